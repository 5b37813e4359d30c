"""The /code group's state, no HTTP (execd/code_routes.py is its HTTP side): the sandbox's code interpreter
(``CodeInterpreter``: its Jupyter server, read once) and, when the sandbox names a Jupyter server
(JUPYTER_HOST and JUPYTER_TOKEN in its environment: the image's Env or the create request's env; execd reads them
at start, pkg/flag/parser.go), that server's contexts (``JupyterContexts``) as execd keeps them at 3bb6fad:
components/execd/pkg/runtime/context.go, jupyter.go, interrupt.go. Contexts are Jupyter sessions (one kernel
each, the kernelspec found by language, never "python3"), a default context per language made on the first run
without a context id, one lock per context (TryLock: "session is busy"). Behaviour rows: QUIRKS.md (part 2,
"/code with Jupyter")."""

from __future__ import annotations

import os
import re
import socket
import threading
import time
import uuid
from typing import Any, Callable

from mock_opensandbox.execd.errors import CONTEXT_NOT_FOUND, MSG, RUNTIME_ERROR, ExecdError
from mock_opensandbox.execd.jupyter import JupyterClient, JupyterError
from mock_opensandbox.runtime import SandboxRuntime

__all__ = ["CodeInterpreter", "JupyterContexts", "Kernel", "NoKernelSpec", "jupyter_from_env"]

# kernelWaitingBackoff (runtime/ctrl.go: 60 steps from 0.5 s, factor 1.5, no cap) retries for longer than any
# client waits, so by default the mock retries until the client leaves; MockOptions.code_context_wait bounds it
GONE_POLL_S = 0.2  # how soon a client that left is noticed between attempts
IDLE_POLL_S = 0.1  # JupyterIdlePollInterval; EXECD_JUPYTER_IDLE_POLL_INTERVAL (a Go duration > 0) sets it
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


class NoKernelSpec(JupyterError):
    """The Jupyter server answered and has kernel specs, none of them for the language asked."""


class Kernel:
    """One context's kernel: its Jupyter kernel id, its language, its run lock (TryLock)."""

    def __init__(self, kernel_id: str, language: str):
        self.kernel_id, self.language = kernel_id, language
        self.lock = threading.Lock()


class JupyterContexts:
    """The contexts of one Jupyter server. ``connect(host, port, timeout)`` opens a TCP connection as the
    sandbox sees it; ``stopping`` is the execd server's stop event; ``mkdir(path)`` makes a context's cwd."""

    def __init__(
        self,
        base_url: str,
        token: str,
        connect: Callable[[str, int, float], socket.socket],
        stopping: threading.Event,
        mkdir: Callable[[str], None],
        idle_poll: float = IDLE_POLL_S,
        create_wait: float | None = None,
        unknown_language_wait: float | None = None,
    ):
        self.idle_poll = idle_poll
        self.create_wait = create_wait
        self.unknown_language_wait = unknown_language_wait
        self.client = JupyterClient(base_url, token, connect)
        self.stopping = stopping
        self._mkdir = mkdir
        self._lock = threading.Lock()
        self.kernels: dict[str, Kernel] = {}  # jupyterClientMap: session id -> kernel
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
            raise NoKernelSpec("no kernel specs found")
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
        execd stops (or create_wait seconds, when set); then JupyterError with the last error.
        ``unknown_language_wait`` (when set, 0 with the fast timing) bounds the retries once the server has
        answered with kernel specs and none is of the language: that answer does not change while it runs."""
        start = time.monotonic()
        deadline = None if self.create_wait is None else start + self.create_wait
        delay = 0.5
        while True:
            try:
                return self._create_once(language, cwd)
            except (JupyterError, OSError, ValueError) as exc:
                last = exc
            until = time.monotonic() + delay
            if deadline is not None and until > deadline:
                raise JupyterError(str(last))
            unknown = self.unknown_language_wait
            if isinstance(last, NoKernelSpec) and unknown is not None and until > start + unknown:
                raise JupyterError(str(last))
            while True:  # the backoff's wait, watching the client
                left = until - time.monotonic()
                if gone() or self.stopping.wait(max(0.0, min(GONE_POLL_S, left))):
                    raise JupyterError(str(last))
                if left <= GONE_POLL_S:
                    break
            delay = min(delay * 1.5, 5.0)

    def create(self, language: str, cwd: str, gone: Callable[[], bool]) -> str:
        """createContext: a new context (its session id), retried as _create; JupyterError with the last error."""
        sid, kid = self._create(language, cwd, gone)
        with self._lock:
            self.kernels[sid] = Kernel(kid, language)
        return sid

    def default_context(self, language: str, gone: Callable[[], bool]) -> str:
        """runJupyter without a context id: the language's default context, made on its first run."""
        if not self.defaults.get(language):
            sid, kid = self._create(language, "", gone)
            with self._lock:
                self.defaults[language] = sid
                self.kernels[sid] = Kernel(kid, language)
        return self.defaults[language]

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


class CodeInterpreter:
    """The sandbox's code interpreter: its Jupyter server's contexts, or None (the sandbox names no server).
    ``jupyter`` makes them; it is called once, at first use, as execd reads its flags once at start
    (pkg/flag/parser.go)."""

    def __init__(self, jupyter: Callable[[], JupyterContexts | None] | None = None):
        self._factory = jupyter
        self._jupyter: JupyterContexts | None = None
        self._made = False
        self._lock = threading.Lock()

    def jupyter(self) -> JupyterContexts | None:
        with self._lock:
            if not self._made and self._factory is not None:
                self._jupyter, self._made = self._factory(), True
            return self._jupyter


def jupyter_from_env(
    runtime: SandboxRuntime,
    stopping: threading.Event,
    create_wait: float | None,
    unknown_language_wait: float | None = None,
) -> JupyterContexts | None:
    """The sandbox's Jupyter server, reached from inside its network namespace; None when JUPYTER_HOST or
    JUPYTER_TOKEN is unset (runtime/jupyter.go). ``create_wait``: how long a context's kernel start is retried
    (None: until the client leaves); ``unknown_language_wait``: how long once the server has no spec of the
    language (None: as create_wait)."""
    try:
        env = runtime.base_env()
    except Exception:  # noqa: BLE001 - a runtime without an environment names no server
        return None
    host, token = env.get("JUPYTER_HOST", ""), env.get("JUPYTER_TOKEN", "")
    if not host or not token:
        return None

    def connect(h: str, port: int, timeout: float) -> socket.socket:
        if h in ("127.0.0.1", "localhost", "::1"):
            return runtime.connect(port, timeout=timeout)
        return socket.create_connection((h, port), timeout=timeout)

    def mkdir(path: str) -> None:
        try:
            os.makedirs(runtime.resolve(path), exist_ok=True)
        except (OSError, ValueError):
            pass

    return JupyterContexts(
        host,
        token,
        connect,
        stopping,
        mkdir,
        idle_poll=idle_poll_s(env.get("EXECD_JUPYTER_IDLE_POLL_INTERVAL")),
        create_wait=create_wait,
        unknown_language_wait=unknown_language_wait,
    )
