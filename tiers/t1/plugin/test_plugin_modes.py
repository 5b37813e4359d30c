"""The plugin against the mock in its other deployments (execd access token, server proxy) and the
EPP behaviours around commands: $/cancel, concurrency, detached sessions, process control,
failed creates, secrets, and where the plugin writes."""

from __future__ import annotations

import base64
import json
import os
import pathlib
import time

import pytest

from mock_opensandbox.server import MockOpenSandbox
from mock_opensandbox.wire import http1 as httpcore
from tiers.toolkit.epp import PLUGIN, EppClient, RpcError
from tiers.toolkit.waits import wait_until

TOKEN = "execd-token-" + "ab12" * 4
CANARY = "abx-canary-" + "0f" * 16


def create(epp, **extra):
    return epp.call("sandbox.create", {"template": "base", "timeout": 300, **extra})["sandbox_id"]


def run(epp, sid, cmd, args=(), **kw):
    params = {"sandbox_id": sid, "cmd": cmd, "args": list(args), "env": {}, "cwd": "", "user": "", "timeout": 30, **kw}
    return epp.call("exec.run", params, timeout=params["timeout"] + 10)


# mock, epp, sid: tiers/t1/conftest.py

# ---- deployments -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["v1.1.0", "latest"])
def test_execd_access_token(tmp_path, mode):
    seen: list = []
    with MockOpenSandbox(execd_mode=mode, execd_token=TOKEN) as osb:
        cfg = {"base_url": osb.base_url, "api_key": osb.api_key}
        with EppClient(str(tmp_path / "without"), cfg) as epp:
            with pytest.raises(RpcError) as info:  # execd is never ready without the token
                create(epp, options={"ready_timeout": "2"})
            assert info.value.code == -32001 and info.value.sdk_code == "E1001"
            assert "execd_access_token" in info.value.data["suggestion"]
        assert osb.sandboxes == {} or all(sb.deleted for sb in osb.sandboxes.values())
        httpcore.OBSERVERS.append(seen.append)
        try:
            with EppClient(str(tmp_path / "with"), {**cfg, "execd_access_token": TOKEN}) as epp:
                sid = create(epp)
                _, notes, code = epp.exec_stream(sid, "sh", ["-c", "echo tok; exit 2"])
                assert code == 2 and EppClient.joined(notes) == "tok\n"
                epp.call("files.write", {"sandbox_id": sid, "path": "/t.txt", "content_b64": "dA=="})
                assert epp.call("files.read", {"sandbox_id": sid, "path": "/t.txt"}) == {"content_b64": "dA=="}
                epp.call("sandbox.kill", {"sandbox_id": sid})
                assert TOKEN.encode() not in b"".join(epp.lines)
        finally:
            httpcore.OBSERVERS.remove(seen.append)
    execd = [ex for ex in seen if ex.server_kind == "gin"]
    assert execd and all(ex.request_headers.get("X-EXECD-ACCESS-TOKEN") == TOKEN for ex in execd)
    lifecycle = [ex for ex in seen if ex.server_kind == "uvicorn"]
    assert all("X-EXECD-ACCESS-TOKEN" not in ex.request_headers for ex in lifecycle)


def test_server_proxy(tmp_path):
    seen: list = []
    with (
        MockOpenSandbox(execd_mode="v1.1.0") as osb,
        EppClient(
            str(tmp_path / "d"), {"base_url": osb.base_url + "/v1", "api_key": osb.api_key, "use_server_proxy": "true"}
        ) as epp,
    ):
        sid = create(epp)
        httpcore.OBSERVERS.append(seen.append)
        try:
            assert run(epp, sid, "echo", ["proxied"])["stdout"] == "proxied\n"
            url = epp.call("ports.url", {"sandbox_id": sid, "port": 9000})["url"]
        finally:
            httpcore.OBSERVERS.remove(seen.append)
            epp.call("sandbox.kill", {"sandbox_id": sid})
        base = osb.base_url
    assert url == f"{base}/v1/sandboxes/{sid}/proxy/9000"
    assert [ex for ex in seen if ex.path.endswith("/proxy/44772/command")], "commands went through the server"


# ---- $/cancel, concurrency ---------------------------------------------------------------------------------


def test_cancel_interrupts_the_command(epp, sid):
    rid, q = epp.request(
        "exec.run",
        {
            "sandbox_id": sid,
            "cmd": "sh",
            "args": ["-c", "echo started; sleep 30"],
            "env": {},
            "cwd": "",
            "user": "",
            "timeout": 60,
        },
    )
    time.sleep(0.5)
    epp.cancel(rid)
    res = epp.wait(rid, q, timeout=15)  # the host ignores it; we still answer promptly
    assert res["exit_code"] != 0
    procs = epp.call("process.list", {"sandbox_id": sid})["processes"]
    assert not [p for p in procs if p["command"] == "sleep 30"]


def test_requests_run_concurrently(epp, sid):
    slow, q_slow = epp.request(
        "exec.run",
        {
            "sandbox_id": sid,
            "cmd": "sh",
            "args": ["-c", "sleep 1; echo slow"],
            "env": {},
            "cwd": "",
            "user": "",
            "timeout": 30,
        },
    )
    fast = run(epp, sid, "echo", ["fast"])
    assert fast["stdout"] == "fast\n"
    assert not any(line.startswith(b'{"jsonrpc":"2.0","id":%d' % slow) for line in epp.lines), (
        "the fast answer came first"
    )
    assert epp.wait(slow, q_slow)["stdout"] == "slow\n"


def test_env_cwd_user(epp, sid):
    res = run(epp, sid, "sh", ["-c", 'echo "$A|$B"; pwd; id -u'], env={"A": "x y", "B": "é"}, cwd="/tmp", user="0")
    assert res["stdout"].splitlines()[:2] == ["x y|é", "/tmp"]


# ---- sessions (detached) and process control -------------------------------------------------------------


def test_detached_session_is_followed_to_its_exit(epp, sid):
    res = epp.call(
        "exec.start",
        {
            "sandbox_id": sid,
            "cmd": "sh",
            "args": ["-c", "for i in 1 2 3; do echo line$i; sleep 0.2; done; echo bg-err >&2; exit 5"],
            "env": {},
            "cwd": "",
            "user": "",
            "timeout": 30,
            "detached": True,
        },
    )
    assert res["detached"] is True
    notes = list(epp.events(res["process_id"], timeout=20))
    assert notes[-1]["params"]["exit_code"] == 5
    assert EppClient.joined(notes) == "line1\nline2\nline3\nbg-err\n"  # merged logs (recording 10)


def test_process_signal_by_command_id_and_pid(epp, sid):
    res = epp.call(
        "exec.start",
        {"sandbox_id": sid, "cmd": "sleep", "args": ["30"], "env": {}, "cwd": "", "user": "", "timeout": 60},
    )
    pid = res["process_id"]
    epp.call("process.signal", {"sandbox_id": sid, "pid": pid, "signal": 9})
    notes = list(epp.events(pid, timeout=15))
    assert notes[-1]["params"]["exit_code"] != 0
    with pytest.raises(RpcError) as info:
        epp.call("process.signal", {"sandbox_id": sid, "pid": pid, "signal": 2})
    assert info.value.code == -32003
    with pytest.raises(RpcError) as info:
        epp.call("process.signal", {"sandbox_id": sid, "pid": "0123456789abcdef0123456789abcdef", "signal": 9})
    assert info.value.code == -32002
    bg = run(epp, sid, "sh", ["-c", "sleep 300 >/dev/null 2>&1 & echo $!"])
    os_pid = int(bg["stdout"].strip())

    def listed() -> list:
        return epp.call("process.list", {"sandbox_id": sid})["processes"]

    # ($! is known before the child has exec'd sleep: a listing at once may show it as the sh it was forked as)
    assert wait_until(lambda: any(p["pid"] == os_pid and p["command"] == "sleep 300" for p in listed()), 10), listed()
    epp.call("process.signal", {"sandbox_id": sid, "pid": str(os_pid), "signal": 15})
    assert wait_until(lambda: run(epp, sid, "kill", ["-0", str(os_pid)])["exit_code"] != 0, timeout=10)
    with pytest.raises(RpcError) as info:
        epp.call("process.kill", {"sandbox_id": sid, "pid": os_pid})
    assert info.value.code == -32002
    with pytest.raises(RpcError) as info:
        epp.call("process.signal", {"sandbox_id": sid, "pid": "p-abc!", "signal": 9})
    assert info.value.code == -32000 and "process id" in info.value.message
    with pytest.raises(RpcError) as info:
        epp.call("process.stdin", {"sandbox_id": sid, "pid": pid, "data": "x"})
    assert info.value.code == -32003 and info.value.data["details"]["feature"] == "process.stdin"


# ---- create failures, lifecycle states ---------------------------------------------------------------------


def test_failed_entrypoint_is_deleted_and_typed(tmp_path):
    # like a real server, the mock answers Running before its execd is up (execd_start_delay): an entrypoint
    # that exits at once is then seen as Failed instead of racing the plugin's /ping
    with (
        MockOpenSandbox(execd_mode="latest", execd_start_delay=0.5) as osb,
        EppClient(str(tmp_path / "d"), {"base_url": osb.base_url, "api_key": osb.api_key}) as epp,
    ):
        with pytest.raises(RpcError) as info:
            create(epp, options={"entrypoint": "sh -c 'exit 1'", "ready_timeout": "10"})
        assert info.value.code == -32000 and "Failed" in info.value.message
        assert "entrypoint" in info.value.data["suggestion"]
        assert wait_until(lambda: all(sb.deleted for sb in osb.sandboxes.values()))


def test_create_waits_for_execd_behind_running(tmp_path):
    """The create answer says Running before execd answers /ping: the plugin waits for both."""
    with (
        MockOpenSandbox(execd_mode="latest", execd_start_delay=0.4) as osb,
        EppClient(str(tmp_path / "d"), {"base_url": osb.base_url, "api_key": osb.api_key}) as epp,
    ):
        started = time.monotonic()
        sid = create(epp)
        assert time.monotonic() - started >= 0.35
        assert run(epp, sid, "echo", ["up"])["stdout"] == "up\n"
        epp.call("sandbox.kill", {"sandbox_id": sid})


def test_image_pull_failure(tmp_path):
    with (
        MockOpenSandbox(pull_fails=["does-not-exist"]) as osb,
        EppClient(str(tmp_path / "d"), {"base_url": osb.base_url, "api_key": osb.api_key}) as epp,
    ):
        with pytest.raises(RpcError) as info:
            epp.call("sandbox.create", {"template": "local/does-not-exist:1", "timeout": 300})
        assert info.value.code == -32000 and info.value.sdk_code == "E2001"
        assert osb.sandboxes == {}


def test_pause_resume_connect_idempotent(epp, sid):
    epp.call("sandbox.pause", {"sandbox_id": sid})
    epp.call("sandbox.pause", {"sandbox_id": sid})  # 409 on the server (recording 14): still fine
    assert epp.call("sandbox.get", {"sandbox_id": sid})["status"] == "paused"
    assert [r["sandbox_id"] for r in epp.call("sandbox.list", {"limit": 100, "status": "paused"})["sandboxes"]] == [sid]
    assert epp.call("sandbox.connect", {"sandbox_id": sid})["status"] == "running"  # connect resumes
    epp.call("sandbox.resume", {"sandbox_id": sid})
    assert run(epp, sid, "echo", ["back"])["stdout"] == "back\n"


def test_unreachable_server_and_bad_config(tmp_path):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with EppClient(str(tmp_path / "d"), {"base_url": f"http://127.0.0.1:{port}"}) as epp:
        with pytest.raises(RpcError) as info:
            epp.call("sandbox.list", {"limit": 10})
        assert info.value.sdk_code == "E5001" and "base_url" in info.value.data["suggestion"]
    with EppClient(str(tmp_path / "e"), {"ready_timeout": "soon"}) as epp:
        with pytest.raises(RpcError) as info:
            epp.call("sandbox.list", {"limit": 10})
        assert info.value.code == -32006 and info.value.data["field"] == "ready_timeout"


def test_secrets_never_reach_the_wire(mock, tmp_path):
    cfg = {"base_url": mock.base_url, "api_key": CANARY, "registry_password": CANARY, "execd_access_token": CANARY}
    with EppClient(str(tmp_path / "d"), cfg) as epp:
        with pytest.raises(RpcError) as info:
            create(epp)
        assert info.value.code == -32001 and info.value.sdk_code == "E1001"
        with pytest.raises(RpcError):
            epp.call("sandbox.connect", {"sandbox_id": "does-not-exist-0000"})
        wire = b"".join(epp.lines)
    assert CANARY.encode() not in wire and CANARY.encode() not in epp.stderr


def test_writes_only_in_the_data_dir(mock, tmp_path):
    plugin_dir = pathlib.Path(PLUGIN).parent
    before = sorted(p.name for p in plugin_dir.iterdir())
    data = tmp_path / "data"
    with EppClient(str(data), {"base_url": mock.base_url, "api_key": mock.api_key}) as epp:
        sid = create(epp)
        run(epp, sid, "true")
        files = list((data / "sandboxes").iterdir())
        assert len(files) == 1
        cached = json.loads(files[0].read_text())
        assert cached["sandbox_id"] == sid and cached["framing"] == "latest" and "execd_direct" in cached
        assert oct(files[0].stat().st_mode & 0o777) == "0o600"
        # a second process (the host starts one per call) reuses the cached endpoint
        with EppClient(str(data), {"base_url": mock.base_url, "api_key": mock.api_key}) as other:
            assert run(other, sid, "echo", ["again"])["stdout"] == "again\n"
        epp.call("sandbox.kill", {"sandbox_id": sid})
        assert list((data / "sandboxes").iterdir()) == []
    assert sorted(p.name for p in plugin_dir.iterdir()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_big_output_is_chunked_and_complete(epp, sid):
    _, notes, code = epp.exec_stream(sid, "sh", ["-c", "head -c 3000000 /dev/zero | tr '\\0' 'x'; echo"])
    out = EppClient.joined(notes)
    assert code == 0 and len(out) == 3_000_001 and set(out[:-1]) == {"x"}
    assert max(len(line) for line in epp.lines) < 8 * 1024 * 1024


def test_terminal_event_ends_the_read_without_waiting_for_execd_to_close(tmp_path):
    """execd keeps the stream open ~1 s after the last event (brief); the plugin stops at the event.
    With a 30 s close delay, five commands still finish long before one delay would."""
    with (
        MockOpenSandbox(execd_mode="v1.1.0", execd_close_delay=30) as osb,
        EppClient(str(tmp_path / "d"), {"base_url": osb.base_url, "api_key": osb.api_key}) as epp,
    ):
        sid = create(epp)
        started = time.monotonic()
        for i in range(5):
            assert run(epp, sid, "echo", [str(i)])["stdout"] == f"{i}\n"
        _, _notes, code = epp.exec_stream(sid, "sh", ["-c", "exit 2"])
        assert code == 2
        assert time.monotonic() - started < 25
        epp.call("sandbox.resume", {"sandbox_id": sid})  # resuming a running sandbox is fine too
        epp.call("sandbox.kill", {"sandbox_id": sid})


PY310 = "/root/.pyenv/versions/3.10.13/bin/python3.10"


@pytest.mark.skipif(not os.path.exists(PY310), reason="Python 3.10 interpreter not installed")
def test_whole_flow_on_python_310(mock, tmp_path):
    with EppClient(str(tmp_path / "d"), {"base_url": mock.base_url, "api_key": mock.api_key}, python=PY310) as epp:
        sid = create(epp)
        _, notes, code = epp.exec_stream(sid, "printf", ["a\\r\\nb\\n"])
        assert code == 0 and EppClient.joined(notes) == "a\r\nb\n"
        assert run(epp, sid, "sleep", ["30"], timeout=1)["exit_code"] == 124
        data = os.urandom(70_000)
        epp.call(
            "files.write", {"sandbox_id": sid, "path": "/py310.bin", "content_b64": base64.b64encode(data).decode()}
        )
        assert (
            base64.b64decode(epp.call("files.read", {"sandbox_id": sid, "path": "/py310.bin"})["content_b64"]) == data
        )
        epp.call("sandbox.set_timeout", {"sandbox_id": sid, "timeout": 900})
        assert epp.call("process.list", {"sandbox_id": sid})["processes"]
        epp.call("sandbox.kill", {"sandbox_id": sid})
        assert epp.violations == []


def test_stale_cached_endpoint_is_re_resolved(mock, tmp_path):
    import socket

    data = tmp_path / "data"
    cfg = {"base_url": mock.base_url, "api_key": mock.api_key}
    with EppClient(str(data), cfg) as epp:
        sid = create(epp)
    (cache,) = (data / "sandboxes").iterdir()
    rec = json.loads(cache.read_text())
    good = rec["execd_direct"]["url"]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        rec["execd_direct"]["url"] = f"http://127.0.0.1:{s.getsockname()[1]}/proxy/44772"
    cache.write_text(json.dumps(rec))
    with EppClient(str(data), cfg) as epp:  # a new process trusts the (stale) cache first
        assert run(epp, sid, "echo", ["moved"])["stdout"] == "moved\n"
        assert json.loads(cache.read_text())["execd_direct"]["url"] == good
        epp.call("sandbox.kill", {"sandbox_id": sid})


class _PendingServer:
    """A lifecycle server whose sandbox never leaves Pending (a slow image pull or scheduler)."""

    def __init__(self):
        import http.server
        import threading

        calls = self.calls = []

        class H(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _send(self, status, body=b""):
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                calls.append(("POST", self.path))
                self._send(202, b'{"id":"s-pending","status":{"state":"Pending","reason":"PULLING"}}')

            def do_GET(self):
                calls.append(("GET", self.path))
                self._send(200, b'{"id":"s-pending","status":{"state":"Pending","reason":"PULLING"}}')

            def do_DELETE(self):
                calls.append(("DELETE", self.path))
                self._send(204)

            def log_message(self, *a):
                pass

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.srv.server_port}"

    def close(self):
        self.srv.shutdown()
        self.srv.server_close()


@pytest.mark.parametrize("how", ["ready_timeout", "cancel"])
def test_create_that_never_gets_ready_is_deleted(tmp_path, how):
    stub = _PendingServer()
    try:
        with EppClient(
            str(tmp_path / "d"), {"base_url": stub.url, "ready_timeout": "1" if how == "ready_timeout" else "60"}
        ) as epp:
            rid, q = epp.request("sandbox.create", {"template": "base", "timeout": 300})
            if how == "cancel":
                time.sleep(0.5)
                epp.cancel(rid)
            with pytest.raises(RpcError) as info:
                epp.wait(rid, q, timeout=20)
    finally:
        stub.close()
    if how == "ready_timeout":
        assert info.value.sdk_code == "E3001" and "ready_timeout" in info.value.data["suggestion"]
        assert "state Pending" in info.value.message
    else:
        assert "cancelled" in info.value.message
    assert ("DELETE", "/v1/sandboxes/s-pending") in stub.calls
