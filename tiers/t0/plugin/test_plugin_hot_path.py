"""What the plugin's hot paths (bench/ cases 2-4) rely on, without a server: the request threads are
reused (a call handed to an idle thread, none left over), a failing hook is answered and the loop
reads on, files.write's base64 decoding accepts and
refuses what ``b64decode(validate=True)`` does, a prompt answer leaves with its first notification, a
streamed reply read on the caller's thread (``Stream.wait`` + ``read_some``) never blocks while it
says it is readable, and a download with a Content-Length is read into one buffer (whole, cut short,
or over its limit)."""

from __future__ import annotations

import base64
import binascii
import http.client
import io
import json
import os
import socket
import threading
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import epp
from errors import EppError
from osb import transport
from params import b64_param
from tiers.toolkit.waits import wait_until

# ---- request threads -------------------------------------------------------------------------------------


def test_a_call_runs_on_a_thread_an_earlier_call_left_idle():
    w = epp.Workers()
    seen: list[int] = []
    done = threading.Event()
    w.run(lambda: (seen.append(threading.get_ident()), done.set()))
    assert done.wait(5)
    assert wait_until(lambda: len(w._idle) == 1, 5.0)
    done.clear()
    w.run(lambda: (seen.append(threading.get_ident()), done.set()))
    assert done.wait(5)
    assert seen[0] == seen[1]


def test_concurrent_calls_get_their_own_threads_and_idle_ones_end(monkeypatch):
    monkeypatch.setattr(epp.Workers, "IDLE", 0.2)
    w = epp.Workers()
    gate, started, idents = threading.Event(), threading.Semaphore(0), set()

    def job():
        idents.add(threading.get_ident())
        started.release()
        gate.wait(5)

    before = threading.active_count()
    for _ in range(3):
        w.run(job)
    for _ in range(3):
        assert started.acquire(timeout=5)
    assert len(idents) == 3
    gate.set()
    assert wait_until(lambda: threading.active_count() <= before, 5.0)  # all three ended after IDLE
    assert w._idle == []


def test_a_spare_thread_takes_the_first_call():
    w = epp.Workers()
    w.spare()
    assert wait_until(lambda: len(w._idle) == 1, 5.0)
    n, seen, done = threading.active_count(), [], threading.Event()
    w.run(lambda: (seen.append(threading.active_count()), done.set()))
    assert done.wait(5)
    assert seen == [n]  # no new thread: the spare ran it


def _serving(initialize=lambda p: {}, find=lambda name: None):
    """A Server reading a pipe, serve() on its own thread: (write a line, the output, the thread)."""
    r, w = os.pipe()
    rfile, wfile = os.fdopen(r, "rb"), os.fdopen(w, "wb", buffering=0)
    out = _Flushes()
    srv = epp.Server(rfile, out, initialize=initialize, find=find)
    t = threading.Thread(target=srv.serve, daemon=True)
    t.start()

    def send(msg):
        wfile.write((json.dumps(msg) + "\n").encode())

    return send, wfile, out, t


def test_a_failing_hook_is_answered_and_the_reading_goes_on():
    def initialize(p):
        if p.get("bad"):
            raise RuntimeError("boom")
        return {"ok": 1}

    send, wfile, out, t = _serving(initialize=initialize, find=lambda name: lambda req, p: {"n": p["n"]})
    send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}})
    send({"jsonrpc": "2.0", "id": 2, "method": "initialize", "params": {"bad": 1}})
    send({"jsonrpc": "2.0", "id": 3, "method": "x", "params": {"n": 3}})
    assert wait_until(lambda: out.getvalue().count(b"\n") >= 3, 5.0)
    answers = {m["id"]: m for m in map(json.loads, out.getvalue().splitlines())}
    assert answers[2]["error"]["code"] == -32603 and answers[3]["result"] == {"n": 3}
    wfile.close()
    t.join(10)
    assert not t.is_alive()


# ---- files.write's base64 ---------------------------------------------------------------------------------

b64ish = st.one_of(
    st.binary(max_size=64).map(lambda b: base64.b64encode(b).decode()),
    st.text(alphabet="ABCabc+/=\n -_\u00e9", max_size=24),
    st.sampled_from(["", "=", "==", "Zg", "Zg=", "Zg==", "Zh==", "Zg==Zg==", "=Zg=", "Z g==", "Zm9v\n", "Zm9v\u00e9"]),
)


@settings(max_examples=300, deadline=None)
@given(b64ish)
def test_b64_param_accepts_and_refuses_what_validate_true_does(text):
    try:
        want = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        with pytest.raises(EppError) as info:
            b64_param({"content_b64": text}, "content_b64")
        assert info.value.code == -32000 and "base64" in info.value.message
        return
    assert b64_param({"content_b64": text}, "content_b64") == want


# ---- the answer of a prompt Deferred leaves with its first notification ----------------------------------


class _Flushes(io.BytesIO):
    """A stdout that records what each flush() pushed out."""

    def __init__(self):
        super().__init__()
        self.flushed: list[bytes] = []
        self._mark = 0

    def flush(self):
        data = self.getvalue()[self._mark :]
        if data:
            self.flushed.append(data)
        self._mark += len(data)


def _server(out, then, prompt):
    srv = epp.Server(
        io.BytesIO(),
        out,
        initialize=lambda p: {},
        find=lambda name: lambda req, p: epp.Deferred({"process_id": "p"}, then, prompt=prompt),
    )
    return srv


def test_a_prompt_answer_is_written_with_the_first_notification():
    out = _Flushes()
    srv = _server(out, lambda: srv.notify("exec.exit", {"process_id": "p", "exit_code": 0}), True)
    srv._run(epp.Request(1), "exec.start", {})
    assert len(out.flushed) == 1 and out.flushed[0].count(b"\n") == 2
    assert [json.loads(x).get("id") for x in out.flushed[0].splitlines()] == [1, None]


def test_an_answer_is_flushed_at_once_unless_prompt_and_even_when_then_fails():
    out = _Flushes()
    srv = _server(out, lambda: srv.notify("exec.exit", {"process_id": "p", "exit_code": 0}), False)
    srv._run(epp.Request(1), "exec.start", {})
    assert len(out.flushed) == 2
    out, during = _Flushes(), []

    def broken():
        during.append(list(out.flushed))
        raise RuntimeError("boom")

    srv = _server(out, broken, True)
    srv._run(epp.Request(2), "exec.start", {})
    assert during == [[]]  # held while then() ran
    assert len(out.flushed) == 1 and json.loads(out.flushed[0])["id"] == 2


# ---- reading a reply on the caller's thread ---------------------------------------------------------------


class _Conn:
    def __init__(self, sock):
        self.sock = sock

    def close(self):
        self.sock.close()


def _reply(head: bytes):
    """A Stream over a socket pair: the server side and the client Stream whose headers are ``head``."""
    a, b = socket.socketpair()
    a.settimeout(3)  # a read that would block raises instead of hanging the test
    b.sendall(head)
    resp = http.client.HTTPResponse(a)
    resp.begin()
    return b, transport.Stream(None, ("http", "x", 80), _Conn(a), resp, time.monotonic())


def test_chunked_stream_is_never_reported_readable_while_a_read_would_block():
    server, stream = _reply(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n")
    try:
        assert stream.wait(1.0) and stream.read_some() == b"hello"
        # only the chunk's closing CRLF may sit in the reader now; http.client's read1 would block here
        drained: list[bytes] = []

        def drain() -> None:
            got = b""
            while stream.wait(0.2):
                piece = stream.read_some()
                assert piece is not None
                got += piece
            drained.append(got)

        reader = threading.Thread(target=drain, daemon=True)
        reader.start()
        reader.join(10)  # a bound, not a timing: a blocked read never ends
        assert drained == [b""]
        server.sendall(b"3\r\nabc\r\n0\r\n\r\n")
        got = b""
        while True:
            assert stream.wait(2.0)
            piece = stream.read_some()
            if piece is None:
                break
            got += piece
        assert got == b"abc"
    finally:
        server.close()
        stream.close()


def test_wait_ends_early_on_the_wake_descriptor():
    server, stream = _reply(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    r, w = os.pipe()
    try:
        os.write(w, b"x")
        answers: list[bool] = []
        waiter = threading.Thread(target=lambda: answers.append(stream.wait(None, r)), daemon=True)
        waiter.start()
        waiter.join(10)  # no time limit on the wait itself: only the wake descriptor can end it
        assert answers == [False]
    finally:
        for fd in (r, w):
            os.close(fd)
        server.close()
        stream.close()


def test_read_body_with_a_content_length_and_one_cut_short():
    server, stream = _reply(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789")
    try:
        body = stream.read_body(deadline=time.monotonic() + 5)
        assert body == bytearray(b"0123456789") and stream.resp.isclosed()
    finally:
        server.close()
    server, stream = _reply(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n01234")
    server.close()
    with pytest.raises(http.client.IncompleteRead):
        stream.read_body(deadline=time.monotonic() + 5)
    stream.close()
    server, stream = _reply(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789")
    try:
        assert stream.read_body(limit=3) == bytearray(b"0123")  # limit + 1: the caller sees "too large"
    finally:
        server.close()
        stream.close()
