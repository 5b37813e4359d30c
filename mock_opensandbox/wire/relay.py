"""Relays between a client connection and a backend connection, for the mock's proxies.

* ``TCPRelay``: a listener on the host's 127.0.0.1 whose every connection is joined byte for byte
  to a connection that ``connect()`` opens - docker-proxy's shape for a published container port.
  The backend is usually ``SandboxRuntime.connect(port)``: a port inside the sandbox's network
  namespace. A connection is accepted first and the backend connected after, so while nothing
  listens inside (a sandbox whose execd has not started yet) a client sees its connection accepted
  and then dropped, as through Docker's published port.
* ``pump()``: one direction of such a join (also usable by an HTTP proxy for an upgraded
  connection).
* ``HOP_BY_HOP``, ``connection_tokens()`` and ``forwardable()``: the headers a reverse proxy never
  forwards (RFC 9110 7.6.1, as Go's httputil.ReverseProxy and the server's proxy drop them) and the
  one filter that drops them, for the HTTP-level proxies (lifecycle/proxy.py's server proxy and 8080
  listener, execd's /proxy/<port>, workbench/proxy.py), both ways; each proxy's policy (``drop=``) is this
  set, or this set with ``FRAMING`` (Host, Content-Length: what the proxy writes itself), or less
  (the server's proxy passes proxy-connection), plus what else it strips.
* ``free_port()`` (an ephemeral port nothing listens on yet) and ``client_gone()`` (has the peer of a
  connection we are holding unanswered gone away?): the mock's one copy of each.

Standard library only.
"""

from __future__ import annotations

import socket
import threading
from typing import AbstractSet, Any, Callable, Iterable

from mock_opensandbox.wire import pollio

HOP_BY_HOP = frozenset(
    (
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "proxy-connection",
    )
)
# what an HTTP proxy writes itself for the side it sends to, never copied from what it read
FRAMING = frozenset(("host", "content-length"))
BUFSIZE = 256 * 1024


def connection_tokens(values: Iterable[str | None]) -> set[str]:
    """The header names listed in Connection header values (dropped with the hop-by-hop ones)."""
    return {t.strip().lower() for v in values if v for t in v.split(",") if t.strip()}


def forwardable(
    headers: Iterable[tuple[str, str]],
    drop: AbstractSet[str] = HOP_BY_HOP,
    *,
    connection: Iterable[str | None] | None = None,
) -> list[tuple[str, str]]:
    """The ``(name, value)`` pairs of ``headers`` a proxy passes on, in order, repeats kept: all but those
    named in ``drop`` (lower case) and those listed in *every* Connection header of ``headers``, as Go's
    httputil.ReverseProxy removeHopByHopHeaders does (and httpx's joined response header). ``connection``:
    the Connection values to honour instead (the server's proxy reads only the request's first one:
    Starlette ``headers.get``)."""
    pairs = list(headers)
    if connection is None:
        connection = [v for k, v in pairs if k.lower() == "connection"]
    skip = set(drop) | connection_tokens(connection)
    return [(k, v) for k, v in pairs if k.lower() not in skip]


def free_port(host: str = "127.0.0.1") -> int:
    """An ephemeral TCP port of ``host`` that was free a moment ago (the caller binds it next)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def client_gone(sock: Any) -> bool:
    """True when the peer closed its side (readable with nothing to read) or the socket broke."""
    try:
        readable = pollio.readable([sock], 0)
        return bool(readable) and sock.recv(1, socket.MSG_PEEK) == b""
    except (OSError, ValueError):
        return True


def pump(src: socket.socket, dst: socket.socket, bufsize: int = BUFSIZE) -> int:
    """Copy src to dst until src's end (or an error on either side); then half-close dst so that its
    peer sees the end too. Returns the bytes copied."""
    buf = bytearray(bufsize)
    view = memoryview(buf)
    total = 0
    try:
        while True:
            n = src.recv_into(buf)
            if not n:
                break
            dst.sendall(view[:n])
            total += n
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass
    return total


class TCPRelay:
    """``127.0.0.1:<port>`` (ephemeral by default) relayed to ``connect()``. ``close()`` stops the
    listener and cuts every relayed connection; nothing of it (thread, socket) stays behind."""

    def __init__(
        self, connect: Callable[[], socket.socket], host: str = "127.0.0.1", port: int = 0, *, name: str = "osb-relay"
    ):
        self._connect = connect
        self.name = name
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._threads: set[threading.Thread] = set()
        self._closed = False
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._listener.bind((host, port))
            self._listener.listen(128)
        except OSError:
            self._listener.close()
            raise
        self.host, self.port = self._listener.getsockname()[:2]
        self._acceptor = threading.Thread(target=self._accept_loop, name="%s-%d" % (name, self.port), daemon=True)
        self._acceptor.start()

    def _accept_loop(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            with self._lock:
                if self._closed:
                    client.close()
                    return
                self._conns.add(client)
                # finished threads leave the set here, not in their own finally: close() must still
                # join a thread that is past its bookkeeping but not yet ended
                self._threads = {t for t in self._threads if t.is_alive()}
                t = threading.Thread(
                    target=self._serve, args=(client,), name="%s-%d-conn" % (self.name, self.port), daemon=True
                )
                # started under the lock: a thread close() finds in the set can be joined ("cannot join thread
                # before it is started" otherwise, when close() came between the two; the target takes the
                # lock only after start() returned)
                t.start()
                self._threads.add(t)

    def _serve(self, client: socket.socket) -> None:
        backend: socket.socket | None = None
        back_thread: threading.Thread | None = None
        try:
            try:
                backend = self._connect()
                backend.settimeout(None)
            except OSError:
                return  # nothing listens behind the port: the accepted connection drops
            with self._lock:
                if self._closed:
                    return
                self._conns.add(backend)
                back_thread = threading.Thread(
                    target=pump, args=(backend, client), name="%s-%d-back" % (self.name, self.port), daemon=True
                )
                back_thread.start()  # (under the lock, as above)
                self._threads.add(back_thread)
            for s in (client, backend):
                try:
                    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                except OSError:
                    pass
            pump(client, backend)
            back_thread.join()
        finally:
            with self._lock:
                for end in (client, backend):
                    if end is not None:
                        self._conns.discard(end)
            for end in (client, backend):
                if end is not None:
                    end.close()

    def close(self, timeout: float = 2.0) -> None:
        """Stop accepting, cut every relayed connection, wait (bounded) for the relay threads."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            conns, threads = list(self._conns), list(self._threads)
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
        except OSError:
            pass
        self._listener.close()
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._acceptor.join(timeout)
        for t in threads:
            t.join(timeout)

    def __enter__(self) -> "TCPRelay":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
