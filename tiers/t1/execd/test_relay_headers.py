"""t1: the hop-by-hop filter of the mock's HTTP proxies (relay.forwardable): every Connection header counts, as in
Go's httputil.ReverseProxy (removeHopByHopHeaders reads them all), except where the real server reads only the
first (its proxy's request side: Starlette ``headers.get``). Through the fault proxy (workbench/proxy.py) in front of a
small upstream that shows what it received and answers with Connection headers of its own."""

from __future__ import annotations

import http.client
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mock_opensandbox.wire import relay
from mock_opensandbox.workbench.proxy import FaultProxy

pytestmark = pytest.mark.spec_exempt("the fault proxy in front of a test upstream (not an OpenSandbox server)")


class _Echo(BaseHTTPRequestHandler):
    """Answers with the request's headers as JSON, two Connection headers and the headers they name."""

    def do_GET(self) -> None:
        body = json.dumps([[k, v] for k, v in self.headers.items()]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "X-Up-First")
        self.send_header("Connection", "X-Up-Second")
        for name in ("X-Up-First", "X-Up-Second", "X-Up-Kept"):
            self.send_header(name, "1")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def through_proxy():
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    upstream.daemon_threads = True
    t = threading.Thread(target=upstream.serve_forever, daemon=True)
    t.start()
    proxy = FaultProxy("http://127.0.0.1:%d" % upstream.server_address[1]).start()
    try:
        yield proxy
    finally:
        proxy.stop()
        upstream.shutdown()
        upstream.server_close()
        t.join(10)


def test_every_connection_header_names_headers_the_proxy_drops(through_proxy):
    conn = http.client.HTTPConnection("127.0.0.1", through_proxy.port, timeout=10)
    try:
        conn.putrequest("GET", "/health", skip_accept_encoding=True)
        for k, v in (
            ("Connection", "X-First"),
            ("Connection", "X-Second"),
            ("X-First", "1"),
            ("X-Second", "1"),
            ("X-Kept", "1"),
            ("Keep-Alive", "timeout=5"),
        ):
            conn.putheader(k, v)
        conn.endheaders()
        resp = conn.getresponse()
        got = {k.lower() for k, _ in json.loads(resp.read())}
        sent_back = {k.lower() for k, _ in resp.getheaders()}
    finally:
        conn.close()
    assert resp.status == 200
    assert "x-kept" in got and not got & {"x-first", "x-second", "keep-alive"}  # the second Connection too
    assert "x-up-kept" in sent_back and not sent_back & {"x-up-first", "x-up-second"}


def test_forwardable_policy():
    pairs = [
        ("Connection", "a"),
        ("A", "1"),
        ("connection", "B, c"),
        ("b", "2"),
        ("C", "3"),
        ("Set-Cookie", "x"),
        ("Set-Cookie", "y"),
        ("Host", "h"),
        ("TE", "trailers"),
    ]
    assert relay.forwardable(pairs) == [("Set-Cookie", "x"), ("Set-Cookie", "y"), ("Host", "h")]
    assert relay.forwardable(pairs, relay.HOP_BY_HOP | relay.FRAMING) == [("Set-Cookie", "x"), ("Set-Cookie", "y")]
    # the server's proxy: only the first Connection header's names
    assert relay.forwardable(pairs, relay.HOP_BY_HOP, connection=["a"]) == [
        ("b", "2"),
        ("C", "3"),
        ("Set-Cookie", "x"),
        ("Set-Cookie", "y"),
        ("Host", "h"),
    ]
    assert relay.forwardable(pairs, frozenset(), connection=()) == pairs  # an upgrade's tunnel keeps them all
