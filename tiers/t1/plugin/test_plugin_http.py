"""The plugin's HTTP transport against a local HTTP/1.1 server: one kept-alive connection per host,
a stale kept-alive connection is replaced transparently, concurrent requests do not share a socket,
and an SSE stream is read only up to the terminal event."""

from __future__ import annotations

import http.server
import socket
import threading
import time

import pytest

from osb import sse, transport  # plugin/: importable through tiers/t1/conftest.py


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.server.peers.append(self.client_address[1])
        if self.path.startswith("/slow"):
            time.sleep(0.3)
        if self.path.startswith("/sse"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for frame in (
                b'{"type":"init","text":"abc"}\n\n',
                b'{"type":"stdout","text":"x"}\n\n',
                b'{"type":"execution_complete","execution_time":1}\n\n',
            ):
                self.wfile.write(b"%x\r\n%s\r\n" % (len(frame), frame))
                self.wfile.flush()
            time.sleep(self.server.close_delay)  # execd keeps the stream open after the last event
            self.wfile.write(b"0\r\n\r\n")
            return
        body = b'{"ok":true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if self.path.startswith("/drop"):  # answer, then silently drop the keep-alive socket
            self.close_connection = True

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    srv.peers, srv.close_delay = [], 0.0
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def url(srv, path):
    return f"http://127.0.0.1:{srv.server_port}{path}"


def test_one_connection_for_sequential_requests(server):
    h = transport.Http(5)
    for _ in range(5):
        assert h.request("GET", url(server, "/x"), {}).json() == {"ok": True}
    assert len(set(server.peers)) == 1
    h.close()


def test_stale_keep_alive_connection_is_replaced(server):
    h = transport.Http(5)
    assert h.request("GET", url(server, "/drop"), {}).status == 200
    time.sleep(0.1)
    assert h.request("GET", url(server, "/x"), {}).json() == {"ok": True}
    assert len(set(server.peers)) == 2
    h.close()


def test_concurrent_requests_use_their_own_connections(server):
    h = transport.Http(5)
    results = []
    threads = [
        threading.Thread(target=lambda: results.append(h.request("GET", url(server, "/slow"), {}).status))
        for _ in range(3)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [200, 200, 200] and len(set(server.peers)) == 3
    n = len(server.peers)
    h.request("GET", url(server, "/x"), {})
    assert server.peers[n] in server.peers[:n], "one of them was kept for reuse"
    h.close()


def test_sse_read_stops_at_the_terminal_event(server):
    server.close_delay = 20.0
    h = transport.Http(5)
    stream = h.open("GET", url(server, "/sse"), {})
    dec, events = sse.SSEDecoder(), []
    started = time.monotonic()
    while not events or events[-1]["type"] != "execution_complete":
        chunk = stream.read_some()
        assert chunk is not None, "the stream ended before the terminal event"
        events += dec.feed(chunk)
    stream.close()
    assert [e["type"] for e in events] == ["init", "stdout", "execution_complete"]
    assert time.monotonic() - started < 10


def test_refused_and_timeout_are_net_errors():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(transport.NetError) as info:
        transport.Http(2).request("GET", f"http://user:pw@127.0.0.1:{port}/v1/x?token=t", {})
    assert info.value.kind == "refused" and "pw" not in str(info.value) and "token" not in str(info.value)
    with socket.socket() as s:  # accepts (backlog) but never answers
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        with pytest.raises(transport.NetError) as info:
            transport.Http(0.5).request("GET", f"http://127.0.0.1:{s.getsockname()[1]}/", {})
        assert info.value.kind == "timeout"
