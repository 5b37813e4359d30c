"""Gin's replies for the mock execd (c.JSON, c.Status, RespondError, the SSE header set, the
router's own 404 / trailing-slash redirect). Everything that writes an execd answer goes through
here; the texts and header sets are the binary's (tiers/diff)."""

from __future__ import annotations

from typing import Any

from mock_opensandbox.execd.errors import ExecdError
from mock_opensandbox.wire.gojson import GIN_JSON, go_json
from mock_opensandbox.wire.http1 import ChunkedWriter, Request

__all__ = ["send", "json_reply", "error_reply", "ok", "sse_start", "not_found", "redirect"]

# net/http bufferBeforeChunkingSize: a handler that writes more than this before returning (without
# setting Content-Length) gets a chunked answer (tiers/diff directories.list depth 3)
GO_BUFFER = 2048

# controller/sse.go sseHeaders (Connection: keep-alive is left to the transport)
SSE_HEADERS = {"Cache-Control": "no-cache", "Content-Type": "text/event-stream", "X-Accel-Buffering": "no"}


def send(
    req: Request, status: int, body: bytes, content_type: str | None, headers: dict[str, str] | None = None
) -> None:
    """A Go handler's body: Content-Length up to 2048 bytes, chunked above."""
    if len(body) > GO_BUFFER and req.method != "HEAD":
        all_headers = dict(headers or {})
        if content_type:
            all_headers["Content-Type"] = content_type
        w = req.start_chunked(status, all_headers)
        try:
            w.write(body)
        finally:
            w.close()
        return
    req.send(status, body, content_type, headers)


def json_reply(req: Request, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
    send(req, status, go_json(obj).encode("utf-8", "surrogatepass"), GIN_JSON, headers)


def error_reply(req: Request, err: ExecdError) -> None:
    json_reply(req, err.status, err.body())


def ok(req: Request) -> None:
    """RespondSuccess(nil): 200, Content-Length 0, no Content-Type (recordings 10/13)."""
    req.send(200, b"")


def sse_start(req: Request) -> ChunkedWriter:
    return req.start_chunked(200, dict(SSE_HEADERS))


def not_found(req: Request) -> None:
    """Gin's default 404 (recording 06): also for a known path with another method
    (HandleMethodNotAllowed is off) and for HEAD (Gin does not route HEAD to GET)."""
    req.send_text(404, "404 page not found")


def redirect(req: Request, location: str) -> None:
    """RedirectTrailingSlash: 301 for GET, 307 otherwise; net/http's http.Redirect writes the small
    HTML body only for GET and HEAD."""
    if req.method in ("GET", "HEAD"):
        body = f'<a href="{location}">Moved Permanently</a>.\n\n' if req.method == "GET" else ""
        req.send(301, body.encode(), "text/html; charset=utf-8", {"Location": location})
    else:
        req.send(307, b"", None, {"Location": location})
