"""execd's port as the sandbox itself sees it: ``127.0.0.1:44772`` inside its own network namespace.

The real execd listens on ``:44772`` inside the container, so code in a sandbox reaches it there
(fixtures/22_sandbox_inside.json, probe ``connect_host``: ``loopback_execd=connected``). The mock's
execd runs in the mock's own process and listens on the host's 127.0.0.1:<ephemeral>; for a
sandbox with a network namespace of its own, ``InsideListener`` adds a second listening socket,
created *in* that namespace (``SandboxRuntime.listen``: setns as root, the in-sandbox agent or a
helper otherwise, the socket handed back with SCM_RIGHTS), and one accept thread that hands every
connection to the same ExecdServer (``process_request``): same handler, routes, access token, request
journal and fault rules as the outside listener. Only the ingress gateway's routing headers are not
asked for: a connection from inside never passes the gateway.

It dies with the sandbox: ExecdServer.stop() closes it (shutdown(SHUT_RD) wakes the blocked accept),
and the namespace it keeps alive goes with it. A paused sandbox cannot connect (its processes are
frozen); a connection made before the pause waits in ExecdServer.handle like every request.
Standard library only.
"""

from __future__ import annotations

import errno
import socket
import socketserver
import threading
import time

from mock_opensandbox.runtime import SandboxRuntime
from mock_opensandbox.wire.http1 import Handler
from mock_opensandbox.wire.listener import App, Server

EXECD_PORT = 44772


class _InsideServer(Server):
    """The httpcore Server for connections accepted inside the sandbox (never binds on the host)."""

    inside = True

    def __init__(self, sock: socket.socket, handler: type[Handler], app: App):  # no bind, no listen: sock is given
        self.app = app
        self._thread = None
        self._listen_delay = 0.0
        self._cancel = threading.Event()
        self._serving = threading.Event()
        socketserver.BaseServer.__init__(self, sock.getsockname(), handler)
        self.socket = sock
        host, port = sock.getsockname()[:2]  # server_address, as BaseServer set it
        self.server_name, self.server_port = host, port


class InsideListener:
    """Listen on 0.0.0.0:``port`` in ``runtime``'s network namespace and feed ``app``'s handler."""

    def __init__(
        self, app: App, handler: type[Handler], runtime: SandboxRuntime, port: int = EXECD_PORT, delay: float = 0.0
    ):
        self.app = app
        self.handler = handler
        self.runtime = runtime
        self.port = port
        self.delay = max(0.0, float(delay))
        self.note = ""  # why there is no listener inside ("" while there is one, or before it is tried)
        self.ready = threading.Event()  # set once it listens, or gave up
        self._cancel = threading.Event()
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None
        self._thread: threading.Thread | None = None

    @property
    def listening(self) -> bool:
        return self._sock is not None and not self._cancel.is_set()

    def start(self) -> None:
        """Listen now when that is cheap (root: setns), else from the accept thread (the agent's
        answer is awaited there, never by the caller)."""
        net = getattr(self.runtime.pid1.holder, "net", None)
        if self.delay == 0 and getattr(net, "netns_fd", None) is not None:
            self._open()
            if self._sock is None:
                return
        self._thread = threading.Thread(target=self._run, name="execd-inside-%d" % self.port, daemon=True)
        self._thread.start()

    def _open(self) -> None:
        try:
            sock = self.runtime.listen(self.port)
        except (OSError, RuntimeError) as exc:  # no namespace, not running, agent gone
            self.note = "execd does not listen inside the sandbox (%s)" % (exc,)
            self.ready.set()
            return
        with self._lock:
            if self._cancel.is_set():
                sock.close()
                self.ready.set()
                return
            self._sock = sock
        self.ready.set()

    def _run(self) -> None:
        if self._sock is None:
            if self.delay and self._cancel.wait(self.delay):
                self.ready.set()
                return
            self._open()
        sock = self._sock
        if sock is None:
            return
        srv = _InsideServer(sock, self.handler, self.app)
        while not self._cancel.is_set():
            try:
                conn, addr = sock.accept()
            except OSError as exc:
                if self._cancel.is_set() or exc.errno in (errno.EINVAL, errno.EBADF):
                    break  # stopped (shutdown wakes accept with EINVAL)
                time.sleep(0.05)  # EMFILE, ECONNABORTED, ...: as Go's http.Server, back off and go on
                continue
            conn.setblocking(True)
            try:
                srv.process_request(conn, addr)  # ThreadingMixIn: one thread per connection, as outside
            except Exception:
                srv.shutdown_request(conn)

    def stop(self) -> None:
        self._cancel.set()
        with self._lock:
            sock = self._sock
        if sock is not None:
            try:
                sock.shutdown(socket.SHUT_RDWR)  # wakes the thread blocked in accept()
            except OSError:
                pass
        t, self._thread = self._thread, None
        if t is not None and t is not threading.current_thread():
            t.join(timeout=5)
        with self._lock:
            sock, self._sock = self._sock, None
        if sock is not None:
            sock.close()
        self.ready.set()
