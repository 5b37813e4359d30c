"""bench/execd_ops.py (case 8's session command, background first log line and PTY start) against a mock sandbox:
each call answers and measures, and leaves nothing behind (the background command interrupted, the PTY session
deleted). Case 8 itself needs a live server; these are its calls on the mock side. No timing is asserted."""

from __future__ import annotations

import json
import time
import urllib.request

import pytest

from bench import direct, execd_ops
from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit.waits import wait_until


@pytest.fixture(scope="module")
def execd():
    with MockOpenSandbox(timing="fast") as osb:
        headers = {"OPEN-SANDBOX-API-KEY": osb.api_key, "Content-Type": "application/json"}

        def call(method: str, path: str, payload: dict | None = None):
            data = None if payload is None else json.dumps(payload).encode()
            req = urllib.request.Request(osb.base_url + path, data=data, headers=headers, method=method)
            with urllib.request.urlopen(req, timeout=30) as r:
                return json.loads(r.read() or b"null")

        body = {"image": {"uri": "python:3.11-slim"}, "entrypoint": ["tail", "-f", "/dev/null"], "timeout": 600}
        sb = call("POST", "/v1/sandboxes", dict(body, resourceLimits={"cpu": "500m", "memory": "512Mi"}))
        deadline = time.monotonic() + 30
        while call("GET", "/v1/sandboxes/" + sb["id"])["status"]["state"] != "Running":
            assert time.monotonic() < deadline
            time.sleep(0.05)
        ep = call("GET", "/v1/sandboxes/%s/endpoints/44772" % sb["id"])
        url, hdrs = "http://" + ep["endpoint"], ep.get("headers") or {}
        direct.Execd(url, hdrs).ping()
        yield osb, sb["id"], url, hdrs


def test_session_command(execd):
    _, _, url, hdrs = execd
    sid = execd_ops.session_create(url, hdrs)
    assert 0 < execd_ops.session_run(url, hdrs, sid) < 30


def test_background_first_line_then_interrupted(execd):
    _, _, url, hdrs = execd
    assert 0 < execd_ops.background_first_line(url, hdrs) < 30
    deadline = time.monotonic() + 5  # the `sleep 30` is gone (interrupted), not left running
    while "sleep 30" in _ps(url, hdrs) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "sleep 30" not in _ps(url, hdrs)


def test_pty_start_then_deleted(execd):
    _, _, url, hdrs = execd
    assert 0 < execd_ops.pty_start(url, hdrs) < 30
    # the session's shell was deleted with it: SIGKILLed by the DELETE, which does not wait for its end (execd's
    # ptySession.close neither), so a `ps` right after may still catch it for a moment
    assert wait_until(lambda: "--noprofile" not in _ps(url, hdrs), 10.0), _ps(url, hdrs)


def _ps(url: str, hdrs: dict) -> str:
    out: list[str] = []
    direct.Execd(url, hdrs).run("ps -eo args", on_output=lambda kind, text: out.append(text))
    return "".join(out)
