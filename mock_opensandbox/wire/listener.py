"""The mock's HTTP listener: Server, a threaded server that can be stopped from any thread and
serve only after a delay, and App, the interface of the application it serves, with what an app is given
(FaultRules, RequestJournal) and what those are given of a request (RequestHandler). Split out of http1.py.
"""

from __future__ import annotations

import errno
import socket
import sys
import threading
import time
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from mock_opensandbox.wire import pollio


class RequestStream(Protocol):
    """A request's input as its handler reads it: the connection's buffered reader, or a wrapper of it that keeps
    what crosses (workbench/journal.py _TeeReader)."""

    def read(self, size: int | None = -1, /) -> bytes: ...

    def read1(self, size: int = -1, /) -> bytes: ...

    def readline(self, size: int | None = -1, /) -> bytes: ...

    def readinto(self, buffer: bytearray | memoryview, /) -> int: ...


class ResponseStream(Protocol):
    """A request's output as its handler writes it: the connection's buffered writer, or a wrapper of it (the
    journal's tee, a fault's cut or dribbled body: workbench/journal.py _TeeWriter, workbench/faultinject.py
    _FaultyWriter; a paused sandbox's: execd/connection.py _FrozenWriter). A stream may also have
    ``sendfile(sock, fd, offset, count) -> int``: a file's bytes to the socket without a copy through Python (the
    execd download); a wrapper that must see the bytes either has one that accounts for them or sets it to None
    (then the route writes them)."""

    def write(self, data: bytes, /) -> int: ...

    def flush(self) -> None: ...


class SendfileRefused(Exception):
    """A stream's sendfile took no byte of the file (sendfile(2) EINVAL: not a file it maps; or no stream under
    the wrapper can send a file): the caller writes the bytes instead."""


class RequestHandler(Protocol):
    """The handler of one request as the fault rules and the request journal use it (wire/http1.py ``Handler``
    is one: it passes itself to ``FaultRules.inject`` and ``RequestJournal.begin``, which mypy checks against
    this). Read only: the request line's target, its headers, the peer, the socket, the listener (``server.app``
    names its sandbox and fault listener), the ``flavor`` (uvicorn: lifecycle, gin: execd); set as well: whether
    the connection closes after this request, the input and output streams (a journal's tee, a fault's writer
    put in and taken out again), and ``pod_outcome`` (a fault's word to a Kubernetes create). The methods are
    BaseHTTPRequestHandler's, to read the body and answer in place of the route."""

    @property
    def path(self) -> str: ...

    @property
    def headers(self) -> Message: ...

    @property
    def client_address(self) -> tuple[str, int] | tuple[str, int, int, int]: ...

    @property
    def connection(self) -> socket.socket: ...

    @property
    def server(self) -> Server: ...

    @property
    def flavor(self) -> str: ...

    close_connection: bool
    rfile: RequestStream
    wfile: ResponseStream
    pod_outcome: object | None

    def read_body(self) -> bytes: ...

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None: ...

    def send_response_only(self, code: int, message: str | None = None) -> None: ...

    def send_header(self, keyword: str, value: str) -> None: ...

    def end_headers(self) -> None: ...

    def date_time_string(self, timestamp: float | None = None) -> str: ...


class Fault(Protocol):
    """A fault started on one request (workbench/faultinject.py Injection): ``done`` when it has answered (or
    broken off) the request itself, ``finish()`` once the request is over."""

    done: bool

    def finish(self) -> None: ...


class FaultRules(Protocol):
    """A listener's fault rules as the wire uses them (workbench/faults.py FaultRegistry): ``armed`` while a rule
    can still fire; ``inject(handler, method)`` starts the fault a rule makes of this request, or None. Whoever
    builds the registry plugs the injector in (server.py, workbench/proxy.py); the wire never imports it."""

    armed: bool

    def inject(self, handler: RequestHandler, method: str) -> Fault | None: ...


class JournalEntry(Protocol):
    """One request in a RequestJournal: ``end(fault)`` once it is over (answered, faulted, reset or broken off)."""

    def end(self, fault: Fault | None = None) -> None: ...


class RequestJournal(Protocol):
    """The request journal as the wire uses it (workbench/journal.py Journal): ``begin(handler, method)`` before
    anything is read or faulted."""

    def begin(self, handler: RequestHandler, method: str) -> JournalEntry | None: ...


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

    faults: FaultRules | None = None
    sandbox_id: str | None = None
    fault_listener: str | None = None
    verbose: bool = False
    journal: RequestJournal | None = None


class Server(ThreadingHTTPServer):
    """A ThreadingHTTPServer that never blocks interpreter exit and can be stopped from any thread. Its
    threads accept and serve (``_accept_loop``): a connection is served by the thread the kernel woke for
    it, not handed to a thread started for it (that start and hand-off cost ~0.3 ms a request:
    bench/README.md)."""

    daemon_threads = True
    allow_reuse_address = True
    block_on_close = False
    request_queue_size = 128
    SPARE = 4  # threads of the accept pool left waiting in accept() once the connections they served are over

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
        self._init_state(listen_delay)
        super().__init__(address, handler, bind_and_activate=self._listen_delay == 0)
        if self._listen_delay:
            try:
                self.server_bind()
            except BaseException:
                self.server_close()
                raise

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away (a reset or a broken pipe, e.g. a kept-alive connection closed with unread
        data) is no error of the mock's: nothing is printed, as Go's server prints nothing. Anything else is
        socketserver's traceback on stderr."""
        if isinstance(sys.exc_info()[1], (ConnectionResetError, BrokenPipeError, ConnectionAbortedError)):
            return
        super().handle_error(request, client_address)

    def _init_state(self, listen_delay: float) -> None:
        """The listener's own state (a subclass that makes its socket itself calls this instead of __init__)."""
        self._thread: threading.Thread | None = None
        self._listen_delay = max(0.0, float(listen_delay))
        self._cancel = threading.Event()
        self._serving = threading.Event()
        self._pool_lock = threading.Lock()
        self._accepting: set[threading.Thread] = set()  # pool threads in accept() (_accept_loop; stop() waits for them)

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
        self._accept_loop()

    def _accept_loop(self) -> None:
        """One thread of the pool: blocked in accept(), it serves the connection it gets itself (no hand-off to
        a thread started for it: the kernel wakes this one), then accepts again. A thread that takes the
        last idle place starts another first, so one always waits in accept() while any serves a
        connection; one that finds SPARE others idle when done ends. stop() shuts the socket down, which
        wakes every accept() (EINVAL)."""
        while True:
            me = threading.current_thread()
            with self._pool_lock:
                if self._cancel.is_set():
                    return
                self._accepting.add(me)
            try:
                conn, addr = self.socket.accept()
            except OSError as exc:
                with self._pool_lock:
                    self._accepting.discard(me)
                if self._cancel.is_set() or exc.errno in (errno.EINVAL, errno.EBADF):
                    return
                time.sleep(0.05)  # EMFILE, ECONNABORTED, ...: back off and go on (as Go's http.Server)
                continue
            with self._pool_lock:
                self._accepting.discard(me)
                more = not self._accepting and not self._cancel.is_set()
            if more:
                threading.Thread(target=self._accept_loop, name=me.name, daemon=True).start()
            conn.setblocking(True)
            self.process_request_thread(conn, addr)  # ThreadingMixIn: finish_request, then shutdown_request
            with self._pool_lock:
                if len(self._accepting) >= self.SPARE:
                    return

    def stop(self) -> None:
        self._cancel.set()
        if self._thread is not None and not self._serving.is_set():
            self._thread.join(timeout=5)  # cancelled before it listened
            if not self._serving.is_set():
                self._thread = None
        if self._thread is not None:
            with self._pool_lock:
                accepting = list(self._accepting)
            try:
                # wakes every thread blocked in accept() (EINVAL): they end, and stop() waits for that; a thread
                # serving a connection ends when that is over (not waited for: it may be a stream of minutes)
                self.socket.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            deadline = time.monotonic() + 5
            for t in accepting:
                t.join(max(0.0, deadline - time.monotonic()))
            self._thread = None
        self.server_close()
