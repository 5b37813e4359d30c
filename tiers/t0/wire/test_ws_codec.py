"""Properties of the two WebSocket codecs: the mock's server side (mock_opensandbox/wire/websocket.py) and the
plugin's client (plugin/osb/ws.py). They share no code, so each direction is checked across them:
client encoder -> server decoder and server encoder -> client decoder, for payloads of 0 to 1 MiB,
text and binary, whole or fragmented, with control frames between the fragments.
Sockets only appear as socketpair() (no ports)."""

from __future__ import annotations

import io
import json
import random
import socket
import struct
import threading

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from mock_opensandbox.wire import websocket as srv
from osb import transport
from osb import ws as cli

MIB = 1 << 20
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _payload(size: int, seed: int, text: bool) -> bytes:
    rng = random.Random(seed)
    if text:  # valid UTF-8 of about ``size`` bytes, multi-byte characters included
        alphabet = "abc xyz\n\t0123é€😀"
        out = "".join(rng.choice(alphabet) for _ in range(min(size, 4096)))
        data = (out * (size // max(1, len(out.encode())) + 1)).encode()
        while len(data) > size:  # cut back to a character boundary at or below size
            data = data[:size]
            try:
                data.decode()
                break
            except UnicodeDecodeError:
                size -= 1
        return data
    return rng.randbytes(size)


sizes = st.one_of(st.integers(0, 300), st.sampled_from([125, 126, 127, 65535, 65536, 65537, MIB]), st.integers(0, MIB))


def _bucket(n: int) -> str:
    return (
        "size 0"
        if n == 0
        else "size <126"
        if n < 126
        else "size <64Ki"
        if n < 65536
        else "size <1Mi"
        if n < MIB
        else "size 1Mi"
    )


def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    parts, last = [], 0
    for p in points:
        parts.append(data[last:p])
        last = p
    parts.append(data[last:])
    return parts


def _reader(read, module, *, require_mask, max_message=2 * MIB, validate_utf8=True):
    fr = module.FrameReader(read, require_mask=require_mask, max_payload=max_message)
    return module.MessageAssembler(fr, max_message=max_message, validate_utf8=validate_utf8)


def _drain(asm) -> list[tuple]:
    events = []
    while True:
        try:
            events.append(asm.next_event())
        except (srv.ConnectionClosed, cli.ConnectionClosed):
            return events


def _build(enc, opcode, data, cuts, controls, mask: bool):
    """Frames of one message split at ``cuts`` with ``controls`` (kind, payload) after fragment i."""
    parts = _split(data, cuts)
    wire = bytearray()
    expected = []
    for i, part in enumerate(parts):
        op = opcode if i == 0 else 0
        key = random.Random(i).randbytes(4) if mask else None
        wire += enc(op, part, fin=i == len(parts) - 1, mask=key)
        if i < len(parts) - 1:
            for kind, payload in controls.get(i, []):
                op_c = {"ping": 0x9, "pong": 0xA}[kind]
                wire += enc(op_c, payload, mask=random.Random(99).randbytes(4) if mask else None)
                expected.append((kind, payload))
    expected.append(("message", opcode, data))
    return bytes(wire), expected


messages = st.tuples(
    sizes,
    st.integers(0, 2**32),
    st.booleans(),
    st.lists(st.integers(0, MIB), max_size=4),
    st.dictionaries(
        st.integers(0, 4),
        st.lists(st.tuples(st.sampled_from(["ping", "pong"]), st.binary(max_size=125)), max_size=2),
        max_size=3,
    ),
)


@SETTINGS
@given(messages)
def test_client_to_server_round_trip(msg):
    size, seed, text, cuts, controls = msg
    data = _payload(size, seed, text)
    event(_bucket(len(data)))
    wire, expected = _build(cli.encode_frame, 0x1 if text else 0x2, data, cuts, controls, mask=True)
    events = _drain(_reader(io.BytesIO(wire).read, srv, require_mask=True))
    assert events == expected


@SETTINGS
@given(messages)
def test_server_to_client_round_trip(msg):
    size, seed, text, cuts, controls = msg
    data = _payload(size, seed, text)
    event(_bucket(len(data)))
    wire, expected = _build(srv.encode_frame, 0x1 if text else 0x2, data, cuts, controls, mask=False)
    events = _drain(_reader(io.BytesIO(wire).read, cli, require_mask=False))
    assert events == expected


@pytest.mark.parametrize("text", [False, True])
def test_one_mebibyte_fragmented_with_controls_both_directions(text):
    """The upper end, always exercised (the properties above only reach it sometimes)."""
    data = _payload(MIB, 7, text)
    cuts = [1, 65536, 65537, MIB // 2, MIB - 1]
    controls = {0: [("ping", b"a")], 2: [("pong", b""), ("ping", b"x" * 125)], 4: [("pong", b"z")]}
    op = 0x1 if text else 0x2
    wire, expected = _build(cli.encode_frame, op, data, cuts, controls, mask=True)
    assert _drain(_reader(io.BytesIO(wire).read, srv, require_mask=True)) == expected
    wire, expected = _build(srv.encode_frame, op, data, cuts, controls, mask=False)
    assert _drain(_reader(io.BytesIO(wire).read, cli, require_mask=False)) == expected


@SETTINGS
@given(
    st.lists(
        st.tuples(st.integers(0, 70000), st.integers(0, 2**32), st.booleans(), st.booleans()), min_size=1, max_size=5
    ),
    st.integers(1, 7),
)
def test_message_streams_survive_short_reads(msgs, chunk):
    """Many messages back to back, read a few bytes at a time (a socket gives what it has)."""
    wire = bytearray()
    expected = []
    for size, seed, text, masked in msgs:
        data = _payload(size, seed, text)
        wire += cli.encode_frame(0x1 if text else 0x2, data, mask=b"\x01\x02\x03\x04" if masked else None)
        expected.append(("message", 0x1 if text else 0x2, data))
    buf = io.BytesIO(bytes(wire))
    events = _drain(_reader(lambda n: buf.read(min(n, chunk)), srv, require_mask=None))
    assert events == expected


@given(st.binary(max_size=4096), st.binary(min_size=4, max_size=4))
def test_masking_is_an_involution_and_matches_both_sides(data, key):
    assert srv.apply_mask(srv.apply_mask(data, key), key) == data
    assert srv.apply_mask(data, key) == cli.apply_mask(data, key)
    assert srv.apply_mask(data, key) == bytes(b ^ key[i % 4] for i, b in enumerate(data))


@pytest.mark.parametrize("n,header", [(0, 2), (125, 2), (126, 4), (65535, 4), (65536, 10)])
def test_length_encodings(n, header):
    for mod in (srv, cli):
        assert len(mod.encode_frame(2, b"x" * n)) == header + n
        assert len(mod.encode_frame(2, b"x" * n, mask=b"abcd")) == header + 4 + n


@given(st.sampled_from([1000, 1001, 1002, 1003, 1007, 1011, 3000, 4001, 4999]), st.text(max_size=30))
def test_close_payload_round_trip(code, reason):
    if len(reason.encode()) > 123:
        return
    assert srv.decode_close(cli.encode_close(code, reason)) == (code, reason)
    assert cli.decode_close(srv.encode_close(code, reason)) == (code, reason)


# -- violations: each side refuses what RFC 6455 forbids -----------------------------------------


def _events(module, wire: bytes, require_mask):
    return _drain(_reader(io.BytesIO(wire).read, module, require_mask=require_mask))


@pytest.mark.parametrize("module,require_mask,masked", [(srv, True, False), (cli, False, True)])
def test_mask_direction_is_enforced(module, require_mask, masked):
    frame = srv.encode_frame(2, b"hi", mask=b"abcd" if masked else None)
    with pytest.raises(module.ProtocolError) as err:
        _events(module, frame, require_mask)
    assert err.value.code == 1002


BAD = {
    "control frame over 125 bytes": struct.pack("!BB", 0x89, 126) + struct.pack("!H", 126) + b"x" * 126,
    "fragmented control frame": bytes([0x09, 0]),
    "continuation without a start": bytes([0x80, 1]) + b"x",
    "data frame inside a fragmented message": bytes([0x01, 1]) + b"a" + bytes([0x82, 1]) + b"b",
    "reserved bits": bytes([0xC2, 0]),
    "unknown opcode": bytes([0x83, 0]),
    "close with one byte": bytes([0x88, 1]) + b"\x03",
    "close code 1005 on the wire": bytes([0x88, 2]) + struct.pack("!H", 1005),
    "close code 999": bytes([0x88, 2]) + struct.pack("!H", 999),
    "64-bit length with the top bit": bytes([0x82, 127]) + struct.pack("!Q", 1 << 63),
}


@pytest.mark.parametrize("name", sorted(BAD))
@pytest.mark.parametrize("module", [srv, cli], ids=["server", "client"])
def test_protocol_violations(module, name):
    with pytest.raises(module.ProtocolError):
        _events(module, BAD[name], None)


def test_oversized_message_is_1009_and_bad_utf8_is_1007():
    two = cli.encode_frame(2, b"a" * 10, fin=False) + cli.encode_frame(0, b"b" * 10)
    for module in (srv, cli):
        asm = _reader(io.BytesIO(two).read, module, require_mask=None, max_message=15)
        with pytest.raises(module.ProtocolError) as err:
            asm.next_event()
        assert err.value.code == 1009
        asm = _reader(io.BytesIO(cli.encode_frame(1, b"\xff\xfe")).read, module, require_mask=None, validate_utf8=True)
        with pytest.raises(module.ProtocolError) as err:
            asm.next_event()
        assert err.value.code == 1007


@given(st.integers(1, 200), st.integers(0, 2**32))
def test_truncated_streams_end_cleanly(size, seed):
    frame = cli.encode_frame(2, _payload(size, seed, False), mask=b"wxyz")
    cut = random.Random(seed).randrange(1, len(frame))
    with pytest.raises(srv.ConnectionClosed):
        srv.FrameReader(io.BytesIO(frame[:cut]).read, require_mask=True).read_frame()
    with pytest.raises(cli.ConnectionClosed):
        cli.FrameReader(io.BytesIO(frame[:cut]).read, require_mask=None).read_frame()


def test_accept_key_rfc_example():
    assert srv.accept_key("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="  # RFC 6455 §1.3
    assert cli._accept_for("dGhlIHNhbXBsZSBub25jZQ==") == "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="


def test_go_json_matches_gorilla_write_json():
    assert (
        srv.go_json({"type": "error", "error": "<a & b>"}) == b'{"type":"error","error":"\\u003ca \\u0026 b\\u003e"}\n'
    )


# -- both ends live over a socketpair -------------------------------------------------------------


def _pair():
    a, b = socket.socketpair()
    server = srv.WebSocket(a, a.makefile("rb"), a.makefile("wb", buffering=0))
    client = cli.WebSocketClient(b, b.makefile("rb"))
    return server, client


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(st.tuples(st.integers(0, 200_000), st.integers(0, 2**32), st.booleans()), min_size=1, max_size=4),
    st.sampled_from([0, 1, 1000, 65536]),
)
def test_live_connection_both_directions_with_pings(msgs, fragment):
    server, client = _pair()
    try:
        results: list = []

        def serve():
            while True:
                m = server.recv()
                if m is None:
                    return
                results.append(m)
                server.ping(b"p")  # the client must answer while the server keeps echoing
                server.send(m[0], m[1])

        t = threading.Thread(target=serve, daemon=True)
        t.start()
        client.settimeout(30)
        for size, seed, text in msgs:
            data = _payload(size, seed, text)
            op = cli.OP_TEXT if text else cli.OP_BINARY
            client.send(op, data, fragment_size=fragment)
            assert client.recv() == (op, data)  # the ping in between was answered, not returned
        client.close(4001, "bye", timeout=5)
        t.join(timeout=10)
        assert not t.is_alive()
        assert [(o, d) for o, d in results] == [
            (cli.OP_TEXT if x[2] else cli.OP_BINARY, _payload(*x[:2], x[2])) for x in msgs
        ]
        assert server.close_code == 4001 and server.close_reason == "bye"
    finally:
        server.abort()
        client.shutdown()


def test_server_close_reaches_the_client_with_its_code():
    server, client = _pair()
    try:
        server.send_json({"type": "exit", "exit_code": 3})
        server.close(1000, "process exited")
        client.settimeout(10)
        assert json.loads(client.recv()[1]) == {"type": "exit", "exit_code": 3}
        with pytest.raises(cli.ConnectionClosed) as err:
            client.recv()
        assert (err.value.code, err.value.reason) == (1000, "process exited")
    finally:
        server.abort()
        client.shutdown()


def test_every_failure_of_an_open_connection_is_a_net_error():
    """The client's one vocabulary: silence, and a read or a send after the end, are the
    transport's NetError (what methods/pty.py catches), a read that timed out of kind "timeout"."""
    server, client = _pair()
    try:
        client.settimeout(0.05)
        with pytest.raises(cli.TimedOut) as err:
            client.recv()
        assert isinstance(err.value, transport.NetError) and err.value.kind == "timeout"
        assert client.closed  # a timed-out socket file cannot be read again
        for fail in (client.recv, lambda: client.send_text("x")):
            with pytest.raises(cli.ConnectionClosed) as err:
                fail()
            assert isinstance(err.value, transport.NetError) and err.value.kind == "websocket"
    finally:
        server.abort()
        client.shutdown()


def test_unmasked_client_frame_gets_a_1002_close():
    a, b = socket.socketpair()
    server = srv.WebSocket(a, a.makefile("rb"), a.makefile("wb", buffering=0))
    try:
        b.sendall(srv.encode_frame(2, b"not masked"))
        assert server.recv() is None
        b.settimeout(5)
        reply = b.recv(64)
        assert reply[0] == 0x88 and struct.unpack("!H", reply[2:4])[0] == 1002
    finally:
        server.abort()
        b.close()
