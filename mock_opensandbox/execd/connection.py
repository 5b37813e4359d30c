"""The execd listener's connections: the request handler class, and the raw reads and writes that
freeze while the sandbox is paused (a request in flight stalls like the real, frozen execd)."""

from __future__ import annotations

import errno
import io
import os
import socket
import threading
from typing import Any, Protocol, cast

from mock_opensandbox.runtime import SandboxRuntime
from mock_opensandbox.wire.http1 import Handler, Request
from mock_opensandbox.wire.listener import ResponseStream, SendfileRefused


class ExecdApp(Protocol):
    """What a connection needs of its app (execd/server.py ExecdServer): the sandbox, the server's stop
    event, the register of open connections (stop() shuts them) and the dispatch."""

    runtime: SandboxRuntime
    stopping: threading.Event

    def track(self, conn: socket.socket, add: bool) -> None: ...

    def handle(self, req: Request) -> None: ...


def _frozen_wait(app: ExecdApp) -> None:
    """Block while the sandbox is paused: `docker pause` freezes the real execd, so a request in flight
    (an upload's body, a streamed answer) stalls until resume (QUIRKS.md, "Pause"). stop() or the
    sandbox's end lets it through (the connection is dropped then)."""
    rt, stopping = app.runtime, app.stopping
    while rt.paused and not stopping.is_set() and not rt.terminated:
        rt.wait_unpaused(0.1)


class _FrozenReader(io.RawIOBase):
    """A connection's raw input that reads nothing while the sandbox is paused; one read returns at most
    FROZEN_READ bytes, so a read blocked in recv when the pause comes takes no more than that."""

    def __init__(self, raw: io.RawIOBase | io.BufferedIOBase, app: ExecdApp):
        super().__init__()
        self._raw, self._app = raw, app

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> Any:
        _frozen_wait(self._app)
        with memoryview(b) as view:
            return self._raw.readinto(view[:FROZEN_READ])

    def fileno(self) -> int:
        return self._raw.fileno()

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()


class _FrozenWriter:
    """A connection's output that writes nothing while the sandbox is paused."""

    def __init__(self, raw: ResponseStream, app: ExecdApp):
        self._raw, self._app = raw, app

    def write(self, b: Any) -> Any:
        _frozen_wait(self._app)
        return self._raw.write(b)

    def flush(self) -> Any:
        return self._raw.flush()

    def sendfile(self, sock: socket.socket, fd: int, offset: int, count: int) -> int:
        """``count`` bytes of the file ``fd`` from ``offset`` to the connection's (blocking) socket by
        sendfile(2), FROZEN_READ at a time so a pause stalls the copy as it stalls write(); the bytes sent
        (fewer when the file ended first). Raises OSError like write()."""
        sent = 0
        while sent < count:
            _frozen_wait(self._app)
            try:
                n = os.sendfile(sock.fileno(), fd, offset + sent, min(count - sent, FROZEN_READ))
            except OSError as exc:
                if sent == 0 and exc.errno in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
                    raise SendfileRefused(str(exc)) from None
                raise
            if n == 0:
                break
            sent += n
        return sent

    def __getattr__(self, name: str) -> Any:
        return getattr(self._raw, name)


def cork(sock: socket.socket, on: bool) -> bool:
    """TCP_CORK on a connection (on: what is written waits for more, up to a full segment; off: it leaves), so a
    head and the bytes right behind it reach the client in one segment and one wake-up, not two; False where the
    socket takes none (not TCP)."""
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1 if on else 0)
        return True
    except (OSError, AttributeError):
        return False


FROZEN_READ = 64 * 1024


class _ExecdHandler(Handler):
    flavor = "gin"

    def _app(self) -> ExecdApp:
        return cast(ExecdApp, self.server.app)  # the App this handler class is given to: an ExecdServer

    def setup(self) -> None:
        super().setup()
        app = self._app()
        app.track(self.connection, True)
        rfile = self.rfile  # StreamRequestHandler.setup's own reader (no wrapper yet), nothing read yet
        raw = rfile.detach() if isinstance(rfile, io.BufferedReader) else cast(io.BufferedIOBase, rfile)
        self.rfile = io.BufferedReader(_FrozenReader(raw, app))
        self.wfile = _FrozenWriter(self.wfile, app)

    def finish(self) -> None:
        try:
            super().finish()
        finally:
            self._app().track(self.connection, False)

    def dispatch(self, req: Request) -> None:
        self._app().handle(req)
