"""RFC 6455 WebSocket, server side, for the mock execd's PTY socket (standard library only).

execd upgrades ``GET /pty/{id}/ws`` with gorilla/websocket (execd go.mod; ``wsUpgrader`` in
components/execd/pkg/web/controller/pty_ws.go: no subprotocol, no compression, any Origin). This
module reproduces what a client can observe of that:

* the upgrade checks and their HTTP answers (gorilla ``Upgrader.Upgrade`` -> ``http.Error``:
  ``text/plain; charset=utf-8`` body = the status text + "\\n", ``Sec-Websocket-Version: 13``),
* the raw ``101 Switching Protocols`` reply (Upgrade, Connection, Sec-WebSocket-Accept only),
* frames: client frames must be masked, server frames are never masked, fragmentation, ping is
  answered with pong, a close is echoed with the same code (gorilla's default close handler),
  protocol violations close with 1002, oversized messages with 1009.

Pure codec functions (``encode_frame``, ``FrameReader``, ``MessageAssembler``) take plain byte
readers so they can be tested without sockets (tiers/t0/wire/test_ws_codec.py).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import socket
import struct
import threading
from typing import Any, Callable, NamedTuple

from mock_opensandbox.wire.gojson import go_json_bytes

__all__ = [
    "GUID",
    "OP_CONT",
    "OP_TEXT",
    "OP_BINARY",
    "OP_CLOSE",
    "OP_PING",
    "OP_PONG",
    "ProtocolError",
    "ConnectionClosed",
    "Frame",
    "encode_frame",
    "encode_close",
    "decode_close",
    "apply_mask",
    "FrameReader",
    "MessageAssembler",
    "accept_key",
    "handshake_problem",
    "send_handshake_error",
    "upgrade",
    "WebSocket",
    "go_json",
]

GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455 §1.3

OP_CONT, OP_TEXT, OP_BINARY = 0x0, 0x1, 0x2
OP_CLOSE, OP_PING, OP_PONG = 0x8, 0x9, 0xA
DATA_OPCODES = (OP_TEXT, OP_BINARY)
CONTROL_OPCODES = (OP_CLOSE, OP_PING, OP_PONG)

CLOSE_NORMAL = 1000
CLOSE_PROTOCOL_ERROR = 1002
CLOSE_INVALID_PAYLOAD = 1007
CLOSE_TOO_BIG = 1009
CLOSE_NO_STATUS = 1005  # never sent on the wire; reported when a close frame has no payload

DEFAULT_MAX_MESSAGE = 64 << 20  # mock safety bound; execd sets no read limit (gorilla default 0)


class ProtocolError(Exception):
    """The peer broke RFC 6455. ``code`` is the close code to answer with."""

    def __init__(self, message: str, code: int = CLOSE_PROTOCOL_ERROR):
        super().__init__(message)
        self.code = code


class ConnectionClosed(Exception):
    """The byte stream ended (EOF) in the middle of, or before, a frame."""


class Frame(NamedTuple):
    fin: bool
    rsv: int
    opcode: int
    masked: bool
    payload: bytes


# ------------------------------------------------------------------------------------------------
# codec


def apply_mask(data: bytes, key: bytes) -> bytes:
    """XOR data with the 4-byte masking key (RFC 6455 §5.3). Its own inverse."""
    n = len(data)
    if n == 0:
        return b""
    if len(key) != 4:
        raise ValueError("masking key must be 4 bytes")
    reps = (n + 3) // 4
    k = int.from_bytes((key * reps)[:n], "big")
    return (int.from_bytes(data, "big") ^ k).to_bytes(n, "big")


def encode_frame(
    opcode: int, payload: bytes = b"", *, fin: bool = True, mask: bytes | None = None, rsv: int = 0
) -> bytes:
    """One frame on the wire. ``mask`` (4 bytes) masks the payload, as a client must."""
    if not 0 <= opcode <= 0xF:
        raise ValueError("opcode out of range")
    if not 0 <= rsv <= 7:
        raise ValueError("rsv out of range")
    payload = bytes(payload)
    n = len(payload)
    head = bytearray()
    head.append((0x80 if fin else 0) | (rsv << 4) | opcode)
    mbit = 0x80 if mask is not None else 0
    if n < 126:
        head.append(mbit | n)
    elif n < (1 << 16):
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


# Close codes a peer may send (RFC 6455 §7.4; same table as gorilla's validReceivedCloseCodes).
def valid_close_code(code: int) -> bool:
    return code in (1000, 1001, 1002, 1003) or 1007 <= code <= 1014 or 3000 <= code <= 4999


def encode_close(code: int | None = CLOSE_NORMAL, reason: str = "") -> bytes:
    """Close frame payload: 2-byte code + UTF-8 reason (empty when code is None or 1005)."""
    if code is None or code == CLOSE_NO_STATUS:
        return b""
    data = struct.pack("!H", code) + reason.encode("utf-8")
    if len(data) > 125:
        raise ValueError("close reason too long")
    return data


def decode_close(payload: bytes) -> tuple[int, str]:
    """(code, reason) of a received close payload; raises ProtocolError when malformed."""
    if len(payload) == 0:
        return CLOSE_NO_STATUS, ""
    if len(payload) == 1:
        raise ProtocolError("close frame payload of 1 byte")
    code = struct.unpack("!H", payload[:2])[0]
    if not valid_close_code(code):
        raise ProtocolError(f"invalid close code {code}")
    try:
        reason = payload[2:].decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError("close reason is not UTF-8", CLOSE_INVALID_PAYLOAD) from None
    return code, reason


def _read_exact(read: Callable[[int], bytes], n: int) -> bytes:
    if n == 0:
        return b""
    chunks: list[bytes] = []
    left = n
    while left:
        b = read(left)
        if not b:
            raise ConnectionClosed(
                "connection closed in the middle of a frame" if left != n or chunks else "connection closed"
            )
        chunks.append(b)
        left -= len(b)
    return b"".join(chunks)


class FrameReader:
    """Reads single frames from ``read(n)`` (a file's read: may return fewer bytes, b"" at EOF).

    ``require_mask``: True on a server (clients must mask), False on a client (servers must not
    mask), None to accept both (tests). ``max_payload`` bounds one frame's payload."""

    def __init__(
        self, read: Callable[[int], bytes], *, require_mask: bool | None, max_payload: int = DEFAULT_MAX_MESSAGE
    ):
        self._read = read
        self.require_mask = require_mask
        self.max_payload = max_payload

    def read_frame(self) -> Frame:
        first = self._read(1)
        if not first:
            raise ConnectionClosed("connection closed")
        b0 = first[0]
        b1 = _read_exact(self._read, 1)[0]
        fin = bool(b0 & 0x80)
        rsv = (b0 >> 4) & 0x7
        opcode = b0 & 0x0F
        masked = bool(b1 & 0x80)
        n = b1 & 0x7F
        if rsv:
            raise ProtocolError("reserved bits set without a negotiated extension")
        if opcode not in DATA_OPCODES + CONTROL_OPCODES + (OP_CONT,):
            raise ProtocolError(f"unknown opcode {opcode}")
        if opcode in CONTROL_OPCODES:
            if not fin:
                raise ProtocolError("fragmented control frame")
            if n > 125:
                raise ProtocolError("control frame payload over 125 bytes")
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
            raise ProtocolError(f"frame payload of {n} bytes is over the limit", CLOSE_TOO_BIG)
        key = _read_exact(self._read, 4) if masked else b""
        payload = _read_exact(self._read, n)
        if masked:
            payload = apply_mask(payload, key)
        return Frame(fin, rsv, opcode, masked, payload)


class MessageAssembler:
    """Turns frames into events, one per call of ``next_event()``:

    * ``("message", opcode, data)`` for a complete text/binary message (fragments joined),
    * ``("ping", payload)``, ``("pong", payload)``, ``("close", code, reason)`` for control frames,
      which may arrive between the fragments of a message (RFC 6455 §5.4).

    ``validate_utf8`` rejects text messages that are not UTF-8 (1007). gorilla does not check text
    payloads, so the mock server leaves it off; the plugin's client turns it on."""

    def __init__(self, reader: FrameReader, *, max_message: int = DEFAULT_MAX_MESSAGE, validate_utf8: bool = False):
        self.reader = reader
        self.max_message = max_message
        self.validate_utf8 = validate_utf8
        self._op: int | None = None
        self._parts: list[bytes] = []
        self._size = 0

    def next_event(self) -> tuple[Any, ...]:
        while True:
            f = self.reader.read_frame()
            if f.opcode in CONTROL_OPCODES:
                if f.opcode == OP_PING:
                    return ("ping", f.payload)
                if f.opcode == OP_PONG:
                    return ("pong", f.payload)
                code, reason = decode_close(f.payload)
                return ("close", code, reason)
            if f.opcode == OP_CONT:
                if self._op is None:
                    raise ProtocolError("continuation frame without a message to continue")
            else:
                if self._op is not None:
                    raise ProtocolError("new data frame while a fragmented message is open")
                self._op = f.opcode
                self._parts = []
                self._size = 0
            self._size += len(f.payload)
            if self._size > self.max_message:
                raise ProtocolError(f"message over {self.max_message} bytes", CLOSE_TOO_BIG)
            self._parts.append(f.payload)
            if f.fin:
                op, data = self._op, b"".join(self._parts)
                self._op, self._parts, self._size = None, [], 0
                if op == OP_TEXT and self.validate_utf8:
                    try:
                        data.decode("utf-8")
                    except UnicodeDecodeError:
                        raise ProtocolError("text message is not UTF-8", CLOSE_INVALID_PAYLOAD) from None
                return ("message", op, data)


# ------------------------------------------------------------------------------------------------
# handshake


def accept_key(key: str) -> str:
    """Sec-WebSocket-Accept for a Sec-WebSocket-Key (RFC 6455 §4.2.2)."""
    return base64.b64encode(hashlib.sha1((key.strip() + GUID).encode("ascii")).digest()).decode("ascii")


def _tokens(headers: Any, name: str) -> list[str]:
    vals = headers.get_all(name) if hasattr(headers, "get_all") else [headers.get(name)]
    out: list[str] = []
    for v in vals or []:
        if v:
            out += [t.strip().lower() for t in v.split(",")]
    return out


def handshake_problem(method: str, headers: Any) -> int | None:
    """The HTTP status gorilla's Upgrader answers for a bad upgrade request, or None when fine.
    Order of checks as in gorilla/websocket server.go: Connection, Upgrade, method, version, key."""
    if "upgrade" not in _tokens(headers, "Connection"):
        return 400
    if "websocket" not in _tokens(headers, "Upgrade"):
        return 426  # http.StatusUpgradeRequired + "Upgrade: websocket" (the binary; tiers/diff pty.websocket)
    if method != "GET":
        return 405
    if "13" not in _tokens(headers, "Sec-WebSocket-Version"):
        return 400
    key = (headers.get("Sec-WebSocket-Key") or "").strip()
    try:
        if len(base64.b64decode(key, validate=True)) != 16:
            return 400
    except (binascii.Error, ValueError):
        return 400
    return None


_STATUS_TEXT = {400: "Bad Request", 405: "Method Not Allowed", 403: "Forbidden", 426: "Upgrade Required"}


def send_handshake_error(req: Any, status: int) -> None:
    """gorilla returnError: Sec-Websocket-Version header + Go http.Error (status text + newline)."""
    text = _STATUS_TEXT.get(status, "Bad Request") + "\n"
    headers = {"Sec-Websocket-Version": "13", "X-Content-Type-Options": "nosniff"}
    if status == 426:
        headers["Upgrade"] = "websocket"
    req.send(status, text.encode("ascii"), "text/plain; charset=utf-8", headers=headers)


def upgrade(
    req: Any,
    *,
    max_message: int = DEFAULT_MAX_MESSAGE,
    read_timeout: float | None = None,
    on_close: Callable[["WebSocket"], None] | None = None,
) -> "WebSocket":
    """Answer 101 on an httpcore Request that passed ``handshake_problem`` and return the socket.
    The HTTP connection is not reused afterwards."""
    h = req.handler
    key = req.headers.get("Sec-WebSocket-Key") or ""
    # gorilla writes exactly these lines (no Date, no Server) on the hijacked connection.
    raw = (
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Sec-WebSocket-Accept: {accept_key(key)}\r\n\r\n"
    ).encode("ascii")
    h.wfile.write(raw)
    h.wfile.flush()
    h.close_connection = True
    req.responded = True
    req.sent_status = 101
    req.sent_headers = {"Upgrade": "websocket", "Connection": "Upgrade"}
    return WebSocket(
        h.connection, h.rfile, h.wfile, max_message=max_message, read_timeout=read_timeout, on_close=on_close
    )


# ------------------------------------------------------------------------------------------------
# connection


def go_json(obj: Any) -> bytes:
    """JSON as gorilla's Conn.WriteJSON writes it: Go encoding/json (mock_opensandbox.wire.gojson) followed
    by the newline json.Encoder appends."""
    return go_json_bytes(obj, newline=True)


class WebSocket:
    """A server-side WebSocket over an already upgraded connection.

    ``recv()`` returns the next data message as ``(opcode, bytes)`` and answers pings and closes
    itself; it returns None once the connection is over (peer close, EOF, timeout, protocol
    error). All writes are serialised by one lock, so any thread may send."""

    def __init__(
        self,
        sock: socket.socket,
        rfile: Any,
        wfile: Any,
        *,
        max_message: int = DEFAULT_MAX_MESSAGE,
        read_timeout: float | None = None,
        on_close: Callable[["WebSocket"], None] | None = None,
    ):
        self.sock = sock
        self.rfile = rfile
        self.wfile = wfile
        self._wlock = threading.Lock()
        self._state_lock = threading.Lock()
        self.read_timeout = read_timeout
        reader = FrameReader(rfile.read, require_mask=True, max_payload=max_message)
        self._asm = MessageAssembler(reader, max_message=max_message, validate_utf8=False)
        self.close_sent = False
        self.close_received = False
        self.closed = False
        self.close_code: int | None = None  # what the peer sent (or 1006 for an abnormal end)
        self.close_reason = ""
        self._on_close = on_close
        if read_timeout is not None:
            try:
                sock.settimeout(read_timeout)
            except OSError:
                pass

    # -- writing ----------------------------------------------------------------------------------
    def _write(self, data: bytes) -> bool:
        with self._wlock:
            if self.closed:
                return False
            try:
                self.wfile.write(data)
                self.wfile.flush()
                return True
            except (OSError, ValueError):
                self._abort_locked()
                return False

    def send(self, opcode: int, payload: bytes, *, fin: bool = True) -> bool:
        if self.close_sent and opcode != OP_CLOSE:
            return False
        return self._write(encode_frame(opcode, payload, fin=fin))

    def send_binary(self, data: bytes) -> bool:
        return self.send(OP_BINARY, data)

    def send_text(self, data: str | bytes) -> bool:
        return self.send(OP_TEXT, data.encode("utf-8") if isinstance(data, str) else data)

    def send_json(self, obj: Any) -> bool:
        return self.send(OP_TEXT, go_json(obj))

    def ping(self, data: bytes = b"") -> bool:
        return self.send(OP_PING, data)

    def close(self, code: int | None = CLOSE_NORMAL, reason: str = "", *, wait: bool = False) -> None:
        """Send a close frame (once) and shut the connection down. With ``wait`` false the
        socket is closed right away, as gorilla's closeConn does (WriteMessage(Close) + Close)."""
        with self._wlock:
            if not self.closed and not self.close_sent:
                self.close_sent = True
                try:
                    self.wfile.write(encode_frame(OP_CLOSE, encode_close(code, reason)))
                    self.wfile.flush()
                except (OSError, ValueError):
                    pass
            if not wait:
                self._abort_locked()

    def abort(self) -> None:
        """Drop the connection without a close frame (what a client sees when a container dies)."""
        with self._wlock:
            self._abort_locked()

    def _abort_locked(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        cb, self._on_close = self._on_close, None
        if cb is not None:
            try:
                cb(self)
            except Exception:  # a callback must never break the connection teardown
                pass

    # -- reading ----------------------------------------------------------------------------------
    def recv(self) -> tuple[int, bytes] | None:
        while True:
            if self.closed:
                return None
            try:
                ev = self._asm.next_event()
            except ProtocolError as exc:
                self.close(exc.code, str(exc)[:100])
                self.close_code = 1006
                return None
            except (ConnectionClosed, OSError, ValueError):
                self.close_code = self.close_code or 1006
                self.abort()
                return None
            kind = ev[0]
            if kind == "message":
                return ev[1], ev[2]
            if kind == "ping":
                self.send(OP_PONG, ev[1])
                continue
            if kind == "pong":
                continue
            # close: gorilla's default handler echoes the code (no reason), then reading ends
            _, code, reason = ev
            self.close_received = True
            self.close_code, self.close_reason = code, reason
            self.close(None if code == CLOSE_NO_STATUS else code, "")
            return None
