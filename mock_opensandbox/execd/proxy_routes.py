"""The /proxy/<port> route of the mock execd (pkg/web/proxy.go): a request to another port than execd's own is
reverse-proxied to 127.0.0.1:<port> as the sandbox sees it (its own network namespace), the answer streamed
back (QUIRKS.md, Transport, routing, auth). execd's own port is served by the server's route table
(execd/server.py handle()). Routes only: a relay keeps no state between requests."""

from __future__ import annotations

import http.client

from mock_opensandbox.runtime import SandboxRuntime
from mock_opensandbox.wire.http1 import OBSERVERS, ChunkedWriter, Request
from mock_opensandbox.wire.relay import FRAMING, HOP_BY_HOP, forwardable

__all__ = ["PROXY_HOP_BY_HOP", "ProxyRoutes"]

# /proxy/<port>'s hop-by-hop policy (httputil.ReverseProxy), both ways: every hop-by-hop header, and the
# framing it writes itself (Host and Content-Length of the request; Content-Length of the answer)
PROXY_HOP_BY_HOP = HOP_BY_HOP | FRAMING


class ProxyRoutes:
    """The /proxy/<port> route of one execd: ``forward(req, port, path)``, called by the server's dispatch
    for every port but execd's own. ``runtime``: the sandbox, whose ``connect(port)`` reaches 127.0.0.1
    inside it."""

    def __init__(self, runtime: SandboxRuntime):
        self.runtime = runtime

    def forward(self, req: Request, port: str, path: str) -> None:
        """execd pkg/web/proxy.go: forward to 127.0.0.1:<port><path>?<query> inside the sandbox (execd
        runs in the container's network namespace), streaming the answer.
        Headers travel as lists of pairs both ways, so repeated ones (Set-Cookie, Cookie, Vary, ...)
        stay separate like Go's http.Header copies them; hop-by-hop headers (and those named in
        Connection) are dropped as httputil.ReverseProxy does."""
        query = req.raw_path.split("?", 1)[1] if "?" in req.raw_path else ""
        target = path + ("?" + query if query else "")
        try:
            body = req.body
        except (OSError, ValueError):
            body = b""
        client_ip = (
            req.headers.get("X-Forwarded-For", "").split(",")[0].strip()
            or req.headers.get("X-Real-IP")
            or req.handler.client_address[0]
        )
        # Director: Header.Set X-Forwarded-For / X-Forwarded-Proto, Header.Del X-Forwarded-Host
        # (src pkg/web/proxy.go; the server proxy's X-Forwarded-Host therefore never reaches the app)
        out = forwardable(
            req.headers.items(), PROXY_HOP_BY_HOP | {"x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"}
        )
        out += [("X-Forwarded-For", client_ip), ("X-Forwarded-Proto", "http")]
        send_body = body if body or req.method in ("POST", "PUT", "PATCH") else None
        try:
            if not port.isdigit() or not 0 < int(port) < 65536:
                raise OSError("bad port")
            conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=600)
            # 127.0.0.1 as the sandbox sees it: its own network namespace (runtime.connect)
            conn.sock = self.runtime.connect(int(port), timeout=600)
            conn.putrequest(
                req.method, target, skip_accept_encoding=any(k.lower() == "accept-encoding" for k, _ in out)
            )
            for k, v in out:
                conn.putheader(k, v)
            if send_body is not None:
                conn.putheader("Content-Length", str(len(send_body)))
            conn.endheaders(send_body)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException):
            req.send_text(502, "Bad Gateway\n", "text/plain; charset=utf-8", {"X-Content-Type-Options": "nosniff"})
            return
        try:
            pairs = forwardable(resp.getheaders(), PROXY_HOP_BY_HOP)
            length = resp.getheader("Content-Length")
            if length is not None or resp.status in (204, 304) or req.method == "HEAD":
                data = resp.read()
                if resp.status == 204:
                    n = None
                elif req.method == "HEAD" or resp.status == 304:
                    n = length  # the upstream's length of the body it did not send
                else:
                    n = str(len(data))
                _relay_head(req, resp.status, pairs, content_length=n)
                if data and req.method != "HEAD":
                    req.handler.wfile.write(data)
                    if OBSERVERS:
                        req.sent_body += data
                if OBSERVERS:
                    req.observe()
                return
            _relay_head(req, resp.status, pairs, chunked=True)
            w = ChunkedWriter(req.handler, req.sent_body, req.observe) if OBSERVERS else ChunkedWriter(req.handler)
            while True:
                chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(4096)
                if not chunk:
                    break
                w.write(chunk)
            w.close()
        finally:
            conn.close()


def _relay_head(
    req: Request, status: int, pairs: list[tuple[str, str]], *, content_length: str | None = None, chunked: bool = False
) -> None:
    """Status line and headers of a proxied answer, repeated headers kept. Go's server adds Date
    only when the upstream sent none (the copied header wins)."""
    h = req.handler
    req.drain()
    h.log_request(status)
    h.send_response_only(status)
    if not any(k.lower() == "date" for k, _ in pairs):
        h.send_header("Date", h.date_time_string())
    for k, v in pairs:
        h.send_header(k, v)
    if content_length is not None:
        h.send_header("Content-Length", content_length)
    if chunked:
        h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()
    req.responded = True
    if OBSERVERS:
        req.sent_status = status
        req.sent_headers = {}
        for k, v in pairs:  # observers get a dict: repeated values joined as one field would be
            req.sent_headers[k] = req.sent_headers[k] + ", " + v if k in req.sent_headers else v
