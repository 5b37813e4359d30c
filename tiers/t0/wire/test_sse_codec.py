"""SSE codec (execd's bare-JSON framing) and the two output framings of commands."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from mock_opensandbox.execd.commands import ChunkDecoder, LineSplitter
from mock_opensandbox.wire import sse
from mock_opensandbox.wire.gojson import GO_REPLACE

texts = st.text(max_size=40)
events = st.one_of(
    st.builds(sse.init_event, st.text(alphabet="0123456789abcdef", min_size=32, max_size=32), st.integers(0, 2**45)),
    st.builds(sse.ping_event, st.integers(0, 2**45)),
    st.builds(sse.output_event, st.sampled_from(["stdout", "stderr"]), texts, st.integers(0, 2**45)),
    st.builds(sse.complete_event, st.one_of(st.none(), st.integers(0, 10**7)), st.integers(0, 2**45)),
    st.builds(sse.error_event, texts, st.lists(texts, max_size=3), ts=st.integers(0, 2**45)),
)


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts})
    out, last = [], 0
    for p in points:
        out.append(data[last:p])
        last = p
    out.append(data[last:])
    return out


@settings(max_examples=150, deadline=None)
@given(st.lists(events, max_size=12), st.lists(st.integers(0, 10**6), max_size=20))
def test_writer_reader_round_trip_under_any_chunking(evs, cuts):
    stream = b"".join(sse.encode_event(e) for e in evs)
    reader = sse.SSEReader()
    got = []
    for chunk in split(stream, cuts):
        got += reader.feed(chunk)
    got += reader.close()
    assert got == evs


@settings(max_examples=100, deadline=None)
@given(st.lists(events, max_size=8), st.lists(st.integers(0, 10**6), max_size=20), st.booleans())
def test_reader_accepts_standard_data_frames(evs, cuts, crlf):
    nl = "\r\n" if crlf else "\n"
    stream = "".join(f": comment{nl}event: x{nl}data: {json.dumps(e)}{nl}{nl}" for e in evs).encode()
    reader = sse.SSEReader()
    got = []
    for chunk in split(stream, cuts):
        got += reader.feed(chunk)
    assert got + reader.close() == evs


def test_recorded_bytes():
    # recording 07/12: exact frames
    assert sse.encode_event(sse.error_event("3", ["exit status 3"], ts=1795938403469)) == (
        b'{"type":"error","timestamp":1795938403469,"error":{"ename":"CommandExecError","evalue":"3",'
        b'"traceback":["exit status 3"]}}\n\n'
    )
    assert sse.encode_event(sse.complete_event(3, ts=1795938417637)) == (
        b'{"type":"execution_complete","execution_time":3,"timestamp":1795938417637}\n\n'
    )
    assert sse.encode_event(sse.complete_event(0, ts=1795938410516)) == (
        b'{"type":"execution_complete","timestamp":1795938410516}\n\n'
    )
    assert sse.encode_event(sse.output_event("stdout", '{"json": true}', 1)) == (
        b'{"type":"stdout","text":"{\\"json\\": true}","timestamp":1}\n\n'
    )
    assert sse.encode_event(sse.output_event("stdout", "h\u00e9llo \u2603", 1)) == (
        '{"type":"stdout","text":"h\u00e9llo \u2603","timestamp":1}\n\n'.encode()
    )
    assert b"\\u003c\\u0026\\u003e" in sse.encode_event(sse.output_event("stdout", "<&>", 1))


def test_reader_keeps_non_json_frames_visible():
    r = sse.SSEReader()
    assert r.feed(b"not json\n\n") == [{"type": "_raw", "text": "not json"}]
    assert r.feed(b'{"type":"ping"}') == []
    assert r.close() == [{"type": "ping"}]


def test_line_splitter_matches_recording_12():
    s = LineSplitter()
    assert s.feed(b"a\r\nb\n\nc") + s.flush() == ["a", "b", "\n", "c"]
    s = LineSplitter()
    assert s.feed(b"x\r") + s.feed(b"\ny\r\rz") + s.flush() == ["x", "y", "\n", "z"]


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200), st.lists(st.integers(0, 10**6), max_size=10))
def test_line_splitter_is_chunking_invariant(data, cuts):
    whole = LineSplitter()
    expect = whole.feed(data) + whole.flush()
    s = LineSplitter()
    got = []
    for c in split(data, cuts):
        got += s.feed(c)
    assert got + s.flush() == expect
    assert all(t == "\n" or ("\n" not in t and "\r" not in t and t) for t in got)


def _splitter_by_bytes(chunks: list[bytes]) -> list[str]:
    """The framing rule of commandOutputTail byte by byte (what LineSplitter did before it cut at CR/LF)."""
    out: list[str] = []
    pending, last_cr = bytearray(), False
    for data in chunks:
        for b in data:
            if b in (10, 13):
                if pending:
                    out.append(pending.decode("utf-8", GO_REPLACE))
                    pending.clear()
                elif not (b == 10 and last_cr):
                    out.append("\n")
                last_cr = b == 13
                continue
            last_cr = False
            pending.append(b)
    if pending:
        out.append(pending.decode("utf-8", GO_REPLACE))
    return out


@settings(max_examples=400, deadline=None)
@given(
    st.lists(st.sampled_from([b"\r", b"\n", b"\r\n", b"\n\r", b"a", b"bc", b"\xc3\xa9", b"\xff", b""]), max_size=60),
    st.lists(st.integers(0, 10**6), max_size=10),
)
def test_line_splitter_agrees_with_the_rule_byte_by_byte(pieces, cuts):
    data = b"".join(pieces)
    chunks = list(split(data, cuts))
    s = LineSplitter()
    got = []
    for c in chunks:
        got += s.feed(c)
    assert got + s.flush() == _splitter_by_bytes(chunks)


def test_output_frames_are_the_events_encoded_one_by_one():
    texts = ["plain", "<a&b>", "\u2028\u2029", 'tab\tquote"back\\', "é ✓ \U0001f600", "\x00\x1f", "\n"]
    for stream in ("stdout", "stderr"):
        assert sse.output_frames(stream, texts, 1234) == [
            sse.encode_event(sse.output_event(stream, t, 1234)) for t in texts
        ]


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=100), st.lists(st.integers(0, 10**6), max_size=10))
def test_chunk_decoder_is_byte_exact(text, cuts):
    data = text.encode("utf-8")
    d = ChunkDecoder()
    out = []
    for c in split(data, cuts):
        out += d.feed(c)
    assert "".join(out + d.flush()) == text
