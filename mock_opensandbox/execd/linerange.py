"""The line mode of GET /files/download (``offset``/``limit``) with bounded memory.

Upstream components/execd/pkg/web/controller/filesystem_download.go (3bb6fad) serveLineRange reads
``bufio.Reader.ReadBytes('\\n')`` line by line: each line is held whole before it is written (trailing
"\\r\\n" bytes trimmed, lines joined by "\\n"), so a file without a newline (/dev/zero) is read
without end and nothing is answered, while its memory grows until the container's limit. Here the
same bytes go out, in the same order and at the same moments, but a line is never held whole: it is
scanned to its newline and then read again from where it began (a seekable file), or held up to
``HOLD`` bytes and then streamed (a pipe). The scan stops when the client leaves or the sandbox's
execd goes (QUIRKS.md, "files.download line mode")."""

from __future__ import annotations

import threading
import time
from typing import Any

from mock_opensandbox.execd import gin
from mock_opensandbox.wire.http1 import Request
from mock_opensandbox.wire.relay import client_gone

__all__ = ["GoWriter", "Gone", "line_range"]

CHUNK = 1 << 16
HOLD = 1 << 20  # a line of a pipe held before it is streamed
_TRIM = b"\r\n"


class GoWriter:
    """A Go handler's writes: the first 2048 bytes buffered (Content-Length when the handler ends
    within them), chunked after (gin.send's framing, streamed)."""

    def __init__(self, req: Request, content_type: str):
        self.req, self.ctype = req, content_type
        self.buf = bytearray()
        self.chunked: Any = None

    def write(self, data: bytes) -> None:
        if not data:
            return
        if self.chunked is None:
            if len(self.buf) + len(data) <= gin.GO_BUFFER:
                self.buf += data
                return
            self.chunked = self.req.start_chunked(200, {"Content-Type": self.ctype})
            if self.buf:
                self.chunked.write(bytes(self.buf))
            self.buf = bytearray()
        self.chunked.write(data)

    def close(self) -> None:
        if self.chunked is None:
            gin.send(self.req, 200, bytes(self.buf), self.ctype)
        else:
            self.chunked.close()


class Gone:
    """Has the client left or the sandbox's execd stopped? Asked at most every 0.2 s."""

    def __init__(self, req: Request, stopping: threading.Event):
        self.req, self.stopping = req, stopping
        self.next = time.monotonic() + 0.2

    def __call__(self) -> bool:
        now = time.monotonic()
        if now < self.next:
            return False
        self.next = now + 0.2
        return self.stopping.is_set() or client_gone(self.req.handler.connection)


def line_range(fh: Any, offset: int, limit: int, out: GoWriter, gone: Any) -> bool:
    """serveLineRange's loop; False when it stopped because ``gone()`` said so."""
    try:
        pos = fh.tell()
        seekable = fh.seekable()
    except (OSError, ValueError):
        pos, seekable = 0, False
    line_num = written = 0
    start = pos  # where the current line began
    length = 0  # its bytes so far
    held = bytearray()  # its bytes while at most HOLD
    over = False  # more than HOLD: read again (seekable) or streamed (a pipe)
    trail = 0  # the "\r\n" run ending it so far
    crs = 0  # a streamed line's "\r" run not yet written (it may be trimmed)

    def finish() -> None:
        """The current (wanted) line is complete: write it, trimmed."""
        nonlocal written, crs
        if not over:
            if written:
                out.write(b"\n")
            out.write(bytes(held).rstrip(_TRIM))
        elif seekable:
            keep = length - trail
            if written:
                out.write(b"\n")
            here = fh.tell()  # the rest of the current chunk is read already
            fh.seek(start)
            left = keep
            while left > 0:
                chunk = fh.read(min(left, CHUNK))
                if not chunk:
                    break
                out.write(chunk)
                left -= len(chunk)
            fh.seek(here)
        crs = 0
        written += 1

    while True:
        if gone():
            return False
        try:
            chunk = fh.read(CHUNK)
        except OSError:
            chunk = b""
        if not chunk:
            break
        i = 0
        while i < len(chunk):
            nl = chunk.find(b"\n", i)
            piece = chunk[i:] if nl < 0 else chunk[i : nl + 1]
            i += len(piece)
            length += len(piece)
            body = piece.rstrip(_TRIM)
            trail = len(piece) - len(body) if body else trail + len(piece)
            if line_num + 1 >= offset:
                if not over and len(held) + len(piece) <= HOLD:
                    held += piece
                elif seekable:
                    over = True  # finish() reads the line again: only its length and trail are kept
                    held = bytearray()
                else:  # a pipe: stream all but a trailing "\r\n" run
                    data = bytes(held) + piece
                    if not over and written:
                        out.write(b"\n")
                    over = True
                    body = data.rstrip(_TRIM)
                    if body:
                        out.write(b"\r" * crs + body)
                        crs = 0
                    crs += len(data) - len(body) - (1 if nl >= 0 else 0)
                    held = bytearray()
                    if nl >= 0:
                        crs = 0
                        written += 1
            if nl < 0:
                continue
            line_num += 1
            if line_num >= offset:
                if not (over and not seekable):
                    finish()
                if 0 <= limit <= written:
                    return True
            start += length
            length = trail = 0
            held = bytearray()
            over = False
    if length:  # the last line, without its newline
        line_num += 1
        if line_num >= offset and not (over and not seekable):
            finish()
    return True
