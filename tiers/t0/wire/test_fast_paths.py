"""The hot path's shortcuts give what the general code gives, on generated input (t0, no network).

Each shortcut in the command round trip (bench/README.md, the round trip) skips general code for the common
case and falls back to it otherwise: Go-style JSON decoding (json.loads before the scanner), Go-style JSON
encoding (Python's C encoder when there is no float), the request head (no email parser for a plain
head) and the journal's chunk tee (bytes.find instead of a byte at a time). Each test feeds the same
input to both ways and compares.
"""

from __future__ import annotations

import http.client
import io
import random

import pytest

from mock_opensandbox.wire import gojson, http1
from mock_opensandbox.workbench.journal import _TeeWriter

SEED = 20261206


def _slow_decode(body: bytes):
    """decode_value without its json.loads shortcut: the scanner's verdict, then the value."""
    text, sc, start = gojson._scan_start(body, "EOF")
    gojson._deep(sc.value)
    return gojson._deep(gojson._loads, text[start : sc.i])


def _outcome(fn, body):
    try:
        return ("ok", repr(fn(body)))
    except ValueError as exc:  # GoJSONError included
        return ("error", type(exc).__name__, str(exc))


def _json_like(rnd: random.Random) -> bytes:
    atoms = [
        "0",
        "-0",
        "1.5e3",
        "01",
        "1.",
        "NaN",
        "Infinity",
        "-Infinity",
        "true",
        "nul",
        '"a\\u00e9"',
        '"\\ud800"',
        '"x\ty"',
        '"<&>"',
        '""',
        "[]",
        "{}",
        '{"command":"true"}',
        '{"Command":"x","timeout":5}',
        "[1,",
        '{"a":1,}',
        " ",
        "\ufeff",
        "\x00",
        "\xe9",
        '"\\q"',
        "12345678901234567890",
        "1e400",
        '{"envs":{"A":null}}',
    ]
    parts = [rnd.choice(atoms) for _ in range(rnd.randint(1, 4))]
    text = rnd.choice(["", "[", '{"k":']) + rnd.choice([",", " ", ""]).join(parts) + rnd.choice(["", "]", "}", " x"])
    data = text.encode("utf-8")
    if rnd.random() < 0.1:
        data += b"\xff\xfe"
    return data


def test_decode_value_shortcut_agrees_with_the_scanner():
    rnd = random.Random(SEED)
    bodies = [_json_like(rnd) for _ in range(4000)] + [
        b"",
        b"   ",
        b"[" * 20 + b"]" * 20,
        b'{"a":[1,2,{"b":null}]}  \n',
    ]
    for body in bodies:
        assert _outcome(gojson.decode_value, body) == _outcome(_slow_decode, body), body


def test_decode_value_deep_nesting_still_refused():
    deep = b"[" * (gojson.MAX_DEPTH + 1) + b"]" * (gojson.MAX_DEPTH + 1)
    with pytest.raises(gojson.GoJSONError, match="exceeded max depth"):
        gojson.decode_value(deep)


def _slow_go_json(obj) -> str:
    s = gojson._encode(obj)
    for a, b in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("\u2028", "\\u2028"), ("\u2029", "\\u2029")):
        s = s.replace(a, b)
    return s


def test_go_json_c_encoder_agrees_with_the_go_encoder():
    rnd = random.Random(SEED)
    chars = [chr(c) for c in (0, 9, 10, 31, 34, 38, 60, 62, 92, 127, 0xE9, 0x2028, 0x2029, 0xD800, 0x1F600)] + ["a"]
    for _ in range(3000):
        text = "".join(rnd.choice(chars) for _ in range(rnd.randint(0, 8)))
        obj = {
            "type": "stdout",
            "text": text,
            "timestamp": rnd.randint(-(2**70), 2**70),
            "error": {"ename": text, "evalue": None, "traceback": [text, True, False]},
        }
        assert gojson.go_json(obj) == _slow_go_json(obj)
    assert gojson.go_json({"t": 2.0}) == '{"t":2}'  # floats keep Go's form (the general encoder)
    assert gojson.go_json({"t": [1e21]}) == '{"t":[1e+21]}'


def _head(rnd: random.Random) -> bytes:
    names = ["Host", "Content-Length", "X-EXECD-ACCESS-TOKEN", "accept", "A b", "", "Ü", "X_Y"]
    values = ["127.0.0.1:80", " 5", "\tv ", "", "a\rb", "é", "x\x01", "  keep-alive  "]
    lines = []
    for _ in range(rnd.randint(0, 5)):
        line = rnd.choice(names) + rnd.choice([":", " :", ""]) + rnd.choice(values)
        lines.append(line + rnd.choice(["\r\n", "\r\n", "\n"]) + (" folded\r\n" if rnd.random() < 0.05 else ""))
    return "".join(lines).encode("utf-8") + rnd.choice([b"\r\n", b"\r\n", b"", b"\n"]) + b"body"


def test_plain_head_shortcut_agrees_with_parse_headers():
    rnd = random.Random(SEED)
    taken = 0
    for _ in range(3000):
        head = _head(rnd)
        fast = http1._plain_request(b"POST /command HTTP/1.1\r\n", io.BufferedReader(io.BytesIO(head)))
        if fast is None:
            continue  # the stdlib's parser has it
        taken += 1
        fp = io.BytesIO(head)
        ref = http.client.parse_headers(fp)
        msg = http.client.HTTPMessage()
        for name, value in fast[3]:
            msg.set_raw(name, value)
        assert list(msg.items()) == list(ref.items()) and not ref.defects, head
        assert head[fast[4] :] == fp.read()  # the same bytes left for the body
    assert taken > 100


@pytest.mark.parametrize(
    "line",
    [b"GET  / HTTP/1.1\r\n", b"GET / HTTP/2.0\r\n", b"get / HTTP/1.1\r\n", b"GET /\r\n", b"GET / HTTP/1.1 x\r\n"],
)
def test_unusual_request_lines_go_to_the_stdlib(line):
    assert http1._plain_request(line, io.BufferedReader(io.BytesIO(b"Host: x\r\n\r\n"))) is None


class _Sink:
    def write(self, data):
        return len(data)


def _slow_complete(data: bytes) -> bool:
    """The chunked body's end, found the plain way: size lines one by one."""
    _, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    pos = 0
    while True:
        eol = body.find(b"\r\n", pos)
        if eol < 0:
            return False
        try:
            size = int(body[pos:eol].split(b";", 1)[0].strip() or b"0", 16)
        except ValueError:
            return False
        if size == 0:
            return body.find(b"\r\n\r\n", eol) >= 0 or body[eol + 2 : eol + 4] == b"\r\n"
        pos = eol + 2 + size + 2


def test_journal_chunk_tee_finds_the_end_in_any_cut():
    rnd = random.Random(SEED)
    for _ in range(3000):
        data = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
        for _ in range(rnd.randint(0, 4)):
            part = bytes(rnd.choice(b"ab\r\n0") for _ in range(rnd.randint(1, 30)))
            data += b"%x%s\r\n%s\r\n" % (len(part), rnd.choice([b"", b";x=1"]), part)
        if rnd.random() < 0.8:
            data += b"0\r\n\r\n"
        cuts = sorted(rnd.sample(range(1, len(data)), min(len(data) - 1, rnd.randint(0, 8))))
        tee = _TeeWriter(_Sink(), 1 << 20, "POST", lambda: None)
        for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True):
            tee.write(data[a:b])
        assert tee.complete == _slow_complete(data), data
