"""execd, the data plane of one sandbox: commands (``POST /command`` and its SSE stream), files,
directories, the PTY API's REST part and WebSocket. ``Endpoint.headers`` are replayed on every
request, SSE, uploads and WebSocket upgrades included (QUIRKS.md, Endpoints); X-EXECD-ACCESS-TOKEN is
added when configured. Every call raises the transport's ``HttpError`` / ``NetError``.

Facts quoted in comments: ``rec NN`` = recording NN, fixtures/NN_*.json; the others are rows of mock_opensandbox/QUIRKS.md.
"""

from __future__ import annotations

import http.client
import json
import re
import socket
import time
import urllib.parse
from collections import deque

from .retries import with_retries
from .sse import SSEDecoder, restore_legacy_text
from .transport import MAX_ERROR_BODY, HttpError, NetError, Reply, Stream, register_endpoint_secrets, safe_url

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable, Iterator, Protocol, TypeVar

    from .transport import Body, Http
    from .ws import WebSocketClient

    T = TypeVar("T")

    class Cache(Protocol):
        def get(self, sandbox_id: str) -> dict[str, Any]: ...

        def update(self, sandbox_id: str, **values: Any) -> None: ...

    class Client(Protocol):
        """What an Execd uses of the lifecycle client that made it (lifecycle.OpenSandbox, which
        imports this module: naming it here would close a circle)."""

        @property
        def server(self) -> str: ...
        @property
        def api_key(self) -> str: ...
        @property
        def execd_token(self) -> str: ...
        @property
        def http(self) -> Http: ...
        @property
        def cache(self) -> Cache: ...

        def execd(self, sandbox_id: str, *, refresh: bool = False) -> Execd: ...

    Query = dict[str, Any] | list[tuple[str, str]] | None  # urlencode() takes either

LEGACY, LATEST = "v1.1.0", "latest"  # the two execd generations (QUIRKS.md, MockOpenSandbox / CLI)


class Execd:
    """execd of one sandbox, reached at ``base`` with ``endpoint_headers``."""

    def __init__(self, client: Client, sandbox_id: str, base_url: str, headers: dict[str, Any]) -> None:
        self.client, self.sandbox_id, self.base, self.endpoint_headers = client, sandbox_id, base_url, headers
        register_endpoint_secrets(headers)  # also when the endpoint comes from the cache of an earlier process

    def headers(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        h = dict(self.endpoint_headers)
        if self.client.execd_token:
            h["X-EXECD-ACCESS-TOKEN"] = self.client.execd_token
        # Through the server proxy, execd sits behind the lifecycle server: send its API key there
        # and nowhere else.
        if self.client.api_key and _origin(self.base) == _origin(self.client.server):
            h["OPEN-SANDBOX-API-KEY"] = self.client.api_key
        if extra:
            h.update(extra)
        return h

    def url(self, path: str, query: Query = None) -> str:
        url = self.base + path
        if query:
            url += "?" + urllib.parse.urlencode(query, doseq=True, quote_via=urllib.parse.quote)
        return url

    def open(
        self,
        method: str,
        path: str,
        *,
        query: Query = None,
        body: Body | None = None,
        headers: dict[str, Any] | None = None,
        timeout: float | None = None,
        what: str,
    ) -> Stream:
        """Open a request (the caller reads the reply)."""
        return self._fresh(lambda: self._open(method, path, query, body, headers, timeout, what))

    def _fresh(self, attempt: Callable[[], T]) -> T:
        """Run ``attempt()``. A cached endpoint is re-resolved once when it is refused (the sandbox
        moved) or when its access headers are rejected (secure-access credentials can rotate)."""
        try:
            return attempt()
        except (NetError, HttpError) as exc:
            stale = (isinstance(exc, NetError) and exc.kind in ("refused", "dns")) or (
                isinstance(exc, HttpError) and exc.status in (401, 403) and bool(self.endpoint_headers)
            )
            if not stale:
                raise
            fresh = self.client.execd(self.sandbox_id, refresh=True)
            if (fresh.base, fresh.endpoint_headers) == (self.base, self.endpoint_headers):
                raise
            self.base, self.endpoint_headers = fresh.base, fresh.endpoint_headers
            return attempt()

    def _open(
        self,
        method: str,
        path: str,
        query: Query,
        body: Body | None,
        headers: dict[str, Any] | None,
        timeout: float | None,
        what: str,
    ) -> Stream:
        stream = self.client.http.open(method, self.url(path, query), self.headers(headers), body, timeout, what)
        if stream.status >= 400:
            # read like every other body (Stream.read_all, as the lifecycle plane's are): an error answer
            # cut short (reset, or fewer bytes than Content-Length) is a NetError, never an HttpError
            # with a shred of the body (the 400 of the argv probe must be read whole to be recognised)
            try:
                data = stream.read_all(limit=MAX_ERROR_BODY)
            except (OSError, http.client.HTTPException) as exc:
                raise NetError.of(exc, what, self.base) from None
            finally:
                stream.close()
            raise HttpError(stream.status, stream.reason, data, stream.headers, what, "execd")
        return stream

    def call(
        self,
        method: str,
        path: str,
        *,
        query: Query = None,
        json_body: object = None,
        body: Body | None = None,
        content_type: str | None = None,
        timeout: float | None = None,
        what: str,
        retry: bool | None = None,
    ) -> Reply:
        """One execd call whose whole reply must arrive within the timeout. GET is retried
        (with_retries); other methods only when the caller says the call is idempotent."""
        headers = {}
        if json_body is not None:
            body = json.dumps(json_body).encode("utf-8")
            content_type = "application/json"
        if content_type:
            headers["Content-Type"] = content_type
        tmo = self.client.http.timeout if timeout is None else timeout

        def once() -> Reply:
            deadline = time.monotonic() + tmo
            stream = self.open(method, path, query=query, body=body, headers=headers, timeout=timeout, what=what)
            return stream.reply(deadline, what, self.base)

        if retry is None:
            retry = method == "GET"
        return with_retries(once, self.client.http.timeout) if retry else once()

    # ---- framing (QUIRKS.md, POST /command): "latest" accepts argv and keeps line endings; v1.1.0 does not

    @property
    def mode(self) -> str | None:
        mode = self.client.cache.get(self.sandbox_id).get("framing")
        return mode if mode in (LEGACY, LATEST) else None

    def set_mode(self, mode: str) -> None:
        if self.mode != mode:
            self.client.cache.update(self.sandbox_id, framing=mode)

    def ping(self, timeout: float = 3.0) -> None:
        self.call("GET", "/ping", timeout=timeout, what="execd ping")

    def start(
        self,
        *,
        argv: list[str] | None,
        envs: dict[str, Any] | None = None,
        cwd: str = "",
        uid: int | None = None,
        gid: int | None = None,
        timeout_ms: int = 0,
        background: bool = False,
        command: str | None = None,
    ) -> CommandRun:
        """POST /command and read up to the ``init`` event. With argv and an execd of unknown or
        "latest" generation, argv is sent alone; v1.1.0 answers 400 "Field validation for 'Command'
        failed on the 'required' tag" (rec 11), which switches this sandbox to a shell-quoted
        command string for good."""
        base: dict[str, Any] = {}
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

    def _post_command(self, payload: dict[str, Any], mode: str) -> CommandRun:
        body = json.dumps(payload).encode("utf-8")
        stream = self.open(
            "POST",
            "/command",
            body=body,
            headers={"Content-Type": "application/json", "Cache-Control": "no-cache", "Accept": "text/event-stream"},
            what="run command",
        )
        return CommandRun(self, stream, mode)

    def interrupt(self, command_id: str, timeout: float | None = None) -> None:
        """Stop a command (not retried: a second interrupt of a stopped command is an error).
        Bounded by 5 s, or by http_timeout when that is shorter."""
        tmo = min(5.0, self.client.http.timeout) if timeout is None else timeout
        self.call("DELETE", "/command", query={"id": command_id}, timeout=tmo, what="interrupt command")

    def status(self, command_id: str) -> dict[str, Any]:
        body = self.call(
            "GET", f"/command/status/{urllib.parse.quote(command_id, safe='')}", what="command status"
        ).json()
        return body if isinstance(body, dict) else {}

    def logs(self, command_id: str, cursor: str | None) -> tuple[str, str | None]:
        """Merged stdout+stderr of a background command after ``cursor`` and the next cursor
        (rec 10: header EXECD-COMMANDS-TAIL-CURSOR; the cursor is opaque to us)."""
        query = {"cursor": cursor} if cursor is not None else None
        reply = self.call(
            "GET", f"/command/{urllib.parse.quote(command_id, safe='')}/logs", query=query, what="command logs"
        )
        nxt = reply.headers.get("execd-commands-tail-cursor")
        return reply.body.decode("utf-8", "replace"), (nxt.strip() if nxt else cursor)

    # ---- files (rec 13, 18)

    def upload(self, path: str, data: bytes, mode: int | None = None) -> None:
        meta: dict[str, Any] = {"path": path}
        if mode is not None:
            meta["mode"] = mode
        name = path.rstrip("/").rsplit("/", 1)[-1] or "file"
        from .multipart import multipart_pieces

        ctype, body = multipart_pieces(
            [
                ("metadata", "metadata", "application/json", json.dumps(meta).encode("utf-8")),
                ("file", name, "application/octet-stream", data),
            ]
        )
        self.call("POST", "/files/upload", body=body, content_type=ctype, what=f"upload {path}")

    def download(self, path: str, *, start: int | None = None, end: int | None = None) -> Stream:
        """Open a download; the caller reads the body (and retries the whole read: files.read)."""
        headers = {"Accept": "application/octet-stream"}
        if start is not None:
            headers["Range"] = f"bytes={start}-" + ("" if end is None else str(end))
        return self.open("GET", "/files/download", query={"path": path}, headers=headers, what=f"download {path}")

    def read_file(self, path: str, *, offset: int | None = None, length: int | None = None, limit: int) -> bytearray:
        """Bytes ``[offset, offset + length)`` of a file, or all of it; ``TooLarge`` past ``limit``.

        Each try is one download read whole within http_timeout. A body that ends before its
        Content-Length or arrives too slowly raises NetError, so a truncated download is never taken
        for the file; the whole download is retried like any idempotent call. A server that ignores
        Range (200 instead of 206) is cut to the range here."""
        ranged = offset is not None or length is not None
        start = offset or 0
        end = start + length - 1 if length is not None else None
        timeout = self.client.http.timeout

        def once() -> bytearray:
            deadline = time.monotonic() + timeout
            stream = self.download(path, start=start if ranged else None, end=end)
            try:
                declared = stream.headers.get("content-length", "")
                skip = start if (ranged and stream.status == 200) else 0
                want = (skip + length) if length is not None else None
                if declared.isdigit() and want is None and int(declared) - skip > limit:
                    raise TooLarge(int(declared) - skip)
                cap = want if want is not None else skip + limit
                data = stream.read_body(limit=cap, deadline=max(deadline, stream.received + 0.5))
                if want is None and len(data) - skip > limit:
                    raise TooLarge(None)
            except TooLarge:
                stream.close()
                raise
            except Exception as exc:  # noqa: BLE001 - any failure mid-body is a network error
                stream.close()
                raise NetError.of(exc, f"download {path}", self.base) from None
            if len(data) > cap:
                stream.close()
                del data[cap:]
            else:
                stream.release()
            if skip or (want is not None and len(data) > want):
                return data[skip:want]
            return data  # the whole buffer as read: no copy

        return with_retries(once, timeout)

    def info(self, path: str) -> dict[str, Any]:
        body = self.call("GET", "/files/info", query={"path": path}, what=f"stat {path}").json()
        if isinstance(body, dict):
            entry = body.get(path)
            if not isinstance(entry, dict) and len(body) == 1:
                entry = next(iter(body.values()))
            if isinstance(entry, dict):
                return entry
        raise HttpError(
            404, "Not Found", b'{"code":"FILE_NOT_FOUND","message":"file not found"}', {}, f"stat {path}", "execd"
        )

    def list_dir(self, path: str, depth: int = 1) -> list[Any]:
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

    def search(self, path: str, pattern: str) -> list[Any]:
        body = self.call("GET", "/files/search", query={"path": path, "pattern": pattern}, what=f"search {path}").json()
        return body if isinstance(body, list) else []

    def chmod(self, path: str, perm: dict[str, Any]) -> None:
        self.call("POST", "/files/permissions", json_body={path: perm}, what=f"chmod {path}")

    # ---- terminals (components/execd pty_controller.go; docs/PTY.md)

    def pty_create(self) -> str:
        """POST /pty -> the new session's id (not retried: each try would start a shell)."""
        body = self.call("POST", "/pty", json_body={}, what="POST /pty").json()
        sid = body.get("session_id") if isinstance(body, dict) else None
        if not isinstance(sid, str) or not sid:
            raise HttpError(
                502,
                "Bad Gateway",
                b'{"message":"execd answered POST /pty without a session_id"}',
                {},
                "POST /pty",
                "execd",
            )
        return sid

    def pty_status(self, session_id: str, timeout: float | None = None) -> dict[str, Any]:
        body = self.call(
            "GET", f"/pty/{urllib.parse.quote(session_id, safe='')}", timeout=timeout, what="terminal status"
        ).json()
        return body if isinstance(body, dict) else {}

    def pty_delete(self, session_id: str, timeout: float | None = None) -> None:
        """Kill the session's shell (idempotent, retried)."""
        self.call(
            "DELETE", f"/pty/{urllib.parse.quote(session_id, safe='')}", timeout=timeout, what="DELETE /pty", retry=True
        )

    def websocket(self, path: str, query: str = "", *, timeout: float, what: str) -> WebSocketClient:
        """A WebSocket (ws.py) to ``path``; a refused upgrade raises HttpError (its body parsed
        and scrubbed like any other), a failed connection NetError."""
        from . import ws

        def once() -> WebSocketClient:
            url = self.base + path + (f"?{query}" if query else "")
            try:
                return ws.connect(url, self.headers(), timeout=timeout)
            except ws.HandshakeError as exc:
                if exc.status >= 400:
                    raise HttpError(exc.status, "", exc.body, exc.headers, what, "execd") from None
                raise NetError("network", what, safe_url(url), str(exc)) from None
            except (OSError, ValueError) as exc:
                raise NetError.of(exc, what, url) from None

        return self._fresh(once)


class TooLarge(Exception):
    """A download over the caller's limit (``size`` when the server said it, else None)."""

    def __init__(self, size: int | None):
        super().__init__(f"more than the limit ({size})")
        self.size = size


def _origin(url: str) -> tuple[Any, ...]:
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
        self._pending: deque[dict[str, Any]] = deque()
        self.command_id: str | None = None
        self.done = False  # nothing more to read (the stream is closed)
        self.ended = False  # the terminal event was handed out
        # Read until init (rec 07: the first event, text = 32-hex command id).
        early: list[dict[str, Any]] = []  # events before init, handed out first
        while self.command_id is None:
            ev = self._next_raw()
            if ev is None:
                break
            if ev.get("type") == "init":
                text = ev.get("text")
                self.command_id = str(text) if text else ""
            else:
                early.append(ev)
                if ev.get("type") in ("execution_complete", "error"):
                    break
        self._pending.extendleft(reversed(early))
        # From here on the stream is read without a socket timeout: callers enforce deadlines and
        # abort() the stream (execd sends a heartbeat every ~3 s, rec 17).
        sock = getattr(stream._conn, "sock", None)
        if sock is not None:
            try:
                sock.settimeout(None)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
            except OSError:
                pass

    def _fill(self) -> None:
        """One read of the stream, decoded into ``_pending``; at its end (or a failed read) the
        last frame is flushed and the run is done."""
        try:
            chunk = self.stream.read_some()
        except (OSError, ValueError, http.client.HTTPException):
            chunk = None
        if chunk is None:
            self._pending.extend(self.decoder.close())
            self.done = True
            self.stream.close()
        elif chunk:
            self._pending.extend(self.decoder.feed(chunk))

    def _next_raw(self) -> dict[str, Any] | None:
        while not self._pending:
            if self.done:
                return None
            self._fill()
        return self._pending.popleft() if self._pending else None

    def _output(self, ev: dict[str, Any]) -> dict[str, Any] | None:
        """A raw event as events() yields it (None: not one the caller sees). The terminal event
        ends the run: the connection is dropped at once, never waiting out execd's ~1 s close."""
        kind = ev.get("type")
        if kind in ("stdout", "stderr"):
            text = ev.get("text")
            if not isinstance(text, str) or text == "":
                return None
            if self.mode == LEGACY:
                text = restore_legacy_text(text)
            return {"type": kind, "text": text}
        if kind in ("execution_complete", "error"):
            self.done, self.ended = True, True
            self._pending.clear()
            self.stream.close()
            return ev
        return None

    def events(self) -> Iterator[dict[str, Any]]:
        """Yield output events (``{"type": "stdout"|"stderr", "text": ...}`` with v1.1.0 line endings
        restored) and finally the terminal event; stops reading as soon as it arrives."""
        while not self.ended:
            raw = self._next_raw()
            if raw is None:
                return
            ev = self._output(raw)
            if ev is not None:
                yield ev

    def next(self, timeout: float | None, wake: int | None = None) -> dict[str, Any] | None:
        """The next event as events() yields it, read on the caller's thread: waits at most
        ``timeout`` seconds (None: no limit) and no longer than until the file descriptor ``wake``
        is readable; None when nothing came in time. EOFError once the stream is over (after the
        terminal event, or cut short without one)."""
        end = None if timeout is None else time.monotonic() + timeout
        while True:
            while self._pending and not self.ended:
                ev = self._output(self._pending.popleft())
                if ev is not None:
                    return ev
            if self.done:
                raise EOFError("the command's event stream is over")
            left = None if end is None else max(0.0, end - time.monotonic())
            if not self.stream.wait(left, wake):
                return None
            self._fill()

    def pending_output(self, kind: str) -> str | None:
        """The text of the next event when it is already decoded and is output of ``kind``
        (consumed); None otherwise. Joins v1.1.0's one-event-per-line output without waiting."""
        while self._pending and not self.ended:
            raw = self._pending[0]
            if raw.get("type") != kind:
                return None
            self._pending.popleft()
            ev = self._output(raw)
            if ev is not None:
                return str(ev["text"])
        return None

    def abort(self) -> None:
        self.stream.abort()
        self.stream.close()

    def stop(self, timeout: float = 5.0) -> None:
        """Interrupt the command, quietly (best effort: shutdown, cancellation, timeouts)."""
        if self.command_id:
            try:
                self.execd.interrupt(self.command_id, timeout=timeout)
            except Exception:  # noqa: BLE001 - best effort by design
                pass
