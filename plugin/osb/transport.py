"""HTTP transport of the OpenSandbox client: keep-alive connections, whole replies read within a
deadline, streamed replies, and the two errors every call raises.

* ``HttpError``: the server answered >= 400. Its body is scrubbed of every registered secret
  (``errors.SECRETS``, the plugin's one registry) *before* it is parsed and clipped into ``message``
  (``parse_error_body`` reads the four error-body shapes OpenSandbox and execd send).
* ``NetError``: no HTTP answer (refused, reset, timeout, DNS, TLS, an answer cut short).
* ``Http``: one idle keep-alive connection kept per host; ``open()`` returns a ``Stream``,
  ``request()`` a whole ``Reply``. The retries of idempotent calls are retries.py's.

Standard library only, Python >= 3.10.
"""

from __future__ import annotations

import html
import http.client
import json
import re
import select
import socket
import threading
import time
import urllib.parse

from errors import SECRETS

TYPE_CHECKING = False
if TYPE_CHECKING:
    import ssl
    from typing import Any

    Key = tuple[str, str, int]  # (scheme, host, port) of a pooled connection
    Body = bytes | list[bytes]  # a request body, whole or in pieces

USER_AGENT = "abx-opensandbox-provider/0.1.0"
MAX_ERROR_BODY = 64 * 1024  # bytes of an error body we keep for the message


def json_or_none(blob: bytes) -> Any:
    try:
        return json.loads(blob.decode("utf-8", "replace"))
    except ValueError:
        return None


# --------------------------------------------------------------------------- error bodies and errors

_TAG_RE = re.compile(r"<[^>]*>")
_TITLE_RE = re.compile(r"<title[^>]*>([^<]{1,200})</title>", re.I)
_WS_RE = re.compile(r"\s+")


def parse_error_body(status: int, body: bytes | None, reason: str = "") -> tuple[str | None, str]:
    """(server error code, human message) from any error body; never raises.

    Four shapes: ErrorResponse ``{"code","message"}`` (rec 02/04), FastAPI ``{"detail":[...]}``
    (rec 03), execd ``{"error": "..."}`` (QUIRKS.md, Transport, routing, auth) and non-JSON text such as an HTML 502.
    """
    try:
        raw = (body or b"")[:MAX_ERROR_BODY]
        text = raw.decode("utf-8", "replace")
        obj = json_or_none(raw) if text.lstrip().startswith(("{", "[")) else None
        if isinstance(obj, dict):
            code = obj.get("code")
            code = str(code) if isinstance(code, (str, int)) and str(code) else None
            if isinstance(obj.get("detail"), list):
                items = []
                for item in obj["detail"][:10]:
                    if isinstance(item, dict):
                        loc = item.get("loc")
                        where = ".".join(str(p) for p in loc[1:] or loc) if isinstance(loc, list) else ""
                        msg = str(item.get("msg") or item.get("type") or "invalid")
                        items.append(f"{where}: {msg}" if where else msg)
                    else:
                        items.append(str(item))
                return code or "VALIDATION_ERROR", _clip("; ".join(items) or "request validation failed")
            for key in ("message", "detail", "error", "msg"):
                val = obj.get(key)
                if isinstance(val, dict):
                    val = val.get("message") or json.dumps(val, sort_keys=True)
                if isinstance(val, (str, int, float)) and str(val).strip():
                    return code, _clip(str(val))
            if code:
                return code, code
            return None, _clip(json.dumps(obj, sort_keys=True))
        title = _TITLE_RE.search(text) if "<" in text[:200] else None
        if title and title.group(1).strip():
            return None, _clip(_WS_RE.sub(" ", html.unescape(title.group(1))).strip())  # a proxy's page
        stripped = _WS_RE.sub(" ", _TAG_RE.sub(" ", text)).strip()
        if stripped:
            return None, _clip(stripped)
        return None, f"HTTP {status} {reason}".strip()
    except Exception:  # noqa: BLE001 - the mapper must never raise
        return None, f"HTTP {status}"


def _readable(objs: list[Any], timeout: float | None) -> list[Any]:
    """``select.select(objs, [], [], timeout)[0]`` through ``select.poll``: select refuses fd numbers at
    or above 1024, which a process holding many connections passes. A hang-up or error counts as
    readable (the next read reports it); a closed socket (fileno -1) raises ValueError, as select does."""
    poller = select.poll()
    by_fd: dict[int, Any] = {}
    for obj in objs:
        fd = obj if isinstance(obj, int) else obj.fileno()
        if fd < 0:
            raise ValueError("file descriptor cannot be a negative integer")
        by_fd[fd] = obj
        poller.register(fd, select.POLLIN | select.POLLPRI)
    ms = None if timeout is None else max(0, int(timeout * 1000 + 0.999))
    return [by_fd[fd] for fd, _ in poller.poll(ms) if fd in by_fd]


def _clip(text: str, limit: int = 400) -> str:
    text = "".join(c if c.isprintable() or c == " " else " " for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# The Kubernetes runtime's gateway: a secureAccess sandbox's endpoint carries its access token in this header
# (server services/k8s/endpoint_resolver.py _attach_secure_access_headers; QUIRKS.md, "Kubernetes runtime: gateway
# and secure access"). It is a credential: masked in errors and logs like the API key.
SECURE_ACCESS_HEADER = "opensandbox-secure-access"


def register_endpoint_secrets(headers: dict[str, Any]) -> None:
    """Add an endpoint's access token (if any) to ``errors.SECRETS``."""
    SECRETS.add(*(str(v) for k, v in headers.items() if str(k).lower() == SECURE_ACCESS_HEADER))


class HttpError(Exception):
    """The server answered with a status >= 400."""

    def __init__(self, status: int, reason: str, body: bytes, headers: dict[str, Any], what: str, plane: str):
        self.status, self.reason, self.headers, self.what, self.plane = status, reason, headers, what, plane
        self.code, self.message = parse_error_body(status, SECRETS.scrub(body or b""), reason)
        self.request_id = headers.get("x-request-id", "")
        self.content_type = headers.get("content-type", "")
        super().__init__(f"HTTP {status} ({what}): {self.message}")


class NetError(Exception):
    """No HTTP answer: refused, reset, timeout, DNS, TLS."""

    def __init__(self, kind: str, what: str, target: str, detail: str):
        self.kind, self.what, self.target, self.detail = kind, what, target, detail
        super().__init__(f"{kind} ({what}) {target}: {detail}")

    @classmethod
    def of(cls, exc: BaseException, what: str, url: str) -> NetError:
        """The NetError for ``exc``, a socket or http.client failure while talking to ``url``."""
        return cls(net_kind(exc), what, safe_url(url), str(exc) or type(exc).__name__)


def net_kind(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timeout"
    if isinstance(exc, socket.gaierror):
        return "dns"
    if type(exc).__module__ == "ssl" or exc.__class__.__name__.startswith("SSL"):
        return "tls"
    if isinstance(exc, http.client.IncompleteRead):
        return "incomplete"  # the answer started but ended early (Content-Length / chunks)
    if isinstance(exc, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError, http.client.RemoteDisconnected)):
        return "reset"
    return "network"


# --------------------------------------------------------------------------- HTTP transport


class Reply:
    def __init__(self, status: int, reason: str, headers: dict[str, Any], body: bytes, received: float):
        self.status, self.reason, self.headers, self.body = status, reason, headers, body
        self.received = received  # time.monotonic() when the status line arrived

    def json(self) -> Any:
        return json_or_none(self.body) if self.body else None


class Dechunker:
    """Incremental decoder of HTTP/1.1 chunked transfer coding (RFC 9112 §7.1): ``feed(raw)`` returns
    the body bytes completed so far, whatever the split of ``raw``; ``done`` after the last chunk
    and its trailer. Malformed framing raises http.client.IncompleteRead, as http.client does."""

    MAX_LINE = 4096  # a chunk-size or trailer line longer than this is malformed

    def __init__(self) -> None:
        self._buf = b""  # an incomplete line kept from the last feed
        self._left = -1  # bytes of chunk data still to come; -1: a line is next
        self._crlf = False  # that line is the CRLF closing a chunk's data
        self._trailer = False  # the last chunk arrived: trailer lines until an empty one
        self.done = False

    def feed(self, data: bytes) -> bytes:
        if self.done:
            return b""
        buf = self._buf + data if self._buf else data
        out: list[bytes] = []
        pos, end = 0, len(buf)
        while pos < end:
            if self._left > 0:
                take = min(self._left, end - pos)
                out.append(buf[pos : pos + take])
                pos += take
                self._left -= take
                if self._left == 0:
                    self._left, self._crlf = -1, True
                continue
            nl = buf.find(b"\n", pos)
            if nl < 0:
                if end - pos > self.MAX_LINE:
                    raise http.client.IncompleteRead(b"")
                break
            line = buf[pos:nl].rstrip(b"\r")
            pos = nl + 1
            if self._crlf:  # the end of a chunk's data
                self._crlf = False
                if line:
                    raise http.client.IncompleteRead(b"")
            elif self._trailer:
                if not line:
                    self.done = True
                    break
            else:
                try:
                    size = int(line.split(b";", 1)[0].strip(), 16)
                except ValueError:
                    raise http.client.IncompleteRead(b"") from None
                if size < 0:
                    raise http.client.IncompleteRead(b"")
                if size == 0:
                    self._trailer = True
                else:
                    self._left = size
        self._buf = b"" if self.done else buf[pos:]
        return out[0] if len(out) == 1 else b"".join(out)


class Stream:
    """An HTTP reply whose body is read incrementally (SSE, downloads)."""

    def __init__(
        self, http: Http, key: Key, conn: http.client.HTTPConnection, resp: http.client.HTTPResponse, received: float
    ) -> None:
        self._http, self._key, self._conn, self.resp = http, key, conn, resp
        self.status, self.reason = resp.status, resp.reason
        self.headers = {k.lower(): v for k, v in resp.getheaders()}
        self.received = received
        self._closed = False
        self._body: Dechunker | None | bool = None  # read_some()'s decoder (False: not chunked)
        self._left: int | None = None
        self._carry = b""  # body bytes http.client's reader held when read_some() began
        self._sock: socket.socket | None = None
        self._done = False

    def _begin(self) -> None:
        """Before the first read_some(): the body's framing, and the body bytes http.client's reader
        already holds (taken without waiting); from then on the socket is read directly."""
        self._body = Dechunker() if self.resp.chunked else False
        self._left = None if self.resp.chunked else self.resp.length
        fp, sock = self.resp.fp, getattr(self._conn, "sock", None)
        if fp is None or sock is None:
            self._done = True
            return
        saved = sock.gettimeout()
        try:
            sock.settimeout(0.0)  # peek() must not block: b"" when nothing is there
            held = fp.peek(65536)
        except OSError:  # (TLS: nothing decrypted yet)
            held = b""
        finally:
            sock.settimeout(saved)
        self._carry = fp.read1(len(held)) if held else b""
        self._sock = sock

    def read_some(self) -> bytes | None:
        """The next piece of the body as it arrives, for a stream read on the caller's own thread
        (with wait()): one read of the socket (up to 64 KiB) after what http.client's reader held.
        Chunked coding is decoded here (Dechunker): http.client returns one chunk per call and may
        block on the next chunk's header while the bytes it holds say "readable".
        b"" when only framing arrived; None at the end of the body (or of the connection)."""
        if self._body is None:
            self._begin()
        if self._done or self._sock is None:
            return None
        if self._left == 0:
            self._done = True
            return None
        if self._carry:
            data, self._carry = self._carry, b""
            if self._left is not None and len(data) > self._left:
                data = data[: self._left]
        else:
            data = self._sock.recv(65536 if self._left is None else min(65536, self._left))
        if not data:
            self._done = True
            return None
        if isinstance(self._body, Dechunker):
            data = self._body.feed(data)
            if self._body.done:
                self._done = True
                return data or None
            return data
        if self._left is not None:
            self._left -= len(data)
        return data

    def wait(self, timeout: float | None, wake: int | None = None) -> bool:
        """Wait until read_some() can go on without blocking: bytes already held, or bytes (or the
        end) arriving within ``timeout`` seconds (None: no limit). False when the time ran out, or
        when the file descriptor ``wake`` became readable first."""
        if self._body is None:
            self._begin()
        sock = self._sock
        if self._done or self._carry or sock is None:
            return True  # the next read_some() answers at once
        try:
            pending = getattr(sock, "pending", None)  # TLS: bytes decrypted already
            if pending is not None and pending() > 0:
                return True
            fds: list[Any] = [sock] if wake is None else [sock, wake]
            ready = _readable(fds, timeout)
        except (OSError, ValueError):
            return True  # a closed or broken socket: the next read reports it
        return sock in ready

    def read_all(self, limit: int | None = None, deadline: float | None = None) -> bytes:
        """The whole body (or its first ``limit + 1`` bytes), read before ``deadline`` (monotonic).

        A body shorter than its Content-Length (a connection closed early) raises IncompleteRead:
        http.client returns such a short read silently. A body that trickles in so slowly that it
        misses the deadline raises socket.timeout, whatever the gaps between its bytes."""
        return bytes(self.read_body(limit, deadline))

    def read_body(self, limit: int | None = None, deadline: float | None = None) -> bytearray:
        """read_all() into the buffer it was read into, not copied (a download of megabytes: one
        buffer fewer to allocate, fault in and fill)."""
        want = None if limit is None else limit + 1
        resp, fp = self.resp, self.resp.fp
        sock = getattr(self._conn, "sock", None)
        base = sock.gettimeout() if sock is not None else None
        # With a Content-Length the body goes straight into one buffer of its size, each socket read
        # as large as what has arrived (readinto1: never more than one read between two deadline
        # checks); otherwise (chunked, or until the connection closes) 64 KiB at a time.
        sized = fp is not None and not resp.chunked and resp.length is not None
        size = 0
        if sized:
            assert resp.length is not None
            size = resp.length if want is None else min(resp.length, want)
        out = bytearray(size)
        view, got = memoryview(out if sized else bytearray()), 0  # (a view of out pins its size)
        try:
            while (got < size) if sized else (want is None or len(out) < want):
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise socket.timeout("the reply body did not arrive in time")
                    if sock is not None:
                        sock.settimeout(left if base is None else min(base, left))
                if sized:
                    assert fp is not None
                    n = fp.readinto1(view[got:])
                    if not n:
                        break
                    got += n
                    continue
                chunk = resp.read1(65536 if want is None else min(65536, want - len(out)))
                if not chunk:
                    break
                out += chunk
        finally:
            view.release()
            if sock is not None and deadline is not None:
                try:
                    sock.settimeout(base)
                except OSError:
                    pass
        if sized:
            assert resp.length is not None
            resp.length -= got  # what http.client would have counted, reading it itself
            del out[got:]
        missing = resp.length
        if (want is None or len(out) < want) and missing:
            raise http.client.IncompleteRead(bytes(out), missing)
        if missing == 0 and not resp.isclosed():
            resp.read()  # marks a complete Content-Length body done (keep-alive reuse)
        return out

    def reply(self, deadline: float, what: str, url: str) -> Reply:
        """The whole reply: its body read before ``deadline`` (monotonic; never less than 0.5 s after the
        status line), the connection kept for reuse. A body cut short or too slow raises NetError."""
        try:
            data = self.read_all(deadline=max(deadline, self.received + 0.5))
        except (OSError, http.client.HTTPException) as exc:
            self.close()
            raise NetError.of(exc, what, url) from None
        self.release()
        return Reply(self.status, self.reason, self.headers, data, self.received)

    def release(self) -> None:
        """Body fully read: keep the connection for the next request when the server allows it."""
        if self._closed:
            return
        self._closed = True
        if self.resp.isclosed() and not self.resp.will_close:
            self._http._give(self._key, self._conn)
        else:
            self._conn.close()

    def close(self) -> None:
        """Stop reading now (terminal event seen, or the body is not wanted): drop the connection."""
        if self._closed:
            return
        self._closed = True
        try:
            self._conn.close()
        except OSError:
            pass

    def abort(self) -> None:
        """Unblock a read of this stream (wait / read_some / read_body) from another thread."""
        sock = getattr(self._conn, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Http:
    """HTTP/1.1 with keep-alive. Concurrent requests each get a connection; at most one idle
    connection per host is kept for reuse (the plugin process is short-lived)."""

    IDLE_MAX_AGE = 4.0  # uvicorn closes idle keep-alive connections after 5 s
    POST_REUSE_AGE = 2.0  # a POST is retried on a stale connection, so only reuse young ones

    def __init__(self, timeout: float = 30.0):
        self.timeout = timeout
        self._idle: dict[Key, tuple[http.client.HTTPConnection, float]] = {}
        self._lock = threading.Lock()
        self._ssl_ctx: ssl.SSLContext | None = None

    def _connect(self, key: Key, timeout: float | None) -> http.client.HTTPConnection:
        scheme, host, port = key
        if scheme == "https":
            import ssl

            if self._ssl_ctx is None:
                self._ssl_ctx = ssl.create_default_context()
            return http.client.HTTPSConnection(host, port, timeout=timeout, context=self._ssl_ctx)
        return http.client.HTTPConnection(host, port, timeout=timeout)

    def _take(self, key: Key, max_age: float) -> http.client.HTTPConnection | None:
        with self._lock:
            item = self._idle.pop(key, None)
        if item is None:
            return None
        conn, since = item
        if time.monotonic() - since > max_age or self._dropped(conn):
            conn.close()
            return None
        return conn

    @staticmethod
    def _dropped(conn: http.client.HTTPConnection) -> bool:
        """An idle keep-alive connection is never readable: readable means the server closed it
        (or sent junk), so it must not carry the next request."""
        sock = conn.sock
        if sock is None:
            return True
        try:
            readable = _readable([sock], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    def _give(self, key: Key, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if key not in self._idle:
                self._idle[key] = (conn, time.monotonic())
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, {}
        for conn, _ in idle.values():
            conn.close()

    def open(
        self,
        method: str,
        url: str,
        headers: dict[str, Any],
        body: Body | None = None,
        timeout: float | None = None,
        what: str = "",
    ) -> Stream:
        parts = urllib.parse.urlsplit(url)
        scheme, host = parts.scheme.lower(), parts.hostname  # (each property parses the netloc again)
        if scheme not in ("http", "https") or not host:
            raise NetError("network", what, safe_url(url), "unsupported URL (need http:// or https://)")
        port = parts.port or (443 if scheme == "https" else 80)
        key = (scheme, host, port)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        hdrs = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity", **headers}
        if body is not None:  # (a list of pieces is sent piece by piece, never joined)
            hdrs["Content-Length"] = str(len(body) if isinstance(body, bytes) else sum(map(len, body)))
        tmo = self.timeout if timeout is None else timeout
        max_age = self.POST_REUSE_AGE if method == "POST" else self.IDLE_MAX_AGE
        for attempt in (0, 1):
            conn = self._take(key, max_age) if attempt == 0 else None
            reused = conn is not None
            if conn is None:
                conn = self._connect(key, tmo)
            else:
                conn.timeout = tmo
                if conn.sock is not None:
                    conn.sock.settimeout(tmo)
            try:
                conn.request(method, target, body=body, headers=hdrs)
                resp = conn.getresponse()
                return Stream(self, key, conn, resp, time.monotonic())
            except (
                http.client.RemoteDisconnected,
                BrokenPipeError,
                ConnectionResetError,
                ConnectionAbortedError,
            ) as exc:
                conn.close()
                if reused and method in ("GET", "HEAD", "DELETE", "OPTIONS"):
                    continue  # stale keep-alive connection: one fresh try (never for a POST)
                raise NetError.of(exc, what, url) from None
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                raise NetError.of(exc, what, url) from None
        raise NetError("reset", what, safe_url(url), "connection closed")  # pragma: no cover

    def request(
        self,
        method: str,
        url: str,
        headers: dict[str, Any],
        body: bytes | None = None,
        timeout: float | None = None,
        what: str = "",
    ) -> Reply:
        """One whole exchange; the reply, body included, must be complete within ``timeout``."""
        tmo = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + tmo
        return self.open(method, url, headers, body, timeout, what).reply(deadline, what, url)


def safe_url(url: str) -> str:
    """URL for messages: no userinfo, no query string (it may carry paths or tokens)."""
    try:
        p = urllib.parse.urlsplit(url)
        host = p.hostname or ""
        if p.port:
            host += f":{p.port}"
        return f"{p.scheme}://{host}{p.path}"
    except ValueError:
        return "<invalid url>"
