"""Terminals: pty.open / pty.write / pty.resize / pty.close on execd's PTY API (docs/PTY.md).

execd side (components/execd: pty_controller.go, pty_ws.go, model/pty_ws.go): ``POST /pty`` ->
201 ``{"session_id"}``; ``GET /pty/{id}/ws`` upgrades; the server sends a JSON ``connected`` text
frame, then binary output frames (first byte 0x01 stdout, 0x02 stderr, 0x03 replay with an 8-byte
big-endian offset), and at the end a JSON ``{"type":"exit","exit_code":N}`` frame followed by close
1000. Input is a binary frame 0x00 + bytes; resize is ``{"type":"resize","cols":C,"rows":R}``.
``DELETE /pty/{id}`` kills the shell. A fresh shell is 80x24. All of it goes through the plugin's
OpenSandbox client (osb/execd.py: retries, endpoint refresh, scrubbed error bodies, its errors).

EPP side (epp-host-reference §3.4): ``pty.open{sandbox_id, cols, rows}`` -> ``{"process_id"}``;
notifications ``pty.output{process_id, data_b64}`` and exactly one ``pty.exit{process_id,
exit_code}``. The host keeps one plugin process per ``Sandbox`` object, so the process that
opened a terminal serves it: terminals live in this process's memory, and ``pty.write`` for an id
this process does not hold is a clear -32002.

A terminal never outlives its sandbox: ``close_sandbox()`` (sandbox.kill) and ``close_all()``
(shutdown) end them; when execd goes away the socket ends, the session status is probed, and
``pty.exit`` follows. A dropped socket whose shell is still running is re-attached with
``?since=<offset>&takeover=1`` so no output is lost or repeated.
"""

from __future__ import annotations

import base64
import json
import threading
import time
import urllib.parse
from typing import TYPE_CHECKING, Any, Callable, Mapping

from context import Context
from epp import Request
from errors import EppError, unsupported
from failures import map_osb_error
from osb import OP_BINARY, HttpError, NetError, WebSocketClient
from params import b64_param

if TYPE_CHECKING:
    from osb import Execd, OpenSandbox

BIN_STDIN, BIN_STDOUT, BIN_STDERR, BIN_REPLAY = 0x00, 0x01, 0x02, 0x03  # model/pty_ws.go
EXECD_INITIAL_SIZE = (80, 24)  # pty_session.go StartPTY: pty.StartWithSize(80x24)
OUTPUT_CHUNK = 192 * 1024  # raw bytes per pty.output (256 KiB of base64, far below 8 MiB lines)
Notify = Callable[[str, dict[str, Any]], None]


def _error(exc: Exception, what: str, *, no_pty_api: bool = False) -> EppError:
    """A client failure as an EPP error whose message says which terminal step failed."""
    if isinstance(exc, EppError):
        return exc
    if isinstance(exc, HttpError) and (exc.status == 501 or (no_pty_api and exc.status in (404, 405) and not exc.code)):
        # An execd without the PTY API answers Gin's plain "404 page not found" (router.go has no
        # /pty route then); 501 NOT_SUPPORTED is execd's answer on platforms without PTYs.
        return unsupported(
            "pty",
            f"{what}: this sandbox's execd has no PTY API (HTTP {exc.status}: "
            f"{exc.message}); terminals need an execd build that serves /pty",
        )
    err = map_osb_error(exc, op="pty")
    err.message = f"{what}: {err.message}"
    return err


def _json_frame(data: bytes) -> dict[str, Any] | None:
    """A text frame's JSON object; None for anything else (ignored: forward compatible)."""
    try:
        frame = json.loads(data.decode("utf-8"))
    except ValueError:
        return None
    return frame if isinstance(frame, dict) else None


def _path(session_id: str, tail: str = "") -> str:
    return f"/pty/{urllib.parse.quote(session_id, safe='')}{tail}"


class _Terminal:
    def __init__(
        self, manager: PtyManager, process_id: str, sandbox_id: str, session_id: str, execd: Execd, ws: WebSocketClient
    ) -> None:
        self.manager = manager
        self.process_id = process_id
        self.sandbox_id = sandbox_id
        self.session_id = session_id
        self.execd = execd  # the sandbox's osb.Execd
        self.ws = ws
        self.offset = 0  # output bytes received so far (= execd's replay offset)
        self.exit_code: int | None = None
        self.closing = False  # we ended it (pty.close, sandbox kill, shutdown)
        self.finished = False  # pty.exit sent
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    # -- output ---------------------------------------------------------------------------------
    def emit(self, data: bytes) -> None:
        for i in range(0, len(data), OUTPUT_CHUNK):
            self.manager._notify(
                "pty.output",
                {
                    "process_id": self.process_id,
                    "data_b64": base64.b64encode(data[i : i + OUTPUT_CHUNK]).decode("ascii"),
                },
            )

    def handle_binary(self, data: bytes) -> None:
        if not data:
            return
        kind = data[0]
        if kind in (BIN_STDOUT, BIN_STDERR):
            payload = data[1:]
            self.offset += len(payload)
        elif kind == BIN_REPLAY and len(data) >= 9:
            start = int.from_bytes(data[1:9], "big")
            payload = data[9:]
            end = start + len(payload)
            if end <= self.offset:
                return  # all of it was delivered before
            if start < self.offset:
                payload = payload[self.offset - start :]
            self.offset = end
        else:
            return  # unknown channel byte: ignore (forward compatible)
        if payload:
            self.emit(payload)

    def handle_text(self, data: bytes) -> None:
        frame = _json_frame(data)
        if frame is None:
            return
        ftype = frame.get("type")
        if ftype == "exit":
            code = frame.get("exit_code")
            self.exit_code = code if isinstance(code, int) and not isinstance(code, bool) else -1
        elif ftype == "error":
            self.manager._log(
                f"terminal {self.process_id}: execd error frame {frame.get('code')}: {str(frame.get('error'))[:200]}"
            )

    # -- reader thread --------------------------------------------------------------------------
    def run(self) -> None:
        try:
            while True:
                self._pump(self.ws)
                if self.exit_code is not None or self.closing:
                    break
                ws = self.manager._reattach(self)
                if ws is None:
                    break
                self.ws = ws
        except Exception as exc:  # noqa: BLE001 - a reader must always end with pty.exit
            self.manager._log(f"terminal {self.process_id}: reader failed: {exc.__class__.__name__}: {exc}")
        finally:
            try:
                self.ws.shutdown()
            except Exception:  # noqa: BLE001 - closing a dead socket; pty.exit follows regardless
                pass
            self.finish()

    def _pump(self, ws: WebSocketClient) -> None:
        if self.manager.idle_timeout:
            ws.settimeout(self.manager.idle_timeout)  # execd pings every 30 s; silence = gone
        while True:
            try:
                op, data = ws.recv()
            except NetError:  # the end, or silence (every WebSocket error is a NetError)
                return
            if op == OP_BINARY:
                self.handle_binary(data)
            else:
                self.handle_text(data)

    def finish(self) -> None:
        with self.lock:
            if self.finished:
                return
            self.finished = True
        code = self.exit_code if self.exit_code is not None else -1
        self.manager._notify("pty.exit", {"process_id": self.process_id, "exit_code": code})
        self.manager._forget(self)


class PtyManager:
    """Terminals of this plugin process."""

    def __init__(
        self,
        client: OpenSandbox,
        notify: Notify,
        *,
        connect_timeout: float = 30.0,
        idle_timeout: float | None = 90.0,
        probe_timeout: float = 10.0,
        give_up_after: float = 600.0,
        log: Callable[[str], None] | None = None,
    ) -> None:
        self.client = client  # the process's osb.OpenSandbox
        self.notify = notify
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self.probe_timeout = probe_timeout
        self.give_up_after = give_up_after
        self.log = log
        self._lock = threading.Lock()
        self._terminals: dict[str, _Terminal] = {}
        self._ended: dict[str, str] = {}  # process_id -> why it is gone (for a clear error)

    # -- plumbing -------------------------------------------------------------------------------
    def _notify(self, method: str, params: dict[str, Any]) -> None:
        try:
            self.notify(method, params)
        except Exception:  # noqa: BLE001 - stdout gone; nothing else to do
            pass

    def _log(self, message: str) -> None:
        if self.log is not None:
            try:
                self.log(message)
            except Exception:  # noqa: BLE001 - logging must never end a terminal
                pass

    def _forget(self, term: _Terminal) -> None:
        with self._lock:
            if self._terminals.get(term.process_id) is term:
                del self._terminals[term.process_id]
            self._ended[term.process_id] = "has exited"
            if len(self._ended) > 1024:
                for k in list(self._ended)[:512]:
                    del self._ended[k]

    def _get(self, params: Mapping[str, Any]) -> _Terminal:
        pid = params.get("process_id")
        if pid is None or isinstance(pid, (dict, list, bool)):
            raise EppError(-32602, "process_id is required")
        pid = str(pid)
        with self._lock:
            term = self._terminals.get(pid)
            ended = self._ended.get(pid)
        if term is None:
            if ended:
                raise EppError(-32002, f"terminal {pid} {ended}")
            raise EppError(
                -32002,
                f"terminal {pid} is not open in this plugin process: a terminal is "
                "served only by the process that opened it (it may have been closed, or the "
                "process restarted)",
            )
        sid = params.get("sandbox_id")
        if sid not in (None, "") and str(sid) != term.sandbox_id:
            raise EppError(-32002, f"terminal {pid} does not belong to sandbox {sid}")
        return term

    @staticmethod
    def _size(params: Mapping[str, Any], name: str, default: int) -> int:
        v = params.get(name, default)
        if v is None:
            return default
        if isinstance(v, bool):
            raise EppError(-32602, f"{name} must be an integer between 1 and 65535")
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v.strip())
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if not isinstance(v, int) or not 1 <= v <= 65535:
            raise EppError(-32602, f"{name} must be an integer between 1 and 65535, got {v!r}")
        return v

    # -- execd calls ----------------------------------------------------------------------------
    def _create_session(self, sandbox_id: str) -> tuple[str, Execd]:
        """POST /pty -> (session id, the sandbox's Execd)."""
        try:
            execd = self.client.execd(sandbox_id)
            return execd.pty_create(), execd
        except Exception as exc:  # noqa: BLE001 - every client failure becomes a typed EPP error
            raise _error(exc, "pty.open: POST /pty", no_pty_api=True) from None

    @staticmethod
    def _delete_session(execd: Execd, session_id: str, timeout: float | None = None) -> None:
        try:
            execd.pty_delete(session_id, timeout)
        except (HttpError, NetError):
            pass  # gone already, or execd is: either way the shell is over

    def _status(self, term: _Terminal) -> dict[str, Any] | None:
        """The session's status; None when execd says it is gone. NetError when execd is silent
        (timeout) or unreachable."""
        try:
            return term.execd.pty_status(term.session_id, self.probe_timeout)
        except HttpError:
            return None

    def _connect(self, execd: Execd, session_id: str, query: str = "") -> tuple[WebSocketClient, list[bytes]]:
        """Open the socket and read up to the ``connected`` frame; returns binary frames that came
        first (a replay frame precedes ``connected``, pty_ws.go step 8)."""
        what = "pty.open"
        try:
            ws = execd.websocket(
                _path(session_id, "/ws"), query, timeout=self.connect_timeout, what="terminal WebSocket"
            )
        except Exception as exc:  # noqa: BLE001 - every client failure becomes a typed EPP error
            raise _error(exc, f"{what}: WebSocket upgrade") from None
        early: list[bytes] = []
        try:
            ws.settimeout(self.connect_timeout)
            while True:
                op, data = ws.recv()
                if op == OP_BINARY:
                    early.append(data)
                    continue
                frame = _json_frame(data)
                if frame is None:
                    continue
                if frame.get("type") == "connected":
                    break
                if frame.get("type") == "error":
                    raise EppError(
                        -32000,
                        f"{what}: execd could not start the terminal: "
                        f"{frame.get('code')}: {str(frame.get('error'))[:300]}",
                    )
            ws.settimeout(None)
        except EppError:
            ws.shutdown()
            raise
        except NetError as exc:
            ws.shutdown()
            raise EppError(-32000, f"{what}: the terminal socket closed before it was ready ({exc})") from None
        return ws, early

    def _reattach(self, term: _Terminal) -> WebSocketClient | None:
        """The socket ended without an exit frame. Re-attach while the shell still runs; give up
        (-> pty.exit) when the session or the sandbox is gone."""
        deadline = time.monotonic() + self.give_up_after
        delay = 0.2
        while not term.closing and time.monotonic() < deadline:
            try:
                obj = self._status(term)
            except NetError as exc:
                if exc.kind != "timeout":
                    return None  # execd is gone: the sandbox was killed
                # a paused sandbox answers nothing until resumed: keep asking (bounded)
                time.sleep(min(delay, 5.0))
                delay *= 2
                continue
            if not obj or not obj.get("running"):
                return None  # session deleted, or the shell ended while we were away
            try:
                ws, early = self._connect(term.execd, term.session_id, f"since={term.offset}&takeover=1")
            except EppError as exc:
                self._log(f"terminal {term.process_id}: re-attach failed: {exc.message}")
                time.sleep(min(delay, 5.0))
                delay *= 2
                continue
            if term.closing:
                ws.shutdown()
                return None
            for data in early:
                term.handle_binary(data)
            self._log(f"terminal {term.process_id}: re-attached at offset {term.offset}")
            return ws
        return None

    # -- EPP methods ----------------------------------------------------------------------------
    def open(self, params: Mapping[str, Any]) -> dict[str, Any]:
        sandbox_id = params.get("sandbox_id")
        if not isinstance(sandbox_id, str) or not sandbox_id:
            raise EppError(-32602, "sandbox_id is required")
        cols = self._size(params, "cols", EXECD_INITIAL_SIZE[0])
        rows = self._size(params, "rows", EXECD_INITIAL_SIZE[1])
        session_id, execd = self._create_session(sandbox_id)
        try:
            ws, early = self._connect(execd, session_id)
        except BaseException:
            self._delete_session(execd, session_id, timeout=5.0)
            raise
        term = _Terminal(self, session_id, sandbox_id, session_id, execd, ws)
        try:
            if (cols, rows) != EXECD_INITIAL_SIZE:
                ws.send_text(json.dumps({"type": "resize", "cols": cols, "rows": rows}))
        except NetError:
            pass  # the reader reports the end
        with self._lock:
            self._terminals[term.process_id] = term
            self._ended.pop(term.process_id, None)
        for data in early:
            term.handle_binary(data)
        term.thread = threading.Thread(target=term.run, name=f"pty-{session_id[:8]}", daemon=True)
        term.thread.start()
        return {"process_id": term.process_id}

    def write(self, params: Mapping[str, Any]) -> dict[str, Any]:
        term = self._get(params)
        data = b64_param(params, "data_b64", bad_code=-32602)
        if not data:
            return {}
        self._send(term, lambda ws: ws.send_binary(bytes([BIN_STDIN]) + data))
        return {}

    def _send(self, term: _Terminal, fn: Callable[[WebSocketClient], None]) -> None:
        """Send on the terminal's socket; while a dropped socket is being re-attached, wait for the
        new one (bounded) instead of failing the call."""
        deadline = time.monotonic() + self.connect_timeout
        while True:
            ws = term.ws
            try:
                fn(ws)
                return
            except NetError:
                pass
            if term.finished or term.closing or time.monotonic() > deadline:
                raise EppError(-32002, f"terminal {term.process_id} has exited or lost its connection")
            while term.ws is ws and not term.finished and not term.closing and time.monotonic() < deadline:
                time.sleep(0.02)

    def resize(self, params: Mapping[str, Any]) -> dict[str, Any]:
        term = self._get(params)
        cols = self._size(params, "cols", EXECD_INITIAL_SIZE[0])
        rows = self._size(params, "rows", EXECD_INITIAL_SIZE[1])
        self._send(term, lambda ws: ws.send_text(json.dumps({"type": "resize", "cols": cols, "rows": rows})))
        return {}

    def close(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """Kill the shell (DELETE /pty/{id}); idempotent. The host ignores the answer."""
        try:
            term = self._get(params)
        except EppError as exc:
            if exc.code == -32002:
                return {}
            raise
        self._end(term, delete=True)
        return {}

    def _end(self, term: _Terminal, *, delete: bool, timeout: float | None = None) -> None:
        term.closing = True
        if delete:
            self._delete_session(term.execd, term.session_id, timeout)
            # execd answers the kill with an exit frame and a close; give the reader a moment
            if term.thread is not None and term.thread is not threading.current_thread():
                term.thread.join(timeout=2.0)
        term.ws.shutdown()
        if term.thread is not None and term.thread is not threading.current_thread():
            term.thread.join(timeout=2.0)
        term.finish()

    def close_sandbox(self, sandbox_id: str, *, delete: bool = False) -> None:
        """End every terminal of a sandbox (call before/after sandbox.kill). With ``delete`` the
        shells are also killed through execd (not needed when the sandbox is being deleted)."""
        with self._lock:
            terms = [t for t in self._terminals.values() if t.sandbox_id == sandbox_id]
        for t in terms:
            self._end(t, delete=delete, timeout=5.0)

    def close_all(self, timeout: float = 1.5) -> None:
        """Plugin shutdown: kill every remote shell this process opened (in parallel, bounded by
        ``timeout`` so the host's 2 s shutdown budget holds), then drop the sockets."""
        with self._lock:
            terms = list(self._terminals.values())
        for t in terms:
            t.closing = True
        threads = [
            threading.Thread(target=self._delete_session, args=(t.execd, t.session_id, timeout), daemon=True)
            for t in terms
        ]
        for th in threads:
            th.start()
        deadline = time.monotonic() + timeout
        for th in threads:
            th.join(timeout=max(0.0, deadline - time.monotonic()))
        for t in terms:
            t.ws.shutdown()
        for t in terms:
            if t.thread is not None:
                t.thread.join(timeout=max(0.05, deadline - time.monotonic()))
            t.finish()

    def open_terminals(self) -> list[str]:
        with self._lock:
            return list(self._terminals)


# ------------------------------------------------------------------------------------------------
# the methods: one PtyManager per plugin process, held by the context (ctx.terminals)


def manager(ctx: Context, *, create: bool = False) -> PtyManager | None:
    """This process's PtyManager; created on the first pty.open (``create``), None before."""
    client = ctx.client() if create else None
    with ctx.lock:
        if ctx.terminals is None and client is not None:
            ctx.terminals = PtyManager(client, ctx.notify, log=ctx.log)
        held = ctx.terminals
    return held if isinstance(held, PtyManager) else None


def _held(ctx: Context) -> PtyManager:
    m = manager(ctx)
    if m is None:
        raise EppError(-32002, "no terminal has been opened in this plugin process")
    return m


def m_pty_open(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    m = manager(ctx, create=True)
    assert m is not None
    return m.open(p)


def m_pty_write(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    return _held(ctx).write(p)


def m_pty_resize(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    return _held(ctx).resize(p)


def m_pty_close(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    m = manager(ctx)
    return {} if m is None else m.close(p)
