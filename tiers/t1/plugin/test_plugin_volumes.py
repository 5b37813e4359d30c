"""The plugin passes `volumes` (provider option, per create or configured) to the server (QUIRKS.md, Volumes): through
EPP against the mock, a named volume outlives the sandbox that wrote it, and a refusal comes back with the
server's code and message."""

from __future__ import annotations

import json

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit.epp import RpcError
from tiers.toolkit.marks import needs_isolation

pytestmark = needs_isolation


@pytest.fixture(scope="module")
def mock(tmp_path_factory):
    """Overrides the toolkit's ``mock`` (tiers/toolkit/fixtures.py): a short close delay on execd's streams."""
    with MockOpenSandbox(execd_mode="latest", execd_close_delay=0.05) as osb:
        yield osb


def _run(epp, sid, script):
    return epp.call(
        "exec.run",
        {"sandbox_id": sid, "cmd": "sh", "args": ["-c", script], "env": {}, "cwd": "", "user": "", "timeout": 30},
        timeout=40,
    )


def test_volumes_option_mounts_a_named_volume(epp, mock):
    vols = json.dumps([{"name": "work", "pvc": {"claimName": "epp-work"}, "mountPath": "/workspace/work"}])
    a = epp.call("sandbox.create", {"template": "base", "timeout": 300, "options": {"volumes": vols}})["sandbox_id"]
    try:
        out = _run(epp, a, "echo via-plugin > /workspace/work/f && echo ok")
        assert out["exit_code"] == 0, out
    finally:
        epp.call("sandbox.kill", {"sandbox_id": a})
    b = epp.call("sandbox.create", {"template": "base", "timeout": 300, "options": {"volumes": vols}})["sandbox_id"]
    try:
        out = _run(epp, b, "cat /workspace/work/f")
        assert out["exit_code"] == 0 and out["stdout"] == "via-plugin\n", out
    finally:
        epp.call("sandbox.kill", {"sandbox_id": b})
    assert [s["name"] for s in mock.admin.backend.volumes()["named"]] == ["epp-work"]


def test_a_refused_volume_carries_the_servers_code(epp):
    vols = json.dumps([{"name": "h", "host": {"path": "/etc"}, "mountPath": "/h"}])
    with pytest.raises(RpcError) as err:
        epp.call("sandbox.create", {"template": "base", "timeout": 300, "options": {"volumes": vols}})
    assert "VOLUME::HOST_PATH_NOT_ALLOWED" in str(err.value) or "VOLUME::HOST_PATH_NOT_ALLOWED" in json.dumps(
        err.value.data
    ), err.value
    with pytest.raises(RpcError) as err:
        epp.call("sandbox.create", {"template": "base", "timeout": 300, "options": {"volumes": "{not json"}})
    assert "volumes" in str(err.value)
