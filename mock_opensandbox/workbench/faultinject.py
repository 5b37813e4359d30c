"""The fault injector: what a fired rule of workbench/faults.py does to one request on a mock listener (delay,
made-up status page, TCP reset, a body cut, dribbled or stalled), called by ``httpcore.Handler._handle``
through ``inject()``; ``classify()`` names a request's listener, path and sandbox for the rules and the
journal. docs/FAULTS.md is the user guide. Standard library only."""

from __future__ import annotations

import html
import json
import os
import re
import socket
import struct
from http import HTTPStatus
from typing import Any

from mock_opensandbox.lifecycle.k8s_workloads import PodOutcome
from mock_opensandbox.wire.listener import App, RequestHandler, ResponseStream
from mock_opensandbox.wire.relay import client_gone
from mock_opensandbox.workbench.faults import FaultRegistry, Rule

__all__ = ["inject", "classify", "request_sandbox", "proxy_error_page", "Injection"]

_SANDBOX_PATH_RE = re.compile(r"^(?:/v1)?/sandboxes/([^/?]+)")  # a lifecycle path of one sandbox


def proxy_error_page(status: int, extra: str = "") -> str:
    """The HTML error page nginx puts in front of a failed upstream (``<title>502 Bad Gateway</title>``)."""
    try:
        reason = HTTPStatus(status).phrase
    except ValueError:
        reason = "Error"
    title = "%d %s" % (status, reason)
    return (
        "<html>\r\n<head><title>%s</title></head>\r\n<body>\r\n<center><h1>%s</h1></center>\r\n%s"
        "<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n" % (title, title, extra)
    )


def _reset(handler: RequestHandler) -> None:
    """Abort the connection with a TCP RST (SO_LINGER 0, then close the descriptor at once). The
    socket object is detached first, so the handler's later clean-up never touches a reused fd."""
    sock = handler.connection
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        # wake a thread blocked reading this socket (a WebSocket reader): while a read is in
        # progress the close below would be deferred, and no RST sent (SHUT_RD sends nothing)
        try:
            sock.shutdown(socket.SHUT_RD)
        except OSError:
            pass
        fd = sock.detach()
        if fd >= 0:
            os.close(fd)
    except OSError:
        pass
    handler.close_connection = True


def _fin(handler: RequestHandler) -> None:
    """Close the connection cleanly (FIN) after what was sent."""
    try:
        handler.connection.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    handler.close_connection = True


class _FaultyWriter:
    """Stands in for ``handler.wfile`` while a body fault (reset_body, truncate, dribble) is active.

    BaseHTTPRequestHandler writes the status line and all headers in one write (flush_headers), so
    the first write ending in a blank line is the head; everything after it is body."""

    def __init__(self, raw: ResponseStream, injection: "Injection"):
        self._raw = raw
        self._inj = injection
        self._rule = injection.rule
        self._in_body = False
        self._sent = 0
        self.cut = False

    def _cut(self) -> None:
        self.cut = True
        try:
            self._raw.flush()
        except OSError:
            pass
        h = self._inj.handler
        if self._rule.kind == "reset_body":
            _reset(h)
            raise ConnectionResetError("connection reset by a mock fault (%s)" % self._rule.id)
        _fin(h)
        raise BrokenPipeError("connection closed early by a mock fault (%s)" % self._rule.id)

    def write(self, data: Any) -> int:
        if self.cut:
            raise BrokenPipeError("connection cut by a mock fault (%s)" % self._rule.id)
        data = bytes(data)
        n = len(data)
        if not self._in_body:
            end = data.find(b"\r\n\r\n")
            if end < 0 or not data.startswith(b"HTTP/") or data.startswith(b"HTTP/1.1 100 "):
                self._raw.write(data)
                return n
            head, data = data[: end + 4], data[end + 4 :]
            self._raw.write(head)
            self._in_body = True
        if not data:
            return n
        kind = self._rule.kind
        if kind in ("reset_body", "truncate"):
            left = self._rule.after_bytes - self._sent
            if len(data) > left:
                if left > 0:
                    self._raw.write(data[:left])
                    self._sent += left
                self._cut()
            self._raw.write(data)
            self._sent += len(data)
            return n
        # dribble
        step = self._rule.chunk
        for i in range(0, len(data), step):
            if self._sent and self._inj.registry.closed.wait(self._rule.interval):
                self._cut()
            piece = data[i : i + step]
            self._raw.write(piece)
            try:
                self._raw.flush()
            except AttributeError:  # pragma: no cover
                pass
            self._sent += len(piece)
        return n

    # a body fault cuts or dribbles what is written: a download's file is written through it, never sent past it
    sendfile = None

    def flush(self) -> None:
        if not self.cut:
            self._raw.flush()

    @property
    def closed(self) -> bool:
        return bool(getattr(self._raw, "closed", False))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class Injection:
    """One request under a fault. ``done`` = the fault answered (or refused to answer) by itself and
    the route must not run; otherwise the route runs, maybe through a faulty writer."""

    def __init__(self, handler: RequestHandler, method: str, registry: FaultRegistry, rule: Rule):
        self.handler, self.method, self.registry, self.rule = handler, method, registry, rule
        self.done = False
        self._raw_wfile: ResponseStream | None = None
        self.request_body = b""

    def _drain(self) -> None:
        try:
            self.request_body = self.handler.read_body()
        except (OSError, ValueError):
            self.handler.close_connection = True

    def begin(self) -> None:
        rule, h = self.rule, self.handler
        wait = rule.pre_wait()
        if wait > 0 and self.registry.closed.wait(wait):
            h.close_connection = True  # the mock is stopping: drop the request
            self.done = True
            return
        kind = rule.kind
        if kind == "delay":
            return
        if kind == "pod":  # the route answers; a Kubernetes-runtime create reads it (lifecycle/k8s_sandboxes_routes.py)
            h.pod_outcome = PodOutcome(rule.pod, rule.after, rule.reason)
            return
        if kind == "reset":
            settle = getattr(h.wfile, "settle", None)
            if settle is not None:
                settle(self)  # in the journal before the client sees the reset
            _reset(h)
            self.done = True
            return
        if kind == "stall":
            self._drain()
            while not self.registry.closed.wait(0.05):
                if client_gone(h.connection):
                    break
            _fin(h)
            self.done = True
            return
        if kind == "status":
            self._drain()
            self._send_status()
            self.done = True
            return
        # reset_body, truncate, dribble: the route answers through a faulty writer
        self._raw_wfile = h.wfile
        h.wfile = _FaultyWriter(h.wfile, self)

    def _send_status(self) -> None:
        rule, h = self.rule, self.handler
        assert rule.status is not None
        ctype = rule.content_type
        if rule.body is not None:
            body = rule.body
            ctype = ctype or "text/html"
        elif (rule.echo_headers or rule.echo_body) and ctype and "json" in ctype:
            parts = []
            if rule.echo_headers:
                parts.append("request headers: " + "; ".join("%s: %s" % (k, v) for k, v in h.headers.items()))
            if rule.echo_body:
                parts.append("request body: " + self.request_body[:4096].decode("utf-8", "replace"))
            body = json.dumps({"code": "MOCK::ECHO", "message": " | ".join(parts)})
        else:
            extra = ""
            if rule.echo_headers:
                extra = "<pre>request headers:\r\n%s</pre>\r\n" % "".join(
                    "%s: %s\r\n" % (html.escape(k), html.escape(v)) for k, v in h.headers.items()
                )
            if rule.echo_body:
                extra += "<pre>request body:\r\n%s</pre>\r\n" % html.escape(
                    self.request_body[:4096].decode("utf-8", "replace")
                )
            body = proxy_error_page(rule.status, extra)
            ctype = ctype or "text/html"
        data = body.encode("utf-8")
        h.log_request(rule.status)
        h.send_response_only(rule.status)
        h.send_header("Server", "nginx")
        h.send_header("Date", h.date_time_string())
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(data)))
        if rule.retry_after is not None:
            h.send_header("Retry-After", rule.retry_after)
        for k, v in rule.headers.items():
            h.send_header(k, v)
        h.send_header("X-Mock-Fault", rule.id)
        h.end_headers()
        if self.method != "HEAD":
            h.wfile.write(data)
        h.wfile.flush()

    def finish(self) -> None:
        h = self.handler
        h.pod_outcome = None
        if self._raw_wfile is not None:
            w = h.wfile
            h.wfile = self._raw_wfile
            self._raw_wfile = None
            if isinstance(w, _FaultyWriter) and w.cut:
                h.close_connection = True
        self.registry._done()


def request_sandbox(app: App, listener: str, path: str) -> str | None:
    """The sandbox a request belongs to: the listener's own (execd, port) or the lifecycle path's."""
    sid: str | None = app.sandbox_id
    if sid:
        return sid
    if listener == "lifecycle":
        m = _SANDBOX_PATH_RE.match(path)
        if m:
            return m.group(1)
    return None


def classify(handler: RequestHandler) -> tuple[str, str, str | None]:
    """(listener, path without the query, sandbox) of a request: what fault rules match and the journal
    notes."""
    app = handler.server.app
    listener = app.fault_listener or ("lifecycle" if handler.flavor == "uvicorn" else "execd")
    path = handler.path.split("?", 1)[0]
    return listener, path, request_sandbox(app, listener, path)


def inject(handler: RequestHandler, method: str, registry: FaultRegistry) -> Injection | None:
    """Match the request against the rules and start the fault; None when no rule fires."""
    listener, path, sandbox = classify(handler)
    rule = registry.match(method, path, listener, sandbox)
    if rule is None:
        return None
    registry.log("mock fault %s (%s) on %s %s [%s]" % (rule.id, rule.kind, method, path[:200], listener))
    inj = Injection(handler, method, registry, rule)
    try:
        inj.begin()
    except BaseException:
        inj.finish()
        raise
    if inj.done:
        inj.finish()
    return inj
