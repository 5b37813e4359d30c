"""Request framing refused as the real servers refuse it (mock_opensandbox/wire/framing.py; QUIRKS.md
"Framing"): the execd as Go net/http (the real binary v1.0.19), the lifecycle port as uvicorn with
httptools (opensandbox-server's install), and JSON nested past Go's 10000 levels."""

from __future__ import annotations

import socket
import sys
from urllib.parse import urlsplit

import pytest

from mock_opensandbox.server import MockOpenSandbox

GO_400 = (
    b"HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n400 Bad Request"
)
UVICORN_400_TAIL = (
    b"server: uvicorn\r\ncontent-type: text/plain; charset=utf-8\r\ncontent-length: 30\r\n"
    b"connection: close\r\n\r\nInvalid HTTP request received."
)
DEPTH = b"error parsing request, MAYBE invalid body format. exceeded max depth"


def exchange(port: int, raw: bytes) -> bytes:
    """Send raw, read until the server closes (or 5 s pass: a kept-alive answer)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    out = b""
    try:
        s.sendall(raw)
        while True:
            try:
                data = s.recv(65536)
            except socket.timeout:
                break
            if not data:
                break
            out += data
            if b"\r\n\r\n" in out and b"Content-Length: " in out:
                head, _, body = out.partition(b"\r\n\r\n")
                n = int(head.split(b"Content-Length: ")[1].split(b"\r\n")[0])
                if len(body) >= n:
                    break
    finally:
        s.close()
    return out


def post(path: bytes, headers: bytes, body: bytes = b"{}") -> bytes:
    return (
        b"POST "
        + path
        + b" HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        + headers
        + b"\r\n"
        + body
    )


BAD_LENGTHS = [
    b"Content-Length: -5\r\n",
    b"Content-Length: abc\r\n",
    b"Content-Length: +2\r\n",
    b"Content-Length: 2, 2\r\n",
    b"Content-Length: 2\r\nContent-Length: 3\r\n",
]


@pytest.fixture
def execd_port(make_execd):
    return make_execd().port


@pytest.mark.parametrize("hdr", BAD_LENGTHS)
def test_execd_bad_content_length_is_go_400(execd_port, hdr):
    assert exchange(execd_port, post(b"/command", hdr)) == GO_400


def test_execd_identical_repeat_and_chunked_win(execd_port):
    for hdr in (b"Content-Length: 2\r\nContent-Length: 2\r\n", b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n"):
        body = b"{}" if b"chunked" not in hdr else b"2\r\n{}\r\n0\r\n\r\n"
        out = exchange(execd_port, post(b"/command", hdr, body))
        assert out.startswith(b"HTTP/1.1 400 Bad Request") and b"'Command' failed on the 'required' tag" in out


def test_execd_bad_chunk_size_is_the_handlers_error_and_closes(execd_port):
    out = exchange(execd_port, post(b"/command", b"Transfer-Encoding: chunked\r\n", b"zz\r\n{}\r\n0\r\n\r\n"))
    head, _, body = out.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 Bad Request") and b"\r\nConnection: close" in head
    assert body == (
        b'{"code":"INVALID_REQUEST_BODY","message":"error parsing request, MAYBE invalid body format. '
        b'invalid byte in chunk length"}'
    )


def test_execd_oversized_body_is_413(execd_port):
    out = exchange(execd_port, post(b"/command", b"Content-Length: 3000000000\r\n"))
    assert out.startswith(b"HTTP/1.1 413 ") and b"Connection: close" in out


@pytest.mark.parametrize("path", [b"/command", b"/files/mv", b"/directories"])
def test_execd_json_too_deep_is_gos_error(execd_port, path):
    deep = b'{"command":' + b"[" * 100_001 + b"]" * 100_001 + b"}"
    out = exchange(execd_port, post(path, b"Content-Length: %d\r\n" % len(deep), deep))
    assert out.startswith(b"HTTP/1.1 400 Bad Request") and out.endswith(b'"message":"' + DEPTH + b'"}'), out[:300]
    # 10000 levels are still a value (Go: a type error, not a depth error); Python 3.10 cannot recurse that
    # deep safely, so there the mock gives the depth error early (wire/gojson.py MAX_DEPTH, QUIRKS.md "Framing, execd")
    ok = b"[" * 10_000 + b"]" * 10_000
    out = exchange(execd_port, post(b"/command", b"Content-Length: %d\r\n" % len(ok), ok))
    if sys.version_info >= (3, 11):
        assert out.endswith(b'json: cannot unmarshal array into Go value of type model.RunCommandRequest"}'), out[-200:]
    else:
        assert out.endswith(b'"message":"' + DEPTH + b'"}'), out[-200:]


def test_execd_upload_metadata_too_deep(execd_port):
    from mock_opensandbox.wire import formdata as multipart

    meta = b"[" * 20_000 + b"]" * 20_000
    body, ctype = multipart.encode(
        [("metadata", "metadata", "application/json", meta), ("file", "f", "application/octet-stream", b"x")]
    )
    out = exchange(
        execd_port,
        b"POST /files/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
        + ctype.encode()
        + b"\r\nContent-Length: %d\r\n\r\n" % len(body)
        + body,
    )
    assert out.startswith(b"HTTP/1.1 400 Bad Request")  # the real binary's answer, byte for byte:
    assert out.endswith(b'{"code":"INVALID_FILE_METADATA","message":"invalid metadata format. exceeded max depth"}'), (
        out[:300]
    )


def test_lifecycle_framing_is_uvicorn_httptools():
    with MockOpenSandbox() as osb:
        port = urlsplit(osb.base_url).port
        for hdr in BAD_LENGTHS + [
            b"Content-Length: 2\r\nContent-Length: 2\r\n",
            b"Content-Length: 2\r\nTransfer-Encoding: chunked\r\n",
        ]:
            out = exchange(port, post(b"/v1/sandboxes", hdr))
            assert out.startswith(b"HTTP/1.1 400 Bad Request\r\ndate: ") and out.endswith(UVICORN_400_TAIL), (hdr, out)
        out = exchange(port, post(b"/v1/sandboxes", b"Transfer-Encoding: chunked\r\n", b"zz\r\n{}\r\n0\r\n\r\n"))
        assert out.endswith(UVICORN_400_TAIL)
        out = exchange(port, post(b"/v1/sandboxes", b"Content-Length: 3000000000\r\n"))
        assert out.startswith(b"HTTP/1.1 413 ") and b"connection: close" in out


def test_lifecycle_proxy_streams_a_chunked_upload():
    """A chunked body through the server's proxy (/sandboxes/{id}/proxy/{port}/...): uvicorn reads the
    chunk sizes first (a spool file here, 1 MiB in memory), then the proxy forwards it chunked, 64 KiB
    at a time, and execd stores it whole; a chunk announced bigger than what follows breaks it off."""
    from mock_opensandbox.wire import formdata as multipart
    from tiers.toolkit import volume_flows as vf

    with MockOpenSandbox(execd_close_delay=0.05) as osb:
        t = vf.Target(osb.base_url, osb.api_key)
        try:
            sid = t.sandbox([])
            port = urlsplit(osb.base_url).port
            body, ctype = multipart.encode(
                [
                    ("metadata", "m", "application/json", b'{"path":"/tmp/big"}'),
                    ("file", "f", "application/octet-stream", b"\x07" * (6 << 20)),
                ]
            )
            pieces = [body[i : i + (3 << 20)] for i in range(0, len(body), 3 << 20)]
            chunked = b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"
            path = b"/v1/sandboxes/%s/proxy/44772" % sid.encode()
            head = (
                b"POST "
                + path
                + b"/files/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nOPEN-SANDBOX-API-KEY: "
                + osb.api_key.encode()
                + b"\r\nContent-Type: "
                + ctype.encode()
                + b"\r\nTransfer-Encoding: chunked\r\n\r\n"
            )
            s = socket.create_connection(("127.0.0.1", port), timeout=30)
            try:
                s.sendall(head + chunked)
                out = s.recv(65536)
            finally:
                s.close()
            assert out.startswith(b"HTTP/1.1 200 OK"), out[:300]
            rc, text = t.run(sid, "stat -c %s /tmp/big; tr -d '\\007' < /tmp/big | wc -c")
            assert (rc, text.split()) == (0, [str(6 << 20), "0"]), text
        finally:
            t.close()
