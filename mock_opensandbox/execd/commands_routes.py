"""The /command group of the mock execd (controller/command.go; router.go's "/command" routes): request
decoding and validation (RunCommandRequest in both dialects, the working directory), the SSE stream of a
foreground or background run with its heartbeat and linger, interrupt, status and logs. The commands
themselves are execd/commands.py's (CommandRegistry, no HTTP). /code runs a command through ``stream``.
Behaviour sources: QUIRKS.md (part 2), tiers/diff command.* cases."""

from __future__ import annotations

import errno
import json
import os
import signal
import stat
import threading
import time
import uuid
from typing import Any, ClassVar

from mock_opensandbox.execd import gin
from mock_opensandbox.execd.commands import (
    ChunkDecoder,
    Command,
    CommandRegistry,
    LineSplitter,
    LogFilesFailure,
    StartFailure,
)
from mock_opensandbox.execd.connection import cork
from mock_opensandbox.execd.errors import (
    INVALID_REQUEST,
    MSG,
    RUNTIME_ERROR,
    ExecdError,
    bad_body,
    invalid,
    missing_query,
)
from mock_opensandbox.execd.files import SandboxFS
from mock_opensandbox.execd.paths import PathExpandError, expand_path
from mock_opensandbox.runtime import SandboxRuntime, SandboxTerminated
from mock_opensandbox.wire import sse
from mock_opensandbox.wire.gojson import GoJSONError, Struct, decode, errno_text, go_json
from mock_opensandbox.wire.http1 import Request
from mock_opensandbox.wire.relay import client_gone

__all__ = ["CommandsRoutes"]


class CommandsRoutes:
    """The /command routes of one execd: ``run``, ``interrupt``, ``status``, ``logs`` (ROUTES targets
    "command.*"), ``stream`` for /code, ``validate_cwd`` for /session. ``stopping`` is the server's
    stop event (it ends lingers and kills the foreground commands still streaming)."""

    def __init__(
        self,
        runtime: SandboxRuntime,
        fs: SandboxFS,
        commands: CommandRegistry,
        stopping: threading.Event,
        *,
        mode: str,
        close_delay: float,
        heartbeat: float,
    ):
        self.runtime, self.fs, self.commands, self.stopping = runtime, fs, commands, stopping
        self.mode = mode
        self.close_delay = close_delay
        self.heartbeat = heartbeat

    _V1_FIELDS: ClassVar[dict[str, str]] = {
        "command": "string",
        "cwd": "string",
        "background": "bool",
        "timeout": "int64",
        "uid": "uint32",
        "gid": "uint32",
        "envs": "map[string]string",
    }
    _LATEST_FIELDS: ClassVar[dict[str, str]] = dict(_V1_FIELDS, argv="[]string", operation_id="string")
    _V1_STRUCT = Struct("model.RunCommandRequest", _V1_FIELDS)
    # model.RunCommandRequest.UnmarshalJSON decodes into a local type named "request"
    _LATEST_STRUCT = Struct("model.request", _LATEST_FIELDS)

    def parse(self, req: Request) -> dict[str, Any]:
        """Decode + validate a RunCommandRequest; raises ExecdError (400) as execd answers it."""
        latest = self.mode == "latest"
        try:
            body = req.body
        except (OSError, ValueError) as exc:
            raise bad_body(exc) from exc
        try:
            if latest:
                # model.RunCommandRequest.UnmarshalJSON decodes into a local type named "request"
                data = decode(body, self._LATEST_STRUCT)
                raw = json.loads(body.decode("utf-8", "replace") or "null") if body.strip() else {}
                keys = {k.lower() for k in raw} if isinstance(raw, dict) else set()
                cmd_set, argv_set = "command" in keys, "argv" in keys
                if cmd_set == argv_set or (cmd_set and not data.get("command")) or (argv_set and "argv" not in data):
                    raise GoJSONError("exactly one of non-empty command or argv is required")
                if argv_set and any(a is None for a in (raw.get("argv") or [])):
                    raise GoJSONError("argv elements must be strings")
            else:
                data = decode(body, self._V1_STRUCT)
        except ValueError as exc:  # GoJSONError included
            raise bad_body(exc) from exc
        struct = "RunCommandRequest"
        problems: list[str] = []
        if latest:
            argv = data.get("argv")
            if argv is not None:
                if not argv or not argv[0]:
                    raise invalid("argv must contain a non-empty executable")
                if any("\x00" in a for a in argv):
                    raise invalid("argv must not contain NUL")
            if data.get("timeout", 0) < 0:
                problems.append(MSG["gte"].format(struct, "TimeoutMs"))
        else:
            if not data.get("command"):
                problems.append(MSG["required"].format(struct, "Command"))
            if data.get("timeout", 0) < 0:
                problems.append(MSG["gte"].format(struct, "TimeoutMs"))
            data.pop("argv", None)  # v1.x has no argv field: ignored (recording 11)
        if problems:
            raise invalid("\n".join(problems))
        if "gid" in data and "uid" not in data:
            raise invalid("uid is required when gid is provided")
        envs = data.get("envs") or {}
        cwd = data.get("cwd") or ""
        if cwd:
            err = self.validate_cwd(cwd)
            if err:
                raise invalid(err)
            try:
                data["cwd"] = self._expand(cwd, envs)
            except PathExpandError:
                data["cwd"] = self._expand(cwd, {})
        return data

    def validate_cwd(self, cwd: str) -> str | None:
        """runtime.ValidateWorkingDir: ExpandPath with execd's own environment (not the request's
        envs), then stat (tiers/diff command.fg.env_cwd)."""
        try:
            expanded = self._expand(cwd, {})
        except PathExpandError as exc:
            return f'cannot resolve working directory "{cwd}": {exc}'
        return self._check_cwd(cwd, expanded)

    def _expand(self, path: str, envs: dict[str, str]) -> str:
        """pathutil.ExpandPathWithEnv: ${VAR}/$VAR (request envs over execd's environment), then "~".
        Raises PathExpandError for an undefined variable."""
        env = self.fs.env()
        env.update(envs)
        return expand_path(path, env, env.get("HOME", "/root"))

    def _check_cwd(self, cwd: str, expanded: str) -> str | None:
        try:
            sp = expanded if expanded.startswith("/") else "/" + expanded
            self.fs.check_dotdot(sp)  # the kernel walks "a/x/.." (tiers/diff gen.env)
            fd = self.fs.fd(sp, os.O_PATH)  # openat2 on the sandbox's "/": never a host path
            try:
                st = os.fstat(fd)
            finally:
                os.close(fd)
        except FileNotFoundError:
            return f"working directory does not exist: {cwd}: stat {expanded}: no such file or directory"
        except OSError as exc:
            if exc.errno == errno.ENOENT:
                return f"working directory does not exist: {cwd}: stat {expanded}: no such file or directory"
            return f'cannot access working directory "{cwd}": stat {expanded}: {errno_text(exc)}'
        except ValueError as exc:
            return f'cannot resolve working directory "{cwd}": {exc}'
        if not stat.S_ISDIR(st.st_mode):
            return f"working directory path is not a directory: {cwd}"
        return None

    def run(self, req: Request) -> None:
        self.stream(req, self.parse(req), True)

    def stream(self, req: Request, spec: dict[str, Any], linger: bool) -> None:
        """Start a command and stream it. linger: /command sleeps ApiGracefulShutdownTimeout after
        the last event; /code returns as soon as the command completed (waitForExecutionComplete)."""
        background = bool(spec.get("background"))
        try:
            cmd = self.commands.start(
                command=spec.get("command"),
                argv=spec.get("argv"),
                cwd=spec.get("cwd") or None,
                envs=spec.get("envs") or {},
                timeout_ms=int(spec.get("timeout") or 0),
                background=background,
                uid=spec.get("uid"),
                gid=spec.get("gid"),
            )
        except StartFailure as exc:
            if exc.command is not None:  # background: init, then the controller's error in the same body
                self._background_start_failure(req, exc.command.id, str(exc))
            else:
                self._start_failure(req, str(exc))
            return
        except LogFilesFailure as exc:
            if exc.command is not None:  # background: its init event went out before the file was made
                self._background_start_failure(req, exc.command.id, str(exc), prefix="", ping=False)
                return
            raise ExecdError(500, RUNTIME_ERROR, MSG["run_commands"].format(exc)) from exc
        except SandboxTerminated as exc:
            raise ExecdError(500, RUNTIME_ERROR, MSG["run_commands"].format(exc)) from exc
        if background:
            self._background_stream(req, cmd, linger)
        else:
            self._foreground_stream(req, cmd, linger)
        self.commands.files.refill()  # the next run's files, made now that this one's answer is out

    def _start_failure(self, req: Request, msg: str) -> None:
        w = gin.sse_start(req)
        try:
            w.write(sse.encode_event(sse.init_event(uuid.uuid4().hex)))
            w.write(sse.encode_event(sse.ping_event()))
            w.write(sse.encode_event(sse.error_event(msg, [msg])))
            self._linger(req)
        except OSError:
            pass
        w.close()

    def _background_start_failure(
        self, req: Request, cid: str, msg: str, prefix: str = "failed to start commands: ", ping: bool = True
    ) -> None:
        """runBackgroundCommand: OnExecuteInit, then cmd.Start (or the making of its file) fails and RunCommand's
        RespondError JSON lands in the stream, no linger (tiers/diff command.start_failure). The heartbeat's first
        ping came before a failed start live, not before a file that could not be made (2026-12-07)."""
        w = gin.sse_start(req)
        try:
            w.write(sse.encode_event(sse.init_event(cid)))
            if ping:
                w.write(sse.encode_event(sse.ping_event()))
            w.write(go_json({"code": RUNTIME_ERROR, "message": MSG["run_commands"].format(prefix + msg)}).encode())
        except OSError:
            pass
        w.close()

    def _linger(self, req: Request) -> None:
        """execd keeps the stream open ApiGracefulShutdownTimeout (~1 s) after the last event
        (recordings 07-12; controller/command.go)."""
        if self.close_delay > 0:
            self.stopping.wait(self.close_delay)

    def _background_stream(self, req: Request, cmd: Command, linger: bool = True) -> None:
        # the head and the three events leave in one segment (TCP_CORK until the last is written: one wake-up of
        # the client, the same bytes and chunks)
        corked = cork(req.handler.connection, True)
        w = gin.sse_start(req)
        try:
            w.write(
                sse.encode_event(sse.init_event(cmd.id)),
                sse.encode_event(sse.ping_event()),
                sse.encode_event(sse.complete_event(cmd.execution_ms())),
            )
            if corked:
                corked = not cork(req.handler.connection, False)
            if linger:
                self._linger(req)
        except OSError:
            pass
        finally:
            if corked:
                cork(req.handler.connection, False)
        w.close()

    def _foreground_stream(self, req: Request, cmd: Command, linger: bool = True) -> None:
        try:
            out = sse.SSEWriter(gin.sse_start(req))
        except BaseException:
            self.commands.drain(cmd)  # its pipes are read to their end and closed all the same
            raise
        emit = out.emit
        emit(sse.init_event(cmd.id), sse.ping_event())
        framers = {"stdout": self.commands.framer(), "stderr": self.commands.framer()}
        rc = None
        try:
            rc = self._pump(req, cmd, out, framers)
        finally:
            if rc is None:  # an error on the way: the command's bookkeeping goes on without a reader
                self.commands.drain(cmd)
        for name, fr in framers.items():
            for text in fr.flush():
                emit(sse.output_event(name, text))
        code, err = cmd.finish(rc)
        last = sse.complete_event(cmd.execution_ms()) if rc == 0 else sse.error_event(str(code), [err])
        if linger and self.close_delay > 0:
            emit(last)
            if not out.gone:
                self._linger(req)
            out.close()
        else:
            out.close(last)  # the last event and the body's end in one write
        if out.gone:
            req.handler.close_connection = True

    def _pump(
        self, req: Request, cmd: Command, out: sse.SSEWriter, framers: dict[str, LineSplitter | ChunkDecoder]
    ) -> int:
        """The command's output as events until it exits (its status), pumped by this request's thread;
        a heartbeat ping while it runs."""
        emit = out.emit
        next_ping = time.monotonic() + self.heartbeat
        for kind, val in cmd.events:
            if kind == "exit":
                status: int = val
                return status
            if kind in framers:
                # the lines of one read: one event (one chunk) each, written together
                out.frames(sse.output_frames(kind, framers[kind].feed(val)))
            now = time.monotonic()
            if self.runtime.paused:
                next_ping = now + self.heartbeat  # a frozen execd sends nothing (QUIRKS.md, "Paused sandbox")
            elif now >= next_ping:
                emit(sse.ping_event())
                next_ping += self.heartbeat
            if not out.gone and client_gone(req.handler.connection):
                # the command outlives its connection: Execute runs it under context.Background()
                # (runtime/ctrl.go; tiers/diff command.disconnect)
                out.gone = True
            proc = cmd.proc  # (None once finished)
            if self.stopping.is_set() and proc is not None and proc.poll() is None:
                out.gone = True
                cmd.kill(signal.SIGKILL)
        raise RuntimeError("the output pump ended without the exit")  # pragma: no cover - it always yields it

    def interrupt(self, req: Request) -> None:
        cid = req.q("id")
        if not cid:
            raise missing_query("id")
        try:
            self.commands.interrupt(cid)
        except LookupError as exc:
            raise ExecdError(500, RUNTIME_ERROR, MSG["interrupt"].format(exc.args[0])) from exc
        gin.ok(req)

    def status(self, req: Request) -> None:
        cid = req.params.get("id", "")
        cmd = self.commands.get(cid)
        if cmd is None:
            raise ExecdError(404, INVALID_REQUEST, MSG["command_not_found"].format(cid))
        gin.json_reply(req, 200, cmd.status())

    def logs(self, req: Request) -> None:
        cid = req.params.get("id", "")
        raw = req.q("cursor")
        cursor = 0
        if raw:
            try:
                cursor = int(raw)  # controller QueryInt64: unparsable -> default 0
            except ValueError:
                cursor = 0
        try:
            data, tail = self.commands.logs(cid, cursor)
        except (LookupError, ValueError) as exc:
            raise ExecdError(400, INVALID_REQUEST, str(exc.args[0])) from exc
        gin.send(req, 200, data, "text/plain; charset=utf-8", {"Execd-Commands-Tail-Cursor": str(tail)})
