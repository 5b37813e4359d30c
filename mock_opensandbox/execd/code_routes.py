"""The /code group on a plain image (no Jupyter server configured), as the real binary answers it
(controller/codeinterpreting.go, runtime/context.go + ctrl.go; tiers/diff code.* cases):
contexts are never created (the Jupyter retry loop never ends: POST /code/context hangs), listing
is empty, a "" or "command" language runs the code as a foreground command, "background-command"
as a background one, "sql" fails to reach MySQL at 127.0.0.1:3306, every other known language
fails because no language runtime is configured. With JUPYTER_HOST + JUPYTER_TOKEN in the sandbox's
environment the Jupyter languages and contexts go to that server (execd/code_jupyter_routes.py)."""

from __future__ import annotations

import threading
import uuid
from typing import Any, Callable

from mock_opensandbox.execd import gin
from mock_opensandbox.execd.errors import (
    CONTEXT_NOT_FOUND,
    MSG,
    RUNTIME_ERROR,
    ExecdError,
    bad_body,
    invalid,
    missing_query,
)
from mock_opensandbox.wire import sse
from mock_opensandbox.wire.gojson import GoJSONError, Struct, decode, go_json
from mock_opensandbox.wire.http1 import Request

__all__ = ["CodeAPI", "JUPYTER_LANGUAGES"]

CODE_CONTEXT = Struct("model.CodeContext", {"id": "string", "language": "string", "cwd": "string"})
RUN_CODE = Struct("model.RunCodeRequest", {"context": CODE_CONTEXT, "code": "string"})
CONTEXT_REQUEST = Struct("model.CodeContextRequest", {"language": "string", "cwd": "string"})
JUPYTER_LANGUAGES = ("bash", "python", "java", "javascript", "typescript", "go")
NO_CONTEXT_OPS = ("command", "background-command", "sql")
NO_RUNTIME = "language runtime server not configured, please check your image runtime"


class CodeAPI:
    def __init__(
        self,
        run_command: Callable[[Request, dict[str, Any], bool], None],
        interrupt: Callable[[Request], None],
        stall: Callable[[Request], None],
        mode: str = "v1.1.0",
        jupyter: Callable[[], Any] | None = None,
    ):
        """run_command(req, spec, linger): stream a /command-style run (spec as CommandRoutes.parse returns).
        mode "latest": a code request without a language needs the (absent) runtime (QUIRKS.md,
        Transport, routing, auth: "latest mode"); the v1.0.19 binary runs it as a command (tiers/diff code.plain_image)."""
        self._run_command, self._interrupt, self._stall = run_command, interrupt, stall
        self.mode = mode
        self._jupyter_factory = jupyter  # () -> code_jupyter.JupyterCode | None (the sandbox names no server)
        self._jupyter: Any = None
        self._jlock = threading.Lock()

    def jupyter(self) -> Any:
        """The sandbox's Jupyter server (JUPYTER_HOST + JUPYTER_TOKEN), or None: read once, as execd
        reads its flags once at start (pkg/flag/parser.go)."""
        with self._jlock:
            if self._jupyter is None and self._jupyter_factory is not None:
                self._jupyter = self._jupyter_factory() or False
            return self._jupyter or None

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
                j.run(req, lang, (data.get("context") or {}).get("id") or "", data["code"])
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
        if j is not None:
            j.create_context(req, data.get("language") or "", data.get("cwd") or "")
            return
        self._stall(req)  # kernelWaitingBackoff retries the absent Jupyter server for minutes

    def list_contexts(self, req: Request) -> None:
        lang = req.q("language") or ""
        if lang in NO_CONTEXT_OPS:
            raise ExecdError(500, RUNTIME_ERROR, MSG["unsupported_language"].format(lang))
        j = self.jupyter()
        gin.json_reply(req, 200, j.list(lang) if j is not None else [])

    def delete_by_language(self, req: Request) -> None:
        if not req.q("language"):
            raise missing_query("language")
        j = self.jupyter()
        if j is not None:
            j.delete_language(req.q("language"))
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
