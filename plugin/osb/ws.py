"""A small RFC 6455 WebSocket client (standard library only, Python >= 3.10).

Used by the plugin for execd's PTY socket (``GET /pty/{id}/ws``). What it does:

* handshake over ws:// or wss:// (http:// and https:// are accepted as aliases), with extra headers
  on the upgrade request (Endpoint.headers and X-EXECD-ACCESS-TOKEN go there), a random
  Sec-WebSocket-Key and a checked Sec-WebSocket-Accept;
* a non-101 answer raises ``HandshakeError`` carrying status, headers and (a bounded part of) the
  body, so callers can map execd's JSON errors (404 unknown session, 409 already connected, 401);
* masked client frames, fragmented messages in both directions, automatic pong for every ping,
  close handshake with codes, size limits, UTF-8 check of text messages.

One thread may read while others write: every write is serialised by a lock. Every error of an
open connection (``recv``, ``send*``, ``settimeout``) is a ``transport.NetError`` (kind ``"websocket"``;
``"timeout"`` for a read that timed out), the client's one word for "no usable answer"; ``connect``'s
socket and URL errors become one in ``Execd.websocket``, and a refused upgrade an ``HttpError``. So a
caller of the OpenSandbox client catches ``HttpError`` / ``NetError`` and nothing else.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
import ssl
import struct
import threading
from typing import Any, BinaryIO, Callable, Mapping
from urllib.parse import urlsplit

from .transport import NetError

__all__ = [
    "connect",
    "WebSocketClient",
    "WebSocketError",
    "HandshakeError",
    "ProtocolError",
    "ConnectionClosed",
    "TimedOut",
    "encode_frame",
    "apply_mask",
    "FrameReader",
    "MessageAssembler",
    "encode_close",
    "decode_close",
    "OP_CONT",
    "OP_TEXT",
    "OP_BINARY",
    "OP_CLOSE",
    "OP_PING",
    "OP_PONG",
]

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
OP_CONT, OP_TEXT, OP_BINARY = 0x0, 0x1, 0x2
OP_CLOSE, OP_PING, OP_PONG = 0x8, 0x9, 0xA
_DATA = (OP_TEXT, OP_BINARY)
_CONTROL = (OP_CLOSE, OP_PING, OP_PONG)
CLOSE_NO_STATUS = 1005
CLOSE_ABNORMAL = 1006
DEFAULT_MAX_MESSAGE = 64 << 20
MAX_HEADER_BYTES = 64 << 10
MAX_ERROR_BODY = 64 << 10
WRITE_FRAGMENT = 1 << 20  # messages above this are sent as several frames


class WebSocketError(NetError):
    """Base class of every error raised here: a NetError of kind ``websocket`` whose text is the
    message alone (``what``/``target`` are filled in by the caller that knows them)."""

    def __init__(self, message: str):
        super().__init__("websocket", "WebSocket", "", message)
        self.args = (message,)


class HandshakeError(WebSocketError):
    """The server did not switch protocols (or answered with a broken upgrade)."""

    def __init__(self, message: str, status: int = 0, headers: Mapping[str, str] | None = None, body: bytes = b""):
        super().__init__(message)
        self.status = status
        self.headers = dict(headers or {})
        self.body = body


class ProtocolError(WebSocketError):
    def __init__(self, message: str, code: int = 1002):
        super().__init__(message)
        self.code = code


class ConnectionClosed(WebSocketError):
    """The connection is over. ``code``/``reason`` are the peer's close frame (1006: none)."""

    def __init__(self, message: str = "connection closed", code: int = CLOSE_ABNORMAL, reason: str = ""):
        super().__init__(message)
        self.code = code
        self.reason = reason


class TimedOut(ConnectionClosed):
    """Nothing arrived within the timeout set with ``settimeout``: the connection was dropped (a socket
    file that timed out cannot be read again). A NetError of kind ``timeout``, as an HTTP read's is."""

    def __init__(self, message: str = "no message within the timeout"):
        super().__init__(message)
        self.kind = "timeout"


# ------------------------------------------------------------------------------------------------
# codec (same wire rules as mock_opensandbox/wire/websocket.py; the two products share no code)


def apply_mask(data: bytes, key: bytes) -> bytes:
    n = len(data)
    if n == 0:
        return b""
    if len(key) != 4:
        raise ValueError("masking key must be 4 bytes")
    k = int.from_bytes((key * ((n + 3) // 4))[:n], "big")
    return (int.from_bytes(data, "big") ^ k).to_bytes(n, "big")


def encode_frame(
    opcode: int, payload: bytes = b"", *, fin: bool = True, mask: bytes | None = None, rsv: int = 0
) -> bytes:
    if not 0 <= opcode <= 0xF or not 0 <= rsv <= 7:
        raise ValueError("opcode or rsv out of range")
    payload = bytes(payload)
    n = len(payload)
    head = bytearray([(0x80 if fin else 0) | (rsv << 4) | opcode])
    mbit = 0x80 if mask is not None else 0
    if n < 126:
        head.append(mbit | n)
    elif n < 65536:
        head.append(mbit | 126)
        head += struct.pack("!H", n)
    else:
        head.append(mbit | 127)
        head += struct.pack("!Q", n)
    if mask is not None:
        if len(mask) != 4:
            raise ValueError("masking key must be 4 bytes")
        head += mask
        payload = apply_mask(payload, mask)
    return bytes(head) + payload


def _valid_close_code(code: int) -> bool:
    return code in (1000, 1001, 1002, 1003) or 1007 <= code <= 1014 or 3000 <= code <= 4999


def encode_close(code: int | None = 1000, reason: str = "") -> bytes:
    if code is None or code == CLOSE_NO_STATUS:
        return b""
    data = struct.pack("!H", code) + reason.encode("utf-8")
    if len(data) > 125:
        raise ValueError("close reason too long")
    return data


def decode_close(payload: bytes) -> tuple[int, str]:
    if not payload:
        return CLOSE_NO_STATUS, ""
    if len(payload) == 1:
        raise ProtocolError("close frame payload of 1 byte")
    code = struct.unpack("!H", payload[:2])[0]
    if not _valid_close_code(code):
        raise ProtocolError(f"invalid close code {code}")
    try:
        return code, payload[2:].decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("close reason is not UTF-8", 1007) from None


def _read_exact(read: Callable[[int], bytes], n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        b = read(n - len(buf))
        if not b:
            raise ConnectionClosed("connection closed in the middle of a frame")
        buf += b
    return bytes(buf)


class FrameReader:
    """Reads frames from ``read(n)``. ``require_mask``: False on a client (servers must not mask),
    True on a server, None accepts both."""

    def __init__(
        self, read: Callable[[int], bytes], *, require_mask: bool | None = False, max_payload: int = DEFAULT_MAX_MESSAGE
    ):
        self._read = read
        self.require_mask = require_mask
        self.max_payload = max_payload

    def read_frame(self) -> tuple[bool, int, int, bool, bytes]:
        """(fin, rsv, opcode, masked, payload)."""
        first = self._read(1)
        if not first:
            raise ConnectionClosed("connection closed")
        b0 = first[0]
        b1 = _read_exact(self._read, 1)[0]
        fin, rsv, opcode = bool(b0 & 0x80), (b0 >> 4) & 7, b0 & 0xF
        masked, n = bool(b1 & 0x80), b1 & 0x7F
        if rsv:
            raise ProtocolError("reserved bits set without a negotiated extension")
        if opcode not in _DATA + _CONTROL + (OP_CONT,):
            raise ProtocolError(f"unknown opcode {opcode}")
        if opcode in _CONTROL and (not fin or n > 125):
            raise ProtocolError("fragmented or oversized control frame")
        if n == 126:
            n = struct.unpack("!H", _read_exact(self._read, 2))[0]
        elif n == 127:
            n = struct.unpack("!Q", _read_exact(self._read, 8))[0]
            if n >> 63:
                raise ProtocolError("payload length with the most significant bit set")
        if self.require_mask is True and not masked:
            raise ProtocolError("client frame is not masked")
        if self.require_mask is False and masked:
            raise ProtocolError("server frame is masked")
        if n > self.max_payload:
            raise ProtocolError(f"frame payload of {n} bytes is over the limit", 1009)
        key = _read_exact(self._read, 4) if masked else b""
        payload = _read_exact(self._read, n)
        return fin, rsv, opcode, masked, apply_mask(payload, key) if masked else payload


class MessageAssembler:
    """Events from frames: ("message", opcode, data) | ("ping", p) | ("pong", p) | ("close", code, reason).
    Control frames may come between the fragments of a message."""

    def __init__(self, reader: FrameReader, *, max_message: int = DEFAULT_MAX_MESSAGE, validate_utf8: bool = True):
        self.reader = reader
        self.max_message = max_message
        self.validate_utf8 = validate_utf8
        self._op: int | None = None
        self._parts: list[bytes] = []
        self._size = 0

    def next_event(self) -> tuple[Any, ...]:
        while True:
            fin, _rsv, op, _m, payload = self.reader.read_frame()
            if op == OP_PING:
                return ("ping", payload)
            if op == OP_PONG:
                return ("pong", payload)
            if op == OP_CLOSE:
                code, reason = decode_close(payload)
                return ("close", code, reason)
            if op == OP_CONT:
                if self._op is None:
                    raise ProtocolError("continuation frame without a message to continue")
            else:
                if self._op is not None:
                    raise ProtocolError("new data frame while a fragmented message is open")
                self._op, self._parts, self._size = op, [], 0
            self._size += len(payload)
            if self._size > self.max_message:
                raise ProtocolError(f"message over {self.max_message} bytes", 1009)
            self._parts.append(payload)
            if fin:
                op2, data = self._op, b"".join(self._parts)
                self._op, self._parts, self._size = None, [], 0
                if op2 == OP_TEXT and self.validate_utf8:
                    try:
                        data.decode("utf-8")
                    except UnicodeDecodeError:
                        raise ProtocolError("text message is not UTF-8", 1007) from None
                return ("message", op2, data)


# ------------------------------------------------------------------------------------------------
# client


def _accept_for(key: str) -> str:
    return base64.b64encode(hashlib.sha1((key + GUID).encode("ascii")).digest()).decode("ascii")


def _safe_header(name: str, value: str) -> None:
    if not name or any(c in name for c in "\r\n:\x00 ") or any(c in str(value) for c in "\r\n\x00"):
        raise ValueError(f"invalid header {name!r}")


def connect(
    url: str,
    headers: Mapping[str, str] | None = None,
    *,
    timeout: float = 30.0,
    max_message: int = DEFAULT_MAX_MESSAGE,
    ssl_context: ssl.SSLContext | None = None,
) -> "WebSocketClient":
    """Open a WebSocket. ``timeout`` bounds connect + handshake; afterwards reads block until
    ``WebSocketClient.settimeout`` says otherwise. Raises HandshakeError, OSError, ValueError."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in ("http", "ws"):
        secure = False
    elif scheme in ("https", "wss"):
        secure = True
    else:
        raise ValueError(f"not a WebSocket URL: {url!r}")
    host = parts.hostname
    if not host:
        raise ValueError(f"URL has no host: {url!r}")
    try:
        port = parts.port or (443 if secure else 80)
    except ValueError:
        raise ValueError(f"URL has a bad port: {url!r}") from None
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    host_header = host if ":" not in host else f"[{host}]"
    if parts.port:
        host_header += f":{parts.port}"
    key = base64.b64encode(os.urandom(16)).decode("ascii")
    lines = [
        f"GET {path} HTTP/1.1",
        f"Host: {host_header}",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Key: {key}",
        "Sec-WebSocket-Version: 13",
    ]
    reserved = {
        "host",
        "upgrade",
        "connection",
        "sec-websocket-key",
        "sec-websocket-version",
        "sec-websocket-extensions",
        "content-length",
        "transfer-encoding",
    }
    for name, value in (headers or {}).items():
        _safe_header(name, value)
        if name.lower() in reserved:
            continue
        lines.append(f"{name}: {value}")
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")

    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        if secure:
            ctx = ssl_context or ssl.create_default_context()
            sock = ctx.wrap_socket(sock, server_hostname=host)
        sock.sendall(request)
        rfile = sock.makefile("rb")
        status, reason, resp_headers = _read_response_head(rfile)
        if status != 101:
            body = _read_error_body(rfile, resp_headers)
            raise HandshakeError(
                f"WebSocket upgrade refused: HTTP {status} {reason}".rstrip(), status, resp_headers, body
            )
        if resp_headers.get("upgrade", "").lower() != "websocket" or "upgrade" not in [
            t.strip().lower() for t in resp_headers.get("connection", "").split(",")
        ]:
            raise HandshakeError(
                "server answered 101 without Upgrade: websocket / Connection: Upgrade", status, resp_headers
            )
        if resp_headers.get("sec-websocket-accept", "").strip() != _accept_for(key):
            raise HandshakeError("server answered with a wrong Sec-WebSocket-Accept", status, resp_headers)
        if resp_headers.get("sec-websocket-extensions"):
            raise HandshakeError("server selected an extension that was not offered", status, resp_headers)
        sock.settimeout(None)
        return WebSocketClient(sock, rfile, max_message=max_message)
    except BaseException:
        try:
            sock.close()
        except OSError:
            pass
        raise


def _read_response_head(rfile: BinaryIO) -> tuple[int, str, dict[str, str]]:
    total = 0
    line = rfile.readline(MAX_HEADER_BYTES)
    if not line:
        raise HandshakeError("connection closed before the HTTP response")
    total += len(line)
    try:
        version, status_s, *rest = line.decode("latin-1").rstrip("\r\n").split(" ", 2)
        status = int(status_s)
    except ValueError:
        raise HandshakeError(f"malformed HTTP status line: {line[:80]!r}") from None
    if not version.startswith("HTTP/"):
        raise HandshakeError(f"malformed HTTP status line: {line[:80]!r}")
    headers: dict[str, str] = {}
    while True:
        line = rfile.readline(MAX_HEADER_BYTES)
        total += len(line)
        if total > MAX_HEADER_BYTES:
            raise HandshakeError("HTTP response headers too large", status)
        if not line:
            raise HandshakeError("connection closed in the HTTP response headers", status)
        if line in (b"\r\n", b"\n"):
            break
        text = line.decode("latin-1").rstrip("\r\n")
        if ":" not in text:
            continue
        k, v = text.split(":", 1)
        k = k.strip().lower()
        headers[k] = f"{headers[k]}, {v.strip()}" if k in headers else v.strip()
    return status, rest[0] if rest else "", headers


def _read_error_body(rfile: BinaryIO, headers: Mapping[str, str]) -> bytes:
    try:
        if "chunked" in headers.get("transfer-encoding", "").lower():
            out = bytearray()
            while len(out) < MAX_ERROR_BODY:
                size_line = rfile.readline(1024)
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    break
                out += rfile.read(size)
                rfile.readline(3)
            return bytes(out[:MAX_ERROR_BODY])
        n = headers.get("content-length")
        if n is not None:
            return bytes(rfile.read(min(int(n), MAX_ERROR_BODY)))
        return bytes(rfile.read(MAX_ERROR_BODY))
    except (OSError, ValueError):
        return b""


class WebSocketClient:
    """An open client connection. ``recv()`` gives data messages; pings are answered and the close
    handshake is completed internally; ``ConnectionClosed`` marks the end."""

    def __init__(self, sock: socket.socket, rfile: BinaryIO, *, max_message: int = DEFAULT_MAX_MESSAGE):
        self.sock = sock
        self._rfile = rfile
        self._wlock = threading.Lock()
        self._asm = MessageAssembler(
            FrameReader(rfile.read, require_mask=False, max_payload=max_message),
            max_message=max_message,
            validate_utf8=True,
        )
        self.close_sent = False
        self.closed = False
        self.close_code: int | None = None
        self.close_reason = ""

    def settimeout(self, timeout: float | None) -> None:
        """Bound each later read (``recv`` raises TimedOut); ConnectionClosed when the socket is gone."""
        try:
            self.sock.settimeout(timeout)
        except OSError as exc:
            raise ConnectionClosed(f"connection is closed ({exc})", self.close_code or CLOSE_ABNORMAL) from None

    # -- writing ----------------------------------------------------------------------------------
    def _send_frame(self, opcode: int, payload: bytes, fin: bool = True) -> None:
        data = encode_frame(opcode, payload, fin=fin, mask=os.urandom(4))
        with self._wlock:
            if self.closed:
                raise ConnectionClosed("connection is closed", self.close_code or CLOSE_ABNORMAL, self.close_reason)
            if self.close_sent and opcode != OP_CLOSE:
                raise ConnectionClosed("close already sent", self.close_code or CLOSE_ABNORMAL)
            try:
                self.sock.sendall(data)
            except OSError as exc:
                self._shutdown_locked()
                raise ConnectionClosed(f"send failed: {exc}") from None

    def send(self, opcode: int, data: bytes, *, fragment_size: int = WRITE_FRAGMENT) -> None:
        """Send one message, split into frames of at most ``fragment_size`` bytes."""
        if opcode not in _DATA:
            raise ValueError("send() takes text or binary; use ping()/close() for control frames")
        data = bytes(data)
        if fragment_size <= 0 or len(data) <= fragment_size:
            self._send_frame(opcode, data)
            return
        # Hold the write lock across the fragments: another thread's message must not interleave.
        frames = []
        for i in range(0, len(data), fragment_size):
            op = opcode if i == 0 else OP_CONT
            frames.append(
                encode_frame(op, data[i : i + fragment_size], fin=i + fragment_size >= len(data), mask=os.urandom(4))
            )
        with self._wlock:
            if self.closed or self.close_sent:
                raise ConnectionClosed("connection is closed", self.close_code or CLOSE_ABNORMAL)
            try:
                for f in frames:
                    self.sock.sendall(f)
            except OSError as exc:
                self._shutdown_locked()
                raise ConnectionClosed(f"send failed: {exc}") from None

    def send_binary(self, data: bytes) -> None:
        self.send(OP_BINARY, data)

    def send_text(self, text: str) -> None:
        self.send(OP_TEXT, text.encode("utf-8"))

    def ping(self, data: bytes = b"") -> None:
        self._send_frame(OP_PING, data)

    def close(self, code: int = 1000, reason: str = "", *, timeout: float = 2.0) -> None:
        """Start (or finish) the close handshake, wait up to ``timeout`` for the server's close,
        then close the socket. Safe to call more than once and from any thread."""
        payload = encode_close(code, reason)
        try:
            self._send_frame(OP_CLOSE, payload)
        except ConnectionClosed:
            pass
        with self._wlock:
            self.close_sent = True
        if timeout and not self.closed:
            try:
                self.sock.settimeout(timeout)
                while not self.closed:
                    self._next_event_internal()
            except (ConnectionClosed, WebSocketError, OSError, ValueError):
                pass
        self.shutdown()

    def shutdown(self) -> None:
        """Drop the connection now (no close frame). Unblocks a thread waiting in recv()."""
        with self._wlock:
            self._shutdown_locked()

    def _shutdown_locked(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass

    # -- reading ----------------------------------------------------------------------------------
    def _next_event_internal(self) -> tuple[int, bytes] | None:
        ev = self._asm.next_event()
        kind = ev[0]
        if kind == "message":
            return ev[1], ev[2]
        if kind == "ping":
            try:
                self._send_frame(OP_PONG, ev[1])
            except ConnectionClosed:
                pass
            return None
        if kind == "pong":
            return None
        _, code, reason = ev
        self.close_code, self.close_reason = code, reason
        if not self.close_sent:  # echo the code, as RFC 6455 §5.5.1 asks
            try:
                self._send_frame(OP_CLOSE, encode_close(None if code == CLOSE_NO_STATUS else code))
            except ConnectionClosed:
                pass
            self.close_sent = True
        self.shutdown()
        raise ConnectionClosed(f"server closed the connection ({code} {reason})".rstrip(), code, reason)

    def recv(self) -> tuple[int, bytes]:
        """Next data message as (opcode, payload). Raises ConnectionClosed at the end (also after a
        protocol error, which is answered with a close frame first), and its TimedOut when a timeout
        set with settimeout() expires; the connection is dropped then (a socket file that timed
        out cannot be read again)."""
        while True:
            if self.closed:
                raise ConnectionClosed("connection is closed", self.close_code or CLOSE_ABNORMAL, self.close_reason)
            try:
                msg = self._next_event_internal()
            except ProtocolError as exc:
                try:
                    self._send_frame(OP_CLOSE, encode_close(exc.code, str(exc)[:100]))
                except ConnectionClosed:
                    pass
                self.shutdown()
                raise ConnectionClosed(f"protocol error from server: {exc}", exc.code) from None
            except socket.timeout:
                # a timed-out socket file cannot be read again: the connection is over
                self.close_code = self.close_code or CLOSE_ABNORMAL
                self.shutdown()
                raise TimedOut() from None
            except ConnectionClosed as exc:
                self.close_code = self.close_code or exc.code
                self.shutdown()
                raise
            except (OSError, ValueError) as exc:  # reset, or the socket was closed under us
                self.close_code = self.close_code or CLOSE_ABNORMAL
                self.shutdown()
                raise ConnectionClosed(f"connection lost: {exc}") from None
            if msg is not None:
                return msg
