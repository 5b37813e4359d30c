"""The reverse proxy of the mock's lifecycle server, as the server's ``api/proxy.py`` does it (any method,
filtered headers, the body streamed both ways, uvicorn's response headers), and the per-sandbox listener
that stands in for Docker's published container port 8080 (``PortForwardApp``: a transparent forward).

``forward(..., hop_by_hop=)`` takes the proxy's hop-by-hop policy: the server's set is relay.HOP_BY_HOP
without ``proxy-connection`` (server api/proxy.py HOP_BY_HOP_HEADERS), which a client can therefore pass
through. Standard library only.
"""

from __future__ import annotations

import http.client
import socket
from typing import Any, Callable, Iterator, cast

from mock_opensandbox.wire import framing, relay
from mock_opensandbox.wire.http1 import OBSERVERS, Handler, Request
from mock_opensandbox.wire.listener import App, FaultRules, RequestJournal

# server api/proxy.py: the hop-by-hop headers it drops (relay.HOP_BY_HOP has proxy-connection too)
HOP_BY_HOP = relay.HOP_BY_HOP - {"proxy-connection"}
SENSITIVE = {"authorization", "cookie", "open-sandbox-api-key", "opensandbox-secure-access"}
FORWARDED = {"forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-port", "x-forwarded-proto", "x-real-ip"}


class _BodyReader:
    """File-like view of the first ``n`` bytes of the client's body stream (for http.client)."""

    def __init__(self, rfile: Any, n: int):
        self._f, self._left = rfile, n

    def read(self, size: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        size = self._left if size is None or size < 0 else min(size, self._left)
        data: bytes = self._f.read(size)
        self._left -= len(data)
        if not data:
            self._left = 0
        return data


def _chunked_body(rfile: Any) -> Iterator[bytes]:
    """A chunked request body as it arrives, at most 64 KiB at a time whatever a chunk's size (a chunk
    announced as 2 GiB is never read whole). framing.ChunkError when it is malformed."""
    while True:
        size = framing.chunk_size(rfile.readline(4096))
        if size == 0:
            while rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                pass
            return
        while size:
            data = rfile.read(min(size, 1 << 16))
            if not data:
                raise framing.ChunkError("unexpected EOF")
            size -= len(data)
            yield data
        if rfile.readline(3) not in (b"\r\n", b"\n"):
            raise framing.ChunkError("malformed chunked encoding")


class BackendError(Exception):
    """The backend (execd or a sandbox app) failed after the connection was made."""


def forward(
    req: Request,
    target: str,
    rest: str,
    *,
    extra_headers: dict[str, str] | None = None,
    client_facing: bool = True,
    on_connect_error: Callable[[Exception], None] | None = None,
    location_prefix: str | None = None,
    connect: Callable[[], socket.socket] | None = None,
    hop_by_hop: frozenset[str] = HOP_BY_HOP,
    host: str | None = None,
    response_headers: dict[str, str] | None = None,
) -> None:
    """Forward ``req`` to ``http://<target>/<rest>?<query>`` and stream the answer back.

    ``client_facing`` = the lifecycle server's proxy: strip auth/forwarding headers, add X-Forwarded-*,
    and answer with uvicorn's headers; otherwise a transparent port mapping (the 8080 listener).
    ``connect`` opens the backend connection (a port inside the sandbox's network namespace);
    ``hop_by_hop``: the headers never forwarded either way (with those the Connection header names).
    ``host``: the Host sent instead (the ingress gateway's target); ``response_headers``: added to the answer."""
    h = req.handler
    hostport, _, base_path = target.partition("/")
    host, _, port_s = hostport.rpartition(":")
    path = "/" + base_path.rstrip("/") if base_path else ""
    rest = rest.lstrip("/")
    if rest:
        path += "/" + rest
    path = path or "/"
    query = req.raw_path.partition("?")[2]
    if query:
        path += "?" + query
    # the server's proxy honours only the first Connection header of a request (server api/proxy.py passes
    # Starlette's request.headers.get("connection")); the 8080 listener honours every one, as relay does
    headers = relay.forwardable(
        req.headers.items(),
        hop_by_hop | relay.FRAMING | (SENSITIVE | FORWARDED if client_facing else frozenset()),
        connection=[req.headers.get("Connection")] if client_facing else None,
    )
    for k, v in (extra_headers or {}).items():
        headers = [(a, b) for a, b in headers if a.lower() != k.lower()]
        headers.append((k, v))
    if client_facing:
        headers.append(("X-Forwarded-Proto", "http"))
        if req.headers.get("Host"):
            headers.append(("X-Forwarded-Host", req.headers["Host"]))
        headers.append(("X-Forwarded-For", h.client_address[0]))
    body: Any = None
    chunked = False
    pre = getattr(h, "prefetched", None)  # a chunked lifecycle body, read into a spool file (httpcore)
    if pre is not None and req._body is None:
        h.prefetched = None
        body, chunked = iter(lambda: pre.read(1 << 16), b""), True
        headers.append(("Transfer-Encoding", "chunked"))
        req._body = b""
    elif req._body is not None:
        body = req._body
        headers.append(("Content-Length", str(len(body))))
    elif "chunked" in (req.headers.get("Transfer-Encoding") or "").lower():
        body, chunked = _chunked_body(h.rfile), True
        headers.append(("Transfer-Encoding", "chunked"))
        req._body = b""
    else:
        n = int(req.headers.get("Content-Length") or 0)
        if n > 0:
            body = _BodyReader(h.rfile, n)
            headers.append(("Content-Length", str(n)))
        elif req.method in ("POST", "PUT", "PATCH"):
            headers.append(("Content-Length", "0"))
        req._body = b""
    conn = http.client.HTTPConnection(host, int(port_s), timeout=10)
    try:
        try:
            if connect is not None:
                conn.sock = connect()
            else:
                conn.connect()
        except OSError as e:
            if on_connect_error is None:
                raise
            on_connect_error(e)
            return
        conn.sock.settimeout(None)
        try:
            conn.putrequest(req.method, path, skip_host=True, skip_accept_encoding=True)
            # a published port (not client_facing) is transparent: the app sees the client's Host
            conn.putheader("Host", host or (req.headers.get("Host") or hostport if not client_facing else hostport))
            for k, v in headers:
                conn.putheader(k, v)
            conn.endheaders()
            if body is not None:
                if isinstance(body, (bytes, bytearray)):
                    conn.send(body)
                elif chunked:
                    for chunk in body:
                        if chunk:
                            conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    conn.send(b"0\r\n\r\n")
                else:
                    while True:
                        data = body.read(65536)
                        if not data:
                            break
                        conn.send(data)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            raise BackendError(str(e)) from e
        except framing.ChunkError:  # the client's chunked body broke off or is malformed: so does this
            h.close_connection = True
            return
        _relay_response(req, resp, client_facing, location_prefix, hop_by_hop, response_headers)
    finally:
        conn.close()
        if pre is not None:
            pre.close()


def _relay_response(
    req: Request,
    resp: http.client.HTTPResponse,
    client_facing: bool,
    location_prefix: str | None,
    hop_by_hop: frozenset[str],
    response_headers: dict[str, str] | None = None,
) -> None:
    h = req.handler
    out: list[tuple[str, str]] = []
    length: int | None = None
    for k, v in relay.forwardable(resp.getheaders(), hop_by_hop):  # every Connection header (httpx joins them)
        kl = k.lower()
        if client_facing and kl in ("server", "date"):
            continue  # uvicorn writes its own (server api/proxy.py SERVER_GENERATED_RESPONSE_HEADERS)
        if kl == "content-length":
            try:
                length = int(v)
            except ValueError:
                continue
        if kl == "location" and location_prefix and v.startswith("/") and not v.startswith("//"):
            v = location_prefix + v
        out.append((kl if client_facing else k, v))
    out.extend((response_headers or {}).items())
    no_body = req.method == "HEAD" or resp.status in (204, 304) or 100 <= resp.status < 200
    use_chunked = length is None and not no_body
    if client_facing:
        h.send_response(resp.status)  # server: uvicorn + date
        extra = h.base_headers()
    else:
        h.send_response_only(resp.status)
        extra = {}
    for k, v in out:
        h.send_header(k, v)
    for k, v in extra.items():
        h.send_header(k, v)
    if use_chunked:
        h.send_header("transfer-encoding" if client_facing else "Transfer-Encoding", "chunked")
    h.end_headers()
    h.wfile.flush()
    req.responded = True
    capture = bool(OBSERVERS)
    if capture:
        req.sent_status = resp.status
        req.sent_headers = dict(out)
        req.sent_headers.update(extra)
    if no_body:
        return
    while True:
        try:
            data = resp.read1(65536)
        except (OSError, http.client.HTTPException):  # the backend broke off: so does the answer
            h.close_connection = True
            return
        if not data:
            break
        if use_chunked:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        else:
            h.wfile.write(data)
        h.wfile.flush()
        if capture:
            req.sent_body += data
    if use_chunked:
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()
    elif length is not None and resp.length:  # backend closed early: the client must not wait for more
        h.close_connection = True


class PortForwardApp(App):
    """The per-sandbox listener standing in for Docker's published container port 8080: forwards
    everything to the sandbox's port 8080 (``connect``: into its network namespace; with the host
    network, through execd's /proxy/8080 route)."""

    fault_listener = "port"

    def __init__(
        self,
        target: Callable[[], tuple[str, dict[str, str]]],
        verbose: bool = False,
        *,
        faults: FaultRules | None = None,
        sandbox_id: str | None = None,
        journal: RequestJournal | None = None,
        connect: Callable[[], socket.socket] | None = None,
    ):
        self.target = target
        self.connect = connect  # the sandbox's own port 8080 (its network namespace), else target's address
        self.verbose = verbose
        self.faults, self.sandbox_id, self.journal = faults, sandbox_id, journal


class PortForwardHandler(Handler):
    flavor = "gin"

    def dispatch(self, req: Request) -> None:
        app = cast(PortForwardApp, self.server.app)
        try:
            target, headers = app.target()
        except Exception:
            self.close_connection = True
            return

        def refused(e: Exception) -> None:
            self.close_connection = True  # like a published port with nothing behind it: the connection drops

        try:
            forward(
                req,
                target,
                req.raw_path.partition("?")[0],
                extra_headers=headers,
                client_facing=False,
                on_connect_error=refused,
                connect=app.connect,
            )
        except BackendError:
            self.close_connection = True
