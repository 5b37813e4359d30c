"""Tier t3: the smoke flow and a few plugin-free checks with an execd process per sandbox."""

from __future__ import annotations

import os
import socket

import pytest

from tiers.flows.server.smoke_flow import STEPS, output_of, request, run_smoke_flow, stream_command
from tiers.toolkit.waits import port_closed, wait_until

UNAUTHORIZED = {"error": "Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"}  # QUIRKS.md, Transport


def _create(osb) -> str:
    r = request(
        "POST",
        osb.base_url,
        "/v1/sandboxes",
        headers={"OPEN-SANDBOX-API-KEY": osb.api_key},
        json_body={
            "image": {"uri": "python:3.12-slim"},
            "entrypoint": ["tail", "-f", "/dev/null"],
            "resourceLimits": {"cpu": "500m", "memory": "512Mi"},
        },
    )
    assert r.status == 202, r
    return r.json()["id"]


def _execd_url(osb, sid: str) -> str:
    r = request(
        "GET", osb.base_url, f"/v1/sandboxes/{sid}/endpoints/44772", headers={"OPEN-SANDBOX-API-KEY": osb.api_key}
    )
    assert r.status == 200, r
    return "http://" + r.json()["endpoint"]


def _execd_pid(osb, sid: str):
    """The execd process id when the mock exposes it (MockOpenSandbox.sandboxes[id].execd.proc), else None."""
    proc = getattr(getattr(osb.sandboxes.get(sid), "execd", None), "proc", None)
    return getattr(proc, "pid", None)


def _port_of(url: str) -> int:
    return int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])


def _proc_state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().rsplit(")", 1)[1].split()[0]


def test_smoke_flow_with_an_execd_process_per_sandbox(t3_mock):
    passed = run_smoke_flow(t3_mock.base_url, t3_mock.api_key)
    assert len(passed) == STEPS, passed


def test_execd_is_a_process_that_kill_stops(t3_mock):
    sid = _create(t3_mock)
    url = _execd_url(t3_mock, sid)
    port = _port_of(url)
    assert port != t3_mock.port
    pid = _execd_pid(t3_mock, sid)
    if pid is not None:
        assert pid != os.getpid() and _proc_state(pid) in "RSD"
    assert request("GET", url, "/ping").status == 200
    status, _h, events = stream_command(url, {}, {"command": "echo from-process"})
    assert status == 200 and output_of(events, "stdout") == "from-process\n", events

    r = request("DELETE", t3_mock.base_url, f"/v1/sandboxes/{sid}", headers={"OPEN-SANDBOX-API-KEY": t3_mock.api_key})
    assert r.status == 204, r
    assert wait_until(lambda: port_closed(port, 1), 10), (
        "the execd port still open after 10 s"
    )  # the execd process is gone with its sandbox
    if pid is not None:
        assert not os.path.exists(f"/proc/{pid}") or _proc_state(pid) == "Z"


def test_pause_freezes_the_execd_process(t3_mock):
    sid = _create(t3_mock)
    pid = _execd_pid(t3_mock, sid)
    url = _execd_url(t3_mock, sid)
    hdr = {"OPEN-SANDBOX-API-KEY": t3_mock.api_key}
    assert request("POST", t3_mock.base_url, f"/v1/sandboxes/{sid}/pause", headers=hdr).status == 202
    if pid is not None:  # SIGSTOP of its process groups (QUIRKS.md, Sandbox runtime); the stop lands asynchronously
        assert wait_until(lambda: _proc_state(pid) == "T", 5.0), "execd process not stopped after 5 s"
    # a frozen execd accepts the connection but never answers (retry only while the stop is still landing)

    def silent() -> bool:
        try:
            request("GET", url, "/ping", timeout=0.5)
        except socket.timeout:
            return True
        return False

    assert wait_until(silent, 5, 0), "execd still answers 5 s after pause"
    assert request("POST", t3_mock.base_url, f"/v1/sandboxes/{sid}/resume", headers=hdr).status == 202
    assert request("GET", url, "/ping", timeout=10).status == 200


def test_access_token_is_passed_to_the_execd_process(t3_factory):
    osb = t3_factory(execd_token="t3-token")
    sid = _create(osb)
    url = _execd_url(osb, sid)
    r = request("GET", url, "/ping")
    assert r.status == 401 and r.json() == UNAUTHORIZED, r
    r = request("GET", url, "/ping", headers={"X-EXECD-ACCESS-TOKEN": "t3-token"})
    assert r.status == 200, r


def _status_field(pid: int, name: str) -> str:
    with open(f"/proc/{pid}/status") as fh:
        for line in fh:
            if line.startswith(name + ":"):
                return line.split(":", 1)[1].strip()
    return ""


def test_a_real_execd_runs_inside_the_sandbox_view_never_on_the_host(t3_mock, execd_bin):
    """COMMON.md: the real execd has no sandbox of its own. The mock starts it in the sandbox's namespaces with
    the real sandbox's capability set (fixtures/21_containment_probes.json: 00000000800405fb, NoNewPrivs 1)."""
    if not execd_bin.real:
        pytest.skip("t3 runs against the mock's stand-alone execd (no real binary)")
    sid = _create(t3_mock)
    pid = _execd_pid(t3_mock, sid)
    assert pid, "the mock exposes the execd process"
    assert os.readlink(f"/proc/{pid}/ns/mnt") != os.readlink("/proc/self/ns/mnt")
    assert os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
    assert _status_field(pid, "CapEff") == "00000000800405fb" and _status_field(pid, "NoNewPrivs") == "1"
    url = _execd_url(t3_mock, sid)
    status, _, events = stream_command(url, {}, {"command": "test -e /work/coord && echo host-visible || echo hidden"})
    assert status == 200 and output_of(events, "stdout").strip() == "hidden"  # the host's tree is not there
