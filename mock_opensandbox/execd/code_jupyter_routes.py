"""The /code group when the sandbox names a Jupyter server (JUPYTER_HOST and JUPYTER_TOKEN in its
environment: the image's Env or the create request's env; execd reads them at start, pkg/flag/parser.go),
as execd drives it at 3bb6fad: components/execd/pkg/runtime/context.go, jupyter.go, interrupt.go and
pkg/web/controller/codeinterpreting.go + sse.go. Contexts are Jupyter sessions (one kernel each, the
kernelspec found by language, never "python3"), a default context per language made on the first run
without a context id, one lock per context (TryLock: "session is busy"), events mapped from the kernel's
iopub messages in execd's order and shapes. Behaviour rows: QUIRKS.md (part 2, "/code with Jupyter")."""

from __future__ import annotations

import os
import queue
import re
import threading
import time
import uuid
from typing import Any, Callable

from mock_opensandbox.wire import sse
from mock_opensandbox.wire.gojson import go_json
from mock_opensandbox.wire.http1 import Request
from mock_opensandbox.wire.relay import client_gone
from mock_opensandbox.execd import gin
from mock_opensandbox.execd.errors import CONTEXT_NOT_FOUND, MSG, RUNTIME_ERROR, ExecdError
from mock_opensandbox.execd.jupyter import JupyterClient, JupyterError

__all__ = ["JupyterCode"]

# kernelWaitingBackoff (runtime/ctrl.go: 60 steps from 0.5 s, factor 1.5, no cap) retries for longer than any
# client waits, so by default the mock retries until the client leaves; MockOptions.code_context_wait bounds it
GONE_POLL_S = 0.2  # how soon a client that left is noticed between attempts
# execute.go finalizeExecution: on the first idle status, of any parent (handleExecutionStatus does not look at
# parent_header: the notebook server's own kernel_info requests on a new channel end in an idle that often
# comes before the run's output), execution_complete is sent at once; then every JupyterIdlePollInterval
# (default 100 ms) until the reply's count or an error, and the stream ends. So on the real execd
# execution_complete mostly comes first (fixture 27_code_interpreter) [upstream 3bb6fad, recording].
FIRST_CHECK_S = 0.002  # [choice] the goroutine's head start, in which messages already sent are still taken
IDLE_POLL_S = 0.1  # EXECD_JUPYTER_IDLE_POLL_INTERVAL (a Go duration > 0) in the sandbox's environment sets it
_GO_DURATION = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|\u00b5s|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def idle_poll_s(value: str | None) -> float:
    """flag/parser.go: time.ParseDuration of the env; <= 0 falls back to 100 ms. [choice] A value Go cannot
    parse (the real execd panics at start) falls back too."""
    value = (value or "").strip()
    if not value or _GO_DURATION.sub("", value) != "":
        return IDLE_POLL_S
    total = sum(float(n) * _GO_UNITS[u] for n, u in _GO_DURATION.findall(value))
    return total if total > 0 else IDLE_POLL_S


HEARTBEAT_S = 3.0  # controller/sse.go ping: wait.Until(..., 3*time.Second)


def _sorted(v: Any) -> Any:
    """Go marshals map keys sorted, at every level."""
    if isinstance(v, dict):
        return {k: _sorted(v[k]) for k in sorted(v)}
    if isinstance(v, list):
        return [_sorted(x) for x in v]
    return v


class _Kernel:
    def __init__(self, kernel_id: str, language: str):
        self.kernel_id, self.language = kernel_id, language
        self.lock = threading.Lock()


class JupyterCode:
    """Contexts and runs against one Jupyter server. ``connect(host, port, timeout)`` opens a TCP
    connection as the sandbox sees it; ``stopping`` is the execd server's stop event."""

    def __init__(
        self,
        base_url: str,
        token: str,
        connect: Callable[..., Any],
        stopping: threading.Event,
        mkdir: Callable[[str], None],
        heartbeat: float = HEARTBEAT_S,
        idle_poll: float = IDLE_POLL_S,
        create_wait: float | None = None,
    ):
        self.idle_poll = idle_poll
        self.create_wait = create_wait
        self.client = JupyterClient(base_url, token, connect)
        self.stopping = stopping
        self._mkdir = mkdir
        self.heartbeat = heartbeat
        self._lock = threading.Lock()
        self.kernels: dict[str, _Kernel] = {}  # jupyterClientMap: session id -> kernel
        self.defaults: dict[str, str] = {}  # defaultLanguageSessions: language -> session id

    # -- contexts ----------------------------------------------------------------------------
    def _search_kernel(self, language: str) -> str:
        """runtime/jupyter.go searchKernel: the last spec of that language, "python3" skipped."""
        specs = self.client.kernelspecs().get("kernelspecs") or {}
        if not specs:
            raise JupyterError("no kernel specs found")
        name = ""
        for k, spec in specs.items():
            if k == "python3":
                continue
            if ((spec or {}).get("spec") or {}).get("language") == language:
                name = k
        if not name:
            raise JupyterError("no kernel specs found")
        return name

    def _create_once(self, language: str, cwd: str) -> tuple[str, str]:
        kernel = self._search_kernel(language)
        sid = uuid.uuid4().hex
        if cwd:
            self._mkdir(cwd)  # newIpynbPath: MkdirAll(cwd)
        path = os.path.join(cwd, sid + ".ipynb") if cwd else sid + ".ipynb"
        sess = self.client.create_session(sid, path, kernel)
        kid = ((sess or {}).get("kernel") or {}).get("id", "")
        if not any(k.get("id") == kid for k in self.client.kernels()):
            raise JupyterError("kernel not found")
        return (sess or {}).get("id", ""), kid

    def _create(self, language: str, cwd: str, gone: Callable[[], bool]) -> tuple[str, str]:
        """retry.OnError(kernelWaitingBackoff, ...): every error is retried, until the client leaves or the
        execd stops (or create_wait seconds, when set); then JupyterError with the last error."""
        deadline = None if self.create_wait is None else time.monotonic() + self.create_wait
        delay = 0.5
        while True:
            try:
                return self._create_once(language, cwd)
            except (JupyterError, OSError, ValueError) as exc:
                last = exc
            until = time.monotonic() + delay
            if deadline is not None and until > deadline:
                raise JupyterError(str(last))
            while True:  # the backoff's wait, watching the client
                left = until - time.monotonic()
                if gone() or self.stopping.wait(max(0.0, min(GONE_POLL_S, left))):
                    raise JupyterError(str(last))
                if left <= GONE_POLL_S:
                    break
            delay = min(delay * 1.5, 5.0)

    def create_context(self, req: Request, language: str, cwd: str) -> None:
        try:
            sid, kid = self._create(language, cwd, lambda: client_gone(req.handler.connection))
        except JupyterError as exc:
            if client_gone(req.handler.connection) or self.stopping.is_set():
                req.handler.close_connection = True
                return
            raise ExecdError(500, RUNTIME_ERROR, MSG["create_context"].format(exc)) from exc
        with self._lock:
            self.kernels[sid] = _Kernel(kid, language)
        out: dict[str, Any] = {"id": sid}
        if language:
            out["language"] = language
        if cwd:
            out["cwd"] = cwd
        gin.json_reply(req, 200, out)

    def get(self, sid: str) -> dict[str, Any]:
        k = self.kernels.get(sid)
        if k is None:
            raise ExecdError(404, CONTEXT_NOT_FOUND, MSG["context_not_found"].format(sid))
        return {"id": sid, "language": k.language}

    def list(self, language: str) -> list[dict[str, Any]]:
        with self._lock:
            out = [
                {"id": s, "language": k.language}
                for s, k in self.kernels.items()
                if not language or k.language == language
            ]
            seen = {c["id"] for c in out}
            for lang, s in self.defaults.items():
                if s and s not in seen and (not language or lang == language):
                    out.append({"id": s, "language": lang})
        return out

    def delete(self, sid: str) -> None:
        """deleteSessionAndCleanup: unknown -> ErrContextNotFound (404); Jupyter's DELETE, then forget it."""
        if sid not in self.kernels:
            raise ExecdError(404, CONTEXT_NOT_FOUND, MSG["context_not_found"].format(sid))
        try:
            self.client.delete_session(sid)
        except JupyterError as exc:
            raise ExecdError(500, RUNTIME_ERROR, MSG["delete_context"].format(sid, exc)) from exc
        with self._lock:
            self.kernels.pop(sid, None)
            for lang in [lang for lang, s in self.defaults.items() if s == sid]:
                del self.defaults[lang]

    def delete_language(self, language: str) -> None:
        for c in self.list(language):
            try:
                self.delete(c["id"])
            except ExecdError as exc:
                raise ExecdError(
                    500,
                    RUNTIME_ERROR,
                    MSG["delete_context"].format(language, "error deleting context %s: %s" % (c["id"], exc.message)),
                ) from exc

    def interrupt(self, sid: str) -> bool:
        """interrupt.go: a Jupyter context's kernel is interrupted; False when sid is not one."""
        k = self.kernels.get(sid)
        if k is None:
            return False
        try:
            self.client.interrupt(k.kernel_id)
        except JupyterError as exc:
            raise ExecdError(500, RUNTIME_ERROR, MSG["interrupt"].format(exc)) from exc
        return True

    # -- runs --------------------------------------------------------------------------------
    def run(self, req: Request, language: str, context_id: str, code: str) -> None:
        """runJupyter + runJupyterCode + RunCode's hooks."""

        def gone() -> bool:
            return client_gone(req.handler.connection)

        if not context_id:
            if not self.defaults.get(language):
                try:
                    sid, kid = self._create(language, "", gone)
                except JupyterError as exc:
                    raise ExecdError(500, RUNTIME_ERROR, MSG["run_codes"].format(exc)) from exc
                with self._lock:
                    self.defaults[language] = sid
                    self.kernels[sid] = _Kernel(kid, language)
            context_id = self.defaults[language]
        kernel = self.kernels.get(context_id)
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
                ch = self.client.channel(kernel.kernel_id)
            except JupyterError as exc:
                fail(str(exc))
                return
            try:
                self._stream(req, ch, kernel, code, emit, fail, gone)
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
        req: Request,
        ch: Any,
        kernel: _Kernel,
        code: str,
        emit: Callable[[dict[str, Any]], None],
        fail: Callable[[str], None],
        gone: Callable[[], bool],
    ) -> None:
        msgs: queue.Queue = queue.Queue()

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
        while True:
            if finished and time.monotonic() >= next_check:
                if count > 0 or errored:
                    return  # finalizeExecution: idle seen, then polled until the reply's count or an error
                next_check += self.idle_poll
            try:
                m = msgs.get(timeout=max(0.0, next_check - time.monotonic()) if finished else 0.2)
            except queue.Empty:
                m = False
            if m is None:
                dead = True  # the kernel's socket ended: execd's receiver stops, the run waits for ctx
            if m is False or m is None:
                if gone() or self.stopping.is_set():
                    if not dead:
                        try:
                            self.client.interrupt(kernel.kernel_id)
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
