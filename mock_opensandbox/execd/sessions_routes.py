"""The /session group of the mock execd (controller/codeinterpreting.go's bash-session handlers; router.go's
"/session" routes): request decoding and validation, the SSE stream of a run. The sessions themselves are
execd/sessions.py's (SessionRegistry, no HTTP). Behaviour sources: QUIRKS.md (part 2, "/session"), tiers/diff
session.* cases."""

from __future__ import annotations

from typing import Any, Callable

from mock_opensandbox.execd import gin
from mock_opensandbox.execd.errors import MSG, ExecdError
from mock_opensandbox.execd.sessions import RunHooks, SessionRegistry, SessionTimeout
from mock_opensandbox.wire import sse
from mock_opensandbox.wire.gojson import GoJSONError, Struct, decode, go_json
from mock_opensandbox.wire.http1 import ChunkedWriter, Request
from mock_opensandbox.wire.relay import client_gone

__all__ = ["SessionsRoutes"]

_CREATE_SESSION = Struct("model.CreateSessionRequest", {"cwd": "string"})
_RUN_IN_SESSION = Struct("model.RunInSessionRequest", {"command": "string", "cwd": "string", "timeout": "int64"})


class _Stream:
    """A run's SSE stream: its headers go out lazily, with the first event (then a ping); ``gone`` once a
    write failed (later events are dropped)."""

    def __init__(self, req: Request):
        self.req = req
        self.w: ChunkedWriter | None = None
        self.gone = False

    def emit(self, ev: dict[str, Any]) -> None:
        if self.w is None:
            self.w = gin.sse_start(self.req)
            self.w.write(sse.encode_event(ev))
            self.w.write(sse.encode_event(sse.ping_event()))
            return
        if self.gone:
            return
        try:
            self.w.write(sse.encode_event(ev))
        except OSError:
            self.gone = True

    def lines(self, texts: list[str]) -> None:
        """stdout events for the lines of one read, one chunk each, in one write (the head went out with init)."""
        if self.w is None:
            for t in texts:
                self.emit(sse.output_event("stdout", t))
            return
        if self.gone:
            return
        try:
            self.w.write(*sse.output_frames("stdout", texts))
        except OSError:
            self.gone = True


class SessionsRoutes:
    """The /session routes of one execd: ``create``, ``run``, ``delete`` (ROUTES targets "session.*").
    ``validate_cwd(cwd)``: the /command group's working-directory check (its error text, or None)."""

    def __init__(self, sessions: SessionRegistry, validate_cwd: Callable[[str], str | None]):
        self.sessions = sessions
        self._validate_cwd = validate_cwd

    def create(self, req: Request) -> None:
        try:
            data = decode(req.body, _CREATE_SESSION)
        except GoJSONError as exc:
            if str(exc) != "EOF":  # an empty body means default options
                raise ExecdError(400, "INVALID_REQUEST_BODY", MSG["bad_body_session"].format(exc)) from exc
            data = {}
        sid = self.sessions.create(data.get("cwd") or "")
        gin.json_reply(req, 200, {"session_id": sid})

    def run(self, req: Request) -> None:
        sid = req.params.get("sessionId", "")
        try:
            data = decode(req.body, _RUN_IN_SESSION)
        except GoJSONError as exc:
            raise ExecdError(400, "INVALID_REQUEST_BODY", MSG["bad_body_session"].format(exc)) from exc
        problems = []
        if not data.get("command"):
            problems.append(MSG["required"].format("RunInSessionRequest", "Command"))
        if data.get("timeout", 0) < 0:
            problems.append(MSG["gte"].format("RunInSessionRequest", "Timeout"))
        if problems:
            raise ExecdError(400, "INVALID_REQUEST_BODY", MSG["invalid_session"].format("\n".join(problems)))
        cwd = data.get("cwd") or ""
        if cwd:
            err = self._validate_cwd(cwd)
            if err:
                raise ExecdError(400, "INVALID_REQUEST_BODY", MSG["invalid_session"].format(err))

        stream = _Stream(req)

        hooks = RunHooks(
            on_init=lambda i: stream.emit(sse.init_event(i)),
            on_stdout=lambda t: stream.emit(sse.output_event("stdout", t)),
            on_error=lambda ev, tb: stream.emit(sse.error_event(ev, tb)),
            on_complete=lambda ms: stream.emit(sse.complete_event(ms)),
            on_lines=stream.lines,
        )
        try:
            self.sessions.run(
                sid,
                data["command"],
                cwd,
                int(data.get("timeout") or 0),
                hooks,
                gone=lambda: stream.gone or client_gone(req.handler.connection),
            )
        except (LookupError, RuntimeError, SessionTimeout, OSError, ValueError) as exc:
            msg = MSG["run_in_session"].format(exc.args[0] if exc.args else exc)
            if stream.w is None:
                raise ExecdError(500, "RUNTIME_ERROR", msg) from exc
            try:  # RespondError after the stream started: the JSON lands in the body
                stream.w.write(go_json({"code": "RUNTIME_ERROR", "message": msg}).encode())
            except OSError:
                pass
        if stream.w is not None:
            stream.w.close()
        if self.sessions.files is not None:
            self.sessions.files.refill()  # the next run's files, made now that this one's answer is out

    def delete(self, req: Request) -> None:
        self.sessions.delete(req.params.get("sessionId", ""))
        gin.ok(req)
