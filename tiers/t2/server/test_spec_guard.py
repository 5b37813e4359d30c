"""The spec guard itself: pinned specs, allow-list, detection, and that a violation fails the session.

The guard's real work happens in the session observer installed by tiers/conftest.py; these tests
check that it is installed, that it catches what it should, that everything the recordings show is
either spec-conformant or explained, and that an unexplained violation turns the exit status red.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap
import urllib.request
from urllib.parse import parse_qsl, urlsplit

import pytest

from tiers.toolkit import spec_guard as sg
from tiers.toolkit.waits import wait_until

LIVE = os.path.normpath(os.path.join(sg.REPO, "..", "shared", "live", "exchanges"))
needs_specs = pytest.mark.skipif(
    not sg.specs_available(), reason=f"OpenAPI specs not found in {sg.spec_dir()} (<repo>/../shared/specs)"
)


@needs_specs
def test_spec_files_match_the_pin():
    pinned = sg.read_pin()
    assert sorted(pinned) == sorted(sg.SPEC_FILES)
    for name in sg.SPEC_FILES:
        actual = sg.sha256_file(os.path.join(sg.spec_dir(), name))
        assert actual == pinned[name], (
            f"{name} changed (sha256 {actual}); a spec upgrade is deliberate: review the new spec, update "
            f"tiers/SPEC_PIN and the 'spec' entries of tiers/t2/ALLOWED_DIFFERENCES together"
        )


def test_allow_list_parses_and_every_entry_has_a_reason():
    spec, replay = sg.load_allow_list()
    assert spec, "the spec allow-list cannot be empty: the recordings prove divergences"
    for e in spec + replay:
        assert len(e.reason) >= 20, f"ALLOWED_DIFFERENCES:{e.line}: reason too short"


def test_allow_list_rejects_malformed_lines(tmp_path):
    bad = tmp_path / "ALLOWED"
    bad.write_text("spec | ^x | only three fields\n")
    with pytest.raises(sg.AllowListError, match=":1:"):
        sg.load_allow_list(str(bad))
    bad.write_text("replay | 07 | x-y | status | a reason that is long enough\n")
    with pytest.raises(sg.AllowListError, match="bad exchange index"):
        sg.load_allow_list(str(bad))
    bad.write_text("spec | ([ | what | a reason that is long enough\n")
    with pytest.raises(sg.AllowListError, match="bad regex"):
        sg.load_allow_list(str(bad))


@needs_specs
def test_guard_is_installed_for_the_session():
    from mock_opensandbox.wire import http1 as httpcore

    guard = sg.SESSION.get("guard")
    if guard is None:
        pytest.skip(sg.SESSION.get("skip_reason") or "spec guard not installed")
    assert guard.observe in httpcore.OBSERVERS


def _raw_exchanges():
    for path in sorted(glob.glob(os.path.join(LIVE, "*.json"))):
        with open(path, encoding="utf-8") as f:
            for i, ex in enumerate(json.load(f)):
                yield os.path.basename(path), i, ex


def _check_raw(guard: sg.SpecGuard, ex: dict) -> list[sg.Violation]:
    r, s = ex["request"], ex["response"]
    u = urlsplit(r["path"])
    lifecycle = any(k.lower() == "x-request-id" for k in s["headers"])
    return guard.check(
        "uvicorn" if lifecycle else "gin",
        r["method"],
        u.path,
        parse_qsl(u.query, keep_blank_values=True),
        r["headers"],
        r["body"].encode() if r["body"] is not None else None,
        s["status"],
        s["headers"],
        (s["body"] or "").encode(),
    )


@needs_specs
@pytest.mark.skipif(not os.path.isdir(LIVE), reason=f"live recordings not found in {LIVE}")
def test_recordings_conform_to_the_specs_up_to_the_allow_list():
    """What the real server sent is the reference: every divergence it shows must be explained."""
    guard = sg.SpecGuard()
    unexplained, used = [], set()
    n = 0
    for name, i, ex in _raw_exchanges():
        n += 1
        for v in _check_raw(guard, ex):
            entry = guard.allowed(v)
            if entry is None:
                unexplained.append(f"{name} #{i}: {v.text()}")
            else:
                used.add(entry.line)
    assert n > 100
    assert unexplained == []
    # the entries the recordings prove are really exercised by them
    assert len(used) >= 6


@needs_specs
def test_guard_reports_what_the_spec_forbids():
    guard = sg.SpecGuard()
    # a response missing required fields
    vs = guard.check(
        "uvicorn",
        "GET",
        "/v1/sandboxes/abc",
        {},
        {"OPEN-SANDBOX-API-KEY": "k"},
        None,
        200,
        {"content-type": "application/json", "x-request-id": "a" * 32},
        b'{"id": 5}',
    )
    assert any(v.side == "response" and v.error == "InvalidData" for v in vs), vs
    assert all(guard.allowed(v) is None for v in vs if v.error == "InvalidData")
    # an out-of-spec request the server accepted
    vs = guard.check(
        "uvicorn",
        "POST",
        "/v1/sandboxes",
        {},
        {"OPEN-SANDBOX-API-KEY": "k", "Content-Type": "application/json"},
        b'{"image": {"uri": "x"}, "entrypoint": ["a"], "timeout": "soon", "resourceLimits": {"cpu": "1"}}',
        202,
        {"content-type": "application/json", "x-request-id": "a" * 32},
        b'{"id": "3f1c1a52-6f43-4d0e-9d7c-1c1f0c6e2a10", "status": {"state": "Running"}, '
        b'"createdAt": "2026-01-01T00:00:00Z", "entrypoint": ["a"]}',
    )
    assert any(v.side == "request" and v.error == "InvalidRequestBody" for v in vs), vs
    # the same request rejected by the server is an error-path test, not a violation
    vs = guard.check(
        "uvicorn",
        "POST",
        "/v1/sandboxes",
        {},
        {"OPEN-SANDBOX-API-KEY": "k", "Content-Type": "application/json"},
        b'{"timeout": "soon"}',
        422,
        {"content-type": "application/json", "x-request-id": "a" * 32},
        b'{"detail": []}',
    )
    assert not any(v.side == "request" for v in vs)
    # execd runs without a token (allowed), which must not hide an invalid body behind the security error
    vs = guard.check(
        "gin",
        "POST",
        "/proxy/44772/command",
        {},
        {"Content-Type": "application/json"},
        b'{"command": "true", "cwd": 5}',
        200,
        {"Content-Type": "text/event-stream"},
        b'{"type":"init","text":"x","timestamp":1}\n\n',
    )
    errors = {v.error for v in vs if v.side == "request"}
    assert errors == {"SecurityValidationError", "InvalidRequestBody"}, vs
    assert [v for v in vs if v.error == "InvalidRequestBody" and guard.allowed(v) is None]
    # a broken event stream and an event that breaks the event schema
    vs = guard.check(
        "gin",
        "POST",
        "/proxy/44772/command",
        {},
        {"Content-Type": "application/json"},
        b'{"command": "true"}',
        200,
        {"Content-Type": "text/event-stream"},
        b'{"type":"init"}\n',
    )
    assert [v.error for v in vs if v.side == "response"] == ["SSEFraming"]
    vs = guard.check(
        "gin",
        "POST",
        "/proxy/44772/command",
        {},
        {"Content-Type": "application/json"},
        b'{"command": "true"}',
        200,
        {"Content-Type": "text/event-stream"},
        b'{"type":"init","text":"x","timestamp":1}\n\n{"type":"bogus","timestamp":"soon"}\n\n',
    )
    assert any(v.error == "InvalidData" for v in vs), vs


def test_routing_of_traffic_to_the_specs():
    route = sg.SpecGuard.route
    assert route("uvicorn", "/v1/sandboxes") == ("lifecycle", "/v1/sandboxes")
    assert route("uvicorn", "/sandboxes/x") == ("lifecycle", "/v1/sandboxes/x")
    assert route("uvicorn", "/v1/sandboxes/x/proxy/44772/files/info") == ("execd", "/files/info")
    assert route("uvicorn", "/v1/sandboxes/x/proxy/8000/anything") is None
    assert route("gin", "/proxy/44772/command") == ("execd", "/command")
    assert route("gin", "/proxy/8080/") is None
    assert route("gin", "/ping") == ("execd", "/ping")
    assert route("gin", "/index.html") is None  # application traffic on a published port
    # the workbench's own API is the mock's, no spec's (a stream of it may end under the next test)
    assert route("uvicorn", "/__mock__/events") is None and route("gin", "/__mock__/journal") is None


@needs_specs
def test_observer_never_raises_into_the_mock(opensandbox_mock):
    from mock_opensandbox.wire import http1 as httpcore

    class Boom(sg.SpecGuard):
        def check(self, *a, **kw):
            raise RuntimeError("validator exploded")

    boom = Boom()
    httpcore.OBSERVERS.append(boom.observe)
    try:
        for _ in range(2):  # the mock keeps answering after the observer blew up
            with urllib.request.urlopen(opensandbox_mock.base_url + "/health", timeout=10) as r:
                assert r.status == 200
        assert wait_until(lambda: boom.checked >= 2, 5.0)  # observers run after the reply is on the wire
    finally:
        httpcore.OBSERVERS.remove(boom.observe)
    assert {v.error for v in boom.violations} == {"GuardCrash"}


@needs_specs
def test_observer_sees_mock_traffic(opensandbox_mock):
    guard = sg.SESSION.get("guard")
    if guard is None:
        pytest.skip("spec guard not installed")
    before = guard.checked
    req = urllib.request.Request(
        opensandbox_mock.base_url + "/v1/sandboxes", headers={"OPEN-SANDBOX-API-KEY": opensandbox_mock.api_key}
    )
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200
    assert wait_until(lambda: guard.checked > before, 5.0)


@needs_specs
def test_an_unexplained_violation_fails_the_session(tmp_path):
    """The session hook turns a green run red when the observer saw an unexplained violation."""
    test = tmp_path / "test_violation.py"
    test.write_text(
        textwrap.dedent("""
        from mock_opensandbox.wire import http1 as httpcore

        def test_mock_sends_an_off_spec_body():
            ex = httpcore.Exchange("uvicorn", "GET", "/v1/sandboxes", {}, {"OPEN-SANDBOX-API-KEY": "k"}, None,
                                   200, {"content-type": "application/json", "x-request-id": "a" * 32},
                                   b'{"items": "not a list"}')
            for fn in list(httpcore.OBSERVERS):
                fn(ex)
    """)
    )
    env = dict(os.environ, PYTHONPATH=sg.REPO, OSB_SPECS_DIR=sg.spec_dir())
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "no:cacheprovider",
        "-p",
        "tiers.conftest",
        "--rootdir",
        str(tmp_path),
        "-c",
        os.devnull,
        str(test),
    ]
    proc = subprocess.run(cmd, cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120)
    out = proc.stdout + proc.stderr
    assert "1 passed" in out, out
    assert "unexplained OpenAPI violations" in out, out
    assert proc.returncode == 1, out


def test_observers_do_not_change_keep_alive_behaviour(opensandbox_mock):
    """Installing the guard must be transparent: a body the mock answers without reading (401 before
    the body is read) must not desynchronise the keep-alive connection."""
    import http.client

    from mock_opensandbox.wire import http1 as httpcore

    def noop(ex):
        return None

    httpcore.OBSERVERS.append(noop)
    try:
        port = int(opensandbox_mock.base_url.rsplit(":", 1)[1])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
        try:
            conn.request(
                "POST", "/v1/sandboxes", body=b'{"image": {"uri": "x"}}', headers={"Content-Type": "application/json"}
            )  # no key: 401 before the body is read
            r = conn.getresponse()
            r.read()
            assert r.status == 401
            conn.request("GET", "/health")
            r = conn.getresponse()
            body = r.read()
            assert (r.status, body) == (200, b'{"status":"healthy"}')
        finally:
            conn.close()
    finally:
        httpcore.OBSERVERS.remove(noop)
