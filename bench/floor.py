"""The floor under case 8's command round trip: what any Python server that runs the command in a real ``bash`` pays
on this machine, with nothing of a sandbox around it.

``python -m bench.floor`` listens on 127.0.0.1 (an ephemeral port, printed on its first line) and serves one
connection at a time in one thread: it reads a ``POST .../command`` request (head, then a Content-Length body),
forks ``bash -c true`` on the host (``subprocess.Popen`` with pipes, a process group of its own, the file bash is
given, as the mock's contained thread forks a command), sends an event-stream head with an ``init`` event, reads
both pipes to their end, waits for the exit and sends ``execution_complete`` and the last chunk, then closes the
connection. No containment, no request journal, no validation, no routing: the mock's round trip minus
everything that makes it a sandbox. It runs nothing but ``true`` (any other command gets a 400) and ends when its
stdin closes (the bench holds it). Standard library only.

bench/vs_live.py runs it beside the mock and the live server in the command round trip's interleaved rounds:
floor / live says how far below live a Python server with real bash can get at all, mock / floor what the mock
adds to that.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import socket
import subprocess
import sys
import threading

INIT = b'{"type":"init","text":"floor","timestamp":0}\n\n'
DONE = b'{"type":"execution_complete","timestamp":0,"execution_time":0}\n\n'
BAD = b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _request(conn: socket.socket) -> bytes | None:
    """The body of one request on conn, None when it is not a POST to .../command with a Content-Length."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        data = conn.recv(65536)
        if not data or len(buf) > 65536:
            return None
        buf += data
    head, _, body = buf.partition(b"\r\n\r\n")
    lines = head.split(b"\r\n")
    parts = lines[0].split(b" ")
    if len(parts) != 3 or parts[0] != b"POST" or not parts[1].endswith(b"/command"):
        return None
    length = None
    for line in lines[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip())
    if length is None or length > 65536:
        return None
    while len(body) < length:
        data = conn.recv(65536)
        if not data:
            return None
        body += data
    return body[:length]


def serve_one(conn: socket.socket, bash: str) -> None:
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    body = _request(conn)
    try:
        command = json.loads(body)["command"] if body is not None else None
    except (ValueError, KeyError, TypeError):
        command = None
    if command != "true":
        conn.sendall(BAD)
        return
    proc = subprocess.Popen(
        ["bash", "-c", command],
        executable=bash,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C.UTF-8"},
        cwd="/",
        close_fds=True,
        **({"process_group": 0} if sys.version_info >= (3, 11) else {"start_new_session": True}),
    )
    conn.sendall(
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunk(INIT)
    )
    pipes = [proc.stdout, proc.stderr]
    while pipes:
        ready, _, _ = select.select(pipes, [], [])
        for f in ready:
            if not os.read(f.fileno(), 65536):
                pipes.remove(f)
                f.close()
    proc.wait()
    conn.sendall(_chunk(DONE) + b"0\r\n\r\n")


def main() -> int:
    bash = shutil.which("bash")
    if bash is None:
        print("no bash on PATH", file=sys.stderr)
        return 1
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(16)
    print(srv.getsockname()[1], flush=True)

    def watch() -> None:  # the bench closes our stdin when it is done (or dies)
        sys.stdin.read()
        os._exit(0)

    threading.Thread(target=watch, daemon=True).start()
    while True:
        conn, _ = srv.accept()
        try:
            serve_one(conn, bash)
        except OSError:
            pass
        finally:
            conn.close()


if __name__ == "__main__":
    sys.exit(main())
