"""The request journal: a bounded record of every request and response on every mock listener.

WireMock's request journal for the mock: each entry holds method, path (with the query), listener
(lifecycle / execd / port / proxy), sandbox id, status, duration, the fault rule that fired, and
previews of both bodies with secrets scrubbed. ``httpcore.Handler._handle`` calls
``app.journal.begin(handler, method)`` before anything is read or faulted and ``entry.end(fault)``
when the request is over; ``begin`` tees the handler's ``rfile``/``wfile`` (bounded) so the entry sees
the bytes as they crossed the wire, after any fault cut them.

    osb.requests(method="POST", path=r"/command$", sandbox=sid)     # list of dicts, oldest first
    osb.assert_requested(method="DELETE", path=r"^/v1/sandboxes/", count=1)

Over HTTP (behind the API key): ``GET /__mock__/requests?method=&path=&sandbox=&listener=&status=
&since=&limit=`` (workbench/admin.py). The admin routes themselves (``/__mock__/...``) are not journaled.
Standard library only.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections import deque
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

from mock_opensandbox.wire.listener import Fault, RequestHandler, RequestStream, ResponseStream, SendfileRefused
from mock_opensandbox.workbench.faultinject import classify
from mock_opensandbox.workbench.scrub import REDACTED, SECRET_HEADERS, scrub_text

__all__ = ["Journal", "JournalEntry", "match_entry"]

ADMIN_PREFIX = "/__mock__"
DEFAULT_MAX_ENTRIES = 1000
DEFAULT_PREVIEW = 2048
_RAW = "_raw"  # an entry's unread headers and bodies (JournalEntry._record); Journal.entries() expands them
_CREATE_PATH_RE = re.compile(r"^(?:/v1)?/sandboxes/?(?:\?|$)")
_ID_RE = re.compile(r'^\s*\{\s*"id"\s*:\s*"([^"]+)"')


def _preview(data: bytes, limit: int, secrets: Iterable[str]) -> str:
    text = data[:limit].decode("utf-8", "replace")
    # keep it printable: control bytes other than tab/newline become escapes
    text = "".join(c if c in "\t\n\r" or c >= " " else "\\x%02x" % ord(c) for c in text)
    return scrub_text(text, secrets)


def _dechunk(raw: bytes) -> bytes:
    """Best-effort decoding of a (possibly cut) chunked body."""
    out = bytearray()
    pos = 0
    while pos < len(raw):
        eol = raw.find(b"\r\n", pos)
        if eol < 0:
            break
        try:
            size = int(raw[pos:eol].split(b";", 1)[0].strip() or b"0", 16)
        except ValueError:
            return bytes(raw)  # not chunked after all
        if size == 0:
            break
        start = eol + 2
        out += raw[start : start + size]
        pos = start + size + 2
    return bytes(out)


class _TeeReader:
    """Wraps the handler's rfile; keeps the first ``limit`` bytes read and counts the rest."""

    def __init__(self, raw: RequestStream, limit: int):
        self._raw, self._limit = raw, limit
        self.captured = bytearray()
        self.total = 0

    def _keep(self, data: bytes) -> bytes:
        if data:
            self.total += len(data)
            room = self._limit - len(self.captured)
            if room > 0:
                self.captured += data[:room]
        return data

    def read(self, *a: Any) -> bytes:
        return self._keep(self._raw.read(*a))

    def read1(self, *a: Any) -> bytes:
        return self._keep(self._raw.read1(*a))

    def readline(self, *a: Any) -> bytes:
        return self._keep(self._raw.readline(*a))

    def readinto(self, b: Any) -> int:
        n: int = self._raw.readinto(b)
        if n:
            self._keep(bytes(memoryview(b)[:n]))
        return n

    def __iter__(self) -> Any:
        return self

    def __next__(self) -> bytes:
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class _TeeWriter:
    """Wraps the handler's wfile: parses the response head, keeps the first bytes of the body and
    notices the moment the answer is complete (Content-Length reached, last chunk, or no body), so the
    entry is in the journal before the client can have read the end of the answer."""

    def __init__(self, raw: ResponseStream, limit: int, method: str, on_complete: Callable[[], None]):
        self._raw, self._limit, self._method = raw, limit, method
        self._on_complete = on_complete
        # the entry recorded now, with the fault that ends the exchange unanswered (a reset: faultinject.py), before
        # the client can see the end: set by JournalCall
        self.settle: Callable[[Any], None] | None = None
        self._head = bytearray()
        self.head_done = False
        self.complete = False
        self.status = 0
        self.headers: list[tuple[str, str]] = []
        self.body = bytearray()
        self.body_total = 0
        self._length: int | None = None
        self._chunked = False
        self._cbuf = bytearray()  # chunk framing parser state
        self._cleft = 0  # data bytes (+2 for CRLF) left in the current chunk
        self._trailer = False

    def _done(self) -> None:
        if not self.complete:
            self.complete = True
            self._on_complete()

    def _body(self, data: bytes, n: int | None = None) -> None:
        """Body bytes written (``n``: how many went out when ``data`` holds only the first of them, a sendfile's)."""
        self.body_total += len(data) if n is None else n
        room = self._limit - len(self.body)
        if room > 0:
            self.body += data[:room]
        if self._length is not None:
            if self.body_total >= self._length:
                self._done()
        elif self._chunked:
            self._chunks(data)

    def _chunks(self, data: bytes) -> None:
        i, n = 0, len(data)
        while i < n and not self.complete:
            if self._cleft:
                take = min(self._cleft, n - i)
                self._cleft -= take
                i += take
                continue
            # a size (or trailer) line: up to its CRLF, which may come in a later write
            end = data.find(b"\n", i)
            if end < 0:
                self._cbuf += data[i:]
                if len(self._cbuf) > 4096:
                    self._chunked = False
                return
            self._cbuf += data[i : end + 1]
            i = end + 1
            if not self._cbuf.endswith(b"\r\n"):
                if len(self._cbuf) > 4096:
                    self._chunked = False
                    return
                continue  # a bare LF inside the line: it goes on
            line = bytes(self._cbuf[:-2])
            self._cbuf.clear()
            if self._trailer:
                if not line:
                    self._done()
                continue
            try:
                size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            except ValueError:
                self._chunked = False  # not chunk framing after all: give up
                return
            if size == 0:
                self._trailer = True
            else:
                self._cleft = size + 2

    def _feed(self, data: bytes) -> None:
        while data and not self.head_done:
            self._head += data
            end = self._head.find(b"\r\n\r\n")
            if end < 0:
                if len(self._head) > 65536:  # not HTTP (a raw tunnel): give up parsing
                    self.head_done = True
                    self._head.clear()
                return
            head, data = bytes(self._head[:end]), bytes(self._head[end + 4 :])
            self._head.clear()
            lines = head.decode("latin-1").split("\r\n")
            parts = lines[0].split(" ", 2)
            try:
                status = int(parts[1])
            except (IndexError, ValueError):
                status = 0
            if 100 <= status < 200 and status != 101:
                continue  # 100 Continue: the real head follows
            self.status = status
            self.headers = [(k.strip(), v.strip()) for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)]
            self.head_done = True
            for k, v in self.headers:
                kl = k.lower()
                if kl == "content-length" and v.isdigit():
                    self._length = int(v)
                elif kl == "transfer-encoding" and "chunked" in v.lower():
                    self._chunked = True
            if self._method == "HEAD" or status in (101, 204, 304) or self._length == 0:
                self._done()
        if data and self.head_done:
            self._body(data)

    def write(self, data: Any) -> int:
        if not self.complete:
            try:
                self._feed(bytes(data))
            except Exception:  # the journal never breaks an answer
                pass
        written: int = self._raw.write(data)
        return written

    def sendfile(self, sock: Any, fd: int, offset: int, count: int) -> int:
        """The stream's sendfile (a download's body, sent after its head went through write): the bytes count
        as written, the first ones the entry keeps read back from the file. SendfileRefused when the stream
        under it has none."""
        raw = getattr(self._raw, "sendfile", None)
        if raw is None:
            raise SendfileRefused("no sendfile under the journal")
        sent: int = raw(sock, fd, offset, count)
        if sent and self.head_done and not self.complete:
            try:
                room = max(0, self._limit - len(self.body))
                self._body(os.pread(fd, min(room, sent), offset) if room else b"", sent)
            except Exception:  # the journal never breaks an answer
                pass
        return sent

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


class JournalEntry:
    """One request while it runs; ``end`` turns it into the journal's dict."""

    __slots__ = (
        "journal",
        "handler",
        "method",
        "path",
        "listener",
        "sandbox",
        "t0",
        "wall",
        "rtee",
        "wtee",
        "raw_rfile",
        "raw_wfile",
        "client",
        "recorded",
        "fault",
        "entry",
    )

    def __init__(self, journal: "Journal", handler: RequestHandler, method: str, listener: str, sandbox: str | None):
        self.journal, self.handler, self.method = journal, handler, method
        self.path = handler.path
        self.listener, self.sandbox = listener, sandbox
        self.t0 = time.monotonic()
        self.wall = time.time()
        self.client = handler.client_address[0] if handler.client_address else ""
        limit = journal.capture_limit
        self.raw_rfile, self.raw_wfile = handler.rfile, handler.wfile
        self.rtee = _TeeReader(handler.rfile, limit)
        self.wtee = _TeeWriter(handler.wfile, limit, method, self._record)
        self.wtee.settle = self._settle
        self.recorded = False
        self.fault: Fault | None = None
        self.entry: dict[str, Any] | None = None
        handler.rfile, handler.wfile = self.rtee, self.wtee

    def end(self, fault: Fault | None = None) -> None:
        h = self.handler
        # put the raw files back (only if nobody replaced ours meanwhile)
        if h.rfile is self.rtee:
            h.rfile = self.raw_rfile
        if h.wfile is self.wtee:
            h.wfile = self.raw_wfile
        self.fault = fault
        if self.recorded:
            # recorded when the answer was complete; the fault that delayed or shaped it is known now
            rule = getattr(fault, "rule", None)
            if rule is not None and self.entry is not None:
                self.entry["fault"] = {"id": rule.id, "kind": rule.kind}
            return
        self._record()

    def _settle(self, fault: Any) -> None:
        self.fault = fault
        self._record()

    def _record(self) -> None:
        """Add the entry, cheaply: it runs on the request's own thread before the last bytes of the answer
        go out. Headers and body previews (decoding, scrubbing) are made when the journal is read."""
        if self.recorded:
            return
        self.recorded = True
        h = self.handler
        fault = self.fault
        j = self.journal
        duration = time.monotonic() - self.t0
        w = self.wtee
        rheaders = list(w.headers)
        body = bytes(w.body)
        if (
            self.sandbox is None
            and self.method == "POST"
            and w.status in (200, 201, 202)
            and _CREATE_PATH_RE.match(self.path)
        ):
            m = _ID_RE.match(_body_of(body, rheaders).decode("utf-8", "replace"))
            if m:
                self.sandbox = m.group(1)  # a create: the sandbox it made
        rule = getattr(fault, "rule", None)
        error = None
        if not w.head_done or w.status == 0:
            error = {"reset": "connection reset (no answer)", "stall": "stalled (no answer)"}.get(
                getattr(rule, "kind", ""), "no answer"
            )
        entry: dict[str, Any] = {
            "time": self.wall,  # the wall clock; text when first read (Journal._expand)
            "method": self.method,
            "path": self.path,
            "listener": self.listener,
            "sandbox": self.sandbox,
            "status": w.status,
            "duration_ms": round(duration * 1000, 2),
            "client": self.client,
            "request": {"headers": None, "body_bytes": self.rtee.total, "body_preview": None},
            "response": {"headers": None, "body_bytes": w.body_total, "body_preview": None},
            "fault": None if rule is None else {"id": rule.id, "kind": rule.kind},
            "error": error,
            _RAW: (_raw_headers(h.headers), bytes(self.rtee.captured), rheaders, body),
        }
        if rule is None:  # a status fault answers with its rule id in a header
            fid = next((v for k, v in rheaders if k.lower() == "x-mock-fault"), None)
            if fid:
                entry["fault"] = {"id": fid, "kind": "status"}
        self.entry = entry
        j.add(entry)


def _raw_headers(message: Any) -> Callable[[], list[tuple[str, str]]]:
    """The request's headers as they are when the entry is made (a route may have edited them: the gateway's
    X-Forwarded-For; later edits do not reach the entry). An email Message's raw pairs are copied (cheap) and
    given their parsed values, as Message.items() gives them, when the journal is first read: a callable that
    lists them."""
    raw = getattr(message, "raw_items", None)
    policy = getattr(message, "policy", None)
    if raw is None or policy is None:  # not an email Message (or none): listed now
        items = list(message.items()) if message is not None else []
        return lambda: items
    pairs = list(raw())
    return lambda: [(k, policy.header_fetch_parse(k, v)) for k, v in pairs]


def _body_of(raw: bytes, headers: Iterable[tuple[str, str]]) -> bytes:
    """The captured bytes of a body, chunk framing removed when the headers say chunked."""
    if any(k.lower() == "transfer-encoding" and "chunked" in v.lower() for k, v in headers):
        return _dechunk(raw)
    return raw


def _listener_and_sandbox(handler: RequestHandler) -> tuple[str, str | None]:
    listener, _, sandbox = classify(handler)
    return listener, sandbox


class Journal:
    """The bounded journal. Thread-safe; ``wait_for(seq)`` lets the dashboard's event stream sleep."""

    def __init__(
        self,
        max_entries: int = DEFAULT_MAX_ENTRIES,
        preview: int = DEFAULT_PREVIEW,
        *,
        secrets: Callable[[], Iterable[str]] | None = None,
        classify: Callable[[RequestHandler], tuple[str, str | None]] | None = None,
    ):
        if max_entries < 1 or preview < 0:
            raise ValueError("max_entries must be >= 1 and preview >= 0")
        self.preview = preview
        self.capture_limit = preview * 2 + 64  # chunk framing eats a little of it
        self._entries: deque[dict[str, Any]] = deque(maxlen=max_entries)
        self._seq = 0
        self._cond = threading.Condition()
        self._secrets = secrets or (lambda: ())
        self._classify = classify or _listener_and_sandbox
        self.enabled = True
        self.dropped = 0

    # -- the httpcore hook ---------------------------------------------------------------------------
    def begin(self, handler: RequestHandler, method: str) -> JournalEntry | None:
        if not self.enabled or handler.path.split("?", 1)[0].rstrip("/").startswith(ADMIN_PREFIX):
            return None
        try:
            listener, sandbox = self._classify(handler)
            return JournalEntry(self, handler, method, listener, sandbox)
        except Exception:  # the journal must never break a request
            return None

    # -- storage -------------------------------------------------------------------------------------
    def secrets(self) -> list[str]:
        try:
            return [s for s in self._secrets() if s]
        except Exception:
            return []

    def scrub_headers(self, items: Iterable[tuple[str, str]], secrets: list[str] | None = None) -> list[list[str]]:
        if secrets is None:
            secrets = self.secrets()
        out = []
        for k, v in items:
            if k.lower() in SECRET_HEADERS:
                v = REDACTED
            else:
                v = scrub_text(v, secrets)
            out.append([k, v])
        return out

    def add(self, entry: dict[str, Any]) -> None:
        with self._cond:
            self._seq += 1
            entry["seq"] = self._seq
            if len(self._entries) == self._entries.maxlen:
                self.dropped += 1
            self._entries.append(entry)
            self._cond.notify_all()

    @property
    def seq(self) -> int:
        return self._seq

    def wait_for(self, seq: int, timeout: float) -> bool:
        """Wait until an entry newer than ``seq`` exists (or the journal was cleared); True if so."""
        with self._cond:
            return self._cond.wait_for(lambda: self._seq != seq, timeout)

    def clear(self, sandbox: str | None = None) -> int:
        with self._cond:
            before = len(self._entries)
            if sandbox is None:
                self._entries.clear()
            else:
                kept = [e for e in self._entries if e.get("sandbox") != sandbox]
                self._entries.clear()
                self._entries.extend(kept)
            self._seq += 1 if before else 0
            self._cond.notify_all()
            return before - len(self._entries)

    def entries(self, **filters: Any) -> list[dict[str, Any]]:
        """Entries oldest first, filtered (see ``match_entry``); ``since`` = only seq > since; ``limit`` =
        the newest N of the matches."""
        since = filters.pop("since", None)
        limit = filters.pop("limit", None)
        with self._cond:
            items = list(self._entries)
        out = [e for e in items if (since is None or e["seq"] > since) and match_entry(e, **filters)]
        if limit is not None:
            out = out[-limit:] if limit > 0 else []
        if any(_RAW in e for e in out):
            secrets = self.secrets()
            with self._cond:
                for e in out:
                    raw = e.pop(_RAW, None)
                    if raw is not None:
                        self._expand(e, raw, secrets)
        return out

    def _expand(self, e: dict[str, Any], raw: tuple[Any, ...], secrets: list[str]) -> None:
        """Fill in an entry's scrubbed headers and body previews (what _record left for the first read)."""
        req_raw, req_body, resp_headers, resp_body = raw
        req_headers = req_raw()
        e["time"] = datetime.fromtimestamp(e["time"], timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        e["request"]["headers"] = self.scrub_headers(req_headers, secrets)
        e["request"]["body_preview"] = _preview(_body_of(req_body, req_headers), self.preview, secrets)
        e["response"]["headers"] = self.scrub_headers(resp_headers, secrets)
        e["response"]["body_preview"] = _preview(_body_of(resp_body, resp_headers), self.preview, secrets)

    def __len__(self) -> int:
        return len(self._entries)


def _compile(path: Any) -> "re.Pattern[str] | None":
    if path is None or path == "":
        return None
    if isinstance(path, re.Pattern):
        return path
    if not isinstance(path, str):
        raise ValueError("path must be a regular expression string")
    try:
        return re.compile(path)
    except re.error as e:
        raise ValueError("path is not a valid regular expression: %s" % e) from None


def match_entry(
    e: dict[str, Any],
    *,
    method: Any = None,
    path: Any = None,
    sandbox: str | None = None,
    listener: str | None = None,
    status: Any = None,
    fault: str | None = None,
) -> bool:
    """``method``: "GET", "GET|POST" or a list; ``path``: a regex searched in the path (query included);
    ``status``: an int, "4xx"-style class or a list; ``fault``: a rule id or "*" for any faulted request."""
    if method:
        wanted = {m.strip().upper() for m in (method.split("|") if isinstance(method, str) else method)}
        if "*" not in wanted and e["method"] not in wanted:
            return False
    rx = _compile(path)
    if rx is not None and not rx.search(e["path"]):
        return False
    if sandbox and e.get("sandbox") != sandbox:
        return False
    if listener and e.get("listener") != listener:
        return False
    if status is not None and status != "":
        statuses = status if isinstance(status, (list, tuple, set)) else [status]
        ok = False
        for s in statuses:
            s = str(s).strip().lower()
            if len(s) == 3 and s.endswith("xx") and s[0].isdigit():
                ok = ok or str(e["status"]).startswith(s[0])
            elif s.isdigit():
                ok = ok or e["status"] == int(s)
            else:
                raise ValueError("status must be a code like 404 or a class like 4xx")
        if not ok:
            return False
    if fault:
        f = e.get("fault")
        if f is None or (fault != "*" and f["id"] != fault):
            return False
    return True
