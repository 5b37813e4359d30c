"""The /code group on a plain image (no Jupyter server configured), as the real binary answers it
(controller/codeinterpreting.go, runtime/context.go + ctrl.go; tiers/diff code.* cases):
contexts are never created (the Jupyter retry loop never ends: POST /code/context hangs), listing
is empty, a "" or "command" language runs the code as a foreground command, "background-command"
as a background one, "sql" fails to reach MySQL at 127.0.0.1:3306, every other known language
fails because no language runtime is configured. With JUPYTER_HOST + JUPYTER_TOKEN in the sandbox's
environment the Jupyter languages and contexts go to that server (execd/code.py holds its contexts), and a run
streams that kernel's iopub messages as execd's events, in execd's order and shapes
(pkg/web/controller/codeinterpreting.go + sse.go, pkg/jupyter/execute/execute.go; QUIRKS.md part 2,
"/code with Jupyter")."""

from __future__ import annotations

import queue
import threading
import time
import uuid
from typing import Any, Callable, Literal

from mock_opensandbox.execd import gin
from mock_opensandbox.execd.code import CodeInterpreter, JupyterContexts, Kernel
from mock_opensandbox.execd.errors import (
    CONTEXT_NOT_FOUND,
    MSG,
    RUNTIME_ERROR,
    ExecdError,
    bad_body,
    invalid,
    missing_query,
)
from mock_opensandbox.execd.jupyter import JupyterError, KernelChannel
from mock_opensandbox.wire import sse
from mock_opensandbox.wire.gojson import GoJSONError, Struct, decode, go_json
from mock_opensandbox.wire.http1 import Request
from mock_opensandbox.wire.relay import client_gone

__all__ = ["CodeRoutes", "JUPYTER_LANGUAGES"]

CODE_CONTEXT = Struct("model.CodeContext", {"id": "string", "language": "string", "cwd": "string"})
RUN_CODE = Struct("model.RunCodeRequest", {"context": CODE_CONTEXT, "code": "string"})
CONTEXT_REQUEST = Struct("model.CodeContextRequest", {"language": "string", "cwd": "string"})
JUPYTER_LANGUAGES = ("bash", "python", "java", "javascript", "typescript", "go")
NO_CONTEXT_OPS = ("command", "background-command", "sql")
NO_RUNTIME = "language runtime server not configured, please check your image runtime"
HEARTBEAT_S = 3.0  # controller/sse.go ping: wait.Until(..., 3*time.Second)
# execute.go finalizeExecution: on the first idle status, of any parent (handleExecutionStatus does not look at
# parent_header: the notebook server's own kernel_info requests on a new channel end in an idle that often
# comes before the run's output), execution_complete is sent at once; then every JupyterIdlePollInterval
# (default 100 ms) until the reply's count or an error, and the stream ends. So on the real execd
# execution_complete mostly comes first (fixture 27_code_interpreter) [upstream 3bb6fad, recording].
FIRST_CHECK_S = 0.002  # [choice] the goroutine's head start, in which messages already sent are still taken


def _sorted(v: Any) -> Any:
    """Go marshals map keys sorted, at every level."""
    if isinstance(v, dict):
        return {k: _sorted(v[k]) for k in sorted(v)}
    if isinstance(v, list):
        return [_sorted(x) for x in v]
    return v


class CodeRoutes:
    def __init__(
        self,
        run_command: Callable[[Request, dict[str, Any], bool], None],
        interrupt: Callable[[Request], None],
        stopping: threading.Event,
        interpreter: CodeInterpreter,
        mode: str = "v1.1.0",
        heartbeat: float = HEARTBEAT_S,
    ):
        """run_command(req, spec, linger): stream a /command-style run (spec as CommandsRoutes.parse returns);
        interrupt(req): the /command interrupt; stopping: the execd server's stop event; interpreter: the
        sandbox's code interpreter (its Jupyter contexts, execd/code.py).
        mode "latest": a code request without a language needs the (absent) runtime (QUIRKS.md,
        Transport, routing, auth: "latest mode"); the v1.0.19 binary runs it as a command (tiers/diff code.plain_image)."""
        self._run_command, self._interrupt, self._stopping = run_command, interrupt, stopping
        self.interpreter = interpreter
        self.mode = mode
        self.heartbeat = heartbeat

    def jupyter(self) -> JupyterContexts | None:
        """The sandbox's Jupyter server's contexts, or None (execd/code.py CodeInterpreter)."""
        return self.interpreter.jupyter()

    def interrupt(self, req: Request) -> None:
        """interrupt.go: a Jupyter context's kernel first, then commands and bash sessions."""
        j = self.jupyter()
        cid = req.q("id")
        if j is not None and cid and j.interrupt(cid):
            gin.ok(req)
            return
        self._interrupt(req)

    def run(self, req: Request) -> None:
        try:
            data = decode(req.body, RUN_CODE)
        except GoJSONError as exc:
            raise bad_body(exc) from exc
        if not data.get("code"):
            raise invalid(MSG["required"].format("RunCodeRequest", "Code"))
        lang = (data.get("context") or {}).get("language") or ("python" if self.mode == "latest" else "command")
        if lang in ("command", "background-command"):
            self._run_command(req, {"command": data["code"], "background": lang == "background-command"}, False)
            return
        if lang == "sql":
            self._sql_unreachable(req)
            return
        if lang in JUPYTER_LANGUAGES:
            j = self.jupyter()
            if j is not None:
                self._run_jupyter(req, lang, (data.get("context") or {}).get("id") or "", data["code"])
                return
            raise ExecdError(500, RUNTIME_ERROR, MSG["run_codes"].format(NO_RUNTIME))
        raise ExecdError(500, RUNTIME_ERROR, MSG["run_codes"].format(MSG["unknown_language"].format(lang)))

    def _sql_unreachable(self, req: Request) -> None:
        """runtime/sql.go: the stream starts, the DB dial fails (error event, traceback null), then the
        controller's RespondError JSON lands in the same body (headers already sent)."""

        why = "dial tcp 127.0.0.1:3306: connect: connection refused"
        w = gin.sse_start(req)
        try:
            w.write(sse.encode_event(sse.init_event(str(uuid.uuid4()))))
            w.write(sse.encode_event(sse.ping_event()))
            ev = {
                "type": "error",
                "timestamp": sse.now_ms(),
                "error": {"ename": "DBInitError", "evalue": why, "traceback": None},
            }
            w.write(sse.encode_event(ev))
            w.write(go_json({"code": RUNTIME_ERROR, "message": MSG["run_codes"].format(why)}).encode())
        except OSError:
            pass
        w.close()

    def create_context(self, req: Request) -> None:
        try:
            data = decode(req.body, CONTEXT_REQUEST)
        except GoJSONError as exc:
            raise bad_body(exc) from exc
        j = self.jupyter()
        if j is None:
            self._stall(req)  # kernelWaitingBackoff retries the absent Jupyter server for minutes
            return
        language, cwd = data.get("language") or "", data.get("cwd") or ""
        try:
            sid = j.create(language, cwd, lambda: client_gone(req.handler.connection))
        except JupyterError as exc:
            if client_gone(req.handler.connection) or self._stopping.is_set():
                req.handler.close_connection = True
                return
            raise ExecdError(500, RUNTIME_ERROR, MSG["create_context"].format(exc)) from exc
        out: dict[str, Any] = {"id": sid}
        if language:
            out["language"] = language
        if cwd:
            out["cwd"] = cwd
        gin.json_reply(req, 200, out)

    def _stall(self, req: Request) -> None:
        """Hold the request unanswered until execd stops or the client goes away, then close the connection
        without an answer."""
        while not self._stopping.wait(0.2):
            if client_gone(req.handler.connection):
                break
        req.handler.close_connection = True

    def list_contexts(self, req: Request) -> None:
        lang = req.q("language") or ""
        if lang in NO_CONTEXT_OPS:
            raise ExecdError(500, RUNTIME_ERROR, MSG["unsupported_language"].format(lang))
        j = self.jupyter()
        gin.json_reply(req, 200, j.list(lang) if j is not None else [])

    def delete_by_language(self, req: Request) -> None:
        language = req.q("language")
        if not language:
            raise missing_query("language")
        j = self.jupyter()
        if j is not None:
            j.delete_language(language)
        gin.ok(req)  # without Jupyter no context of any language exists

    def get_context(self, req: Request) -> None:
        j = self.jupyter()
        if j is not None:
            gin.json_reply(req, 200, j.get(req.params.get("contextId", "")))
            return
        raise ExecdError(404, CONTEXT_NOT_FOUND, MSG["context_not_found"].format(req.params.get("contextId", "")))

    def delete_context(self, req: Request) -> None:
        j = self.jupyter()
        if j is not None:
            j.delete(req.params.get("contextId", ""))
            gin.ok(req)
            return
        raise ExecdError(404, CONTEXT_NOT_FOUND, MSG["context_not_found"].format(req.params.get("contextId", "")))

    # -- runs with Jupyter ---------------------------------------------------------------------
    def _run_jupyter(self, req: Request, language: str, context_id: str, code: str) -> None:
        """runJupyter + runJupyterCode + RunCode's hooks."""

        def gone() -> bool:
            return client_gone(req.handler.connection)

        j = self.jupyter()
        assert j is not None  # run() came here because the sandbox names a Jupyter server
        if not context_id:
            try:
                context_id = j.default_context(language, gone)
            except JupyterError as exc:
                raise ExecdError(500, RUNTIME_ERROR, MSG["run_codes"].format(exc)) from exc
        kernel = j.kernels.get(context_id)
        if kernel is None:
            raise ExecdError(500, RUNTIME_ERROR, MSG["run_codes"].format("context not found"))
        out = sse.SSEWriter(gin.sse_start(req))
        emit = out.emit
        done = threading.Event()

        def fail(why: str) -> None:  # RespondError after the stream began: the JSON lands in the body
            out.raw(go_json({"code": RUNTIME_ERROR, "message": MSG["run_codes"].format(why)}).encode())

        def pinger() -> None:  # OnExecuteInit starts the heartbeat: one at once, then every 3 s
            while True:
                emit(sse.ping_event())
                if done.wait(self.heartbeat):
                    return

        emit(sse.init_event(context_id))
        threading.Thread(target=pinger, name="osb-code-ping", daemon=True).start()
        locked = kernel.lock.acquire(blocking=False)
        try:
            if not locked:
                fail("session is busy")
                return
            try:
                ch = j.client.channel(kernel.kernel_id)
            except JupyterError as exc:
                fail(str(exc))
                return
            try:
                self._stream(ch, kernel, code, emit, fail, gone, j.idle_poll, j.client.interrupt)
            finally:
                ch.close()
        finally:
            done.set()
            out.close()
            if locked:
                kernel.lock.release()  # after the stream ended (defer kernel.mu.Unlock)
            if out.gone:
                req.handler.close_connection = True

    def _stream(
        self,
        ch: KernelChannel,
        kernel: Kernel,
        code: str,
        emit: Callable[[dict[str, Any]], None],
        fail: Callable[[str], None],
        gone: Callable[[], bool],
        idle_poll: float,
        interrupt: Callable[[str], Any],
    ) -> None:
        msgs: queue.Queue[dict[str, Any] | None] = queue.Queue()

        def reader() -> None:
            while True:
                m = ch.recv()
                msgs.put(m)
                if m is None:
                    return

        start = time.monotonic()
        try:
            msg_id = ch.execute(code)
        except JupyterError as exc:
            fail(str(exc))
            return
        threading.Thread(target=reader, name="osb-code-ws", daemon=True).start()
        count, errored, finished, dead, next_check = 0, False, False, False, 0.0
        m: dict[str, Any] | Literal[False] | None  # a message, False: none came in time, None: the socket ended
        while True:
            if finished and time.monotonic() >= next_check:
                if count > 0 or errored:
                    return  # finalizeExecution: idle seen, then polled until the reply's count or an error
                next_check += idle_poll
            try:
                m = msgs.get(timeout=max(0.0, next_check - time.monotonic()) if finished else 0.2)
            except queue.Empty:
                m = False
            if m is None:
                dead = True  # the kernel's socket ended: execd's receiver stops, the run waits for ctx
            if m is False or m is None:
                if gone() or self._stopping.is_set():
                    if not dead:
                        try:
                            interrupt(kernel.kernel_id)
                        except JupyterError:
                            pass
                    emit(
                        {
                            "type": "error",
                            "timestamp": sse.now_ms(),
                            "error": {"ename": "ContextCancelled", "evalue": "Interrupt kernel", "traceback": None},
                        }
                    )
                    return
                if dead:
                    time.sleep(0.2)
                continue
            mtype = (m.get("header") or {}).get("msg_type") or m.get("msg_type")
            if mtype != "status" and (m.get("parent_header") or {}).get("msg_id") != msg_id:
                continue  # (execd's status handler takes an idle of any parent: see IDLE_POLL_S)
            content = m.get("content") or {}
            if mtype == "stream":
                name, text = content.get("name"), content.get("text") or ""
                if name in ("stdout", "stderr") and text:
                    emit(sse.output_event(name, text))
            elif mtype == "execute_result":
                count = int(content.get("execution_count") or 0)
                data = content.get("data") or {}
                if count > 0:
                    emit({"type": "execution_count", "execution_count": count, "timestamp": sse.now_ms()})
                if data:
                    mutated = {("text" if k == "text/plain" else k): v for k, v in data.items()}
                    emit({"type": "result", "timestamp": sse.now_ms(), "results": _sorted(mutated)})
            elif mtype == "error":
                errored = True
                emit({"type": "status", "text": "error", "timestamp": sse.now_ms()})
                emit(
                    {
                        "type": "error",
                        "timestamp": sse.now_ms(),
                        "error": {
                            "ename": content.get("ename", ""),
                            "evalue": content.get("evalue", ""),
                            "traceback": content.get("traceback"),
                        },
                    }
                )
            elif mtype == "execute_reply":
                count = int(content.get("execution_count") or 0) or count
                if content.get("ename"):
                    errored = True
            elif mtype == "status" and content.get("execution_state") == "idle" and not finished:
                # finalizeExecution runs in its own goroutine: by its first check the receiver has mostly taken
                # the reply that came with the idle (live: the run ends at once, ~50 ms for print(1))
                finished, next_check = True, time.monotonic() + FIRST_CHECK_S
                ms = int((time.monotonic() - start) * 1000)
                ev: dict[str, Any] = {"type": "execution_complete"}
                if ms > 0:
                    ev["execution_time"] = ms
                ev["timestamp"] = sse.now_ms()
                emit(ev)
