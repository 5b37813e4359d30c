"""A raw HTTP/1.1 client for the differential check: it sends exactly the bytes a case asks for
(odd methods, bad framing, truncated bodies) and keeps everything a client could read: status,
headers in order, body framing, the chunk boundaries of a stream. Standard library only."""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from typing import Callable

__all__ = ["Response", "raw_request", "build_request"]


@dataclass
class Response:
    status: int = 0
    reason: str = ""
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    framing: str = "none"  # length | chunked | close | none
    chunks: list[bytes] | None = None
    error: str | None = None  # "no response", "timeout", ...
    elapsed: float = 0.0

    def header(self, name: str) -> str | None:
        name = name.lower()
        for k, v in self.headers:
            if k.lower() == name:
                return v
        return None


def build_request(
    method: str,
    target: str,
    host: str,
    headers: list[tuple[str, str]] | None = None,
    body: bytes | None = None,
    *,
    content_length: bool = True,
) -> bytes:
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    names = set()
    for k, v in headers or []:
        lines.append(f"{k}: {v}")
        names.add(k.lower())
    if body is not None and content_length and "content-length" not in names and "transfer-encoding" not in names:
        lines.append(f"Content-Length: {len(body)}")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "surrogateescape")
    return head + (body or b"")


class _Reader:
    def __init__(self, sock: socket.socket, deadline: float):
        self.sock, self.buf, self.deadline, self.eof = sock, bytearray(), deadline, False

    def _fill(self) -> bool:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("timeout")
        self.sock.settimeout(left)
        try:
            data = self.sock.recv(65536)
        except socket.timeout as exc:
            raise TimeoutError("timeout") from exc
        except ConnectionResetError:
            data = b""
        if not data:
            self.eof = True
            return False
        self.buf += data
        return True

    def line(self) -> bytes | None:
        while True:
            i = self.buf.find(b"\n")
            if i >= 0:
                out = bytes(self.buf[: i + 1])
                del self.buf[: i + 1]
                return out
            if self.eof or not self._fill():
                return None

    def exactly(self, n: int) -> bytes:
        while len(self.buf) < n:
            if self.eof or not self._fill():
                break
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def rest(self) -> bytes:
        while not self.eof and self._fill():
            pass
        out = bytes(self.buf)
        self.buf.clear()
        return out


def raw_request(
    port: int,
    data: bytes,
    *,
    method: str = "GET",
    timeout: float = 20.0,
    stop: Callable[[list[bytes]], bool] | None = None,
    half_close: bool = False,
) -> Response:
    """Send data to 127.0.0.1:port, read one response. ``stop(chunks)`` is asked after every chunk of
    a chunked body: True closes the connection there (a client that goes away)."""
    t0 = time.monotonic()
    resp = Response()
    sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        sock.sendall(data)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        rd = _Reader(sock, t0 + timeout)
        try:
            status = rd.line()
            while status is not None and status.strip() == b"":
                status = rd.line()
            if status is None:
                resp.error = "no response"
                return resp
            parts = status.decode("latin-1").rstrip("\r\n").split(" ", 2)
            resp.status = int(parts[1])
            resp.reason = parts[2] if len(parts) > 2 else ""
            while True:
                ln = rd.line()
                if ln is None or ln in (b"\r\n", b"\n"):
                    break
                k, _, v = ln.decode("latin-1").rstrip("\r\n").partition(":")
                resp.headers.append((k.strip(), v.strip()))
            te = (resp.header("Transfer-Encoding") or "").lower()
            cl = resp.header("Content-Length")
            if method == "HEAD" or resp.status in (204, 304) or 100 <= resp.status < 200:
                resp.framing = "length" if cl is not None else "none"
            elif "chunked" in te:
                resp.framing = "chunked"
                resp.chunks = []
                while True:
                    ln = rd.line()
                    if ln is None:
                        resp.error = "truncated chunked body"
                        break
                    size = int(ln.split(b";", 1)[0].strip() or b"0", 16)
                    if size == 0:
                        while rd.line() not in (b"\r\n", b"\n", None):
                            pass
                        break
                    chunk = rd.exactly(size)
                    rd.line()
                    resp.chunks.append(chunk)
                    if stop is not None and stop(resp.chunks):
                        resp.error = "client closed"
                        break
                resp.body = b"".join(resp.chunks)
            elif cl is not None:
                resp.framing = "length"
                resp.body = rd.exactly(int(cl))
            else:
                resp.framing = "close"
                resp.body = rd.rest()
        except TimeoutError:
            resp.error = "timeout"
    finally:
        resp.elapsed = time.monotonic() - t0
        try:
            sock.close()
        except OSError:
            pass
    return resp
