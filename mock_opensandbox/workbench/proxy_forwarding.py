"""The fault proxy's forwarding (``_Forwarder``): one request to an upstream address and its answer relayed
back (streamed, recorded, an endpoint document rewritten), WebSocket upgrades tunnelled byte for byte."""

from __future__ import annotations

import http.client
import re
import socket
import threading
import time
from typing import Any, Protocol

from mock_opensandbox.wire import pollio, relay
from mock_opensandbox.wire.http1 import OBSERVERS, Request
from mock_opensandbox.workbench.proxy_recording import (
    MAX_RECORDED_BODY,
    STREAM_ABOVE,
    Recorder,
    _stream_request,
    _text_or_b64,
)

_ENDPOINT_RE = re.compile(r"^(?:/v1)?/sandboxes/([^/?]+)/endpoints/(\d+)/?$")
CONNECT_TIMEOUT = 10.0


def _json_error(req: Request, status: int, code: str, message: str) -> None:
    req.send_json(status, {"code": code, "message": message})


# =====================================================================================================
# forwarding
# =====================================================================================================
def _tunnel(client: socket.socket, upstream: socket.socket, stop: threading.Event) -> None:
    """Copy bytes both ways until one side closes (a WebSocket after its 101)."""
    socks = [client, upstream]
    try:
        while not stop.is_set():
            r = pollio.readable(socks, 0.2)
            for s in r:
                data = s.recv(65536)
                if not data:
                    return
                (upstream if s is client else client).sendall(data)
    except OSError:
        return


class Forwarding(Protocol):
    """What a _Forwarder uses of its fault proxy (proxy.py FaultProxy, which imports this module)."""

    upstream_prefix: str
    recorder: Recorder | None
    stopping: threading.Event

    def note_key(self, key: str) -> None: ...

    def observe_lifecycle(self, req: Request, status: int, body: bytes) -> None: ...

    def rewrite_endpoint(self, data: bytes, sid: str, container_port: int, client_host: str | None) -> bytes: ...


class _Forwarder:
    """Forwards one request to ``host:port`` and relays the answer (streaming), optionally rewriting
    an endpoint document. Shared by the lifecycle app and the per-endpoint apps."""

    def __init__(self, proxy: Forwarding):
        self.proxy = proxy

    def forward(
        self, req: Request, host: str, port: int, *, sandbox: str | None = None, lifecycle: bool = False
    ) -> None:
        proxy = self.proxy
        path = req.raw_path
        if lifecycle and proxy.upstream_prefix:
            path = proxy.upstream_prefix + path
        hostport = "%s:%d" % (host, port)
        upgrade = (req.headers.get("Upgrade") or "").lower() == "websocket"
        # an upgrade keeps its Connection/Upgrade (the tunnel is the client's own); else every hop-by-hop header
        # goes, with those any Connection header names
        headers: list[tuple[str, str]] = [("Host", hostport)] + (
            relay.forwardable(req.headers.items(), relay.FRAMING, connection=())
            if upgrade
            else relay.forwardable(req.headers.items(), relay.HOP_BY_HOP | relay.FRAMING)
        )
        # a large Content-Length body is streamed upstream as it arrives (memory independent of its size);
        # the recording keeps its first MAX_RECORDED_BODY bytes. Chunked and small bodies are read first.
        length = (req.headers.get("Content-Length") or "").strip(" \t")
        stream = (
            not upgrade
            and req._body is None
            and length.isdigit()
            and int(length) > STREAM_ABOVE
            and "chunked" not in (req.headers.get("Transfer-Encoding") or "").lower()
        )
        body = b"" if upgrade or stream else req.body
        if stream:
            headers.append(("Content-Length", length))
        elif body or req.method in ("POST", "PUT", "PATCH"):
            headers.append(("Content-Length", str(len(body))))
        if lifecycle and req.headers.get("OPEN-SANDBOX-API-KEY"):
            proxy.note_key(req.headers["OPEN-SANDBOX-API-KEY"])
        started = time.monotonic()
        conn = http.client.HTTPConnection(host, port, timeout=CONNECT_TIMEOUT)
        try:
            try:
                conn.connect()
            except OSError as e:
                _json_error(
                    req,
                    502,
                    "PROXY::UPSTREAM_UNREACHABLE",
                    "The fault proxy cannot reach %s: %s" % (hostport, e.strerror or e),
                )
                return
            conn.sock.settimeout(None)
            if upgrade:
                self._upgrade(req, conn, path, headers)
                return
            try:
                conn.putrequest(req.method, path, skip_host=True, skip_accept_encoding=True)
                for k, v in headers:
                    conn.putheader(k, v)
                conn.endheaders(body if body else None)
                if stream:
                    body = _stream_request(req, conn, int(length))
                resp = conn.getresponse()
            except (OSError, http.client.HTTPException) as e:
                _json_error(req, 502, "PROXY::UPSTREAM_FAILED", "The upstream %s failed: %s" % (hostport, e))
                return
            rec_req = None
            if proxy.recorder is not None:
                rec_req = {"method": req.method, "path": path, "headers": dict(headers), "_started": started}
                rec_req.update(_text_or_b64(body if body or req.method in ("POST", "PUT", "PATCH") else None))
            self._relay(req, resp, rec_req, sandbox=sandbox, lifecycle=lifecycle)
        finally:
            conn.close()

    def _upgrade(
        self, req: Request, conn: http.client.HTTPConnection, path: str, headers: list[tuple[str, str]]
    ) -> None:
        h = req.handler
        sock = conn.sock
        head = "%s %s HTTP/1.1\r\n%s\r\n" % (req.method, path, "".join("%s: %s\r\n" % kv for kv in headers))
        sock.sendall(head.encode("latin-1"))
        h.wfile.flush()
        # the handshake answer (and everything after it) is copied through as is
        req.responded = True
        h.close_connection = True
        first = sock.recv(65536)
        if not first:
            return
        h.wfile.write(first)
        h.wfile.flush()
        _tunnel(h.connection, sock, self.proxy.stopping)

    def _relay(
        self,
        req: Request,
        resp: http.client.HTTPResponse,
        rec_req: dict[str, Any] | None,
        *,
        sandbox: str | None,
        lifecycle: bool,
    ) -> None:
        """Relay the upstream's answer. Whole answers (a Content-Length up to MAX_RECORDED_BODY, or no
        body) are read first, so bookkeeping and recording are done before the client has the answer;
        streams (chunked, SSE, large downloads) are relayed as they come and finished off before their
        last bytes."""
        h = req.handler
        proxy = self.proxy
        m_ep = _ENDPOINT_RE.match(req.path) if lifecycle else None
        raw_headers = resp.getheaders()
        out = relay.forwardable(raw_headers)
        no_body = req.method == "HEAD" or resp.status in (204, 304) or 100 <= resp.status < 200
        length = resp.getheader("Content-Length")
        whole = no_body or (length is not None and length.isdigit() and int(length) <= MAX_RECORDED_BODY)
        captured = bytearray()
        observe = bool(OBSERVERS)
        if observe:
            req.sent_status, req.sent_headers = resp.status, dict(out)

        def finish() -> None:
            body = bytes(captured)
            if lifecycle:
                proxy.observe_lifecycle(req, resp.status, body)
            if rec_req is not None and proxy.recorder is not None:
                rec_resp: dict[str, Any] = {"status": resp.status, "headers": dict(raw_headers)}
                rec_resp.update(_text_or_b64(None if no_body else body))
                started = rec_req.pop("_started", None)
                proxy.recorder.add(rec_req, rec_resp, started)
            if observe:
                req.sent_body += body

        if whole:
            try:
                data = b"" if no_body else resp.read()
            except (OSError, http.client.HTTPException):
                _json_error(req, 502, "PROXY::UPSTREAM_FAILED", "The upstream broke off its answer.")
                return
            captured += data
            if m_ep and resp.status == 200 and data:
                data = proxy.rewrite_endpoint(data, m_ep.group(1), int(m_ep.group(2)), req.headers.get("Host"))
                out = [(k, v) for k, v in out if k.lower() != "content-length"] + [("Content-Length", str(len(data)))]
            finish()
            self._head(h, resp, out)
            if data:
                h.wfile.write(data)
            h.wfile.flush()
            req.responded = True
            return
        chunked = length is None
        if chunked:
            out = [(k, v) for k, v in out if k.lower() != "content-length"] + [("Transfer-Encoding", "chunked")]
        self._head(h, resp, out)
        req.responded = True
        h.wfile.flush()
        pending = b""  # held back so the bookkeeping happens before the last bytes
        broken = False
        while True:
            try:
                data = resp.read1(65536)
            except (OSError, http.client.HTTPException):
                h.close_connection = broken = True  # the upstream broke off: so does the answer
                break
            if not data:
                break
            if len(captured) < MAX_RECORDED_BODY:
                captured += data
            if pending:
                h.wfile.write(b"%x\r\n%s\r\n" % (len(pending), pending) if chunked else pending)
                h.wfile.flush()
            pending = data
        finish()
        if pending:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(pending), pending) if chunked else pending)
        if chunked and not broken:
            h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()

    @staticmethod
    def _head(h: Any, resp: http.client.HTTPResponse, headers: list[tuple[str, str]]) -> None:
        h.log_request(resp.status)
        h.send_response_only(resp.status, resp.reason)
        for k, v in headers:
            h.send_header(k, v)
        h.end_headers()
