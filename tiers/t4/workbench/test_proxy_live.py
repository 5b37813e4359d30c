"""t4: the fault proxy in front of the live server: the official Python SDK's flow through it (recorded,
then compared against the mock: 0 unexplained differences), and faults injected into real traffic.

The recording of a run is kept in ``$OSB_PROXY_RECORDING_DIR`` when that is set (that is how
tiers/t4/recordings/ was made; tiers/t1/workbench/test_workbench_recordings.py compares it offline on every run).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import time
from datetime import timedelta

import pytest

from mock_opensandbox.workbench.proxy import FaultProxy
from record.compare_dir import compare_dir
from tiers.toolkit import rest
from tiers.toolkit.waits import wait_until

opensandbox = pytest.importorskip("opensandbox")
from opensandbox import SandboxSync  # noqa: E402 - after the importorskip above
from opensandbox.config.connection_sync import ConnectionConfigSync  # noqa: E402 - after the importorskip above
from opensandbox.models.execd import RunCommandOpts  # noqa: E402 - after the importorskip above
from opensandbox.models.filesystem import DirectoryListEntry, SearchEntry  # noqa: E402 - after the importorskip above

pytestmark = pytest.mark.spec_exempt(
    "the fault proxy relays the live server's answers (the spec guard checks the mock)"
)
HERE = os.path.dirname(os.path.abspath(__file__))


def _stdout(execution) -> str:
    return "".join(m.text for m in execution.logs.stdout)


def sdk_flow(domain: str, api_key: str, image: str) -> str:
    """The SDK's everyday calls, in an order whose answers do not depend on timing. Returns the sandbox id."""
    cfg = ConnectionConfigSync(api_key=api_key, domain=domain, protocol="http", request_timeout=timedelta(seconds=60))
    sb = SandboxSync.create(
        image,
        connection_config=cfg,
        timeout=timedelta(minutes=10),
        metadata={"via": "proxy"},
        env={"GREETING": "hi"},
        entrypoint=["tail", "-f", "/dev/null"],
        ready_timeout=timedelta(seconds=60),
    )
    try:
        info = sb.get_info()
        assert info.id == sb.id and info.status.state == "Running"
        ex = sb.commands.run("echo $GREETING; echo err >&2; exit 3")
        assert ex.exit_code == 3 and _stdout(ex).strip() == "hi"
        assert _stdout(sb.commands.run("echo fine")).strip() == "fine"
        sb.files.write_file("/tmp/proxied/hello.txt", "hello through the proxy\n")
        assert sb.files.read_file("/tmp/proxied/hello.txt") == "hello through the proxy\n"
        names = [e.path for e in sb.files.list_directory(DirectoryListEntry(path="/tmp/proxied"))]
        assert names == ["/tmp/proxied/hello.txt"]
        found = sb.files.search(SearchEntry(path="/tmp/proxied", pattern="*.txt"))
        assert [e.path for e in found] == ["/tmp/proxied/hello.txt"]
        assert sb.renew(timedelta(minutes=30)).expires_at is not None
        assert sb.get_endpoint(8080).endpoint.startswith("127.0.0.1:")
        # a background command left to finish: the recorder notes the client's pause (wait_before_s)
        bg = sb.commands.run("echo started; sleep 1; echo done", opts=RunCommandOpts(background=True))
        time.sleep(2.5)
        status = sb.commands.get_command_status(bg.id)
        assert status.running is False and status.exit_code == 0
        assert sb.commands.get_background_command_logs(bg.id).content == "started\ndone\n"
        sb.pause()
        assert sb.get_info().status.state == "Paused"
        assert SandboxSync.resume(sb.id, connection_config=cfg).get_info().status.state == "Running"
        assert _stdout(sb.commands.run("echo back")).strip() == "back"
    finally:
        sb.kill()
        sb.close()
    return sb.id


def test_sdk_flow_through_the_proxy_records_and_compares_clean(live_server, tmp_path):
    rec = tmp_path / "rec"
    with FaultProxy(
        live_server.root, api_key=live_server.api_key, record=str(rec), record_name="sdk_sync_flow_proxy"
    ) as proxy:
        sid = sdk_flow(proxy.base_url.split("://", 1)[1], live_server.api_key, live_server.image)
        # every exchange went through the proxy, the data plane included
        assert proxy.assert_requested(method="POST", path=r"^/proxy/44772/command$", sandbox=sid, count=4)
        assert proxy.assert_requested(method="POST", path=r"^/v1/sandboxes$", sandbox=sid, count=1)
        assert proxy.assert_requested(listener="execd", path="/files/upload$", sandbox=sid)
    text = (rec / "sdk_sync_flow_proxy.json").read_text()
    assert live_server.api_key not in text
    keep = os.environ.get("OSB_PROXY_RECORDING_DIR")
    if keep:
        os.makedirs(keep, exist_ok=True)
        shutil.copy(rec / "sdk_sync_flow_proxy.json", os.path.join(keep, "sdk_sync_flow_proxy.json"))
    allow = [os.path.join(HERE, "recordings", "ALLOWED_DIFFERENCES")]
    unexplained, _explained, results = compare_dir(str(rec), allow_files=[a for a in allow if os.path.isfile(a)])
    assert results and results[0].exchanges >= 10
    assert unexplained == 0


def _call(hostport, method, path, body=None, headers=None):
    r = rest.call(hostport, method, path, body, headers, timeout=60)
    return r.status, r.headers, r.body


def test_faults_are_injected_into_real_traffic(live_server):
    key = {"OPEN-SANDBOX-API-KEY": live_server.api_key}
    with FaultProxy(live_server.root, api_key=live_server.api_key) as proxy:
        px = proxy.base_url.split("://", 1)[1]
        st, _, body = _call(
            px,
            "POST",
            "/v1/sandboxes",
            {
                "image": {"uri": live_server.image},
                "entrypoint": ["tail", "-f", "/dev/null"],
                "timeout": 300,
                "resourceLimits": {"cpu": "500m", "memory": "256Mi"},
            },
            key,
        )
        assert st == 202, body
        sid = json.loads(body)["id"]
        try:
            ep = json.loads(_call(px, "GET", f"/v1/sandboxes/{sid}/endpoints/44772", headers=key)[2])
            local = ep["endpoint"].partition("/")[0]
            hdrs = ep.get("headers") or {}
            assert wait_until(lambda: _call(local, "GET", "/proxy/44772/ping", headers=hdrs)[0] == 200, 30, 0.3), (
                "execd never answered through the proxy"
            )
            proxy.faults.add(
                kind="status",
                status=429,
                retry_after=1,
                listener="execd",
                path="^/command$",
                sandbox=sid,
                count=1,
                id="rate",
            )
            proxy.faults.add(
                kind="truncate", after_bytes=40, listener="execd", path="^/command$", sandbox=sid, count=1, id="cut"
            )
            st, h, _ = _call(local, "POST", "/proxy/44772/command", {"command": "echo real"}, hdrs)
            assert st == 429 and h["Retry-After"] == "1"
            with pytest.raises(http.client.HTTPException):
                _call(local, "POST", "/proxy/44772/command", {"command": "echo real"}, hdrs)
            st, _, out = _call(local, "POST", "/proxy/44772/command", {"command": "echo real"}, hdrs)
            assert st == 200 and b'"text":"real"' in out  # the real execd's answer
            assert [e["fault"]["id"] for e in proxy.requests(fault="*", sandbox=sid)] == ["rate", "cut"]
        finally:
            _call(px, "DELETE", f"/v1/sandboxes/{sid}", headers=key)
