"""Plugin codecs without I/O: SSE decoding of both execd framings at any chunking, HTTP chunked
transfer coding at any split, v1.1.0 output restoration, exit codes of terminal events, shell
quoting, the multipart writer."""

from __future__ import annotations

import email.parser
import email.policy
import json
import re
import shlex
import subprocess

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from osb import execd, multipart, sse, transport

# ---- SSE ------------------------------------------------------------------------------------------

text = st.text(st.characters(codec="utf-8"), max_size=40)
events = st.lists(
    st.fixed_dictionaries(
        {
            "type": st.sampled_from(["init", "ping", "stdout", "stderr", "execution_complete", "error", "status"]),
            "text": st.one_of(text, st.sampled_from(["\n", "data: fake", '{"json": true}', "a\n\nb", ""])),
            "timestamp": st.integers(0, 2**53),
        }
    ),
    max_size=12,
)


def _bare(evs) -> bytes:  # what execd really sends (recordings 07-18)
    return b"".join(json.dumps(e).encode() + b"\n\n" for e in evs)


def _sse(evs, crlf: bool, extras: bool) -> bytes:  # standard SSE, as a newer execd or a proxy may send
    nl = "\r\n" if crlf else "\n"
    out = []
    for e in evs:
        lines = []
        if extras:
            lines += [": keep-alive", "event: message", "id: 7"]
        lines.append("data: " + json.dumps(e))
        out.append(nl.join(lines) + nl + nl)
    return "".join(out).encode()


def _decode(blob: bytes, cuts: list[int]) -> list[dict]:
    dec = sse.SSEDecoder()
    got, last = [], 0
    for cut in sorted({c % (len(blob) + 1) for c in cuts}):
        got += dec.feed(blob[last:cut])
        last = cut
    got += dec.feed(blob[last:])
    got += dec.close()
    return got


@settings(max_examples=150, deadline=None)
@given(events, st.lists(st.integers(0, 10**6), max_size=30))
def test_sse_bare_json_any_chunking(evs, cuts):
    assert _decode(_bare(evs), cuts) == evs


@settings(max_examples=150, deadline=None)
@given(events, st.lists(st.integers(0, 10**6), max_size=30), st.booleans(), st.booleans())
def test_sse_data_frames_any_chunking(evs, cuts, crlf, extras):
    assert _decode(_sse(evs, crlf, extras), cuts) == evs


# ---- HTTP chunked transfer coding (Stream.read_some decodes it itself) ------------------------------


def _chunked(pieces: list[bytes], ext: bool, trailer: bool) -> bytes:
    out = b"".join(b"%x%s\r\n%s\r\n" % (len(p), b";x=y" if ext else b"", p) for p in pieces if p)
    return out + b"0\r\n" + (b"X-Trailer: 1\r\n" if trailer else b"") + b"\r\n"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.binary(max_size=300), max_size=10),
    st.lists(st.integers(0, 10**6), max_size=30),
    st.booleans(),
    st.booleans(),
)
def test_dechunker_any_split(pieces, cuts, ext, trailer):
    blob = _chunked(pieces, ext, trailer) + b"after the body"
    dec, got, last = transport.Dechunker(), [], 0
    for cut in sorted({c % (len(blob) + 1) for c in cuts}) + [len(blob)]:
        got.append(dec.feed(blob[last:cut]))
        last = cut
    assert b"".join(got) == b"".join(pieces) and dec.done


def test_dechunker_stops_at_a_partial_chunk_and_refuses_bad_framing():
    dec = transport.Dechunker()
    assert dec.feed(b"5\r\nab") == b"ab" and dec.feed(b"") == b"" and not dec.done
    assert dec.feed(b"cde\r") == b"cde" and dec.feed(b"\n3\r\nxyz\r\n0\r\n\r\n") == b"xyz" and dec.done
    for bad in (b"zz\r\n", b"3\r\nabcX\r\n", b"-1\r\n", b"1" * 5000):
        with pytest.raises(transport.http.client.IncompleteRead):
            transport.Dechunker().feed(bad)


@given(events)
def test_sse_last_frame_without_blank_line(evs):
    blob = _bare(evs)
    if evs:
        blob = blob[:-2]  # the stream ended right after the last object
    assert _decode(blob, []) == evs


def test_sse_recorded_stream_and_garbage():
    recorded = (
        '{"type":"init","text":"2b3c60a922a2481a883c814283e1bc37","timestamp":1795938403468}\n\n'
        '{"type":"ping","text":"pong","timestamp":1795938403468}\n\n'
        '{"type":"stderr","text":"err","timestamp":1795938403469}\n\n'
        '{"type":"error","timestamp":1795938403469,"error":{"ename":"CommandExecError","evalue":"3",'
        '"traceback":["exit status 3"]}}\n\n'
    ).encode()  # recording 07
    got = _decode(recorded, [1, 50, 51, 200])
    assert [e["type"] for e in got] == ["init", "ping", "stderr", "error"]
    dec = sse.SSEDecoder()
    assert dec.feed(b'not json\n\n[1,2]\n\n{"type":"ping"}\n{"type":"stdout"}\n\n') == [
        {"type": "ping"},
        {"type": "stdout"},
    ]
    assert dec.bad_frames >= 1


# ---- v1.1.0 output restoration ----------------------------------------------------------------------


def _v110_events(output: str) -> list[str]:
    """What execd v1.1.0 emits for an output (recording 12): one event per line, the line ending
    (\\n and a \\r before it) stripped, an empty line as the text "\\n"."""
    lines = output.split("\n")
    tail = lines.pop()  # text after the last newline (maybe "")
    out = []
    for line in lines:
        line = line.removesuffix("\r")
        out.append(line if line else "\n")
    if tail.removesuffix("\r"):
        out.append(tail.removesuffix("\r"))
    return out


def test_recorded_v110_framing_is_restored():
    # recording 12: printf 'a\r\nb\n\nc' -> "a", "b", "\n", "c"
    assert _v110_events("a\r\nb\n\nc") == ["a", "b", "\n", "c"]
    assert "".join(map(sse.restore_legacy_text, ["a", "b", "\n", "c"])) == "a\nb\n\nc\n"


def test_printf_crlf_same_in_both_modes_except_cr():
    latest = "a\r\nb\n"  # byte-exact with a latest execd
    legacy = "".join(map(sse.restore_legacy_text, _v110_events(latest)))
    assert legacy == "a\nb\n" == latest.replace("\r", "")


@given(
    st.lists(st.text(st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=8), max_size=10), st.booleans()
)
def test_restoration_property(lines, trailing_newline):
    output = "\n".join(lines) + ("\n" if trailing_newline and lines else "")
    restored = "".join(map(sse.restore_legacy_text, _v110_events(output)))
    expected = output if output.endswith("\n") or not output else output + "\n"
    if not trailing_newline and lines and lines[-1] == "":
        expected = output  # a final empty segment is no line at all
    assert restored == expected


# ---- exit codes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "event,code",
    [
        ({"type": "execution_complete", "execution_time": 2}, 0),
        ({"type": "error", "error": {"ename": "CommandExecError", "evalue": "3", "traceback": ["exit status 3"]}}, 3),
        ({"type": "error", "error": {"evalue": "127", "traceback": ["exit status 127"]}}, 127),
        ({"type": "error", "error": {"evalue": "255", "traceback": ["exit status 255"]}}, 255),
        ({"type": "error", "error": {"evalue": "-1", "traceback": ["signal: killed"]}}, 137),  # rec 09/12
        ({"type": "error", "error": {"evalue": "-1", "traceback": ["signal: terminated"]}}, 143),  # rec 10
        ({"type": "error", "error": {"evalue": "-1", "traceback": []}}, -1),
        ({"type": "stdout", "text": "x"}, None),
        ({"type": "ping"}, None),
    ],
)
def test_terminal_exit_codes(event, code):
    assert sse.terminal_exit_code(event) == code


def test_start_failure_is_not_an_exit_code():
    with pytest.raises(sse.StartFailure, match="fork/exec"):
        sse.terminal_exit_code(
            {
                "type": "error",
                "error": {"ename": "CommandExecError", "evalue": "fork/exec /bin/x: operation not permitted"},
            }
        )


# ---- shell quoting (v1.1.0 takes a command string) ---------------------------------------------------


@given(st.lists(st.text(st.characters(codec="utf-8", exclude_characters="\0"), max_size=12), min_size=1, max_size=6))
def test_shell_join_round_trips_through_posix_splitting(argv):
    assert shlex.split(execd.shell_join(argv)) == argv


def test_shell_join_runs_the_same_argv_in_sh():
    argv = ["printf", "%s|", "a b", "it's", "$HOME", "`x`", "*", "", "-n", "a\nb"]
    out = subprocess.run(["sh", "-c", execd.shell_join(argv)], capture_output=True, text=True).stdout
    assert out == "a b|it's|$HOME|`x`|*||-n|a\nb|"
    with pytest.raises(ValueError):
        execd.shell_join(["a\0b"])


# ---- multipart ------------------------------------------------------------------------------------------


def parse_multipart(content_type: str, body: bytes) -> list[tuple[str, str, str, bytes]]:
    """Independent RFC 2046 reader for the test: [(name, filename, content_type, data)]."""
    boundary = content_type.split("boundary=", 1)[1].encode()
    delim = b"--" + boundary
    assert body.startswith(delim + b"\r\n")
    assert body.endswith(delim + b"--\r\n")
    inner = body[len(delim) + 2 : -(len(delim) + 4)]
    parts = []
    for raw in inner.split(b"\r\n" + delim + b"\r\n") if inner else []:
        head, _, data = raw.partition(b"\r\n\r\n")
        headers = dict(line.split(b": ", 1) for line in head.split(b"\r\n"))
        disp = headers[b"Content-Disposition"].decode()
        fields = dict(re.findall(r'; (name|filename)="([^"]*)"', disp))
        parts.append((fields["name"], fields["filename"], headers[b"Content-Type"].decode(), data))
    if parts:
        last = parts[-1]
        assert last[3].endswith(b"\r\n")
        parts[-1] = (*last[:3], last[3][:-2])
    return parts


def _multipart(parts):
    """The whole body the plugin sends for ``parts``: its pieces, joined."""
    ctype, pieces = multipart.multipart_pieces(parts)
    return ctype, b"".join(pieces)


names = st.text(st.characters(min_codepoint=32, max_codepoint=126, exclude_characters='"\\'), min_size=1, max_size=12)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(names, names, st.binary(max_size=300)), min_size=1, max_size=4))
def test_multipart_round_trip(parts):
    spec = [(n, f, "application/octet-stream", d) for n, f, d in parts]
    ctype, body = _multipart(spec)
    assert parse_multipart(ctype, body) == spec


def test_multipart_pieces_keep_large_data_uncopied_and_join_to_the_same_body():
    big = bytes(range(256)) * 1024  # 256 KiB: sent as its own piece
    spec = [
        ("metadata", "metadata", "application/json", b'{"path": "/tmp/x"}'),
        ("file", "x.bin", "application/octet-stream", big),
    ]
    ctype, pieces = multipart.multipart_pieces(spec)
    assert len(pieces) == 3 and pieces[1] is big
    assert parse_multipart(ctype, b"".join(pieces)) == spec


def test_multipart_boundary_never_inside_data_and_email_parser_agrees():
    data = bytes(range(256)) * 4 + b"\r\n--osbprovider\r\n"
    ctype, body = _multipart(
        [
            ("metadata", "metadata", "application/json", b'{"path": "/tmp/x", "mode": 644}'),
            ("file", "x.bin", "application/octet-stream", data),
        ]
    )
    boundary = ctype.split("boundary=", 1)[1].encode()
    assert boundary not in data
    msg = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        b"Content-Type: " + ctype.encode() + b"\r\n\r\n" + body
    )
    got = [
        (p.get_param("name", header="content-disposition"), p.get_filename(), p.get_payload(decode=True))
        for p in msg.iter_parts()
    ]
    assert got == [("metadata", "metadata", b'{"path": "/tmp/x", "mode": 644}'), ("file", "x.bin", data)]


def test_multipart_filename_is_made_safe():
    ctype, body = _multipart([("file", 'we"ird\r\nname\u00e9', "application/octet-stream", b"x")])
    ((_, filename, _, data),) = parse_multipart(ctype, body)
    assert filename == "we_ird__name_" and data == b"x"
