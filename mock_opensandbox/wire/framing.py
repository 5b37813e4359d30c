"""Request framing as the real servers check it, before any handler runs (a leaf: standard library only).

* execd (Go net/http, ``transfer.go`` fixLength and ``internal/chunked.go``): several Content-Length
  values that differ, or one that is not all digits (``-5``, ``+2``, ``abc``, ``2, 2``, empty) → the
  server's own ``400 Bad Request`` text with ``Connection: close``; identical repeats are one value;
  ``Transfer-Encoding: chunked`` wins over Content-Length. A bad chunk size is an error of the body
  read, which the handler reports (execd: ``error parsing request, MAYBE invalid body format.
  invalid byte in chunk length``) and the connection closes after it.
* lifecycle (uvicorn with httptools, as opensandbox-server installs it): any repeated Content-Length,
  Content-Length with Transfer-Encoding, a value that is not digits, or a bad chunk size → 400
  ``Invalid HTTP request received.`` (text/plain, ``connection: close``).
* Both: a body above MAX_BODY (2 GiB, the mock's own limit) → 413 with the connection closed.

Measured against the real execd v1.0.19 and uvicorn 0.54.0/httptools 0.9.0 (QUIRKS.md, "Framing")."""

from __future__ import annotations

import email.utils
from typing import Any

__all__ = ["MAX_BODY", "ChunkError", "check", "refusal", "read_chunked"]

MAX_BODY = 1 << 31  # a request body above 2 GiB is refused with 413
_DIGITS = frozenset(b"0123456789".decode())
_HEX = frozenset(b"0123456789abcdefABCDEF".decode())


class ChunkError(ValueError):
    """A malformed chunked body, worded as Go's net/http/internal/chunked.go."""


def _go_trim(v: str) -> str:
    return v.strip(" \t")


def check(headers: Any, flavor: str) -> int | None:
    """400 or 413 when the framing headers refuse the request before a handler runs, else None."""
    cls = headers.get_all("Content-Length") or []
    te = headers.get_all("Transfer-Encoding") or []
    if flavor == "uvicorn":
        if len(cls) > 1 or (cls and te):
            return 400
    else:
        if len({_go_trim(v) for v in cls}) > 1:
            return 400
        if any("chunked" in v.lower() for v in te):
            return None  # Content-Length is dropped
    if not cls:
        return None
    v = _go_trim(cls[0])
    if not v or not set(v) <= _DIGITS or len(v) > 19:
        return 400
    return 413 if int(v) > MAX_BODY else None


def refusal(status: int, flavor: str) -> bytes:
    """The whole answer of the server itself (no handler) for a refused request."""
    if flavor == "uvicorn":
        text = b"Invalid HTTP request received." if status == 400 else b"Request Entity Too Large"
        reason = b"Bad Request" if status == 400 else b"Request Entity Too Large"
        date = email.utils.formatdate(usegmt=True).encode()
        return (
            b"HTTP/1.1 %d %s\r\ndate: %s\r\nserver: uvicorn\r\ncontent-type: text/plain; charset=utf-8\r\n"
            b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (status, reason, date, len(text), text)
        )
    line = b"400 Bad Request" if status == 400 else b"413 Request Entity Too Large"
    return b"HTTP/1.1 " + line + b"\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n" + line


def chunk_size(line: bytes) -> int:
    """A chunk-size line (extensions dropped) as Go's parseHexUint reads it."""
    if not line.endswith(b"\n"):
        raise ChunkError("unexpected EOF" if len(line) < 4096 else "header line too long")
    text = line.rstrip(b"\r\n").split(b";", 1)[0].strip(b" \t").decode("latin-1")
    if not text:
        raise ChunkError("empty hex number for chunk length")
    if not set(text) <= _HEX:
        raise ChunkError("invalid byte in chunk length")
    if len(text) > 16:
        raise ChunkError("http chunk length too large")
    return int(text, 16)


def read_chunked(rfile: Any, sink: Any, limit: int = MAX_BODY) -> int:
    """A chunked body from ``rfile`` into ``sink(bytes)``; its length. ChunkError when it is malformed,
    ValueError("request body too large") above ``limit``."""
    total = 0
    while True:
        size = chunk_size(rfile.readline(4096))
        if size == 0:
            while rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                pass
            return total
        if total + size > limit:
            raise ValueError("request body too large")
        left = size
        while left:
            data = rfile.read(min(left, 1 << 16))
            if not data:
                raise ChunkError("unexpected EOF")
            sink(data)
            left -= len(data)
        total += size
        if rfile.readline(3) not in (b"\r\n", b"\n"):
            raise ChunkError("malformed chunked encoding")
