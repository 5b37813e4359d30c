"""execd's interactive PTY sessions for the mock: ``POST /pty``, ``GET /pty/{id}``,
``DELETE /pty/{id}`` and the WebSocket ``GET /pty/{id}/ws`` (standard library only, Python >= 3.10).

Behaviour follows execd's source (opensandbox-group/OpenSandbox, components/execd):

* PTY.md - usage notes: the shell starts on the first WebSocket, ``pty=0`` pipe mode, ``since=``
  replay, ``takeover=1``, one WebSocket per session (409), ``exit`` frame then close.
* pkg/web/router.go - the four routes; the access-token middleware runs before them.
* pkg/web/controller/pty_controller.go - create (201 ``{"session_id"}``), status, delete (200, empty
  body), 404 ``CONTEXT_NOT_FOUND`` "pty session <id> not found", 400 ``INVALID_REQUEST_BODY``.
* pkg/web/controller/pty_ws.go - the WebSocket flow: 404/409 before the upgrade, start the shell if
  it is not running, replay frame, ``connected`` frame, 30 s pings, 60 s read deadline, binary
  stdin (0x00 + bytes), JSON text frames stdin/signal/resize/ping, ``exit`` frame + close 1000
  "process exited", takeover closes the old holder with 4001 "TAKEN_OVER".
* pkg/web/model/pty.go, pkg/web/model/pty_ws.go - JSON field names, frame type bytes, error codes.
* pkg/runtime/pty_session.go - bash (``--noprofile --norc``) else sh, 80x24 start size, process
  group signals, SIGKILL of the group on delete, exit code -1 after a signal; replay_buffer.go -
  1 MiB ring with a monotonic byte offset.

The session model (``PtySession``, ``PtyRegistry``: the shell, its terminal, replay, signals) is in
execd/pty.py; this module is the HTTP side: request decoding, the four routes, the WebSocket loop.
"""

from __future__ import annotations

import json
import re
import struct
import threading
import uuid
from typing import Any

from mock_opensandbox.execd.errors import GoError
from mock_opensandbox.execd.files import SandboxFS
from mock_opensandbox.execd.pty import OutputPipe, PtyRegistry, PtySession
from mock_opensandbox.runtime import SandboxRuntime
from mock_opensandbox.wire import websocket as wsproto
from mock_opensandbox.wire.gojson import GIN_JSON, go_json_bytes

__all__ = ["PtyRoutes", "register_pty_routes"]

# pkg/web/model/pty_ws.go
BIN_STDIN, BIN_STDOUT, BIN_STDERR, BIN_REPLAY = 0x00, 0x01, 0x02, 0x03
WS_ERR_START_FAILED = "START_FAILED"
WS_ERR_STDIN_WRITE_FAILED = "STDIN_WRITE_FAILED"
WS_ERR_INVALID_FRAME = "INVALID_FRAME"
WS_ERR_ALREADY_CONNECTED = "ALREADY_CONNECTED"
WS_ERR_TAKEN_OVER = "TAKEN_OVER"
WS_CLOSE_TAKEN_OVER = 4001
# pkg/web/controller/pty_ws.go
WS_PING_INTERVAL = 30.0
WS_READ_DEADLINE = 60.0
WS_TAKEOVER_TIMEOUT = 5.0


# ------------------------------------------------------------------------------------------------
# HTTP side


def _send_json(req: Any, status: int, obj: Any) -> None:
    # Gin c.JSON: Go encoding/json (HTML-safe), no trailing newline, "application/json; charset=utf-8"
    req.send(status, go_json_bytes(obj), GIN_JSON)


def _send_error(req: Any, status: int, code: str, message: str) -> None:
    _send_json(req, status, {"code": code, "message": message})  # model/error.go ErrorResponse


_JSON_KIND = {str: "string", bool: "bool", int: "number", float: "number", list: "array", dict: "object"}


def _go_decode_create(body: bytes) -> tuple[dict[str, str], str | None]:
    """Decode POST /pty's body like Go's json.Decoder.Decode into CreatePTYSessionRequest:
    empty body is fine (io.EOF), only the first JSON value is read, keys match case-insensitively,
    unknown keys are ignored, null leaves a field unset. Returns (fields, error message)."""
    text = body.decode("utf-8", "replace")
    stripped = text.lstrip(" \t\r\n")
    if not stripped:
        return {}, None
    try:

        def _no_const(name: str) -> Any:
            raise ValueError(f"invalid character '{name[0]}' looking for beginning of value")

        value, _end = json.JSONDecoder(parse_constant=_no_const).raw_decode(stripped)
    except ValueError as exc:
        msg = str(exc)
        if msg.startswith("invalid character"):
            return {}, msg
        if isinstance(exc, json.JSONDecodeError) and exc.pos >= len(stripped.rstrip()):
            return {}, "unexpected EOF"
        bad = stripped[exc.pos] if isinstance(exc, json.JSONDecodeError) and exc.pos < len(stripped) else "?"
        return {}, f"invalid character {bad!r} looking for beginning of value"  # Go-style, approximate
    if value is None:
        return {}, None
    if not isinstance(value, dict):
        return {}, (
            f"json: cannot unmarshal {_JSON_KIND.get(type(value), 'value')} into Go value of type "
            "model.CreatePTYSessionRequest"
        )
    out: dict[str, str] = {}
    for field in ("operation_id", "cwd", "command"):
        hit = field if field in value else next((k for k in value if k.lower() == field), None)
        if hit is None or value[hit] is None:
            continue
        v = value[hit]
        if not isinstance(v, str):
            return {}, (
                f"json: cannot unmarshal {_JSON_KIND.get(type(v), 'value')} into Go struct field "
                f"CreatePTYSessionRequest.{field} of type string"
            )
        out[field] = v
    return out, None


def _parse_since(raw: str | None) -> int:
    # pty_ws.go queryInt64: fmt.Sscanf("%d"), default 0 on error
    if not raw:
        return 0
    m = re.match(r"\s*([+-]?\d+)", raw)
    if not m:
        return 0
    n = int(m.group(1))
    return n if -(1 << 63) <= n < (1 << 63) else 0


def _is_ws_upgrade(headers: Any) -> bool:
    conn = [t.strip().lower() for t in (headers.get("Connection") or "").split(",")]
    upg = [t.strip().lower() for t in (headers.get("Upgrade") or "").split(",")]
    return "upgrade" in conn and "websocket" in upg


def _go_field(frame: dict[str, Any], name: str) -> Any:
    if name in frame:
        return frame[name]
    for k in frame:
        if k.lower() == name:
            return frame[k]
    return None


def _parse_client_frame(data: bytes) -> dict[str, Any] | None:
    """json.Unmarshal into model.ClientFrame; None when Go would fail (the frame is then ignored)."""
    try:
        obj = json.loads(data.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return None
    if obj is None:
        obj = {}
    if not isinstance(obj, dict):
        return None
    out: dict[str, Any] = {}
    for name in ("type", "data", "signal"):
        v = _go_field(obj, name)
        if v is not None and not isinstance(v, str):
            return None
        out[name] = v or ""
    for name in ("cols", "rows"):
        v = _go_field(obj, name)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or not -(1 << 63) <= v < (1 << 63)):
            return None
        out[name] = v or 0
    return out


class PtyRoutes:
    """The HTTP side of execd's PTY routes (pty_controller.go): handlers take an httpcore.Request
    whose ``params`` the dispatcher filled in; ``registry`` holds the sessions (``close_all()`` when
    the sandbox ends). ``mode``: "v1.1.0" status answers carry session_id/running/output_offset only
    (model/pty.go at 3bb6fad, tiers/diff pty.lifecycle); "latest" adds launch_attempted/launch_failed."""

    def __init__(self, runtime: SandboxRuntime, mode: str = "v1.1.0", registry: PtyRegistry | None = None):
        self.runtime = runtime
        self.mode = mode
        self.registry = registry if registry is not None else PtyRegistry(runtime)

    def create(self, req: Any) -> None:
        fields, err = _go_decode_create(req.body)
        if err is not None:
            _send_error(req, 400, "INVALID_REQUEST_BODY", f"error parsing request: {err}")
            return
        cwd = fields.get("cwd", "")
        fs = SandboxFS(self.runtime)
        try:
            if cwd:
                try:
                    cwd = fs.expand(cwd)  # pty_session.go: pathutil.ExpandPath, then MkdirAll
                except GoError as e:
                    raise GoError("error resolving PTY session work directory: " + e.text) from None
                cwd = cwd if cwd.startswith("/") else "/" + cwd
                try:
                    # by fds on the sandbox's "/" (openat2 RESOLVE_IN_ROOT): a symlink swapped in
                    # meanwhile by code inside never makes the walk leave the sandbox
                    fs.mkdir_all(cwd)
                except GoError as e:
                    raise GoError("error creating PTY session work directory: " + e.text) from None
            s = self.registry.create(cwd, fields.get("command", ""))
        except (GoError, OSError, ValueError, RuntimeError) as exc:
            why = exc.strerror.lower() if isinstance(exc, OSError) and exc.strerror else str(exc)
            # CreatePTYSession (pty_controller.go) has no return after RespondError: Gin writes the
            # error, then the 201's JSON after it (status 500 kept); the session is not stored
            head = go_json_bytes({"code": "RUNTIME_ERROR", "message": f"error creating pty session: {why}"})
            req.send(500, head + go_json_bytes({"session_id": str(uuid.uuid4())}), GIN_JSON)
            return
        _send_json(req, 201, {"session_id": s.id})

    def status(self, req: Any) -> None:
        sid = req.params.get("sessionId", "")
        s = self.registry.get(sid)
        if s is None:
            _send_error(req, 404, "CONTEXT_NOT_FOUND", f"pty session {sid} not found")
            return
        st = s.status()
        if self.mode != "latest":
            st = {k: st[k] for k in ("session_id", "running", "output_offset")}
        _send_json(req, 200, st)

    def delete(self, req: Any) -> None:
        sid = req.params.get("sessionId", "")
        if not self.registry.delete(sid):
            _send_error(req, 404, "CONTEXT_NOT_FOUND", f"pty session {sid} not found")
            return
        req.send(200, b"")  # RespondSuccess(nil): c.Status(200), empty body

    def websocket(self, req: Any) -> None:
        _serve_ws(req, self.registry)

    def close_all(self) -> None:
        self.registry.close_all()


def register_pty_routes(router: Any, execd_server: Any, *, prefixes: tuple[str, ...] = ("",)) -> PtyRegistry:
    """Add execd's PTY routes to an httpcore.Router (for callers outside ExecdServer, whose own route
    table lists them). Returns the session registry."""
    routes = PtyRoutes(execd_server.runtime, getattr(execd_server, "mode", "v1.1.0"))
    for p in prefixes:
        router.add("POST", p + "/pty", routes.create)
        router.add("GET", p + "/pty/{sessionId}", routes.status)
        router.add("DELETE", p + "/pty/{sessionId}", routes.delete)
        router.add("GET", p + "/pty/{sessionId}/ws", routes.websocket)
    return routes.registry


def _serve_ws(req: Any, registry: PtyRegistry) -> None:
    """PTYSessionWebSocket (pty_ws.go), step by step."""
    sid = req.params.get("sessionId", "")
    s = registry.get(sid)
    if s is None:  # 1. before the upgrade so the client gets an HTTP error
        _send_error(req, 404, "CONTEXT_NOT_FOUND", f"pty session {sid} not found")
        return
    locked = s.lock_ws()  # 2.
    wants_takeover = not locked and req.q("takeover") == "1" and _is_ws_upgrade(req.headers)
    if not locked and not wants_takeover:
        _send_error(req, 409, WS_ERR_ALREADY_CONNECTED, f"another client is already connected to pty session {sid}")
        return
    problem = wsproto.handshake_problem(req.method, req.headers)  # 3. gorilla Upgrade
    if problem is not None:
        if locked:
            s.unlock_ws()
        wsproto.send_handshake_error(req, problem)
        return
    ws = wsproto.upgrade(req, read_timeout=WS_READ_DEADLINE)
    if not registry._track(ws):  # the sandbox ended meanwhile
        ws.abort()
        if locked:
            s.unlock_ws()
        return
    try:
        _run_ws(ws, s, registry, req, locked)
    finally:
        registry._untrack(ws)
        ws.abort()


def _run_ws(ws: wsproto.WebSocket, s: PtySession, registry: PtyRegistry, req: Any, locked: bool) -> None:
    rt = registry.runtime
    if not locked and not s.takeover_ws(WS_TAKEOVER_TIMEOUT):  # 3b.
        ws.send_json(
            {"type": "error", "error": f"takeover timed out for pty session {s.id}", "code": WS_ERR_ALREADY_CONNECTED}
        )
        return
    pipe_mode = req.q("pty") == "0"
    since = _parse_since(req.q("since"))
    if not s.is_running():  # 4. (a finished shell is started again, as in execd)
        # 5+6 first: execd attaches microseconds after the start, before the shell has printed
        # anything; attaching first keeps that order whatever the GIL does in between
        s.is_pty = not pipe_mode
        out, err, snap, snap_off = s.attach(since)
        try:
            s.start(pipe_mode)
        except Exception as exc:  # noqa: BLE001 - reported to the client as START_FAILED
            s.detach(out, err)
            ws.send_json({"type": "error", "error": str(exc) or exc.__class__.__name__, "code": WS_ERR_START_FAILED})
            s.unlock_ws()
            return
    else:
        out, err, snap, snap_off = s.attach(since)  # 5+6.
    cancel = threading.Event()
    pumps: list[threading.Thread] = []
    gen = 0
    try:
        # close-only eviction hook while the first frames are written
        def evict() -> None:
            cancel.set()
            ws.abort()

        gen = s.set_evict_handler(evict)
        if snap:  # 8. replay frame: 0x03 + 8-byte big-endian offset + bytes
            if not ws.send_binary(bytes([BIN_REPLAY]) + struct.pack(">Q", snap_off) + snap):
                return
        if not ws.send_json({"type": "connected", "session_id": s.id, "mode": "pty" if s.is_pty else "pipe"}):
            return  # 9.

        def evict() -> None:
            ws.close(WS_CLOSE_TAKEN_OVER, WS_ERR_TAKEN_OVER)
            cancel.set()

        gen = s.set_evict_handler(evict)

        done = s.done
        exit_mark = object()

        def send_exit() -> None:
            with s.lock:
                code = s.exit_code
            ws.send_json({"type": "exit", "exit_code": code})
            ws.close(wsproto.CLOSE_NORMAL, "process exited")
            cancel.set()

        def pump(pipe: OutputPipe, type_byte: int) -> None:  # 10b/10c.
            while True:
                item = pipe.get()
                if item is OutputPipe._CLOSE:
                    return
                if item is exit_mark:  # 10d, sent after all output queued before it
                    send_exit()
                    return
                if not ws.send_binary(bytes([type_byte]) + item):
                    cancel.set()
                    pipe.close()
                    return

        pumps.append(threading.Thread(target=pump, args=(out, BIN_STDOUT), daemon=True, name="pty-pump-out"))
        if err is not None:
            pumps.append(threading.Thread(target=pump, args=(err, BIN_STDERR), daemon=True, name="pty-pump-err"))
        for t in pumps:
            t.start()

        def exit_watcher() -> None:
            while not cancel.is_set():
                if done is not None and done.wait(0.05):
                    break
            else:
                return
            if err is not None:  # stderr drained before the exit frame goes out on stdout's pump
                err.close()
                if len(pumps) > 1:
                    pumps[1].join(timeout=5)
            if not out.put(exit_mark):
                # output was detached (DELETE /pty/{id}): execd's exit watcher still reports
                pumps[0].join(timeout=5)
                if not cancel.is_set():
                    send_exit()

        def ping_loop() -> None:  # 10a. RFC 6455 pings every 30 s
            while not cancel.wait(WS_PING_INTERVAL):
                if getattr(rt, "paused", False):
                    continue  # a frozen execd sends nothing
                if not ws.ping():
                    cancel.set()
                    return

        threading.Thread(target=exit_watcher, daemon=True, name="pty-exit").start()
        threading.Thread(target=ping_loop, daemon=True, name="pty-ping").start()

        while not cancel.is_set():  # 11. client read loop
            msg = ws.recv()
            if msg is None:
                break
            if getattr(rt, "paused", False) and hasattr(rt, "wait_unpaused"):
                if not rt.wait_unpaused():  # a frozen execd reads nothing until resume
                    break
            if cancel.is_set():
                break
            opcode, data = msg
            if opcode == wsproto.OP_BINARY:
                if not data or data[0] != BIN_STDIN:
                    continue  # only stdin is expected from the client
                try:
                    s.write_stdin(data[1:])
                except OSError as exc:
                    ws.send_json(
                        {"type": "error", "code": WS_ERR_STDIN_WRITE_FAILED, "error": exc.strerror or str(exc)}
                    )
                    break
            elif opcode == wsproto.OP_TEXT:
                frame = _parse_client_frame(data)
                if frame is None:
                    continue
                ftype = frame["type"]
                if ftype == "stdin":  # wscat / debug fallback: plain UTF-8, no base64
                    try:
                        s.write_stdin(frame["data"].encode("utf-8"))
                    except OSError as exc:
                        ws.send_json(
                            {"type": "error", "code": WS_ERR_STDIN_WRITE_FAILED, "error": exc.strerror or str(exc)}
                        )
                        break
                elif ftype == "signal":
                    s.send_signal(frame["signal"])
                elif ftype == "resize":
                    if frame["cols"] > 0 and frame["rows"] > 0:
                        try:
                            s.resize(frame["cols"], frame["rows"])
                        except OSError:
                            pass  # execd only logs a failed resize
                elif ftype == "ping":
                    ws.send_json({"type": "pong"})
                else:
                    # Go %q of the type; json quoting is the same for printable text
                    ws.send_json(
                        {
                            "type": "error",
                            "error": "unknown frame type " + json.dumps(ftype, ensure_ascii=False),
                            "code": WS_ERR_INVALID_FRAME,
                        }
                    )
    finally:
        cancel.set()
        s.detach(out, err)  # 7. deferred: detach -> wait for pumps -> unlock -> clear hook
        for t in pumps:
            t.join(timeout=5)
        s.unlock_ws()
        s.clear_evict_handler(gen)
