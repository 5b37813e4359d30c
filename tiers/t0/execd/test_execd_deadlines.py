"""The mock execd's command timeouts (execd/deadlines.py): one thread runs every deadline, in order,
once; a cancelled one never runs."""

from __future__ import annotations

import threading

from mock_opensandbox.execd.deadlines import Deadlines


def test_deadlines_fire_in_order_and_cancelled_ones_never():
    def threads() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "execd-deadlines"}

    before = threads()
    d = Deadlines()
    fired: list[str] = []
    done = threading.Event()
    d.add(0.15, lambda: (fired.append("late"), done.set()))
    d.add(0.05, lambda: fired.append("early"))
    gone = d.add(0.1, lambda: fired.append("cancelled"))
    gone.cancel()
    assert done.wait(5)
    assert fired == ["early", "late"]
    assert len(threads() - before) == 1  # three deadlines, one thread


def test_many_cancelled_deadlines_do_not_pile_up():
    d = Deadlines()
    for _ in range(500):
        d.add(300, lambda: None).cancel()
    assert len(d._heap) <= 130
    hit = threading.Event()
    d.add(0.01, hit.set)
    assert hit.wait(5)
