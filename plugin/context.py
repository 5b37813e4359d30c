"""What one plugin process holds, handed to every method as ``ctx``: the settings initialize gave,
the configuration and the OpenSandbox client (each built once, on first use), the foreground
commands it runs and its terminals. provider.py builds it and wires it to the protocol loop.

Imported at start-up, so it imports nothing heavy at module level: ``config`` and the client
arrive with the first call that needs them.
"""

from __future__ import annotations

import os
import threading
import time

from errors import EppError

TYPE_CHECKING = False  # (typing is not imported at start-up: it costs milliseconds)
if TYPE_CHECKING:
    from typing import Any, Callable, Protocol, TypeVar

    from config import Config
    from epp import Server
    from osb import CommandRun, OpenSandbox

    T = TypeVar("T")

    class Terminals(Protocol):
        """methods/pty.py's PtyManager as the context sees it (the methods' layer is above this one)."""

        def close_sandbox(self, sandbox_id: str, *, delete: bool = False) -> None: ...

        def close_all(self, timeout: float = 1.5) -> None: ...


class Context:
    """Public attributes: ``raw_config``/``core``/``data_dir`` (from initialize and the
    environment), ``cfg`` (the Config once built; None before, or when a setting is bad), ``osb``
    (the client once built), ``runs`` (foreground CommandRuns to stop at exit), ``terminals`` (the
    terminal manager after the first pty.open), ``closing`` (set when input ends or on shutdown),
    and the loop's ``notify`` / ``log``."""

    def __init__(self, server: Server) -> None:
        self.server = server
        self.notify = server.notify
        self.log = server.log_stderr
        self.closing = server.closing
        self.raw_config: dict[str, Any] = {}
        self.core: dict[str, Any] = {}
        self.data_dir: str | None = os.environ.get("ABX_PROVIDER_DATA_DIR") or None
        self.cfg: Config | None = None
        self.cfg_error: EppError | None = None
        self.osb: OpenSandbox | None = None
        self.runs: set[CommandRun] = set()
        self.terminals: Terminals | None = None
        self.lock = threading.Lock()

    # ---- configuration and client, built once per process on first use

    def config(self) -> Config:
        """The coerced configuration; a bad setting fails every call alike."""
        with self.lock:
            if self.cfg is None and self.cfg_error is None:
                from config import Config

                try:
                    self.cfg = Config(self.raw_config, self.core)
                except EppError as exc:
                    self.cfg_error = exc
            if self.cfg_error is not None:
                raise self.cfg_error
            assert self.cfg is not None
            return self.cfg

    def client(self) -> OpenSandbox:
        """The OpenSandbox client of this process."""
        cfg = self.config()
        with self.lock:
            if self.osb is None:
                from osb import Http, OpenSandbox

                self.osb = OpenSandbox(
                    cfg.server,
                    api_key=cfg.api_key,
                    http=Http(cfg.http_timeout),
                    data_dir=self.data_dir,
                    use_server_proxy=cfg.use_server_proxy,
                    execd_token=cfg.execd_access_token,
                    scheme=cfg.protocol,
                )
            return self.osb

    # ---- failures

    def error(self, exc: Exception, op: str, target: str = "") -> EppError:
        """A client failure as the EPP error of a call of kind ``op`` (failures.map_osb_error)."""
        from failures import map_osb_error

        return map_osb_error(exc, op=op, cfg=self.cfg, target=target)

    def guard(self, fn: Callable[[], T], *, op: str, target: str = "") -> T:
        """Run an OpenSandbox call and map its failure."""
        try:
            return fn()
        except EppError:
            raise
        except Exception as exc:  # noqa: BLE001 - whatever the client raised becomes an EppError
            raise self.error(exc, op, target) from None

    def map_error(self, exc: Exception, method: str) -> EppError:
        """The loop's hook: an exception a method let through."""
        from failures import op_kind

        return self.error(exc, op_kind(method))

    # ---- end of input

    def close(self, deadline: float) -> None:
        """The loop's on_exit hook: stop the foreground commands still running (best effort, in
        parallel), let answers in flight go out (until ``deadline``), end the terminals (their
        sessions are deleted in execd), drop the idle connections."""
        threads = [threading.Thread(target=run.stop, args=(1.5,), daemon=True) for run in list(self.runs)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        self.server.drain(deadline)
        if self.terminals is not None:
            self.terminals.close_all()
        if self.osb is not None:
            self.osb.http.close()
