"""Case 8's execd operations beyond ``POST /command`` (bench/vs_live.py), the same calls on the mock and on live:

* a session command: ``POST /session/{id}/run`` of ``true`` on a session made once, the SSE body read to its terminal
  event on a new connection;
* a background command's first log line: ``POST /command`` with ``background: true`` of ``echo <mark>; sleep 30``,
  its SSE read to the end, then ``GET /command/{id}/logs?cursor=0`` every 1 ms until the mark is in it (the command
  is interrupted afterwards, untimed);
* a PTY start: ``POST /pty``, the WebSocket ``GET /pty/{id}/ws`` (the shell starts on the first one), frames read
  until the first output byte (the shell's prompt); the socket closed and the session deleted afterwards, untimed.

Each returns the seconds it measured. Standard library, and the mock's WebSocket frame reader (a client's reader
needs no mask).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import time

from bench import direct
from mock_opensandbox.wire.websocket import FrameReader

MARK = "bench-first-line"


def _call(url: str, headers: dict, method: str, path: str, payload: dict | None = None, ok=(200,)) -> bytes:
    """One request on a new connection (bench/direct.py Conn, dropped after); HttpFailure unless its status is ok."""
    conn = direct.Conn(url, headers)
    try:
        body = json.dumps(payload).encode() if payload is not None else None
        return conn.request(method, path, body, {"Content-Type": "application/json"}, ok=ok)[2]
    finally:
        conn.drop()


def _stream(url: str, headers: dict, path: str, payload: dict) -> list[dict]:
    """POST an SSE route on a new connection; its events (bench/direct.py iter_sse) up to the terminal one."""
    conn = direct.Conn(url, headers)
    try:
        hdrs = {"Content-Type": "application/json", "Accept": "text/event-stream"}
        r = conn.open("POST", path, json.dumps(payload).encode(), hdrs)
        if r.status != 200:
            raise RuntimeError(f"POST {path} answered {r.status}: {r.read(300)!r}")
        events = []
        for ev in direct.iter_sse(r):
            events.append(ev)
            if ev.get("type") in ("execution_complete", "error"):
                break
        return events
    finally:
        conn.drop()


def session_create(url: str, headers: dict) -> str:
    return json.loads(_call(url, headers, "POST", "/session", {}))["session_id"]


class IncompleteSession(RuntimeError):
    """A session run whose stream ended without its terminal event."""


def session_run(url: str, headers: dict, sid: str, cmd: str = "true") -> float:
    t0 = time.perf_counter()
    events = _stream(url, headers, f"/session/{sid}/run", {"command": cmd})
    took = time.perf_counter() - t0
    if not events or events[-1].get("type") != "execution_complete":
        raise IncompleteSession(f"a session's `{cmd}` ended with {events[-1:]}")
    return took


def session_run_retried(url: str, headers: dict, sid: str, seen: list[str], tries: int = 3) -> float:
    """session_run, run again (up to ``tries`` in all) when the stream ended without ``execution_complete``: the
    real execd v1.0.19 does that to about one session run in 60 here (the stream closes after ``init`` or a
    ``ping``; 1 of 60 back to back on local-up, 2026-12-07). Each such run is appended to ``seen`` (for the notes);
    the time is that of the run that completed."""
    attempt = 0
    while True:
        attempt += 1
        try:
            return session_run(url, headers, sid)
        except IncompleteSession as exc:
            seen.append(str(exc))
            if attempt >= tries:
                raise


def background_first_line(url: str, headers: dict) -> float:
    t0 = time.perf_counter()
    events = _stream(url, headers, "/command", {"command": f"echo {MARK}; sleep 30", "background": True})
    cid = next((e.get("text") for e in events if e.get("type") == "init"), None)
    if not cid:
        raise RuntimeError(f"a background command without its init event: {events}")
    try:
        while time.perf_counter() < t0 + 30:
            # execd v1.0.19 stores a background command in its table from a goroutine after the process started
            # (_stop_background): until then its logs answer 400 "command not found", and the poll goes on
            try:
                if MARK.encode() in _call(url, headers, "GET", f"/command/{cid}/logs?cursor=0"):
                    return time.perf_counter() - t0
            except direct.HttpFailure as exc:
                if "command not found" not in str(exc):
                    raise
            time.sleep(0.001)
        raise RuntimeError("a background command's first line never reached its logs")
    finally:
        _stop_background(url, headers, cid)


def _stop_background(url: str, headers: dict, cid: str) -> None:
    """DELETE /command?id=, untimed. execd v1.0.19 stores a background command in its table from a goroutine
    after the process started (components/execd/pkg/runtime/command.go runBackgroundCommand at 3bb6fad), so its
    output can be in the logs while an interrupt still answers 500 "no such session" for a moment: retried."""
    deadline = time.monotonic() + 5.0
    while True:
        try:
            _call(url, headers, "DELETE", f"/command?id={cid}", ok=(200, 400, 404))
            return
        except direct.HttpFailure as exc:
            if "no such session" not in str(exc) or time.monotonic() > deadline:
                raise
        time.sleep(0.01)


def pty_start(url: str, headers: dict) -> float:
    t0 = time.perf_counter()
    sid = json.loads(_call(url, headers, "POST", "/pty", {}, ok=(201,)))["session_id"]
    host, port, prefix = direct._split(url)
    s = socket.create_connection((host, port), timeout=30)
    try:
        key = base64.b64encode(os.urandom(16)).decode()
        head = (
            f"GET {prefix}/pty/{sid}/ws HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\n"
            f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n"
            + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
            + "\r\n"
        )
        s.sendall(head.encode())
        f = s.makefile("rb")
        status_line = f.readline()
        if b" 101 " not in status_line:
            raise RuntimeError(f"the PTY WebSocket answered {status_line!r}")
        while f.readline() not in (b"\r\n", b"\n", b""):
            pass
        frames = FrameReader(f.read, require_mask=False)
        while True:
            fr = frames.read_frame()
            data = fr.payload
            if fr.opcode == 0x2 and (data[:1] == b"\x01" and len(data) > 1 or data[:1] == b"\x03" and len(data) > 9):
                return time.perf_counter() - t0  # stdout bytes, or the replay frame (offset + bytes)
            if fr.opcode == 0x8:
                raise RuntimeError("the PTY WebSocket closed before any output")
    finally:
        s.close()
        _call(url, headers, "DELETE", f"/pty/{sid}", ok=(200, 404))
