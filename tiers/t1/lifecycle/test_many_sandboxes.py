"""No fd ceiling: sandboxes keep working once the mock's fd numbers pass 1024 (select.select's
FD_SETSIZE: "filedescriptor out of range in select()"), and 500 sandboxes created at once from 20
threads are all Running and answer a command (slow). Each run prints the mock's fds per sandbox."""

from __future__ import annotations

import os
import resource
from concurrent.futures import ThreadPoolExecutor

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.flows.server.smoke_flow import request, stream_command

CREATE = {
    "image": {"uri": "python:3.12-slim"},
    "entrypoint": ["tail", "-f", "/dev/null"],
    "timeout": 600,
    "resourceLimits": {"cpu": "500m", "memory": "512Mi"},
}


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _one(osb: MockOpenSandbox, i: int) -> str:
    """Create, then run a command and read its output: the sandbox's id."""
    key = {"OPEN-SANDBOX-API-KEY": osb.api_key}
    r = request("POST", osb.base_url, "/v1/sandboxes", headers=key, json_body={**CREATE, "metadata": {"i": str(i)}})
    assert r.status == 202 and r.json()["status"]["state"] == "Running", r
    sid = r.json()["id"]
    ep = request("GET", osb.base_url, f"/v1/sandboxes/{sid}/endpoints/44772", headers=key).json()
    status, _h, events = stream_command(
        "http://" + ep["endpoint"], dict(ep.get("headers") or {}), {"command": f"echo hi-{i}"}, 60
    )
    out = "".join(e.get("text", "") for e in events if e.get("type") == "stdout")
    assert status == 200 and out.strip() == f"hi-{i}", (status, events)
    return sid


def _burst(n: int, threads: int, record_property) -> None:
    before = _fds()
    with MockOpenSandbox() as osb:
        with ThreadPoolExecutor(threads) as pool:
            sids = list(pool.map(lambda i: _one(osb, i), range(n)))
        assert len(set(sids)) == n
        key = {"OPEN-SANDBOX-API-KEY": osb.api_key}
        states = [
            request("GET", osb.base_url, f"/v1/sandboxes/{s}", headers=key).json()["status"]["state"] for s in sids
        ]
        assert states == ["Running"] * n
        per = (_fds() - before) / n
        print(f"\n{n} sandboxes from {threads} threads: {_fds() - before} fds held by the mock, {per:.1f} per sandbox")
        record_property("fds_per_sandbox", round(per, 2))
        _one(osb, n)  # a fresh create -> command still works


def test_sandboxes_work_past_fd_1024(record_property):
    """Every fd the mock opens numbers above 1024 (the low numbers are taken first)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 4096:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} leaves no room above 1024")
    if soft < 4096:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 8192), hard))
    held: list[int] = []
    try:
        while True:
            fd = os.open("/dev/null", os.O_RDONLY)
            held.append(fd)
            if fd >= 1100:
                break
        _burst(6, 3, record_property)
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


@pytest.mark.slow
def test_500_sandboxes_from_20_threads(record_property, request):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("500 sandboxes (about 90 s): run with `make test-slow` (-m slow)")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard < 8192:
        pytest.skip(f"RLIMIT_NOFILE hard limit {hard} is too low for 500 sandboxes")
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    try:
        _burst(500, 20, record_property)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
