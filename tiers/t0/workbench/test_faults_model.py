"""Fault rules as data (mock_opensandbox/workbench/faults.py) and the plugin's retry policy (plugin/osb/retries.py):
parsing and validation, matching by method / path / listener / sandbox, count and seeded probability,
the admin prefix, JSON round trip; which failures an idempotent call retries and for how long."""

from __future__ import annotations

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from errors import SECRETS, Secrets
from failures import map_osb_error
from mock_opensandbox.workbench.faultinject import proxy_error_page
from mock_opensandbox.workbench.faults import KINDS, FaultError, FaultRegistry, Rule, parse_rule
from osb import retries, transport

SID = "15795f29-605c-4208-81d7-7bc9a4a8f280"


# ---- parsing ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "obj,needle",
    [
        ("not an object", "JSON object"),
        ({"kind": "explode"}, "kind must be one of"),
        ({"kind": "status"}, "needs status"),
        ({"kind": "status", "status": 99}, "status must be between"),
        ({"kind": "status", "status": "503"}, "status must be an integer"),
        ({"kind": "status", "status": 503, "after_bytes": 3}, "unknown field"),
        ({"kind": "delay", "delay": -1}, "delay must be between"),
        ({"kind": "delay", "delay": 2, "delay_max": 1}, "delay_max must be between"),
        ({"kind": "delay", "delay": True}, "delay must be a number"),
        ({"kind": "reset", "path": "("}, "not a valid regular expression"),
        ({"kind": "reset", "method": "GE T"}, "not an HTTP method"),
        ({"kind": "reset", "listener": "sidecar"}, "listener must be one of"),
        ({"kind": "reset", "count": -1}, "count must be between"),
        ({"kind": "reset", "probability": 1.5}, "probability must be between"),
        ({"kind": "reset", "id": "no spaces"}, "id must be"),
        ({"kind": "status", "status": 500, "headers": {"X-A": "a\r\nInjected: 1"}}, "without CR, LF"),
        ({"kind": "status", "status": 500, "headers": {"Bad Name": "x"}}, "not a valid token"),
        ({"kind": "status", "status": 500, "headers": {"X-A\n": "x"}}, "not a valid token"),
        ({"kind": "dribble", "chunk": 0}, "chunk must be between"),
        ({"kind": "truncate", "after_bytes": "10"}, "after_bytes must be an integer"),
        ({"kind": "pod"}, "pod must be one of"),
        ({"kind": "pod", "pod": "failed", "reason": "Bad Reason"}, "reason must be"),
        ({"kind": "pod", "pod": "ready", "after": -1}, "after must be between"),
        ({"kind": "pod", "pod": "ready", "status": 500}, "unknown field"),
    ],
)
def test_bad_rules_are_refused_with_a_reason(obj, needle):
    with pytest.raises(FaultError) as info:
        parse_rule(obj)
    assert needle in str(info.value)


@pytest.mark.parametrize("kind", KINDS)
def test_json_round_trip(kind):
    extra = {
        "status": {"status": 429, "retry_after": 2, "headers": {"X-Why": "limit"}},
        "reset_body": {"after_bytes": 7},
        "truncate": {"after_bytes": 3},
        "dribble": {"chunk": 4, "interval": 0.01},
        "pod": {"pod": "failed", "reason": "CrashLoopBackOff", "after": 1.5},
    }.get(kind, {})
    rule = parse_rule(
        {
            "kind": kind,
            "method": "GET|delete",
            "path": r"/files/info$",
            "sandbox": SID,
            "count": 3,
            "probability": 0.5,
            "seed": 42,
            "delay": 0.1,
            "delay_max": 0.2,
            **extra,
        }
    )
    out = rule.to_json()
    assert out["method"] == "DELETE|GET" and out["count"] == 3 and out["seed"] == 42 and out["hits"] == 0
    again = parse_rule(out)
    assert again.to_json() == out


def test_registry_ids_order_and_first_match_wins():
    reg = FaultRegistry()
    a = reg.add(kind="status", status=503, path="^/v1/sandboxes$")
    b = reg.add({"kind": "reset", "path": "sandboxes"})
    c = reg.add(kind="delay", id="mine", delay=0.0)
    assert [r.id for r in reg.rules] == [a.id, b.id, "mine"] and a.id != b.id
    assert reg.match("GET", "/v1/sandboxes", "lifecycle", None) is a
    assert reg.match("GET", "/v1/sandboxes/x", "lifecycle", "x") is b
    assert reg.match("GET", "/health", "lifecycle", None) is c
    with pytest.raises(FaultError):
        reg.add(kind="reset", id="mine")
    assert reg.remove("mine") and not reg.remove("mine")
    reg.clear()
    assert reg.rules == [] and not reg.armed
    assert reg.active == 3  # three requests were handed a fault and not finished
    for _ in range(3):
        reg._done()
    assert reg.wait_idle(0.1)


def test_add_json_is_all_or_nothing():
    reg = FaultRegistry()
    with pytest.raises(FaultError):
        reg.add_json([{"kind": "reset"}, {"kind": "status"}])
    assert reg.rules == []
    assert [r.kind for r in reg.add_json({"kind": "stall"})] == ["stall"]


def test_matching_dimensions():
    r = Rule("reset", method="POST", path=r"^/command$", listener="execd", sandbox=SID)
    assert r.matches("POST", "/command", "execd", SID)
    assert r.matches("POST", "/proxy/44772/command", "execd", SID)  # the execd prefix is optional
    assert not r.matches("GET", "/command", "execd", SID)
    assert not r.matches("POST", "/command", "lifecycle", SID)
    assert not r.matches("POST", "/command", "execd", "other")
    assert not r.matches("POST", "/proxy/44772/commandx", "execd", SID)
    anyr = Rule("reset")
    assert anyr.matches("PATCH", "/anything", "port", None)


def test_admin_routes_are_never_faulted():
    reg = FaultRegistry()
    reg.add(kind="reset")
    assert reg.match("GET", "/__mock__/faults", "lifecycle", None) is None
    assert reg.match("GET", "/health", "lifecycle", None) is not None


def test_count_limits_firings_and_disarms():
    reg = FaultRegistry()
    r = reg.add(kind="reset", count=2)
    assert reg.armed
    fired = [reg.match("GET", "/x", "execd", None) is not None for _ in range(4)]
    assert fired == [True, True, False, False]
    assert r.hits == 2 and r.to_json()["active"] is False and not reg.armed


def test_probability_is_reproducible_with_a_seed():
    def pattern(seed):
        reg = FaultRegistry()
        reg.add(kind="reset", probability=0.3, seed=seed)
        return [reg.match("GET", "/x", "execd", None) is not None for _ in range(200)]

    assert pattern(7) == pattern(7)
    assert pattern(7) != pattern(8)
    assert 30 <= sum(pattern(7)) <= 90  # about 30 % of 200


@given(st.floats(0, 1), st.floats(0, 1), st.integers(0, 2**32))
@settings(max_examples=50, deadline=None)
def test_random_delay_stays_in_its_range(a, b, seed):
    lo, hi = min(a, b), max(a, b)
    r = Rule("delay", delay=lo, delay_max=hi, seed=seed)
    assert all(lo <= r.pre_wait() <= hi for _ in range(20))


def test_proxy_error_page_looks_like_nginx():
    page = proxy_error_page(502)
    assert "<title>502 Bad Gateway</title>" in page and "nginx" in page
    assert "<title>429 Too Many Requests</title>" in proxy_error_page(429)


# ---- the plugin's retry policy ----------------------------------------------------------------------------


def http_error(status, headers=None):
    return transport.HttpError(status, "R", b"", headers or {}, "get sandbox", "lifecycle")


@pytest.mark.parametrize(
    "exc,wait",
    [
        (http_error(503), retries.RETRY_WAITS[0]),
        (http_error(502), retries.RETRY_WAITS[0]),
        (http_error(504), retries.RETRY_WAITS[0]),
        (http_error(429, {"retry-after": "2"}), 2.0),
        (http_error(429, {"retry-after": "0"}), retries.RETRY_WAITS[0]),  # never faster than the backoff
        (http_error(429, {"retry-after": "3600"}), None),  # too long: answer at once
        (http_error(500), None),
        (http_error(404), None),
        (http_error(409), None),
        (transport.NetError("reset", "get", "http://x", "reset"), retries.RETRY_WAITS[0]),
        (
            transport.NetError("incomplete", "get", "http://x", "IncompleteRead(5 bytes read, 9 more expected)"),
            retries.RETRY_WAITS[0],
        ),
        (transport.NetError("timeout", "get", "http://x", "timed out"), None),
        (transport.NetError("refused", "get", "http://x", "refused"), None),
        (transport.NetError("dns", "get", "http://x", "no host"), None),
    ],
)
def test_what_is_retried(exc, wait):
    assert retries.retry_wait(exc, 0) == wait


def test_retry_after_forms():
    assert retries.retry_after_seconds(None) is None and retries.retry_after_seconds("soon") is None
    assert retries.retry_after_seconds(" 7 ") == 7.0
    import email.utils

    future = email.utils.formatdate(time.time() + 30, usegmt=True)
    assert 25 <= retries.retry_after_seconds(future) <= 31
    assert retries.retry_after_seconds(email.utils.formatdate(time.time() - 30, usegmt=True)) == 0.0


def test_with_retries_is_bounded(monkeypatch):
    sleeps = []
    monkeypatch.setattr(retries.time, "sleep", sleeps.append)
    calls = []

    def always_503():
        calls.append(1)
        raise http_error(503)

    with pytest.raises(transport.HttpError):
        retries.with_retries(always_503, budget=30)
    assert len(calls) == 1 + len(retries.RETRY_WAITS) and sleeps == list(retries.RETRY_WAITS)

    results = iter([http_error(429, {"retry-after": "1"}), "ok"])

    def once_429():
        item = next(results)
        if isinstance(item, Exception):
            raise item
        return item

    sleeps.clear()
    assert retries.with_retries(once_429, budget=30) == "ok" and sleeps == [1.0]


def test_with_retries_starts_no_try_after_the_budget(monkeypatch):
    monkeypatch.setattr(retries.time, "sleep", lambda s: None)
    clock = iter([0.0, 100.0, 200.0])
    monkeypatch.setattr(retries.time, "monotonic", lambda: next(clock))
    calls = []

    def fail():
        calls.append(1)
        raise http_error(503)

    with pytest.raises(transport.HttpError):
        retries.with_retries(fail, budget=30)
    assert len(calls) == 1


def test_secrets_are_scrubbed_before_an_error_body_is_clipped():
    secret = "abx-canary-" + "7e" * 16
    SECRETS.add(secret)  # the plugin's one registry (errors.py)
    body = ("<pre>" + "x" * 380 + "OPEN-SANDBOX-API-KEY: " + secret + "</pre>").encode()
    err = transport.HttpError(502, "Bad Gateway", body, {}, "get", "lifecycle")
    assert "7e7e" not in err.message and "abx-canary" not in err.message
    js = ('{"message": "headers: %s"}' % secret).encode()
    assert secret not in transport.HttpError(500, "x", js, {}, "get", "lifecycle").message


def test_one_registry_masks_every_escaped_form():
    registry = Secrets()
    registry.add("pa ss+w&rd", "ab")  # under 3 characters: not a secret worth masking
    for form in ("pa ss+w&rd", "pa%20ss%2Bw%26rd", "pa+ss%2Bw%26rd"):
        assert registry.scrub(b"x " + form.encode() + b" y") == b"x *** y"
        assert registry.redact({"m": [f"<{form}>"]}) == {"m": ["<***>"]}
    assert registry.redact("ab") == "ab"


def test_a_body_cut_short_is_its_own_kind():
    import http.client

    assert transport.net_kind(http.client.IncompleteRead(b"abc", 10)) == "incomplete"
    err = map_osb_error(
        transport.NetError("incomplete", "download /f", "http://h/x", "IncompleteRead(3 bytes read, 10 more expected)"),
        op="files",
    )
    assert err.code == -32000 and err.data["sdk_code"] == "E5001" and "cut short" in err.message
