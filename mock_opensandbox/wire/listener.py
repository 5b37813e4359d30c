"""The mock's HTTP listener: Server, a threaded server that can be stopped from any thread and
serve only after a delay, and App, the interface of the application it serves. Split out of http1.py.
"""

from __future__ import annotations

import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from mock_opensandbox.wire import pollio


class App:
    """What every listener's application offers httpcore: the explicit interface (subclass it and
    set these in the constructor; nothing is attached from outside).

    * ``faults``: the fault registry (workbench/faults.py) whose rules apply to this listener, or None.
    * ``sandbox_id``: the sandbox this listener belongs to (an execd, a published port), or None
      (the lifecycle listener: the sandbox comes from the request path).
    * ``fault_listener``: the listener kind fault rules match ("lifecycle", "execd", "port"); None
      derives it from the handler flavor (uvicorn -> lifecycle, gin -> execd).
    * ``verbose``: write access logs to stderr.
    * ``journal``: the request journal (workbench/journal.py, the workbench) or None: ``journal.begin(handler,
      method) -> entry`` before anything is read or faulted, ``entry.end(fault)`` once it is over.
    """

    faults: Any = None
    sandbox_id: str | None = None
    fault_listener: str | None = None
    verbose: bool = False
    journal: Any = None


class Server(ThreadingHTTPServer):
    """A ThreadingHTTPServer that never blocks interpreter exit and can be stopped from any thread."""

    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False
    request_queue_size = 128

    def __init__(
        self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler], app: App, listen_delay: float = 0.0
    ):
        """``app``: an App (the explicit interface above: subclass it, or delegate every member to
        one, as admin.AdminLayer does). ``listen_delay``: the port is bound at once (so it can be
        announced) but only serves that many seconds after start(). Until then it is Docker's
        readiness window: the published port (docker-proxy) accepts a connection and closes it
        without an answer - a client sees EOF, or a reset when it had already sent its request - it
        is never refused (QUIRKS.md)."""
        self.app = app
        self._thread: threading.Thread | None = None
        self._listen_delay = max(0.0, float(listen_delay))
        self._cancel = threading.Event()
        self._serving = threading.Event()
        super().__init__(address, handler, bind_and_activate=self._listen_delay == 0)
        if self._listen_delay:
            try:
                self.server_bind()
            except BaseException:
                self.server_close()
                raise

    @property
    def port(self) -> int:
        return self.server_address[1]

    def start(self, name: str = "mock-http") -> None:
        if self._listen_delay:
            self.server_activate()  # the port accepts from now on; _run drops what arrives before the delay ends
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if self._listen_delay:
            deadline = time.monotonic() + self._listen_delay
            while not self._cancel.is_set() and time.monotonic() < deadline:
                ready = pollio.readable([self.socket], min(0.05, max(0.0, deadline - time.monotonic())))
                if ready:
                    try:
                        conn, _ = self.socket.accept()
                    except OSError:
                        continue
                    conn.close()  # accepted, then dropped unanswered: nothing listens behind the proxy yet
            if self._cancel.is_set():
                return
        self._serving.set()
        self.serve_forever(poll_interval=0.1)

    def stop(self) -> None:
        self._cancel.set()
        if self._thread is not None and not self._serving.is_set():
            self._thread.join(timeout=5)  # cancelled before it listened
            if not self._serving.is_set():
                self._thread = None
        if self._thread is not None:
            # shutdown() waits for serve_forever to notice the request, up to a poll interval; poking
            # the listener wakes its selector at once (the wake-up connection is never accepted)
            stopper = threading.Thread(target=self.shutdown, daemon=True)
            stopper.start()
            while stopper.is_alive():
                try:
                    socket.create_connection(self.server_address[:2], timeout=0.2).close()
                except OSError:
                    pass
                stopper.join(0.01)
            self._thread.join(timeout=5)
            self._thread = None
        self.server_close()
