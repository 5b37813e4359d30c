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
import http.client
import json
import os
import socket
import time

from bench import direct
from mock_opensandbox.wire.websocket import FrameReader

MARK = "bench-first-line"


def _conn(url: str) -> tuple[http.client.HTTPConnection, str]:
    host, port, prefix = direct._split(url)
    return http.client.HTTPConnection(host, port, timeout=60), prefix


def _json(url: str, headers: dict, method: str, path: str, payload: dict | None = None) -> tuple[int, bytes]:
    c, prefix = _conn(url)
    try:
        body = None if payload is None else json.dumps(payload).encode()
        c.request(method, prefix + path, body=body, headers={**headers, "Content-Type": "application/json"})
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def _sse_to_end(r: http.client.HTTPResponse) -> list[dict]:
    """The events of an SSE body (bare JSON lines or ``data:`` lines) up to a terminal event or the end."""
    events = []
    while True:
        line = r.readline()
        if not line:
            return events
        text = line.strip()
        text = text[5:].strip() if text.startswith(b"data:") else text
        if not text.startswith(b"{"):
            continue
        try:
            ev = json.loads(text)
        except ValueError:
            continue
        events.append(ev)
        if ev.get("type") in ("execution_complete", "error"):
            return events


def session_create(url: str, headers: dict) -> str:
    status, body = _json(url, headers, "POST", "/session", {})
    if status != 200:
        raise RuntimeError(f"POST /session answered {status}: {body[:300]!r}")
    return json.loads(body)["session_id"]


def session_run(url: str, headers: dict, sid: str, cmd: str = "true") -> float:
    c, prefix = _conn(url)
    t0 = time.perf_counter()
    try:
        hdrs = {**headers, "Content-Type": "application/json", "Accept": "text/event-stream"}
        c.request("POST", f"{prefix}/session/{sid}/run", body=json.dumps({"command": cmd}).encode(), headers=hdrs)
        r = c.getresponse()
        if r.status != 200:
            raise RuntimeError(f"POST /session/{{id}}/run answered {r.status}: {r.read(300)!r}")
        events = _sse_to_end(r)
        took = time.perf_counter() - t0
    finally:
        c.close()
    if not events or events[-1].get("type") != "execution_complete":
        raise RuntimeError(f"a session's `{cmd}` ended with {events[-1:]}")
    return took


def background_first_line(url: str, headers: dict) -> float:
    c, prefix = _conn(url)
    t0 = time.perf_counter()
    try:
        body = json.dumps({"command": f"echo {MARK}; sleep 30", "background": True}).encode()
        hdrs = {**headers, "Content-Type": "application/json", "Accept": "text/event-stream"}
        c.request("POST", prefix + "/command", body=body, headers=hdrs)
        r = c.getresponse()
        if r.status != 200:
            raise RuntimeError(f"POST /command (background) answered {r.status}: {r.read(300)!r}")
        events = _sse_to_end(r)
    finally:
        c.close()
    cid = next((e.get("text") for e in events if e.get("type") == "init"), None)
    if not cid:
        raise RuntimeError(f"a background command without its init event: {events}")
    try:
        deadline = t0 + 30
        while time.perf_counter() < deadline:
            status, out = _json(url, headers, "GET", f"/command/{cid}/logs?cursor=0")
            if status == 200 and MARK.encode() in out:
                return time.perf_counter() - t0
            time.sleep(0.001)
        raise RuntimeError("a background command's first line never reached its logs")
    finally:
        _json(url, headers, "DELETE", f"/command?id={cid}")


def pty_start(url: str, headers: dict) -> float:
    t0 = time.perf_counter()
    status, body = _json(url, headers, "POST", "/pty", {})
    if status != 201:
        raise RuntimeError(f"POST /pty answered {status}: {body[:300]!r}")
    sid = json.loads(body)["session_id"]
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
        _json(url, headers, "DELETE", f"/pty/{sid}")
