"""tiers/toolkit/waits.py, which the other tiers poll with: ``wait_until`` ends on the first true predicate,
``poll`` hands back the value it waited for (or the last one it got when the bound ran out)."""

from __future__ import annotations

import itertools

from tiers.toolkit.waits import poll, wait_until


def test_wait_until_ends_on_the_first_true_predicate():
    calls = itertools.count(1)
    assert wait_until(lambda: next(calls) == 3, timeout=30, interval=0.001)
    assert next(calls) == 4  # not asked again once it said yes


def test_wait_until_is_false_when_the_bound_runs_out():
    assert wait_until(lambda: False, timeout=0.01, interval=0.001) is False


def test_poll_returns_the_first_accepted_value():
    values = iter([{"state": "Creating"}, {"state": "Creating"}, {"state": "Ready"}, {"state": "Gone"}])
    assert poll(lambda: next(values), lambda v: v["state"] != "Creating", timeout=30, interval=0.001) == {
        "state": "Ready"
    }


def test_poll_returns_the_last_value_when_the_bound_runs_out():
    calls = itertools.count(1)
    last = poll(lambda: next(calls), lambda v: False, timeout=0.01, interval=0.001)
    assert last >= 2 and last == next(calls) - 1  # the final look after the deadline is what it returns
