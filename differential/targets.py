"""The two sides of the differential check: the real execd binary and the mock's execd, each in a
throw-away sandbox root of its own.

SAFETY: the real binary has no sandbox of its own and acts on whatever file system it sees. It is
only ever started through ``SandboxRuntime.spawn`` with isolation required (``isolate=True``): its
own mount + PID namespace whose "/" is the throw-away root (the binary is copied to
``/opt/opensandbox/execd`` inside it, as the real image bootstrap does). If isolation is not
available the real side refuses to start. Its listener (all interfaces, execd's ``net.Listen(":P")``)
uses an ephemeral port and is stopped in ``stop()`` (callers use ``with`` / ``finally``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any

from differential.client import build_request, raw_request

__all__ = ["Target", "RealExecd", "MockExecd", "IsolationUnavailable"]

SANDBOX_EXECD = "/opt/opensandbox/execd"
GRACE_MS = 100  # execd's ApiGracefulShutdownTimeout (default 1 s) shortened on both sides: same behaviour, faster


class IsolationUnavailable(RuntimeError):
    pass


class Target:
    """One execd under test: ``port``, ``root`` (host path of the sandbox's "/"), start/stop."""

    name = "?"
    port = 0
    root = ""

    def __init__(self, access_token: str | None = None):
        self.access_token = access_token
        self.runtime: Any = None

    def _make_root(self, env: dict[str, str] | None = None) -> str:
        from mock_opensandbox.runtime import SandboxRuntime

        root = tempfile.mkdtemp(prefix=f"osb-diff-{self.name}-")
        os.chmod(root, 0o755)
        try:
            self.runtime = SandboxRuntime(root, env=env, isolate=True)
        except RuntimeError as exc:
            shutil.rmtree(root, ignore_errors=True)
            raise IsolationUnavailable(str(exc)) from exc
        self.root = self.runtime.root
        os.makedirs(os.path.join(self.root, "opt", "opensandbox"), exist_ok=True)
        return self.root

    def _drop_root(self) -> None:
        """The end of stop(): the sandbox's processes and its root go."""
        if self.runtime is not None:
            self.runtime.cleanup()
            self.runtime = None
        if self.root and os.path.isdir(self.root):
            shutil.rmtree(self.root, ignore_errors=True)

    def host(self, sandbox_path: str) -> str:
        """Host path of a sandbox path (for the harness's own setup and snapshots)."""
        return self.runtime.resolve(sandbox_path, follow_symlinks=False)

    def wait_ready(self, timeout: float = 20.0) -> None:
        deadline = time.monotonic() + timeout
        hdr = [("X-EXECD-ACCESS-TOKEN", self.access_token)] if self.access_token else []
        while time.monotonic() < deadline:
            try:
                r = raw_request(self.port, build_request("GET", "/ping", f"127.0.0.1:{self.port}", hdr), timeout=1)
                if r.status:
                    return
            except OSError:
                pass
            self._check_alive()
            time.sleep(0.02)
        raise RuntimeError(f"{self.name} execd did not answer /ping on port {self.port}")

    def _check_alive(self) -> None:
        pass

    def start(self) -> "Target":
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> "Target":
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class RealExecd(Target):
    """The real execd binary inside a throw-away isolated sandbox (never on the host)."""

    name = "real"

    def __init__(self, binary: str, access_token: str | None = None):
        super().__init__(access_token)
        self.binary = binary
        self.proc: Any = None

    def start(self) -> "RealExecd":
        if not os.path.isfile(self.binary):
            raise FileNotFoundError(self.binary)
        self._make_root()
        if not self.runtime.isolated:  # pragma: no cover - isolate=True raises before
            raise IsolationUnavailable("the real execd needs an isolated sandbox view")
        # runtime.start_execd (QUIRKS.md, MockOpenSandbox / CLI, `execd_bin`): copied to /opt/opensandbox/execd, started like
        # bootstrap.sh in the sandbox's own namespaces with its capability set; never on the host
        try:
            self.proc = self.runtime.start_execd(
                self.binary,
                token=self.access_token,
                args=["--graceful-shutdown-timeout", f"{GRACE_MS}ms", "--log-level", "3"],
            )
        except RuntimeError as exc:
            raise IsolationUnavailable(str(exc)) from exc
        self.port = self.proc.port
        self.wait_ready()
        return self

    def stop(self) -> None:
        try:
            if self.proc is not None:
                self.proc.stop()
        finally:
            self._drop_root()


class MockExecd(Target):
    """The mock's execd (``v1.1.0`` mode, the dialect the v1.0.19 binary speaks) on its own runtime."""

    name = "mock"

    def __init__(self, access_token: str | None = None, mode: str = "v1.1.0"):
        super().__init__(access_token)
        self.mode = mode
        self.server: Any = None

    def start(self) -> "MockExecd":
        from mock_opensandbox.execd.server import ExecdServer

        # the environment bootstrap.sh gives the real execd (and so its commands)
        self._make_root({"EXECD_ENVS": "/opt/opensandbox/.env"})
        open(os.path.join(self.root, "opt", "opensandbox", ".env"), "a").close()
        self.server = ExecdServer(
            self.runtime, mode=self.mode, access_token=self.access_token, close_delay=GRACE_MS / 1000.0
        )
        self.server.start()
        self.port = self.server.port
        self.wait_ready()
        return self

    def stop(self) -> None:
        try:
            if self.server is not None:
                self.server.stop()
                self.server = None
            if self.runtime is not None:
                self.runtime.terminate()
        finally:
            self._drop_root()
