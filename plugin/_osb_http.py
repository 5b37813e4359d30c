"""The plugin's one OpenSandbox client: lifecycle API, execd data plane, and the codecs they need.

Standard library only, Python >= 3.10. Read top to bottom:

1. pure codecs (no I/O, unit-tested in tiers/t0): SSE decoder for both execd framings, v1.1.0
   output restoration, exit-code mapping, multipart writer, error-body parser;
2. ``Http``: keep-alive HTTP/1.1 connections (one idle connection kept per host), streaming replies;
3. ``SandboxCache``: per-sandbox state that must outlive the process (execd endpoint, execd framing),
   stored under ABX_PROVIDER_DATA_DIR only;
4. ``OpenSandbox``: lifecycle calls; ``Execd``: the data-plane calls for one sandbox;
   ``CommandRun``: one running execd command (SSE stream).

Facts quoted in comments come from the recorded exchanges in shared/live/exchanges (``rec NN``)
or from seed 000 (the OpenSandbox research notes).
"""
from __future__ import annotations

import base64
import hashlib
import html
import http.client
import json
import os
import re
import select
import socket
import threading
import time
import urllib.parse

USER_AGENT = "abx-opensandbox-provider/0.1.0"
EXECD_PORT = 44772                      # rec 05: GET .../endpoints/44772 is execd
MAX_ERROR_BODY = 64 * 1024              # bytes of an error body we keep for the message
LEGACY, LATEST = "v1.1.0", "latest"     # the two execd generations (seed 000 §1.1)
RETRY_STATUSES = (429, 502, 503, 504)   # answers a proxy or an overloaded server gives for a moment
RETRY_WAITS = (0.2, 0.6)                # waits before the 2nd and 3rd try of an idempotent call
RETRY_AFTER_MAX = 5.0                   # longest Retry-After honoured; a longer one ends the call at once


# --------------------------------------------------------------------------- pure codecs

class SSEDecoder:
    """Incremental decoder for execd's event stream.

    Accepts the bare-JSON framing execd really sends (``{...}\\n\\n``, rec 07-18) and standard SSE
    (``data: {...}\\n\\n``, with ``event:``/``id:``/``retry:`` fields and ``:`` comments), split into
    chunks at arbitrary byte boundaries. ``feed()`` returns the JSON objects completed so far;
    ``close()`` flushes a final frame that was not followed by a blank line.
    """

    _SSE_FIELDS = (b"data:", b"event:", b"id:", b"retry:", b":")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._lines: list[bytes] = []
        self.bad_frames = 0

    def feed(self, data: bytes) -> list[dict]:
        self._buf += data
        out: list[dict] = []
        start = 0
        while True:
            nl = self._buf.find(b"\n", start)
            if nl < 0:
                break
            line = bytes(self._buf[start:nl])
            start = nl + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            if line.strip():
                self._lines.append(line)
            else:
                out.extend(self._frame())
        del self._buf[:start]
        return out

    def close(self) -> list[dict]:
        tail = bytes(self._buf).rstrip(b"\r")
        self._buf.clear()
        if tail.strip():
            self._lines.append(tail)
        return self._frame()

    def _frame(self) -> list[dict]:
        lines, self._lines = self._lines, []
        if not lines:
            return []
        if lines[0].startswith(self._SSE_FIELDS):
            data = [ln[5:].removeprefix(b" ") for ln in lines if ln.startswith(b"data:")]
            candidates = [b"\n".join(data)] if data else []
        else:
            candidates = [b"\n".join(lines)]
        out: list[dict] = []
        for blob in candidates:
            obj = _json_or_none(blob)
            if isinstance(obj, dict):
                out.append(obj)
                continue
            # Not one JSON document: maybe several objects separated by single newlines.
            for ln in blob.split(b"\n"):
                one = _json_or_none(ln)
                if isinstance(one, dict):
                    out.append(one)
                elif ln.strip():
                    self.bad_frames += 1
        return out


def _json_or_none(blob: bytes):
    try:
        return json.loads(blob.decode("utf-8", "replace"))
    except ValueError:
        return None


def restore_legacy_text(text: str) -> str:
    """v1.1.0 execd sends one event per output line with "\\n"/"\\r" stripped, and an empty line as
    the text "\\n" (rec 12: printf 'a\\r\\nb\\n\\nc' -> "a", "b", "\\n", "c"). Give each line its newline
    back. Lost for good: "\\r" characters and whether the last line ended with a newline."""
    return "\n" if text == "\n" else text + "\n"


_SIGNAL_NUMBERS = {
    "hangup": 1, "interrupt": 2, "quit": 3, "illegal instruction": 4, "trace/breakpoint trap": 5,
    "aborted": 6, "bus error": 7, "floating point exception": 8, "killed": 9,
    "user defined signal 1": 10, "segmentation fault": 11, "user defined signal 2": 12,
    "broken pipe": 13, "alarm clock": 14, "terminated": 15,
}
_SIGNAL_RE = re.compile(r"signal:\s*([a-z0-9 /]+)", re.I)


def signal_exit_code(text: str) -> int | None:
    """"signal: killed" -> 137 (128 + 9), as a shell would report it; None when no signal is named."""
    m = _SIGNAL_RE.search(text or "")
    if not m:
        return None
    name = m.group(1).strip().lower()
    if name in _SIGNAL_NUMBERS:
        return 128 + _SIGNAL_NUMBERS[name]
    digits = re.search(r"\d+", name)
    return 128 + int(digits.group()) if digits else None


class StartFailure(Exception):
    """execd could not start the command (an ``error`` event whose evalue is not an exit status)."""


def terminal_exit_code(event: dict) -> int | None:
    """Exit code of a terminal event, None for a non-terminal one; StartFailure for a start error.

    execution_complete -> 0. error -> int(evalue) (rec 07: "3"); evalue "-1" is a signal death
    (rec 09/12: traceback ["signal: killed"]) and becomes 128 + signal number.
    """
    kind = event.get("type")
    if kind == "execution_complete":
        return 0
    if kind != "error":
        return None
    err = event.get("error") if isinstance(event.get("error"), dict) else {}
    evalue = str(err.get("evalue", "")).strip()
    tb = err.get("traceback")
    trace = " ".join(str(t) for t in tb) if isinstance(tb, list) else str(tb or "")
    try:
        code = int(evalue)
    except ValueError:
        code = None
    if code is not None and code != -1:
        return code
    sig = signal_exit_code(trace) or signal_exit_code(evalue)
    if sig is not None:
        return sig
    if code == -1:
        return -1
    name = str(err.get("ename") or "error")
    raise StartFailure(f"{name}: {evalue or trace or 'command could not be started'}")


def encode_multipart(parts: list[tuple[str, str, str, bytes]]) -> tuple[str, bytes]:
    """multipart/form-data body for ``[(field, filename, content_type, data), ...]``.

    Returns ``(content_type_header, body)``. The boundary never occurs inside any part.
    """
    while True:
        boundary = "osbprovider" + os.urandom(12).hex()
        marker = boundary.encode("ascii")
        if not any(marker in data for _, _, _, data in parts):
            break
    chunks: list[bytes] = []
    for field, filename, ctype, data in parts:
        head = (
            f"--{boundary}\r\n"
            f'Content-Disposition: form-data; name="{_header_token(field)}"; '
            f'filename="{_header_token(filename)}"\r\n'
            f"Content-Type: {ctype}\r\n\r\n"
        )
        chunks += [head.encode("ascii"), data, b"\r\n"]
    chunks.append(f"--{boundary}--\r\n".encode("ascii"))
    return f"multipart/form-data; boundary={boundary}", b"".join(chunks)


def _header_token(value: str) -> str:
    safe = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in value)
    return safe or "file"


_TAG_RE = re.compile(r"<[^>]*>")
_TITLE_RE = re.compile(r"<title[^>]*>([^<]{1,200})</title>", re.I)
_WS_RE = re.compile(r"\s+")


def parse_error_body(status: int, body: bytes | None, reason: str = "") -> tuple[str | None, str]:
    """(server error code, human message) from any error body; never raises.

    Four shapes: ErrorResponse ``{"code","message"}`` (rec 02/04), FastAPI ``{"detail":[...]}``
    (rec 03), execd ``{"error": "..."}`` (seed 000 §1.4) and non-JSON text such as an HTML 502.
    """
    try:
        raw = (body or b"")[:MAX_ERROR_BODY]
        text = raw.decode("utf-8", "replace")
        obj = _json_or_none(raw) if text.lstrip().startswith(("{", "[")) else None
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
            return None, _clip(_WS_RE.sub(" ", html.unescape(title.group(1))).strip())   # a proxy's page
        stripped = _WS_RE.sub(" ", _TAG_RE.sub(" ", text)).strip()
        if stripped:
            return None, _clip(stripped)
        return None, f"HTTP {status} {reason}".strip()
    except Exception:  # noqa: BLE001 - the mapper must never raise
        return None, f"HTTP {status}"


def _clip(text: str, limit: int = 400) -> str:
    text = "".join(c if c.isprintable() or c == " " else " " for c in text)
    return text if len(text) <= limit else text[: limit - 1] + "…"


# --------------------------------------------------------------------------- errors raised here

_SECRETS: set = set()


def add_secret(value: str) -> None:
    """A credential this process sends (API key, execd token, registry password). Error bodies can
    echo request headers or bodies back (debugging proxies do): such text is scrubbed before it is
    parsed and clipped, so not even a clipped piece of a secret reaches a message."""
    if isinstance(value, str) and len(value) >= 3:
        _SECRETS.add(value)


def scrub(data: bytes) -> bytes:
    if not _SECRETS or not data:
        return data
    for secret in sorted(_SECRETS, key=len, reverse=True):
        forms = {secret, json.dumps(secret)[1:-1], urllib.parse.quote(secret, safe=""),
                 urllib.parse.quote_plus(secret)}
        for form in forms:
            data = data.replace(form.encode("utf-8", "replace"), b"***")
    return data


class HttpError(Exception):
    """The server answered with a status >= 400."""

    def __init__(self, status: int, reason: str, body: bytes, headers: dict, what: str, plane: str):
        self.status, self.reason, self.headers, self.what, self.plane = status, reason, headers, what, plane
        self.code, self.message = parse_error_body(status, scrub(body or b""), reason)
        self.request_id = headers.get("x-request-id", "")
        self.content_type = headers.get("content-type", "")
        super().__init__(f"HTTP {status} ({what}): {self.message}")


class NetError(Exception):
    """No HTTP answer: refused, reset, timeout, DNS, TLS."""

    def __init__(self, kind: str, what: str, target: str, detail: str):
        self.kind, self.what, self.target, self.detail = kind, what, target, detail
        super().__init__(f"{kind} ({what}) {target}: {detail}")


def _net_kind(exc: BaseException) -> str:
    if isinstance(exc, ConnectionRefusedError):
        return "refused"
    if isinstance(exc, (socket.timeout, TimeoutError)):
        return "timeout"
    if isinstance(exc, socket.gaierror):
        return "dns"
    if type(exc).__module__ == "ssl" or exc.__class__.__name__.startswith("SSL"):
        return "tls"
    if isinstance(exc, http.client.IncompleteRead):
        return "incomplete"             # the answer started but ended early (Content-Length / chunks)
    if isinstance(exc, (ConnectionResetError, ConnectionAbortedError, BrokenPipeError,
                        http.client.RemoteDisconnected)):
        return "reset"
    return "network"


# --------------------------------------------------------------------------- HTTP transport

class Reply:
    def __init__(self, status: int, reason: str, headers: dict, body: bytes, received: float):
        self.status, self.reason, self.headers, self.body = status, reason, headers, body
        self.received = received                  # time.monotonic() when the status line arrived

    def json(self):
        return _json_or_none(self.body) if self.body else None


class Stream:
    """An HTTP reply whose body is read incrementally (SSE, downloads)."""

    def __init__(self, http: Http, key, conn, resp, received: float):
        self._http, self._key, self._conn, self.resp = http, key, conn, resp
        self.status, self.reason = resp.status, resp.reason
        self.headers = {k.lower(): v for k, v in resp.getheaders()}
        self.received = received
        self._closed = False

    def read1(self, n: int = 65536) -> bytes:
        return self.resp.read1(n)

    def read_all(self, limit: int | None = None, deadline: float | None = None) -> bytes:
        """The whole body (or its first ``limit + 1`` bytes), read before ``deadline`` (monotonic).

        A body shorter than its Content-Length (a connection closed early) raises IncompleteRead:
        http.client returns such a short read silently. A body that trickles in so slowly that it
        misses the deadline raises socket.timeout, whatever the gaps between its bytes."""
        out = bytearray()
        want = None if limit is None else limit + 1
        sock = getattr(self._conn, "sock", None)
        base = sock.gettimeout() if sock is not None else None
        try:
            while want is None or len(out) < want:
                if deadline is not None:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        raise socket.timeout("the reply body did not arrive in time")
                    if sock is not None:
                        sock.settimeout(left if base is None else min(base, left))
                n = 65536 if want is None else min(65536, want - len(out))
                chunk = self.resp.read1(n)
                if not chunk:
                    break
                out += chunk
        finally:
            if sock is not None and deadline is not None:
                try:
                    sock.settimeout(base)
                except OSError:
                    pass
        missing = self.resp.length
        if (want is None or len(out) < want) and missing:
            raise http.client.IncompleteRead(bytes(out), missing)
        if missing == 0 and not self.resp.isclosed():
            self.resp.read()            # marks a complete Content-Length body done (keep-alive reuse)
        return bytes(out)

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
        """Unblock a reader thread stuck in read1() (called from another thread)."""
        sock = getattr(self._conn, "sock", None)
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Http:
    """HTTP/1.1 with keep-alive. Concurrent requests each get a connection; at most one idle
    connection per host is kept for reuse (the plugin process is short-lived)."""

    IDLE_MAX_AGE = 4.0       # uvicorn closes idle keep-alive connections after 5 s
    POST_REUSE_AGE = 2.0     # a POST is retried on a stale connection, so only reuse young ones

    def __init__(self, timeout: float = 30.0):
        self.timeout = timeout
        self._idle: dict[tuple, tuple[http.client.HTTPConnection, float]] = {}
        self._lock = threading.Lock()
        self._ssl_ctx = None

    def _connect(self, key, timeout):
        scheme, host, port = key
        if scheme == "https":
            import ssl
            if self._ssl_ctx is None:
                self._ssl_ctx = ssl.create_default_context()
            return http.client.HTTPSConnection(host, port, timeout=timeout, context=self._ssl_ctx)
        return http.client.HTTPConnection(host, port, timeout=timeout)

    def _take(self, key, max_age):
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
    def _dropped(conn) -> bool:
        """An idle keep-alive connection is never readable: readable means the server closed it
        (or sent junk), so it must not carry the next request."""
        sock = conn.sock
        if sock is None:
            return True
        try:
            readable, _, _ = select.select([sock], [], [], 0)
        except (OSError, ValueError):
            return True
        return bool(readable)

    def _give(self, key, conn) -> None:
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

    def open(self, method: str, url: str, headers: dict, body: bytes | None = None,
             timeout: float | None = None, what: str = "") -> Stream:
        parts = urllib.parse.urlsplit(url)
        scheme = parts.scheme.lower()
        if scheme not in ("http", "https") or not parts.hostname:
            raise NetError("network", what, _safe_url(url), "unsupported URL (need http:// or https://)")
        port = parts.port or (443 if scheme == "https" else 80)
        key = (scheme, parts.hostname, port)
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        hdrs = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity", **headers}
        if body is not None:
            hdrs["Content-Length"] = str(len(body))
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
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError,
                    ConnectionAbortedError) as exc:
                conn.close()
                if reused and method in ("GET", "HEAD", "DELETE", "OPTIONS"):
                    continue        # stale keep-alive connection: one fresh try (never for a POST)
                raise NetError(_net_kind(exc), what, _safe_url(url), str(exc) or type(exc).__name__) from None
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                raise NetError(_net_kind(exc), what, _safe_url(url), str(exc) or type(exc).__name__) from None
        raise NetError("reset", what, _safe_url(url), "connection closed")  # pragma: no cover

    def request(self, method: str, url: str, headers: dict, body: bytes | None = None,
                timeout: float | None = None, what: str = "") -> Reply:
        """One whole exchange; the reply, body included, must be complete within ``timeout``."""
        tmo = self.timeout if timeout is None else timeout
        deadline = time.monotonic() + tmo
        stream = self.open(method, url, headers, body, timeout, what)
        try:
            data = stream.read_all(deadline=max(deadline, stream.received + 0.5))
        except (OSError, http.client.HTTPException) as exc:
            stream.close()
            raise NetError(_net_kind(exc), what, _safe_url(url), str(exc) or type(exc).__name__) from None
        stream.release()
        return Reply(stream.status, stream.reason, stream.headers, data, stream.received)


def _safe_url(url: str) -> str:
    """URL for messages: no userinfo, no query string (it may carry paths or tokens)."""
    try:
        p = urllib.parse.urlsplit(url)
        host = p.hostname or ""
        if p.port:
            host += f":{p.port}"
        return f"{p.scheme}://{host}{p.path}"
    except ValueError:
        return "<invalid url>"


# --------------------------------------------------------------------------- retries (idempotent calls only)

def retry_after_seconds(value) -> float | None:
    """Retry-After as seconds: delta-seconds or an HTTP date; None when absent or unreadable."""
    text = str(value or "").strip()
    if not text:
        return None
    if text.isdigit():
        return float(text)
    try:
        import email.utils
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when is None:
        return None
    import datetime
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds())


def retry_wait(exc: BaseException, attempt: int) -> float | None:
    """Seconds to wait before trying an idempotent call again, or None when it must not be retried.

    Retried: 429/502/503/504 (a Retry-After is honoured up to RETRY_AFTER_MAX; a longer one is
    the answer), a connection reset (a proxy or keep-alive race) and an answer cut short.
    Not retried: timeouts (the time is spent already), refusals and DNS errors (configuration),
    and every other status."""
    if attempt >= len(RETRY_WAITS):
        return None
    if isinstance(exc, HttpError):
        if exc.status not in RETRY_STATUSES:
            return None
        after = retry_after_seconds(exc.headers.get("retry-after"))
        if after is not None:
            return None if after > RETRY_AFTER_MAX else max(after, RETRY_WAITS[attempt])
        return RETRY_WAITS[attempt]
    if isinstance(exc, NetError) and exc.kind in ("reset", "incomplete"):
        return RETRY_WAITS[attempt]
    return None


def with_retries(fn, budget: float):
    """Run ``fn`` (an idempotent call); retry it as retry_wait() says. No new try starts once the
    call has taken longer than ``budget`` seconds (the configured http_timeout)."""
    started = time.monotonic()
    attempt = 0
    while True:
        try:
            return fn()
        except (HttpError, NetError) as exc:
            wait = retry_wait(exc, attempt)
            if wait is None or time.monotonic() - started > budget:
                raise
            attempt += 1
            time.sleep(wait)


# --------------------------------------------------------------------------- per-sandbox state

class SandboxCache:
    """Small JSON records per (server, sandbox) under ``<data_dir>/sandboxes``.

    The host starts a new plugin process for most calls (epp-host-reference §1.7), so the execd
    endpoint and the detected execd framing are kept here. Nothing is written when there is no data
    dir, and nothing is ever written outside it.
    """

    MAX_AGE = 14 * 86400

    def __init__(self, data_dir: str | None, server: str):
        self.dir = os.path.join(data_dir, "sandboxes") if data_dir else None
        self.server = server
        self._mem: dict[str, dict] = {}
        self._lock = threading.Lock()

    def _file(self, sandbox_id: str) -> str | None:
        if not self.dir:
            return None
        digest = hashlib.sha256(f"{self.server}\0{sandbox_id}".encode()).hexdigest()[:40]
        return os.path.join(self.dir, digest + ".json")

    def get(self, sandbox_id: str) -> dict:
        with self._lock:
            if sandbox_id in self._mem:
                return dict(self._mem[sandbox_id])
        path = self._file(sandbox_id)
        rec: dict = {}
        if path:
            try:
                with open(path, encoding="utf-8") as fh:
                    loaded = json.load(fh)
                if isinstance(loaded, dict) and loaded.get("sandbox_id") == sandbox_id:
                    rec = loaded
            except (OSError, ValueError):
                rec = {}
        with self._lock:
            self._mem[sandbox_id] = rec
        return dict(rec)

    def update(self, sandbox_id: str, **values) -> None:
        rec = self.get(sandbox_id)
        rec.update(values)
        rec["sandbox_id"] = sandbox_id
        with self._lock:
            self._mem[sandbox_id] = rec
        path = self._file(sandbox_id)
        if not path:
            return
        try:
            os.makedirs(self.dir, mode=0o700, exist_ok=True)
            tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(rec, fh)
            os.replace(tmp, path)
        except OSError:
            pass                    # a cache, not a source of truth

    def drop(self, sandbox_id: str, *keys: str) -> None:
        """Forget ``keys`` of a sandbox (all of it when none are given)."""
        if keys:
            rec = self.get(sandbox_id)
            for k in keys:
                rec.pop(k, None)
            with self._lock:
                self._mem[sandbox_id] = rec
            if rec and self._file(sandbox_id):
                self.update(sandbox_id)
                return
        with self._lock:
            self._mem.pop(sandbox_id, None)
        path = self._file(sandbox_id)
        if path:
            try:
                os.remove(path)
            except OSError:
                pass

    def prune(self) -> None:
        """Remove records untouched for two weeks (sandboxes that expired on their own)."""
        if not self.dir or not os.path.isdir(self.dir):
            return
        cutoff = time.time() - self.MAX_AGE
        try:
            for name in os.listdir(self.dir):
                path = os.path.join(self.dir, name)
                try:
                    if os.path.getmtime(path) < cutoff:
                        os.remove(path)
                except OSError:
                    pass
        except OSError:
            pass


# --------------------------------------------------------------------------- lifecycle client

class OpenSandbox:
    """The lifecycle server (``/v1/sandboxes...``) plus execd access for its sandboxes."""

    def __init__(self, server: str, *, api_key: str = "", http: Http | None = None,
                 data_dir: str | None = None, use_server_proxy: bool = False,
                 execd_token: str = "", scheme: str = ""):
        self.server = server.rstrip("/")                  # root URL, without /v1
        self.api = self.server + "/v1"
        self.api_key = api_key
        self.http = http or Http()
        self.use_server_proxy = use_server_proxy
        self.execd_token = execd_token
        self.scheme = scheme or urllib.parse.urlsplit(self.server).scheme or "http"
        self.cache = SandboxCache(data_dir, self.server)
        self._execd: dict[str, Execd] = {}
        self._lock = threading.Lock()
        add_secret(api_key)
        add_secret(execd_token)

    # ---- plumbing

    def _headers(self, has_body: bool) -> dict:
        h = {"Accept": "application/json"}
        if self.api_key:
            h["OPEN-SANDBOX-API-KEY"] = self.api_key
        if has_body:
            h["Content-Type"] = "application/json"
        return h

    def call(self, method: str, path: str, *, query=None, body=None, what: str,
             timeout: float | None = None, ok=(200, 201, 202, 204), retry: bool | None = None) -> Reply:
        """One lifecycle call. GET and DELETE are retried (with_retries); other methods only when
        the caller says the call is idempotent (renew sets an absolute time)."""
        url = self.api + path
        if query:
            url += "?" + urllib.parse.urlencode(query, doseq=True)
        data = json.dumps(body).encode("utf-8") if body is not None else None

        def once() -> Reply:
            reply = self.http.request(method, url, self._headers(data is not None), data, timeout, what)
            if reply.status not in ok:
                raise HttpError(reply.status, reply.reason, reply.body, reply.headers, what, "lifecycle")
            return reply

        if retry is None:
            retry = method in ("GET", "DELETE")
        return with_retries(once, self.http.timeout) if retry else once()

    @staticmethod
    def sid(sandbox_id: str) -> str:
        return urllib.parse.quote(sandbox_id, safe="")

    # ---- lifecycle (rec 05, 14, 15)

    def create(self, body: dict, timeout: float | None = None) -> Reply:
        return self.call("POST", "/sandboxes", body=body, what="create sandbox", timeout=timeout)

    def get(self, sandbox_id: str) -> Reply:
        return self.call("GET", f"/sandboxes/{self.sid(sandbox_id)}", what="get sandbox")

    def list_page(self, *, page: int, page_size: int, states=(), metadata: str = "") -> dict:
        query: list[tuple[str, str]] = [("state", s) for s in states]
        if metadata:
            query.append(("metadata", metadata))
        query += [("page", str(page)), ("pageSize", str(page_size))]
        body = self.call("GET", "/sandboxes", query=query, what="list sandboxes").json()
        return body if isinstance(body, dict) else {}

    def delete(self, sandbox_id: str) -> None:
        self.call("DELETE", f"/sandboxes/{self.sid(sandbox_id)}", what="delete sandbox")
        self.forget(sandbox_id)

    def pause(self, sandbox_id: str) -> None:
        self.call("POST", f"/sandboxes/{self.sid(sandbox_id)}/pause", what="pause sandbox")

    def resume(self, sandbox_id: str) -> None:
        self.call("POST", f"/sandboxes/{self.sid(sandbox_id)}/resume", what="resume sandbox")

    def renew(self, sandbox_id: str, expires_at: str) -> Reply:
        return self.call("POST", f"/sandboxes/{self.sid(sandbox_id)}/renew-expiration",
                         body={"expiresAt": expires_at}, what="renew sandbox expiration", retry=True)

    def endpoint(self, sandbox_id: str, port: int, server_proxy: bool | None = None) -> tuple[str, dict]:
        """(URL with scheme, headers to send). Endpoints come without a scheme (rec 05)."""
        proxy = self.use_server_proxy if server_proxy is None else server_proxy
        query = {"use_server_proxy": "true"} if proxy else None
        body = self.call("GET", f"/sandboxes/{self.sid(sandbox_id)}/endpoints/{int(port)}",
                         query=query, what=f"resolve endpoint for port {port}").json()
        if not isinstance(body, dict) or not isinstance(body.get("endpoint"), str) or not body["endpoint"]:
            raise HttpError(502, "Bad Gateway", b'{"message":"endpoint response without an endpoint"}',
                            {}, f"resolve endpoint for port {port}", "lifecycle")
        url = body["endpoint"].rstrip("/")
        if "://" not in url:
            url = f"{self.scheme}://{url}"
        raw = body.get("headers")
        headers = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
        return url, headers

    # ---- execd

    def execd(self, sandbox_id: str, *, refresh: bool = False) -> Execd:
        key = "execd_proxy" if self.use_server_proxy else "execd_direct"
        with self._lock:
            cached = None if refresh else self._execd.get(sandbox_id)
        if cached is not None:
            return cached
        rec = {} if refresh else self.cache.get(sandbox_id)
        ep = rec.get(key)
        if not (isinstance(ep, dict) and isinstance(ep.get("url"), str) and isinstance(ep.get("headers"), dict)):
            url, headers = self.endpoint(sandbox_id, EXECD_PORT)
            ep = {"url": url, "headers": headers}
            self.cache.update(sandbox_id, **{key: ep})
        ex = Execd(self, sandbox_id, ep["url"], ep["headers"])
        with self._lock:
            self._execd[sandbox_id] = ex
        return ex

    def forget(self, sandbox_id: str) -> None:
        with self._lock:
            self._execd.pop(sandbox_id, None)
        self.cache.drop(sandbox_id)


# --------------------------------------------------------------------------- execd client

class Execd:
    """execd of one sandbox. ``Endpoint.headers`` are replayed on every request, SSE and uploads
    included (seed 000 §1.4); X-EXECD-ACCESS-TOKEN is added when configured."""

    def __init__(self, osb: OpenSandbox, sandbox_id: str, base_url: str, headers: dict):
        self.osb, self.sandbox_id, self.base, self.endpoint_headers = osb, sandbox_id, base_url, headers

    def headers(self, extra: dict | None = None) -> dict:
        h = dict(self.endpoint_headers)
        if self.osb.execd_token:
            h["X-EXECD-ACCESS-TOKEN"] = self.osb.execd_token
        # Through the server proxy, execd sits behind the lifecycle server: send its API key there
        # and nowhere else.
        if self.osb.api_key and _origin(self.base) == _origin(self.osb.server):
            h["OPEN-SANDBOX-API-KEY"] = self.osb.api_key
        if extra:
            h.update(extra)
        return h

    def url(self, path: str, query=None) -> str:
        url = self.base + path
        if query:
            url += "?" + urllib.parse.urlencode(query, doseq=True, quote_via=urllib.parse.quote)
        return url

    def open(self, method: str, path: str, *, query=None, body: bytes | None = None,
             headers: dict | None = None, timeout: float | None = None, what: str) -> Stream:
        """Open a request. A cached endpoint is re-resolved once when it is refused (the sandbox
        moved) or when its access headers are rejected (secure-access credentials can rotate)."""
        try:
            return self._open(method, path, query, body, headers, timeout, what)
        except (NetError, HttpError) as exc:
            stale = (isinstance(exc, NetError) and exc.kind in ("refused", "dns")) or \
                (isinstance(exc, HttpError) and exc.status in (401, 403) and bool(self.endpoint_headers))
            if not stale:
                raise
            fresh = self.osb.execd(self.sandbox_id, refresh=True)
            if (fresh.base, fresh.endpoint_headers) == (self.base, self.endpoint_headers):
                raise
            self.base, self.endpoint_headers = fresh.base, fresh.endpoint_headers
            return self._open(method, path, query, body, headers, timeout, what)

    def _open(self, method, path, query, body, headers, timeout, what) -> Stream:
        stream = self.osb.http.open(method, self.url(path, query), self.headers(headers), body, timeout, what)
        if stream.status >= 400:
            try:
                data = stream.resp.read(MAX_ERROR_BODY)
            except (OSError, http.client.HTTPException):
                data = b""
            stream.close()
            raise HttpError(stream.status, stream.reason, data, stream.headers, what, "execd")
        return stream

    def call(self, method: str, path: str, *, query=None, json_body=None, body: bytes | None = None,
             content_type: str | None = None, timeout: float | None = None, what: str,
             retry: bool | None = None) -> Reply:
        """One execd call whose whole reply must arrive within the timeout. GET is retried
        (with_retries); other methods only when the caller says the call is idempotent."""
        headers = {}
        if json_body is not None:
            body = json.dumps(json_body).encode("utf-8")
            content_type = "application/json"
        if content_type:
            headers["Content-Type"] = content_type
        tmo = self.osb.http.timeout if timeout is None else timeout

        def once() -> Reply:
            deadline = time.monotonic() + tmo
            stream = self.open(method, path, query=query, body=body, headers=headers, timeout=timeout, what=what)
            try:
                data = stream.read_all(deadline=max(deadline, stream.received + 0.5))
            except (OSError, http.client.HTTPException) as exc:
                stream.close()
                raise NetError(_net_kind(exc), what, _safe_url(self.base), str(exc) or type(exc).__name__) from None
            stream.release()
            return Reply(stream.status, stream.reason, stream.headers, data, stream.received)

        if retry is None:
            retry = method == "GET"
        return with_retries(once, self.osb.http.timeout) if retry else once()

    # ---- framing (seed 000 §1.1): "latest" accepts argv and keeps line endings; v1.1.0 does not

    @property
    def mode(self) -> str | None:
        mode = self.osb.cache.get(self.sandbox_id).get("framing")
        return mode if mode in (LEGACY, LATEST) else None

    def set_mode(self, mode: str) -> None:
        if self.mode != mode:
            self.osb.cache.update(self.sandbox_id, framing=mode)

    def ping(self, timeout: float = 3.0) -> None:
        self.call("GET", "/ping", timeout=timeout, what="execd ping")

    def start(self, *, argv: list[str] | None, envs: dict | None = None, cwd: str = "",
              uid: int | None = None, gid: int | None = None, timeout_ms: int = 0,
              background: bool = False, command: str | None = None) -> CommandRun:
        """POST /command and read up to the ``init`` event. With argv and an execd of unknown or
        "latest" generation, argv is sent alone; v1.1.0 answers 400 "Field validation for 'Command'
        failed on the 'required' tag" (rec 11), which switches this sandbox to a shell-quoted
        command string for good."""
        base: dict = {}
        if envs:
            base["envs"] = envs
        if cwd:
            base["cwd"] = cwd
        if timeout_ms > 0:
            base["timeout"] = int(timeout_ms)
        if uid is not None:
            base["uid"] = uid
        if gid is not None:
            base["gid"] = gid
        if background:
            base["background"] = True
        mode = self.mode
        if argv is not None and mode != LEGACY:
            try:
                run = self._post_command({**base, "argv": list(argv)}, LATEST)
            except HttpError as exc:
                if exc.status == 400 and _is_argv_rejection(exc.message):
                    self.set_mode(LEGACY)
                else:
                    raise
            else:
                self.set_mode(LATEST)
                return run
        if command is None:
            command = shell_join(argv or [])
        return self._post_command({**base, "command": command}, self.mode or LEGACY)

    def _post_command(self, payload: dict, mode: str) -> CommandRun:
        body = json.dumps(payload).encode("utf-8")
        stream = self.open("POST", "/command", body=body,
                           headers={"Content-Type": "application/json", "Cache-Control": "no-cache",
                                    "Accept": "text/event-stream"},
                           what="run command")
        return CommandRun(self, stream, mode)

    def interrupt(self, command_id: str, timeout: float | None = None) -> None:
        """Stop a command (not retried: a second interrupt of a stopped command is an error).
        Bounded by 5 s, or by http_timeout when that is shorter."""
        tmo = min(5.0, self.osb.http.timeout) if timeout is None else timeout
        self.call("DELETE", "/command", query={"id": command_id}, timeout=tmo, what="interrupt command")

    def status(self, command_id: str) -> dict:
        body = self.call("GET", f"/command/status/{urllib.parse.quote(command_id, safe='')}",
                         what="command status").json()
        return body if isinstance(body, dict) else {}

    def logs(self, command_id: str, cursor: str | None) -> tuple[str, str | None]:
        """Merged stdout+stderr of a background command after ``cursor`` and the next cursor
        (rec 10: header EXECD-COMMANDS-TAIL-CURSOR; the cursor is opaque to us)."""
        query = {"cursor": cursor} if cursor is not None else None
        reply = self.call("GET", f"/command/{urllib.parse.quote(command_id, safe='')}/logs",
                          query=query, what="command logs")
        nxt = reply.headers.get("execd-commands-tail-cursor")
        return reply.body.decode("utf-8", "replace"), (nxt.strip() if nxt else cursor)

    # ---- files (rec 13, 18)

    def upload(self, path: str, data: bytes, mode: int | None = None) -> None:
        meta: dict = {"path": path}
        if mode is not None:
            meta["mode"] = mode
        name = path.rstrip("/").rsplit("/", 1)[-1] or "file"
        ctype, body = encode_multipart([
            ("metadata", "metadata", "application/json", json.dumps(meta).encode("utf-8")),
            ("file", name, "application/octet-stream", data),
        ])
        self.call("POST", "/files/upload", body=body, content_type=ctype, what=f"upload {path}")

    def download(self, path: str, *, start: int | None = None, end: int | None = None) -> Stream:
        """Open a download; the caller reads the body (and retries the whole read: files.read)."""
        headers = {"Accept": "application/octet-stream"}
        if start is not None:
            headers["Range"] = f"bytes={start}-" + ("" if end is None else str(end))
        return self.open("GET", "/files/download", query={"path": path}, headers=headers,
                         what=f"download {path}")

    def info(self, path: str) -> dict:
        body = self.call("GET", "/files/info", query={"path": path}, what=f"stat {path}").json()
        if isinstance(body, dict):
            entry = body.get(path)
            if not isinstance(entry, dict) and len(body) == 1:
                entry = next(iter(body.values()))
            if isinstance(entry, dict):
                return entry
        raise HttpError(404, "Not Found", b'{"code":"FILE_NOT_FOUND","message":"file not found"}',
                        {}, f"stat {path}", "execd")

    def list_dir(self, path: str, depth: int = 1) -> list:
        query = {"path": path}
        if depth != 1:
            query["depth"] = str(depth)
        body = self.call("GET", "/directories/list", query=query, what=f"list {path}").json()
        return body if isinstance(body, list) else []

    def mkdir(self, path: str, mode: int = 755) -> None:
        self.call("POST", "/directories", json_body={path: {"mode": mode}}, what=f"mkdir {path}")

    def remove_file(self, path: str) -> None:
        self.call("DELETE", "/files", query={"path": path}, what=f"remove {path}", retry=True)

    def remove_dir(self, path: str) -> None:
        self.call("DELETE", "/directories", query={"path": path}, what=f"remove directory {path}", retry=True)

    def move(self, src: str, dest: str) -> None:
        self.call("POST", "/files/mv", json_body=[{"src": src, "dest": dest}], what=f"move {src}")

    def search(self, path: str, pattern: str) -> list:
        body = self.call("GET", "/files/search", query={"path": path, "pattern": pattern},
                         what=f"search {path}").json()
        return body if isinstance(body, list) else []

    def chmod(self, path: str, perm: dict) -> None:
        self.call("POST", "/files/permissions", json_body={path: perm}, what=f"chmod {path}")


def _origin(url: str) -> tuple:
    p = urllib.parse.urlsplit(url)
    scheme = p.scheme.lower()
    return scheme, (p.hostname or "").lower(), p.port or (443 if scheme == "https" else 80)


def _is_argv_rejection(message: str) -> bool:
    m = message or ""
    return ("'Command'" in m and "required" in m) or "argv" in m.lower()


_SAFE_WORD = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")


def shell_join(argv: list[str]) -> str:
    """POSIX-shell quoting of an argv (execd v1.1.0 only takes a command string, run by bash -c)."""
    out = []
    for arg in argv:
        if "\0" in arg:
            raise ValueError("a command argument contains a NUL byte")
        if arg and _SAFE_WORD.fullmatch(arg):
            out.append(arg)
        else:
            out.append("'" + arg.replace("'", "'\"'\"'") + "'")
    return " ".join(out)


class CommandRun:
    """A command started through POST /command; ``command_id`` is known once ``init`` arrived."""

    def __init__(self, execd: Execd, stream: Stream, mode: str):
        self.execd, self.stream, self.mode = execd, stream, mode
        self.decoder = SSEDecoder()
        self._pending: list[dict] = []
        self.command_id: str | None = None
        self.done = False
        # Read until init (rec 07: the first event, text = 32-hex command id).
        while self.command_id is None:
            ev = self._next_raw()
            if ev is None:
                break
            if ev.get("type") == "init":
                text = ev.get("text")
                self.command_id = str(text) if text else None
                if self.command_id is None:
                    self.command_id = ""
            else:
                self._pending.append(ev)
                if ev.get("type") in ("execution_complete", "error"):
                    break
        # From here on the stream is read without a socket timeout: callers enforce deadlines and
        # abort() the stream (execd sends a heartbeat every ~3 s, rec 17).
        sock = getattr(stream._conn, "sock", None)
        if sock is not None:
            try:
                sock.settimeout(None)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            except OSError:
                pass

    def _next_raw(self) -> dict | None:
        while not self._pending:
            if self.done:
                return None
            try:
                chunk = self.stream.read1(65536)
            except (OSError, ValueError, http.client.HTTPException):
                chunk = b""
            if not chunk:
                self._pending.extend(self.decoder.close())
                self.done = True
                self.stream.close()
                break
            self._pending.extend(self.decoder.feed(chunk))
        return self._pending.pop(0) if self._pending else None

    def events(self):
        """Yield output events (``{"type": "stdout"|"stderr", "text": ...}`` with v1.1.0 line endings
        restored) and finally the terminal event; stops reading as soon as it arrives."""
        while True:
            ev = self._next_raw()
            if ev is None:
                return
            kind = ev.get("type")
            if kind in ("stdout", "stderr"):
                text = ev.get("text")
                if not isinstance(text, str) or text == "":
                    continue
                if self.mode == LEGACY:
                    text = restore_legacy_text(text)
                yield {"type": kind, "text": text}
            elif kind in ("execution_complete", "error"):
                self.done = True
                self.stream.close()          # never wait out execd's ~1 s close
                yield ev
                return

    def abort(self) -> None:
        self.stream.abort()
        self.stream.close()


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
