"""The plugin's first command on a sandbox probes the execd generation with ``argv``; a v1.1.0 execd
answers 400 "'Command' ... required" (rec 11). When that 400 is cut short on the wire the answer is
gone: the plugin must report a cut-short/reset answer (E5001), never "execd HTTP 400" with a shred of
the body, and the next command must still find the generation. (Found by the fault proxy against the
live server, tiers/t4/workbench/test_proxy_faults_live.py.)"""

from __future__ import annotations

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit.epp import EppClient, RpcError


@pytest.mark.parametrize(
    "fault",
    [{"kind": "truncate", "after_bytes": 5}, {"kind": "reset_body", "after_bytes": 5}],
    ids=["truncate", "reset_body"],
)
def test_cut_argv_probe_answer_is_a_cut_answer_not_http_400(tmp_path, fault):
    with MockOpenSandbox(execd_mode="v1.1.0") as osb:
        client = EppClient(str(tmp_path / "data"), {"base_url": osb.base_url, "api_key": osb.api_key})
        try:
            sid = client.call("sandbox.create", {"template": "base", "timeout": 300})["sandbox_id"]
            osb.faults.add(sandbox=sid, method="POST", path="^/command$", count=1, **fault)
            with pytest.raises(RpcError) as info:
                client.exec_stream(sid, "echo", ["probe"], timeout=20)
            err = info.value
            text = str(err)
            assert "HTTP 400" not in text, text
            assert err.sdk_code == "E5001", (err.sdk_code, text)
            # the fault is spent: the probe runs again and the command works
            _, notes, code = client.exec_stream(sid, "echo", ["again"], timeout=20)
            assert code == 0 and client.joined(notes) == "again\n"
            client.call("sandbox.kill", {"sandbox_id": sid})
            assert client.violations == []
        finally:
            client.close()


@pytest.mark.parametrize(
    "fault",
    [{"kind": "truncate", "after_bytes": 5}, {"kind": "reset_body", "after_bytes": 5}],
    ids=["truncate", "reset_body"],
)
@pytest.mark.parametrize("plane", ["lifecycle", "execd"])
def test_any_cut_error_answer_is_a_cut_answer_on_both_planes(tmp_path, fault, plane):
    """Not only the argv probe: every error answer is read whole by the transport (Stream.read_all), so
    a cut 404 of the lifecycle server (unknown sandbox) or of execd (missing file) is E5001 too, never
    E2009 / E4001 made from a shred of the body."""
    with MockOpenSandbox(execd_mode="latest") as osb:
        client = EppClient(str(tmp_path / "data"), {"base_url": osb.base_url, "api_key": osb.api_key})
        try:
            if plane == "lifecycle":
                method, params, path, sid = (
                    "sandbox.get",
                    {"sandbox_id": "no-such-sandbox"},
                    r"^/v1/sandboxes/[^/]+$",
                    None,
                )
            else:
                sid = client.call("sandbox.create", {"template": "base", "timeout": 300})["sandbox_id"]
                method, params, path = "files.stat", {"sandbox_id": sid, "path": "/no/such/file"}, "^/files/info$"
            with pytest.raises(RpcError) as whole:  # the real answer, without the fault
                client.call(method, params)
            assert whole.value.sdk_code == ("E2009" if plane == "lifecycle" else "E4001"), str(whole.value)
            rule = osb.faults.add(method="GET", path=path, **({"sandbox": sid} if sid else {}), **fault)
            with pytest.raises(RpcError) as cut:  # every retry is cut too
                client.call(method, params)
            assert cut.value.sdk_code == "E5001", str(cut.value)
            assert "HTTP 404" not in str(cut.value), str(cut.value)
            osb.faults.remove(rule.id)
            if sid:
                client.call("sandbox.kill", {"sandbox_id": sid})
            assert client.violations == []
        finally:
            client.close()
