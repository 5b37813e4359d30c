"""EPP terminals (``pty.open`` / ``pty.write`` / ``pty.resize`` / ``pty.close``) on execd's PTY API.

Standard library only, Python >= 3.10. docs/PTY.md describes execd's protocol and the mapping.

execd side (components/execd: pty_controller.go, pty_ws.go, model/pty_ws.go): ``POST /pty`` ->
201 ``{"session_id"}``; ``GET /pty/{id}/ws`` upgrades; the server sends a JSON ``connected`` text
frame, then binary output frames (first byte 0x01 stdout, 0x02 stderr, 0x03 replay with an 8-byte
big-endian offset), and at the end a JSON ``{"type":"exit","exit_code":N}`` frame followed by close
1000. Input is a binary frame 0x00 + bytes; resize is ``{"type":"resize","cols":C,"rows":R}``.
``DELETE /pty/{id}`` kills the shell. A fresh shell is 80x24.

EPP side (epp-host-reference §3.4): ``pty.open{sandbox_id, cols, rows}`` -> ``{"process_id"}``;
notifications ``pty.output{process_id, data_b64}`` and exactly one ``pty.exit{process_id,
exit_code}``. The host keeps one plugin process per ``Sandbox`` object, so the process that
opened a terminal serves it: terminals live in this process's memory, and ``pty.write`` for an id
this process does not hold is a clear -32002.

A terminal never outlives its sandbox: ``close_sandbox()`` (call it from sandbox.kill) and
``close_all()`` (call it at shutdown) end them; when execd goes away the socket ends, the session
status is probed, and ``pty.exit`` follows. A dropped socket whose shell is still running is
re-attached with ``?since=<offset>&takeover=1`` so no output is lost or repeated.

Wiring: ``PtyManager(target, notify)`` where ``target(sandbox_id, refresh=False)`` returns
``(execd_base_url, headers)`` (Endpoint.headers + X-EXECD-ACCESS-TOKEN), or the module functions
``pty_open(client_ctx, params, notify)`` etc., where ``client_ctx`` is such a callable or an object
with ``execd(sandbox_id, refresh=...)`` returning something with ``.base`` and ``.headers()``
(plugin/_osb_http.py's ``OpenSandbox``). Errors are raised as ``PtyError`` (``.rpc_error()`` is the
EPP error object).
"""
from __future__ import annotations

import base64
import binascii
import http.client
import inspect
import json
import socket
import threading
import time
import urllib.parse
from typing import Any, Callable, Mapping

try:  # plugin run as a script (provider.py next to this file) or imported as a package
    from . import _ws  # type: ignore[no-redef]
except ImportError:  # pragma: no cover - depends on how the plugin is started
    import _ws  # type: ignore[no-redef]

__all__ = ["PtyError", "PtyManager", "pty_open", "pty_write", "pty_resize", "pty_close",
           "close_sandbox", "close_all", "manager"]

BIN_STDIN, BIN_STDOUT, BIN_STDERR, BIN_REPLAY = 0x00, 0x01, 0x02, 0x03  # model/pty_ws.go
EXECD_INITIAL_SIZE = (80, 24)  # pty_session.go StartPTY: pty.StartWithSize(80x24)
OUTPUT_CHUNK = 192 * 1024      # raw bytes per pty.output (256 KiB of base64, far below 8 MiB lines)
MAX_ERROR_BODY = 16 * 1024

Target = Callable[..., "tuple[str, Mapping[str, str]]"]
Notify = Callable[[str, dict], None]


def _accepts_refresh(fn: Any) -> bool:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "refresh" in params or any(p.kind == p.VAR_KEYWORD for p in params.values())


class PtyError(Exception):
    """An EPP error: ``code`` (-32000...), ``message``, optional ``data``."""

    def __init__(self, code: int, message: str, data: dict | None = None):
        super().__init__(message)
        self.code = code
        self.message = message
        self.data = data or {}

    def rpc_error(self) -> dict:
        err: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.data:
            err["data"] = self.data
        return err


def _feature_error(message: str) -> PtyError:
    return PtyError(-32003, message, {"details": {"feature": "pty"}, "feature": "pty"})


# ------------------------------------------------------------------------------------------------
# small HTTP helper (execd's REST part of the PTY API)


def _http(method: str, url: str, headers: Mapping[str, str], body: bytes | None,
          timeout: float) -> tuple[int, dict[str, str], bytes]:
    parts = urllib.parse.urlsplit(url)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = cls(parts.hostname or "", parts.port, timeout=timeout)
    try:
        h = {k: v for k, v in headers.items()}
        h.setdefault("Accept", "application/json")
        if body is not None:
            h["Content-Type"] = "application/json"
        conn.request(method, path, body=body, headers=h)
        resp = conn.getresponse()
        data = resp.read(MAX_ERROR_BODY if resp.status >= 400 else 1 << 20)
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data
    finally:
        conn.close()


def _error_text(body: bytes, status: int) -> tuple[str | None, str]:
    """(execd error code, message) from an ErrorResponse / {"error"} / text body."""
    text = body[:MAX_ERROR_BODY].decode("utf-8", "replace").strip()
    try:
        obj = json.loads(text) if text.startswith("{") else None
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        code = obj.get("code") if isinstance(obj.get("code"), str) else None
        for key in ("message", "error", "detail"):
            if isinstance(obj.get(key), str) and obj[key]:
                return code, obj[key][:400]
        return code, (code or f"HTTP {status}")
    clean = "".join(c if c.isprintable() else " " for c in text)[:400]
    return None, clean or f"HTTP {status}"


def _net_error(what: str, exc: BaseException) -> PtyError:
    kind = "timed out" if isinstance(exc, (socket.timeout, TimeoutError)) else "failed"
    return PtyError(-32000, f"{what}: connection to execd {kind} ({exc.__class__.__name__}: {exc})",
                    {"sdk_code": "E5001"})


def _http_error(what: str, status: int, body: bytes, *, not_found_means_no_pty: bool = False) -> PtyError:
    code, msg = _error_text(body, status)
    if status == 401:
        return PtyError(-32001, f"{what}: execd rejected the request (401): {msg}")
    if status == 501 or (not_found_means_no_pty and status in (404, 405) and code is None):
        # An execd without the PTY API answers Gin's plain "404 page not found" (router.go has
        # no /pty route then); 501 NOT_SUPPORTED is execd's answer on platforms without PTYs.
        return _feature_error(f"{what}: this sandbox's execd has no PTY API (HTTP {status}: {msg}); "
                              "terminals need an execd build that serves /pty")
    if status == 404:
        return PtyError(-32002, f"{what}: {msg}")
    return PtyError(-32000, f"{what}: execd answered HTTP {status}: {msg}")


# ------------------------------------------------------------------------------------------------


class _Terminal:
    def __init__(self, manager: "PtyManager", process_id: str, sandbox_id: str, session_id: str,
                 base: str, headers: Mapping[str, str], ws: "_ws.WebSocketClient"):
        self.manager = manager
        self.process_id = process_id
        self.sandbox_id = sandbox_id
        self.session_id = session_id
        self.base = base
        self.headers = dict(headers)
        self.ws = ws
        self.offset = 0            # output bytes received so far (= execd's replay offset)
        self.exit_code: int | None = None
        self.closing = False       # we ended it (pty.close, sandbox kill, shutdown)
        self.finished = False      # pty.exit sent
        self.lock = threading.Lock()
        self.thread: threading.Thread | None = None

    # -- output ---------------------------------------------------------------------------------
    def emit(self, data: bytes) -> None:
        for i in range(0, len(data), OUTPUT_CHUNK):
            self.manager._notify("pty.output", {"process_id": self.process_id,
                                                "data_b64": base64.b64encode(data[i:i + OUTPUT_CHUNK]).decode("ascii")})

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
                payload = payload[self.offset - start:]
            self.offset = end
        else:
            return  # unknown channel byte: ignore (forward compatible)
        if payload:
            self.emit(payload)

    def handle_text(self, data: bytes) -> None:
        try:
            frame = json.loads(data.decode("utf-8"))
        except ValueError:
            return
        if not isinstance(frame, dict):
            return
        ftype = frame.get("type")
        if ftype == "exit":
            code = frame.get("exit_code")
            self.exit_code = code if isinstance(code, int) and not isinstance(code, bool) else -1
        elif ftype == "error":
            self.manager._log(f"terminal {self.process_id}: execd error frame "
                              f"{frame.get('code')}: {str(frame.get('error'))[:200]}")

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
            except Exception:  # noqa: BLE001
                pass
            self.finish()

    def _pump(self, ws: "_ws.WebSocketClient") -> None:
        if self.manager.idle_timeout:
            ws.settimeout(self.manager.idle_timeout)  # execd pings every 30 s; silence = gone
        while True:
            try:
                op, data = ws.recv()
            except (_ws.ConnectionClosed, OSError):
                return
            if op == _ws.OP_BINARY:
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

    def __init__(self, target: Target | Any, notify: Notify, *, http_timeout: float = 30.0,
                 connect_timeout: float = 30.0, idle_timeout: float | None = 90.0,
                 probe_timeout: float = 10.0, give_up_after: float = 600.0,
                 log: Callable[[str], None] | None = None):
        self.target = target
        self.notify = notify
        self.http_timeout = http_timeout
        self.connect_timeout = connect_timeout
        self.idle_timeout = idle_timeout
        self.probe_timeout = probe_timeout
        self.give_up_after = give_up_after
        self.log = log
        self._lock = threading.Lock()
        self._terminals: dict[str, _Terminal] = {}
        self._ended: dict[str, str] = {}  # process_id -> why it is gone (for a clear error)

    # -- plumbing -------------------------------------------------------------------------------
    def _notify(self, method: str, params: dict) -> None:
        try:
            self.notify(method, params)
        except Exception:  # noqa: BLE001 - stdout gone; nothing else to do
            pass

    def _log(self, message: str) -> None:
        if self.log is not None:
            try:
                self.log(message)
            except Exception:  # noqa: BLE001
                pass

    def _resolve(self, sandbox_id: str, refresh: bool = False) -> tuple[str, dict[str, str]]:
        t = self.target
        if callable(getattr(t, "execd", None)):  # plugin/_osb_http.py OpenSandbox
            ex = t.execd(sandbox_id, refresh=True) if refresh else t.execd(sandbox_id)
            base, headers = ex.base, ex.headers()
        elif refresh and _accepts_refresh(t):
            base, headers = t(sandbox_id, refresh=True)
        else:
            base, headers = t(sandbox_id)
        return str(base).rstrip("/"), {str(k): str(v) for k, v in dict(headers or {}).items()}

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
            raise PtyError(-32602, "process_id is required")
        pid = str(pid)
        with self._lock:
            term = self._terminals.get(pid)
            ended = self._ended.get(pid)
        if term is None:
            if ended:
                raise PtyError(-32002, f"terminal {pid} {ended}")
            raise PtyError(-32002, f"terminal {pid} is not open in this plugin process: a terminal is "
                           "served only by the process that opened it (it may have been closed, or the "
                           "process restarted)")
        sid = params.get("sandbox_id")
        if sid not in (None, "") and str(sid) != term.sandbox_id:
            raise PtyError(-32002, f"terminal {pid} does not belong to sandbox {sid}")
        return term

    @staticmethod
    def _size(params: Mapping[str, Any], name: str, default: int) -> int:
        v = params.get(name, default)
        if v is None:
            return default
        if isinstance(v, bool):
            raise PtyError(-32602, f"{name} must be an integer between 1 and 65535")
        if isinstance(v, str) and v.strip().isdigit():
            v = int(v.strip())
        if isinstance(v, float) and v.is_integer():
            v = int(v)
        if not isinstance(v, int) or not 1 <= v <= 65535:
            raise PtyError(-32602, f"{name} must be an integer between 1 and 65535, got {v!r}")
        return v

    # -- execd calls ----------------------------------------------------------------------------
    def _create_session(self, sandbox_id: str) -> tuple[str, str, dict[str, str]]:
        what = "pty.open"
        base, headers = self._resolve(sandbox_id)
        for attempt in (0, 1):
            try:
                status, _h, body = _http("POST", base + "/pty", headers, b"{}", self.http_timeout)
                break
            except (ConnectionRefusedError, socket.gaierror) as exc:
                if attempt == 0:  # a cached endpoint may be stale: resolve again once
                    fresh = self._resolve(sandbox_id, refresh=True)
                    if fresh != (base, headers):
                        base, headers = fresh
                        continue
                raise _net_error(what, exc) from None
            except (OSError, http.client.HTTPException) as exc:
                raise _net_error(what, exc) from None
        if status not in (200, 201):
            raise _http_error(f"{what}: POST /pty", status, body, not_found_means_no_pty=True)
        try:
            sid = json.loads(body.decode("utf-8")).get("session_id")
        except (ValueError, AttributeError):
            sid = None
        if not isinstance(sid, str) or not sid:
            raise PtyError(-32000, f"{what}: execd answered POST /pty without a session_id")
        return sid, base, headers

    def _delete_session(self, base: str, headers: Mapping[str, str], session_id: str,
                        timeout: float | None = None) -> None:
        try:
            _http("DELETE", f"{base}/pty/{urllib.parse.quote(session_id, safe='')}", headers, None,
                  timeout or self.http_timeout)
        except (OSError, http.client.HTTPException):
            pass

    def _status(self, term: _Terminal) -> tuple[int, dict | None]:
        status, _h, body = _http("GET", f"{term.base}/pty/{urllib.parse.quote(term.session_id, safe='')}",
                                 term.headers, None, self.probe_timeout)
        try:
            obj = json.loads(body.decode("utf-8")) if status == 200 else None
        except ValueError:
            obj = None
        return status, obj if isinstance(obj, dict) else None

    def _connect(self, base: str, headers: Mapping[str, str], session_id: str,
                 query: str = "") -> tuple["_ws.WebSocketClient", list[bytes]]:
        """Open the socket and read up to the ``connected`` frame; returns binary frames that came
        first (a replay frame precedes ``connected``, pty_ws.go step 8)."""
        url = f"{base}/pty/{urllib.parse.quote(session_id, safe='')}/ws" + (f"?{query}" if query else "")
        what = "pty.open"
        try:
            ws = _ws.connect(url, headers, timeout=self.connect_timeout)
        except _ws.HandshakeError as exc:
            if exc.status:
                raise _http_error(f"{what}: WebSocket upgrade", exc.status, exc.body) from None
            raise PtyError(-32000, f"{what}: WebSocket upgrade failed: {exc}") from None
        except (OSError, ValueError) as exc:
            raise _net_error(what, exc) from None
        early: list[bytes] = []
        try:
            ws.settimeout(self.connect_timeout)
            while True:
                op, data = ws.recv()
                if op == _ws.OP_BINARY:
                    early.append(data)
                    continue
                try:
                    frame = json.loads(data.decode("utf-8"))
                except ValueError:
                    continue
                if not isinstance(frame, dict):
                    continue
                if frame.get("type") == "connected":
                    break
                if frame.get("type") == "error":
                    raise PtyError(-32000, f"{what}: execd could not start the terminal: "
                                   f"{frame.get('code')}: {str(frame.get('error'))[:300]}")
            ws.settimeout(None)
        except PtyError:
            ws.shutdown()
            raise
        except (_ws.WebSocketError, OSError) as exc:
            ws.shutdown()
            raise PtyError(-32000, f"{what}: the terminal socket closed before it was ready ({exc})") from None
        return ws, early

    def _reattach(self, term: _Terminal) -> "_ws.WebSocketClient | None":
        """The socket ended without an exit frame. Re-attach while the shell still runs; give up
        (-> pty.exit) when the session or the sandbox is gone."""
        deadline = time.monotonic() + self.give_up_after
        delay = 0.2
        while not term.closing and time.monotonic() < deadline:
            try:
                status, obj = self._status(term)
            except (socket.timeout, TimeoutError):
                # a paused sandbox answers nothing until resumed: keep asking (bounded)
                time.sleep(min(delay, 5.0))
                delay *= 2
                continue
            except (OSError, http.client.HTTPException):
                return None  # execd is gone: the sandbox was killed
            if status != 200 or not obj or not obj.get("running"):
                return None  # session deleted, or the shell ended while we were away
            try:
                ws, early = self._connect(term.base, term.headers, term.session_id,
                                          f"since={term.offset}&takeover=1")
            except PtyError as exc:
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
    def open(self, params: Mapping[str, Any]) -> dict:
        sandbox_id = params.get("sandbox_id")
        if not isinstance(sandbox_id, str) or not sandbox_id:
            raise PtyError(-32602, "sandbox_id is required")
        cols = self._size(params, "cols", EXECD_INITIAL_SIZE[0])
        rows = self._size(params, "rows", EXECD_INITIAL_SIZE[1])
        session_id, base, headers = self._create_session(sandbox_id)
        try:
            ws, early = self._connect(base, headers, session_id)
        except BaseException:
            self._delete_session(base, headers, session_id, timeout=5.0)
            raise
        term = _Terminal(self, session_id, sandbox_id, session_id, base, headers, ws)
        try:
            if (cols, rows) != EXECD_INITIAL_SIZE:
                ws.send_text(json.dumps({"type": "resize", "cols": cols, "rows": rows}))
        except _ws.WebSocketError:
            pass  # the reader reports the end
        with self._lock:
            self._terminals[term.process_id] = term
            self._ended.pop(term.process_id, None)
        for data in early:
            term.handle_binary(data)
        term.thread = threading.Thread(target=term.run, name=f"pty-{session_id[:8]}", daemon=True)
        term.thread.start()
        return {"process_id": term.process_id}

    def write(self, params: Mapping[str, Any]) -> dict:
        term = self._get(params)
        raw = params.get("data_b64", "")
        if not isinstance(raw, str):
            raise PtyError(-32602, "data_b64 must be a base64 string")
        try:
            data = base64.b64decode(raw, validate=True)
        except (binascii.Error, ValueError):
            raise PtyError(-32602, "data_b64 is not valid base64") from None
        if not data:
            return {}
        self._send(term, lambda ws: ws.send_binary(bytes([BIN_STDIN]) + data))
        return {}

    def _send(self, term: _Terminal, fn: Callable[["_ws.WebSocketClient"], None]) -> None:
        """Send on the terminal's socket; while a dropped socket is being re-attached, wait for the
        new one (bounded) instead of failing the call."""
        deadline = time.monotonic() + self.connect_timeout
        while True:
            ws = term.ws
            try:
                fn(ws)
                return
            except _ws.WebSocketError:
                pass
            if term.finished or term.closing or time.monotonic() > deadline:
                raise PtyError(-32002, f"terminal {term.process_id} has exited or lost its connection")
            while term.ws is ws and not term.finished and not term.closing and time.monotonic() < deadline:
                time.sleep(0.02)

    def resize(self, params: Mapping[str, Any]) -> dict:
        term = self._get(params)
        cols = self._size(params, "cols", EXECD_INITIAL_SIZE[0])
        rows = self._size(params, "rows", EXECD_INITIAL_SIZE[1])
        self._send(term, lambda ws: ws.send_text(json.dumps({"type": "resize", "cols": cols, "rows": rows})))
        return {}

    def close(self, params: Mapping[str, Any]) -> dict:
        """Kill the shell (DELETE /pty/{id}); idempotent. The host ignores the answer."""
        try:
            term = self._get(params)
        except PtyError as exc:
            if exc.code == -32002:
                return {}
            raise
        self._end(term, delete=True)
        return {}

    def _end(self, term: _Terminal, *, delete: bool, timeout: float | None = None) -> None:
        term.closing = True
        if delete:
            self._delete_session(term.base, term.headers, term.session_id, timeout)
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
        threads = [threading.Thread(target=self._delete_session, args=(t.base, t.headers, t.session_id, timeout),
                                    daemon=True) for t in terms]
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
# module-level API: one manager per plugin process


_MANAGER: PtyManager | None = None
_MANAGER_LOCK = threading.Lock()


def manager(client_ctx: Any = None, notify: Notify | None = None,
            log: Callable[[str], None] | None = None) -> PtyManager:
    """This process's PtyManager (created on first use; ``client_ctx``/``notify``/``log`` update it)."""
    global _MANAGER
    with _MANAGER_LOCK:
        if _MANAGER is None:
            if client_ctx is None or notify is None:
                raise PtyError(-32002, "no terminal has been opened in this plugin process")
            _MANAGER = PtyManager(client_ctx, notify, log=log)
        else:
            if client_ctx is not None:
                _MANAGER.target = client_ctx
            if notify is not None:
                _MANAGER.notify = notify
            if log is not None:
                _MANAGER.log = log
        return _MANAGER


def pty_open(client_ctx: Any, params: Mapping[str, Any], notify: Notify,
             log: Callable[[str], None] | None = None) -> dict:
    return manager(client_ctx, notify, log).open(params)


def pty_write(client_ctx: Any, params: Mapping[str, Any], notify: Notify | None = None) -> dict:
    return manager(client_ctx, notify).write(params)


def pty_resize(client_ctx: Any, params: Mapping[str, Any], notify: Notify | None = None) -> dict:
    return manager(client_ctx, notify).resize(params)


def pty_close(client_ctx: Any, params: Mapping[str, Any], notify: Notify | None = None) -> dict:
    with _MANAGER_LOCK:
        m = _MANAGER
    return {} if m is None else m.close(params)


def close_sandbox(sandbox_id: str, *, delete: bool = False) -> None:
    with _MANAGER_LOCK:
        m = _MANAGER
    if m is not None:
        m.close_sandbox(sandbox_id, delete=delete)


def close_all(timeout: float = 1.5) -> None:
    with _MANAGER_LOCK:
        m = _MANAGER
    if m is not None:
        m.close_all(timeout)
