"""Issue 19's table on the mock: the probe list of tiers/sandbox_inside.py (the same assertions t4 runs on the
live server, tiers/t4/test_live_inside.py) against a `MockOpenSandbox()` sandbox created with resourceLimits
cpu 500m / memory 512Mi. The rows the mock does not pass yet are strict xfails naming the part of issue 19
that fixes them; the lead removes a mark when that branch lands (a row that starts passing fails the run)."""
from __future__ import annotations

import socket

import pytest

from mock_opensandbox.runtime import probe_isolation
from mock_opensandbox.server import MockOpenSandbox
from tiers import sandbox_inside as si

ISOLATED, NOTE = probe_isolation()
# the probes allocate 1 GiB and spin for 2 s: only inside an isolated sandbox
pytestmark = pytest.mark.skipif(not ISOLATED, reason="sandbox isolation unavailable here: " + NOTE)

EXECD = "issue 19 item 1: the in-process execd is not a process inside the sandbox"
NOT_YET = {
    "connect_host": EXECD + " (loopback_execd: execd listens on 127.0.0.1:44772 inside)",
}


def _mark(name: str):
    if name in NOT_YET:
        return pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=NOT_YET[name]))
    return name


@pytest.fixture(scope="module")
def target():
    osb = MockOpenSandbox(execd_close_delay=0.05).start()  # streams end right after the last event
    t = si.Target(osb.base_url, osb.api_key or "", "python:3", execd_token=osb.execd_token)
    try:
        yield t
    finally:
        t.delete_all()
        osb.stop()


@pytest.fixture(scope="module")
def inside(target):
    return si.Inside(target, target.create())


@pytest.mark.parametrize("name", [_mark(n) for n in si.NAMES])
def test_inside_mock(inside, name):
    probe = si.PROBES[name]
    probe.check(probe.run(inside), inside)


@pytest.mark.parametrize("name", [_mark("same_port_two_sandboxes")])
def test_same_port_two_sandboxes_mock(target, name):
    with socket.socket() as s:  # today's mock serves on the host's loopback: a free ephemeral port, not 9000
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    si.same_port_two_sandboxes(target, port)
