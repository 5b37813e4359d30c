"""Shared HTTP plumbing for the mock's listeners: a threaded server, a small router, reply helpers.

No sandbox state lives here. Both the lifecycle server (FastAPI/uvicorn in reality) and each execd
(Go/Gin in reality) build on it; the ``flavor`` of a handler decides the header style each real
server shows in the recordings (uvicorn: lower-case ``server: uvicorn`` + ``x-request-id``; Gin: no
``Server`` header, ``application/json; charset=utf-8``).
"""

from __future__ import annotations

import io
import ipaddress
import json
import re
import socket
import tempfile
import threading
import uuid
from email.errors import MissingHeaderBodySeparatorDefect
from http.server import BaseHTTPRequestHandler
from typing import Any, Callable, Iterable
from urllib.parse import parse_qs, urlsplit

from mock_opensandbox.wire import framing
from mock_opensandbox.wire.listener import App, RequestStream, ResponseStream, Server

MAX_BODY = framing.MAX_BODY  # a request body above 2 GiB is refused with 413

# Traffic observers: callables taking one Exchange, called after every answered request on every
# mock listener (lifecycle and execd). Used by the spec guard and the recorder; empty by default.
OBSERVERS: list[Callable[["Exchange"], None]] = []


class Exchange:
    """One request/response pair as a mock listener saw it (the response body of a stream is the
    concatenation of its chunks)."""

    __slots__ = (
        "server_kind",
        "method",
        "path",
        "query",
        "request_headers",
        "request_body",
        "status",
        "response_headers",
        "response_body",
    )

    def __init__(
        self,
        server_kind: str,
        method: str,
        path: str,
        query: dict[str, list[str]],
        request_headers: dict[str, str],
        request_body: bytes | None,
        status: int,
        response_headers: dict[str, str],
        response_body: bytes,
    ):
        self.server_kind = server_kind
        self.method = method
        self.path = path
        self.query = query
        self.request_headers = request_headers
        self.request_body = request_body
        self.status = status
        self.response_headers = response_headers
        self.response_body = response_body


class Request:
    """What a route handler sees: method, path, query, headers, body and the reply helpers."""

    def __init__(self, handler: "Handler", method: str):
        self.handler = handler
        self.method = method
        # http.server collapses a leading "//" of handler.path (an open-redirect guard of its own);
        # the request line still has what the client sent
        words = (getattr(handler, "requestline", "") or "").split()
        target = words[1] if len(words) >= 2 and words[1].startswith("//") else handler.path
        self.raw_path = target
        if target.startswith(("http://", "https://")):  # absolute-form request target
            parts = urlsplit(target)
            path, query = parts.path, parts.query
        else:  # origin-form: "//ping" is the path "//ping", not a network location
            path, _, query = target.partition("?")
            path = path.partition("#")[0]
        self.path = path
        self.query: dict[str, list[str]] = parse_qs(query, keep_blank_values=True)
        self.headers = handler.headers
        self.params: dict[str, str] = {}
        self._body: bytes | None = None
        self._body_streamed = False  # stream_body() consumed it
        self.responded = False
        # what was sent, for OBSERVERS
        self.sent_status = 0
        self.sent_headers: dict[str, str] = {}
        self.sent_body = bytearray()
        self._observed = False

    # -- input -------------------------------------------------------------------------------------
    def q(self, name: str, default: str | None = None) -> str | None:
        vals = self.query.get(name)
        return vals[0] if vals else default

    @property
    def body(self) -> bytes:
        if self._body is None:
            pre = getattr(self.handler, "prefetched", None)
            if pre is not None:
                self.handler.prefetched = None
                with pre:
                    self._body = pre.read()
            else:
                self._body = self.handler.read_body()
        return self._body

    def stream_body(self, sink: Callable[[bytes], Any]) -> int:
        """The request body into ``sink(bytes)`` as it arrives, 64 KiB at a time (memory independent of
        its size), instead of ``body``; its length. Observers see no body (``None``). Raises like
        ``body``; a body cut short by the client just ends."""
        pre = getattr(self.handler, "prefetched", None)
        if pre is not None:
            self.handler.prefetched, self._body_streamed, n = None, True, 0
            with pre:
                for data in iter(lambda: pre.read(1 << 16), b""):
                    sink(data)
                    n += len(data)
            return n
        if self._body is not None:
            if self._body:
                sink(self._body)
            return len(self._body)
        self._body_streamed = True
        return self.handler.read_body_into(sink)

    def json(self) -> Any:
        """Parse the body as JSON; raises ValueError (json.JSONDecodeError) on bad input."""
        return json.loads(self.body.decode("utf-8"))

    # -- output ------------------------------------------------------------------------------------
    def send(
        self, status: int, body: bytes = b"", content_type: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        h = self.handler
        all_headers = dict(h.base_headers())
        if content_type:
            all_headers[h.header_name("Content-Type")] = content_type
        all_headers.update(headers or {})
        if status != 204:
            all_headers[h.header_name("Content-Length")] = str(len(body))
        self.drain()
        if getattr(h, "framing_broken", False):
            all_headers["Connection"] = "close"
        if OBSERVERS:
            # observers run before the client can see the answer, so a test's last exchange is
            # always counted against that test (never the next one)
            self.sent_status, self.sent_headers = status, all_headers
            self.sent_body += body
            self.observe()
        h.send_response(status)
        for k, v in all_headers.items():
            h.send_header(k, v)
        h.end_headers()
        if body and self.method != "HEAD":
            h.wfile.write(body)
        self.responded = True

    def send_json(self, status: int, obj: Any, headers: dict[str, str] | None = None) -> None:
        self.send(
            status,
            json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8"),
            self.handler.json_content_type,
            headers,
        )

    def send_text(
        self, status: int, text: str, content_type: str = "text/plain", headers: dict[str, str] | None = None
    ) -> None:
        self.send(status, text.encode("utf-8"), content_type, headers)

    def send_head(self, status: int, headers: dict[str, str]) -> None:
        """The status line and exactly ``headers`` (the body, if any, is the caller's to write); the
        request body is drained first, observers get the status and headers."""
        h = self.handler
        self.drain()
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.end_headers()
        self.responded = True
        if OBSERVERS:
            self.sent_status, self.sent_headers = status, dict(headers)

    def start_chunked(self, status: int, headers: dict[str, str]) -> "ChunkedWriter":
        h = self.handler
        all_headers = dict(h.base_headers())
        all_headers.update(headers)
        all_headers[h.header_name("Transfer-Encoding")] = "chunked"
        self.send_head(status, all_headers)
        if OBSERVERS:
            return ChunkedWriter(h, self.sent_body, self.observe)
        return ChunkedWriter(h)

    def drain(self) -> None:
        """Read an unread request body so keep-alive stays in sync (and observers see it)."""
        if self._body is None and not self._body_streamed:
            try:
                self.body  # noqa: B018 - the property reads the body
            except (OSError, ValueError):
                self._body = b""
                self.handler.close_connection = True

    def observe(self) -> None:
        """Hand this exchange to the OBSERVERS, once."""
        if self._observed:
            return
        self._observed = True
        ex = Exchange(
            self.handler.flavor,
            self.method,
            self.path,
            self.query,
            dict(self.headers.items()),
            self._body,
            self.sent_status,
            dict(self.sent_headers),
            bytes(self.sent_body),
        )
        for fn in list(OBSERVERS):
            try:
                fn(ex)
            except Exception:  # an observer must never break the mock
                pass


class ChunkedWriter:
    """Writes an HTTP/1.1 chunked body; every write is flushed at once (SSE needs that)."""

    def __init__(
        self,
        handler: BaseHTTPRequestHandler,
        capture: bytearray | None = None,
        on_end: Callable[[], None] | None = None,
    ):
        self._h = handler
        self._lock = threading.Lock()
        self._capture = capture
        self._on_end = on_end
        self.closed = False

    def write(self, *parts: bytes) -> None:
        """One chunk per part, all sent in one write (the same bytes as one write each, fewer syscalls)."""
        parts = tuple(p for p in parts if p)
        if not parts:
            return
        with self._lock:
            if self.closed:
                return
            self._h.wfile.write(b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts))
            self._h.wfile.flush()
            if self._capture is not None:
                for p in parts:
                    self._capture += p

    def close(self, last: bytes = b"") -> None:
        """The end of the body; ``last``: a final chunk sent in the same write."""
        with self._lock:
            if self.closed:
                return
            self.closed = True
            if last and self._capture is not None:
                self._capture += last
            if self._on_end is not None:
                self._on_end()
            try:
                self._h.wfile.write((b"%x\r\n%s\r\n" % (len(last), last) if last else b"") + b"0\r\n\r\n")
                self._h.wfile.flush()
            except OSError:
                pass


Route = tuple[str, "re.Pattern[str]", Callable[[Request], None]]


class Router:
    """Method + regex routes. Patterns use ``{name}`` for one path segment and ``{name:path}`` for the rest."""

    def __init__(self) -> None:
        self.routes: list[Route] = []
        # (method, path) -> the scan's answer, for a path a route without parameters matched (a bounded set:
        # the routes' own paths); emptied by add()
        self._static: dict[tuple[str, str], tuple[Callable[[Request], None] | None, bool]] = {}

    def add(self, methods: str | Iterable[str], pattern: str, fn: Callable[[Request], None]) -> None:
        regex = re.sub(r"\{(\w+):path\}", r"(?P<\1>.*)", pattern)
        regex = re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", regex)
        for m in [methods] if isinstance(methods, str) else methods:
            self.routes.append((m.upper(), re.compile("^" + regex + "$"), fn))
        self._static.clear()

    def prepend(self, other: "Router") -> None:
        """other's routes before this one's (they match first)."""
        self.routes[:0] = other.routes
        self._static.clear()

    def match(self, method: str, path: str) -> tuple[Callable[[Request], None] | None, dict[str, str], bool]:
        """Returns (handler, params, path_matched_any_method)."""
        hit = self._static.get((method, path))
        if hit is not None:
            return hit[0], {}, hit[1]
        path_seen = False
        for m, rx, fn in self.routes:
            mo = rx.match(path)
            if mo:
                path_seen = True
                if m == method:
                    if not rx.groups:  # no parameters: this path's answer is always this one
                        self._static[(method, path)] = (fn, True)
                    return fn, mo.groupdict(), True
        return None, {}, path_seen


class Handler(BaseHTTPRequestHandler):
    """Base request handler. Subclasses set ``flavor`` and implement ``dispatch(req)``."""

    protocol_version = "HTTP/1.1"
    flavor = "gin"  # or "uvicorn"
    # small answers on a kept-alive connection must not wait for delayed ACKs (uvicorn and Go's
    # net/http both set TCP_NODELAY; without it a 4 KiB read took ~40 ms instead of ~1.5 ms)
    disable_nagle_algorithm = True
    # mock-only safety [choice, QUIRKS.md]: a web page must not reach a sandbox's execd (which runs
    # commands) through the browser: refuse any request with an Origin header or a Host that is not a
    # loopback name or the bound address. The lifecycle listener does its own check (ErrorResponse body).
    browser_guard = True
    server: Server
    prefetched: Any = None  # a chunked lifecycle body read before dispatch (wire/framing.py): a spool file
    framing_broken = False  # a malformed chunked body: the answer carries Connection: close
    # the connection's streams, or what wraps them for one request (the journal's tee, a fault's writer, a paused
    # sandbox's writer): listener.py RequestStream / ResponseStream, what this module and its users call of them
    rfile: RequestStream  # type: ignore[assignment]  # StreamRequestHandler says BufferedIOBase: wrappers too
    wfile: ResponseStream  # type: ignore[assignment]  # likewise
    # a fault's word to the route (workbench/faultinject.py, kind pod: a lifecycle/k8s_workloads.py PodOutcome that
    # lifecycle/k8s_sandboxes_routes.py reads on a Kubernetes create); opaque here, None when no fault set it
    pod_outcome: object | None = None

    # quiet: the mock never writes access logs to stderr unless asked
    def log_message(self, format: str, *args: Any) -> None:
        if self.server.app.verbose:
            super().log_message(format, *args)

    def version_string(self) -> str:
        return "uvicorn" if self.flavor == "uvicorn" else ""

    def parse_request(self) -> bool:
        """BaseHTTPRequestHandler.parse_request, without the email parser for a plain request: a request line
        "METHOD /target HTTP/1.x" and a head of "Name: value" lines (token names, no folding, no bare CR or
        LF), all in the read buffer already. The fields, the Connection and Expect handling are the
        stdlib's; anything else goes to the stdlib's parser, which answers it as before."""
        line: bytes = self.raw_requestline  # type: ignore[attr-defined]  # set by handle_one_request
        fast = _plain_request(line, self.rfile)
        if fast is None:
            return super().parse_request()
        command, path, version, fields, size = fast
        self.rfile.read(size)  # the head, from the buffer
        headers = self.MessageClass()
        for name, value in fields:
            headers.set_raw(name, value)
        headers.set_payload("")  # what the parser leaves (the head had no body part)
        self.command, self.request_version, self.headers = command, version, headers
        self.requestline = str(line, "iso-8859-1").rstrip("\r\n")
        self.path = "/" + path.lstrip("/") if path.startswith("//") else path
        conntype = (headers.get("Connection") or "").lower()
        self.close_connection = version == "HTTP/1.0" or conntype == "close"
        if conntype == "keep-alive":
            self.close_connection = False
        expect = headers.get("Expect") or ""
        if expect.lower() == "100-continue" and version == "HTTP/1.1":
            return bool(self.handle_expect_100())
        return True

    def send_response(self, code: int, message: str | None = None) -> None:
        # Gin sends no Server header; uvicorn sends "server: uvicorn" (recordings 01 and 06).
        self.log_request(code)
        self.send_response_only(code, message)
        if self.flavor == "uvicorn":
            self.send_header("server", "uvicorn")
        self.send_header(self.header_name("Date"), self.date_time_string())

    def header_name(self, name: str) -> str:
        return name.lower() if self.flavor == "uvicorn" else name

    @property
    def json_content_type(self) -> str:
        return "application/json" if self.flavor == "uvicorn" else "application/json; charset=utf-8"

    def base_headers(self) -> dict[str, str]:
        return {}

    def read_body_into(self, sink: Callable[[bytes], Any]) -> int:
        """read_body() 64 KiB at a time into ``sink``; the byte count."""
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            try:
                return framing.read_chunked(self.rfile, sink)
            except framing.ChunkError:
                self.close_connection = self.framing_broken = True
                raise
        try:
            n = int((self.headers.get("Content-Length") or "0").strip(" \t") or 0)
        except ValueError:
            n = -1
        if n < 0 or n > MAX_BODY:
            raise ValueError("request body too large")
        left = n
        while left:
            data = self.rfile.read(min(left, 1 << 16))
            if not data:  # the client went away mid-body
                self.close_connection = True
                break
            sink(data)
            left -= len(data)
        return n - left

    def read_body(self) -> bytes:
        te = (self.headers.get("Transfer-Encoding") or "").lower()
        if "chunked" in te:
            out = bytearray()
            try:
                framing.read_chunked(self.rfile, out.extend)
            except framing.ChunkError:
                self.close_connection = self.framing_broken = True  # Go answers with Connection: close
                raise
            return bytes(out)
        try:
            n = int((self.headers.get("Content-Length") or "0").strip(" \t") or 0)
        except ValueError:
            n = -1  # framing.check refused it before any handler; a handler called directly gets this
        if n < 0 or n > MAX_BODY:
            raise ValueError("request body too large")
        return self.rfile.read(n) if n else b""

    def _handle(self, method: str) -> None:
        # request journal (workbench/journal.py, the workbench; coord NEEDS-httpcore.md): an app with a ``journal``
        # gets ``journal.begin(handler, method) -> entry`` before anything is read or faulted, and
        # ``entry.end(fault)`` once the request is over (answered, faulted, reset or broken off)
        app: App = self.server.app
        journal = app.journal
        entry = journal.begin(self, method) if journal is not None else None
        fault = None
        try:
            # fault injection (workbench/faults.py rules, workbench/faultinject.py): the app's rules (listener.py
            # FaultRules), with the injector their builder plugged in
            registry = app.faults
            if registry is not None and registry.armed:
                fault = registry.inject(self, method)
                if fault is not None and fault.done:
                    return
            try:
                self._serve(method)
            finally:
                if fault is not None:
                    fault.finish()
        finally:
            if entry is not None:
                entry.end(fault)

    def _serve(self, method: str) -> None:
        if self.prefetched is not None:  # the last request's body, never read
            self.prefetched.close()
        self.prefetched, self.framing_broken = None, False
        refused = framing.check(self.headers, self.flavor)
        if (
            refused is None
            and self.flavor == "uvicorn"
            and "chunked" in (self.headers.get("Transfer-Encoding") or "").lower()
        ):
            # httptools parses the chunk sizes as the body arrives, before the app reads it; the body
            # waits in a spool file (1 MiB in memory, the rest on disk), never whole in memory
            spool: Any = tempfile.SpooledTemporaryFile(max_size=1 << 20, prefix="osb-body-")
            try:
                framing.read_chunked(self.rfile, spool.write)
                spool.seek(0)
                self.prefetched, spool = spool, None
            except framing.ChunkError:
                refused = 400
            except ValueError:
                refused = 413
            finally:
                if spool is not None:
                    spool.close()
        if refused is not None:  # the server's own answer (gin: the same as for a bad header below)
            self.wfile.write(framing.refusal(refused, self.flavor))
            self.close_connection = True
            return
        if self.flavor == "gin" and not _headers_valid(self.headers):
            # Go's net/http refuses a control character in a header value (or a non-token name)
            # before any handler runs (tiers/diff gen.range: "Range: \r")
            self.wfile.write(
                b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\n"
                b"Connection: close\r\n\r\n400 Bad Request"
            )
            self.close_connection = True
            return
        req = Request(self, method)
        if self.browser_guard and (
            self.headers.get("Origin") is not None
            or not host_allowed(self.headers.get("Host"), str(self.server.server_address[0]))
        ):
            req.send_json(
                403,
                {
                    "code": "MOCK::ORIGIN_NOT_ALLOWED",
                    "message": "browser requests (an Origin header) and foreign Host names are refused "
                    "by the mock (DNS-rebinding protection)",
                },
            )
            self.close_connection = True
            return
        try:
            self.dispatch(req)
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            self.close_connection = True
            return
        if not req.responded:
            self.close_connection = True
            return
        req.drain()
        if OBSERVERS:  # routes that wrote their answer themselves (proxy, download) are observed here
            req.observe()

    def dispatch(self, req: Request) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    # one line per method: a table (`ruff format` would spread each over two)
    # fmt: off
    def do_GET(self) -> None: self._handle("GET")
    def do_POST(self) -> None: self._handle("POST")
    def do_PUT(self) -> None: self._handle("PUT")
    def do_PATCH(self) -> None: self._handle("PATCH")
    def do_DELETE(self) -> None: self._handle("DELETE")
    def do_HEAD(self) -> None: self._handle("HEAD")
    def do_OPTIONS(self) -> None: self._handle("OPTIONS")
    # fmt: on


_TCHAR = r"[!#$%&'*+\-.^_`|~0-9A-Za-z]"  # RFC 9110 tchar
_TOKEN = re.compile(_TCHAR + r"+\Z")
_CTL = re.compile("[\x00-\x08\x0a-\x1f\x7f]")  # control characters but HTAB
_FOLD = re.compile(r"\r?\n[ \t]+")


def _headers_valid(headers: Any) -> bool:
    """net/http's header checks: token names, values without control characters but HTAB."""
    if any(isinstance(d, MissingHeaderBodySeparatorDefect) for d in getattr(headers, "defects", ())):
        return False  # a line without a colon ("malformed MIME header line")
    for k, v in headers.items():
        if "\n" in v:
            v = _FOLD.sub(" ", v)  # obs-fold continuation lines are joined, not refused
        if not _TOKEN.match(k) or _CTL.search(v):
            return False
    return True


_REQUEST_LINE = re.compile(rb"([A-Z]+) ([!-~]+) (HTTP/1\.[01])\r?\n\Z")
_PLAIN_HEAD = re.compile(b"(?:" + _TCHAR.encode() + rb"+:[^\r\n]*\r\n){0,100}\r\n")
_FIELD = re.compile(rb"([^:]+):[ \t]*([^\r\n]*)\r\n")


def _plain_request(line: bytes, rfile: Any) -> tuple[str, str, str, list[tuple[str, str]], int] | None:
    """(method, target, version, fields, head size) of a plain request whose head is all in rfile's buffer,
    or None (nothing consumed). Fields as http.client.parse_headers gives them: the name as sent, the value
    without its leading blanks."""
    m = _REQUEST_LINE.match(line)
    if m is None or not isinstance(rfile, io.BufferedReader):
        return None
    buf = rfile.peek(65536)
    h = _PLAIN_HEAD.match(buf)
    if h is None or h.end() > 65536:
        return None
    head = buf[: h.end()]
    fields = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in _FIELD.findall(head)]
    return m.group(1).decode(), m.group(2).decode("latin-1"), m.group(3).decode(), fields, h.end()


def new_request_id() -> str:
    return uuid.uuid4().hex


LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]", "::1")


def split_host(host: str) -> str:
    """The name part of a Host header value, lower-cased (``[::1]:80`` -> ``[::1]``)."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[: host.find("]") + 1] if "]" in host else host
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host


def host_allowed(host: str | None, bound: str) -> bool:
    """DNS-rebinding protection: only loopback names or the address the listener is bound to."""
    if not host:
        return False
    name = split_host(host)
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    if name.strip("[]") == bound.lower().strip("[]"):
        return True
    try:
        return ipaddress.ip_address(name.strip("[]")).is_loopback
    except ValueError:
        return False
