"""ExecdServer plumbing: prefixes, 404, token and gateway modes, pause blocking, stop(), proxy, code
routes, process cleanup, the stand-alone process."""

from __future__ import annotations

import http.client
import http.server
import json
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from mock_opensandbox.execd.server import ExecdServer
from mock_opensandbox.runtime import SandboxRuntime
from tiers.t1.conftest_execd import Client, live_pids, outputs
from tiers.toolkit import procs
from tiers.toolkit.waits import wait_until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_ping_bare_and_prefixed(make_execd):
    s = make_execd()
    for path in ("/ping", "/proxy/44772/ping"):
        r = Client(s.port, prefix="").get(path)
        assert (r.status, r.body, r.header("Content-Length"), r.header("Content-Type")) == (200, b"", "0", None)
        assert r.header("Server") is None


def test_unknown_route_is_gin_404(make_execd):
    c = Client(make_execd().port, prefix="")
    for path in ("/proxy/44772/no-such-route", "/no-such-route", "/ping/extra"):
        r = c.get(path)
        assert (r.status, r.body, r.header("Content-Type")) == (404, b"404 page not found", "text/plain")


def test_access_token(make_execd):
    s = make_execd(access_token="s3cret")
    for hdr in ({}, {"X-EXECD-ACCESS-TOKEN": "wrong"}):
        r = Client(s.port, headers=hdr).get("/ping")
        assert r.status == 401
        assert r.json() == {"error": "Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"}
        assert "s3cret" not in r.text
    ok = Client(s.port, headers={"X-EXECD-ACCESS-TOKEN": "s3cret"})
    assert ok.get("/ping").status == 200
    assert outputs(ok.run("echo tok").events()) == ["tok"]


def test_gateway_required_headers(make_execd):
    s = make_execd(required_headers={"OpenSandbox-Ingress-To": "sbx-1-44772"})
    r = Client(s.port).get("/ping")
    assert r.status == 404 and "OpenSandbox-Ingress-To" in r.text
    r = Client(s.port, headers={"OpenSandbox-Ingress-To": "other"}).get("/ping")
    assert r.status == 404
    good = Client(s.port, headers={"OpenSandbox-Ingress-To": "sbx-1-44772"})
    assert good.get("/ping").status == 200
    assert outputs(good.run("echo gw").events()) == ["gw"]


def _get_in_thread(port: int, path: str, result: dict) -> threading.Thread:
    def go():
        try:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=20)
            conn.request("GET", path)
            r = conn.getresponse()
            result["status"] = r.status
            r.read()
            conn.close()
        except (OSError, http.client.HTTPException) as exc:
            result["error"] = exc

    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def test_paused_requests_wait_for_resume(make_execd, runtime):
    s = make_execd()
    runtime.pause()
    result: dict = {}
    t = _get_in_thread(s.port, "/ping", result)
    t.join(0.5)
    assert t.is_alive() and result == {}  # no answer while paused
    runtime.resume()
    t.join(5)
    assert result == {"status": 200}


def test_upload_in_flight_stalls_while_paused(make_execd, runtime):
    """docker pause freezes the real execd: an upload whose body is still arriving gets no answer and
    writes nothing until resume, then completes (QUIRKS.md, "Pause")."""
    from mock_opensandbox.wire import formdata as multipart

    s = make_execd()
    data = os.urandom(1024 * 1024)
    body, ctype = multipart.encode(
        [
            ("metadata", "metadata", "application/json", b'{"path":"/tmp/paused.bin"}'),
            ("file", "paused.bin", "application/octet-stream", data),
        ],
        None,
    )
    head = (
        "POST /files/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n"
        % (ctype, len(body))
    ).encode()
    target = os.path.join(runtime.root, "tmp", "paused.bin")
    with socket.create_connection(("127.0.0.1", s.port), timeout=20) as sock:
        sock.sendall(head + body[:1000])
        time.sleep(0.2)  # the handler is reading the body
        runtime.pause()
        try:
            sock.sendall(body[1000:])
            sock.settimeout(0.5)
            with pytest.raises(socket.timeout):
                sock.recv(1)  # no answer while paused
            assert not os.path.exists(target) or os.path.getsize(target) < len(data)
        finally:
            runtime.resume()
        sock.settimeout(20)
        reply = b""
        while b"\r\n\r\n" not in reply:
            chunk = sock.recv(4096)
            assert chunk, reply
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 200 ")
    with open(target, "rb") as fh:
        assert fh.read() == data


def test_download_in_flight_stalls_while_paused(make_execd, runtime):
    """A download going out by sendfile (connection._FrozenWriter.sendfile) stalls too: with the client not
    reading, the socket fills, the pause comes, and not one byte more arrives until resume; then the whole
    file (QUIRKS.md, "Pause")."""
    s = make_execd()
    data = os.urandom(24 * 1024 * 1024)
    with open(os.path.join(runtime.root, "tmp", "big.bin"), "wb") as fh:
        fh.write(data)
    with socket.create_connection(("127.0.0.1", s.port), timeout=20) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
        sock.sendall(b"GET /files/download?path=/tmp/big.bin HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        time.sleep(0.3)  # the handler is in sendfile, blocked on the full socket
        runtime.pause()
        try:
            got = bytearray()
            sock.settimeout(0.5)
            try:
                while True:  # what was in flight when the pause came: the socket buffers and one piece
                    chunk = sock.recv(1 << 20)
                    if not chunk:
                        break
                    got += chunk
            except socket.timeout:
                pass
            assert len(got) < len(data) // 2, len(got)
        finally:
            runtime.resume()
        sock.settimeout(20)
        head, _, rest = bytes(got).partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ")
        body = bytearray(rest)
        while len(body) < len(data):
            chunk = sock.recv(1 << 20)
            assert chunk
            body += chunk
    assert bytes(body) == data


def test_stop_unblocks_paused_and_stalled_requests(runtime):
    s = ExecdServer(runtime, close_delay=0)
    s.start()
    try:
        # POST /code/context never answers (QUIRKS.md, Transport, routing, auth), even on a running sandbox
        stalled = http.client.HTTPConnection("127.0.0.1", s.port, timeout=20)
        stalled.request("POST", "/code/context", body=b"{}")
        time.sleep(0.2)
        runtime.pause()
        paused: dict = {}
        t = _get_in_thread(s.port, "/ping", paused)
        t.join(0.3)
        assert t.is_alive()
        t0 = time.monotonic()
        s.stop()
        t.join(5)
        assert not t.is_alive() and "status" not in paused  # closed without an answer
        with pytest.raises((http.client.HTTPException, OSError)):
            stalled.getresponse()
        stalled.close()
        assert time.monotonic() - t0 < 5
    finally:
        runtime.resume()
        s.stop()
    with pytest.raises(OSError):
        http.client.HTTPConnection("127.0.0.1", s.port, timeout=2).request("GET", "/ping")


def test_code_routes_without_interpreter(make_execd):
    c = Client(make_execd(mode="latest").port)
    r = c.get("/code/contexts")
    assert (r.status, r.json()) == (200, [])
    r = c.post("/code", {"code": "print(1)"})  # v1.1.0 mode runs it as a command (tiers/diff code.plain_image)
    assert r.status == 500
    assert r.json() == {
        "code": "RUNTIME_ERROR",
        "message": "error running codes language runtime server not configured, please check your image runtime",
    }


class _Upstream(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):  # quiet
        pass

    def do_GET(self):
        if self.path.startswith("/stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for i in range(3):
                data = f"chunk{i}\n".encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            return
        body = json.dumps({"path": self.path, "xff": self.headers.get("X-Forwarded-For")}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_reverse_proxy_to_other_ports(sandbox_root):
    """execd's /proxy/<port> semantics, with an upstream on the host: a host-network sandbox (a
    sandbox of its own network reaches only its own ports: tiers/t1/sandbox/test_network.py)."""
    rt = SandboxRuntime(sandbox_root, network="host")
    execd = ExecdServer(rt, close_delay=0)
    execd.start()
    up = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Upstream)
    th = threading.Thread(target=up.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    th.start()
    try:
        c = Client(execd.port, prefix="")
        r = c.get(f"/proxy/{up.server_address[1]}/hello/world?x=1")
        assert r.status == 200 and r.json() == {"path": "/hello/world?x=1", "xff": "127.0.0.1"}
        r = c.get(f"/proxy/{up.server_address[1]}/stream")
        assert r.status == 200 and r.body == b"chunk0\nchunk1\nchunk2\n"
    finally:
        up.shutdown()
        up.server_close()
    try:
        r = c.get(f"/proxy/{up.server_address[1]}/gone")
        assert (r.status, r.body) == (502, b"Bad Gateway\n")
        r = c.get("/proxy/")
        assert (r.status, r.body) == (400, b"port is required\n")
    finally:
        execd.stop()
        rt.cleanup()


def test_terminate_leaves_no_process(sandbox_root):
    rt = SandboxRuntime(sandbox_root)
    s = ExecdServer(rt, close_delay=0)
    s.start()
    try:
        c = Client(s.port)
        c.run("sleep 300", background=True)
        c.run("(setsid sleep 301 > /dev/null 2>&1 < /dev/null &) ; sleep 302 > /dev/null 2>&1 &", background=True)
        ep = rt.start_entrypoint(["tail", "-f", "/dev/null"])
        time.sleep(0.3)
        pids = rt.process_groups() + rt._stray_pids() + [ep.pid]
        assert len(live_pids(pids)) >= 3
    finally:
        s.stop()
        rt.terminate()
        rt.terminate()  # idempotent
    assert live_pids(pids) == []
    assert rt._stray_pids() == []
    rt.cleanup()
    assert not os.path.exists(sandbox_root)


def test_pause_stops_processes(runtime):
    p = runtime.spawn(["sleep", "30"])
    try:
        runtime.pause()
        assert wait_until(lambda: (procs.stat(p.pid) or ("",))[0] == "T", 3)
        runtime.resume()
        assert runtime.wait_unpaused(1)
    finally:
        runtime.terminate()
    assert p.poll() is not None


def test_standalone_process(tmp_path):
    env = dict(os.environ, PYTHONPATH=REPO)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mock_opensandbox.execd",
            "--port",
            "0",
            "-access-token",
            "t0k",
            "--root",
            str(tmp_path),
            "--close-delay",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    try:
        line = proc.stderr.readline().decode()
        assert line.startswith("execd ready on 127.0.0.1:")
        port = int(line.split("127.0.0.1:")[1].split()[0])
        c = Client(port, headers={"X-EXECD-ACCESS-TOKEN": "t0k"})
        assert c.get("/ping").status == 200
        # a sleep no other test on the machine runs: pgrep must find this execd's command only
        sleeper = "sleep 400.%06d" % random.randrange(10**6)
        cid = c.run(sleeper, background=True).events()[0]["text"]
        assert c.get(f"/command/status/{cid}").json()["running"] is True
        # the command is running once it is spawned; its argv is the sleep's only after the stages before it
        # (runtime/stages.py) exec'd it, a moment later on a loaded machine
        before: list[str] = []

        def found() -> bool:
            before[:] = subprocess.run(["pgrep", "-f", sleeper], capture_output=True, text=True).stdout.split()
            return bool(before)

        assert wait_until(found)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0
        assert proc.stdout.read() == b""
        assert live_pids([int(p) for p in before]) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_metrics_snapshot_and_watch(make_execd):
    s = make_execd()
    m = Client(s.port).get("/metrics").json()
    assert list(m) == ["cpu_count", "cpu_used_pct", "mem_total_mib", "mem_used_mib", "timestamp"]
    assert m["cpu_count"] >= 1 and 0 <= m["cpu_used_pct"] <= 100
    conn = http.client.HTTPConnection("127.0.0.1", s.port, timeout=10)
    conn.request("GET", "/metrics/watch")
    r = conn.getresponse()
    assert r.getheader("Content-Type") == "text/event-stream"
    line = r.fp.readline()  # chunk size line
    data = r.fp.readline()
    conn.close()
    assert line.strip() and json.loads(data)["cpu_count"] >= 1


def test_start_delay_drops_then_answers_and_stop_during_the_delay_does_not_hang(runtime):
    """execd_start_delay: Running arrives before execd answers /ping (QUIRKS.md, Transport, routing, auth). In that
    window the port accepts and drops the connection unanswered, never refuses it (Docker's published port,
    QUIRKS.md)."""
    hc = http.client
    s = ExecdServer(runtime, start_delay=3, close_delay=0)
    s.start()
    try:
        assert s.port
        with socket.create_connection(("127.0.0.1", s.port), timeout=2) as c:  # accepted: not refused
            c.sendall(b"GET /ping HTTP/1.1\r\nHost: x\r\n\r\n")
            try:
                assert c.recv(100) == b""  # closed without an answer
            except ConnectionResetError:
                pass  # or reset, when the close finds the request unread
        with pytest.raises((hc.RemoteDisconnected, ConnectionResetError)):
            conn = hc.HTTPConnection("127.0.0.1", s.port, timeout=2)
            try:
                conn.request("GET", "/ping")
                conn.getresponse()
            finally:
                conn.close()
        deadline = time.monotonic() + 15
        while True:
            try:
                conn = hc.HTTPConnection("127.0.0.1", s.port, timeout=10)
                conn.request("GET", "/ping")
                assert conn.getresponse().status == 200
                conn.close()
                break
            except (hc.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                assert time.monotonic() < deadline
                time.sleep(0.05)
    finally:
        s.stop()
    early = ExecdServer(runtime, start_delay=30)
    early.start()
    started = time.monotonic()
    early.stop()
    assert time.monotonic() - started < 2
