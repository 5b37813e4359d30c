"""Memory of a mock execd run as a subprocess stays bounded, whatever a request asks for (VmRSS from
/proc/<pid>/status). The subprocess runs under RLIMIT_AS so that a regression fails the test instead
of eating the machine."""

from __future__ import annotations

import os
import re
import resource
import socket
import subprocess
import sys
import time
from typing import Iterator

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
AS_LIMIT = 3 << 30  # Python's own reservations fit well below; an unbounded read does not


def _limit_as() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))


def rss_kb(pid: int) -> int:
    with open(f"/proc/{pid}/status") as fh:
        return int(re.search(r"^VmRSS:\s+(\d+) kB", fh.read(), re.M).group(1))


def open_count(pid: int, target: str) -> int:
    n = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            n += os.readlink(f"/proc/{pid}/fd/{fd}") == target
        except OSError:
            pass
    return n


@pytest.fixture
def execd_proc(tmp_path) -> Iterator[tuple[subprocess.Popen, int]]:
    root = tmp_path / "root"
    root.mkdir()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mock_opensandbox.execd", "--port", "0", "--root", str(root)],
        cwd=REPO,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        preexec_fn=_limit_as,
    )
    try:
        line = proc.stderr.readline().decode()
        m = re.search(r"ready on 127\.0\.0\.1:(\d+)", line)
        assert m, line
        yield proc, int(m.group(1))
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stderr.close()


def test_line_mode_download_of_dev_zero(execd_proc):
    """The real execd (3bb6fad, filesystem_download.go serveLineRange: bufio ReadBytes('\\n')) never
    answers a line-mode download of /dev/zero; the mock does the same with bounded memory, and stops
    reading when the client leaves."""
    proc, port = execd_proc
    base = rss_kb(proc.pid)
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    try:
        s.sendall(b"GET /files/download?path=/dev/zero&offset=1&limit=2 HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        s.settimeout(0.3)
        peak = base
        for _ in range(10):  # 3 s: no answer, and the memory stays where it was
            with pytest.raises(socket.timeout):
                s.recv(1)
            peak = max(peak, rss_kb(proc.pid))
        assert open_count(proc.pid, "/dev/zero") == 1  # still reading, as the real one does
    finally:
        s.close()
    assert peak - base < 100_000, (base, peak)
    deadline = time.monotonic() + 10
    while open_count(proc.pid, "/dev/zero") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert open_count(proc.pid, "/dev/zero") == 0  # the client left: the read stopped
    assert proc.poll() is None


def test_fault_proxy_streams_a_large_request_body(tmp_path):
    """The fault proxy forwards a 200 MB body as it arrives: its RSS grows by far less than the body."""
    import http.server
    import threading

    got = []

    class Sink(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            left, n = int(self.headers["Content-Length"]), 0
            while left:
                data = self.rfile.read(min(left, 1 << 16))
                if not data:
                    break
                left -= len(data)
                n += len(data)
            got.append(n)
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *a):
            pass

    sink = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Sink)
    t = threading.Thread(target=sink.serve_forever, daemon=True)
    t.start()
    env = dict(os.environ, OPENSANDBOX_API_KEY="k", PYTHONPATH=REPO)
    p = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mock_opensandbox.workbench.proxy",
            "--upstream",
            f"http://127.0.0.1:{sink.server_address[1]}",
            "--port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=str(tmp_path),
        preexec_fn=_limit_as,
    )
    try:
        line = p.stdout.readline()
        assert line.startswith("Fault proxy listening on http://127.0.0.1:"), line + p.stderr.read()
        port = int(line.split()[4].rsplit(":", 1)[1].strip("/"))
        base = rss_kb(p.pid)
        size = 200 << 20
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        peak = base
        try:
            s.sendall(b"POST /upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: %d\r\n\r\n" % size)
            block = b"\0" * (1 << 20)
            for i in range(size >> 20):
                s.sendall(block)
                if i % 16 == 0:
                    peak = max(peak, rss_kb(p.pid))
            head = s.recv(4096)
            peak = max(peak, rss_kb(p.pid))
        finally:
            s.close()
        assert head.startswith(b"HTTP/1.1 200"), head
        assert got == [size]
        assert peak - base < 100_000, (base, peak)
    finally:
        p.terminate()
        p.wait(timeout=10)
        p.stdout.close()
        p.stderr.close()
        sink.shutdown()
        sink.server_close()


def _upload_rss(proc: subprocess.Popen, port: int, root: str, size: int) -> tuple[int, int, bytes]:
    """A multipart upload of ``size`` zero bytes to /big, sent 1 MiB at a time: (base RSS, peak RSS, the
    answer's head), both in kB."""
    bnd = b"osbbound"
    head = (
        b"--" + bnd + b'\r\nContent-Disposition: form-data; name="metadata"; filename="m"\r\n\r\n'
        b'{"path":"/big"}\r\n--' + bnd + b'\r\nContent-Disposition: form-data; name="file"; filename="f"\r\n'
        b"Content-Type: application/octet-stream\r\n\r\n"
    )
    tail = b"\r\n--" + bnd + b"--\r\n"
    base = peak = rss_kb(proc.pid)
    s = socket.create_connection(("127.0.0.1", port), timeout=120)
    try:
        s.sendall(
            b"POST /files/upload HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: multipart/form-data; "
            b"boundary=%s\r\nContent-Length: %d\r\n\r\n" % (bnd, len(head) + size + len(tail)) + head
        )
        block = b"\0" * (1 << 20)
        for i in range(size >> 20):
            s.sendall(block)
            if i % 16 == 0:
                peak = max(peak, rss_kb(proc.pid))
        s.sendall(tail)
        answer = b""
        while b"\r\n\r\n" not in answer:
            peak = max(peak, rss_kb(proc.pid))
            data = s.recv(4096)
            if not data:
                break
            answer += data
        peak = max(peak, rss_kb(proc.pid))
    finally:
        s.close()
    return base, peak, answer


def test_a_large_upload_is_streamed_to_disk(execd_proc, tmp_path):
    """A 200 MB upload (the allowed maximum is 2 GiB): the form is parsed as it arrives and each part's
    data spooled to a temporary file (Gin's ParseMultipartForm keeps 32 MiB in memory, the rest on
    disk), so the mock's RSS grows by far less than the body (it was about 4x the body, read whole)."""
    proc, port = execd_proc
    size = 200 << 20
    base, peak, answer = _upload_rss(proc, port, str(tmp_path / "root"), size)
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert os.path.getsize(tmp_path / "root" / "big") == size
    assert peak - base < 60_000, (base, peak)


@pytest.mark.slow
def test_a_1_gib_upload_keeps_the_rss_under_300_mb(request, tmp_path):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("a 1 GiB upload (about 20 s): run with `make test-slow` (-m slow)")
    proc, port = request.getfixturevalue("execd_proc")
    size = 1 << 30
    base, peak, answer = _upload_rss(proc, port, str(tmp_path / "root"), size)
    print(f"1 GiB upload: RSS {base // 1024} MB before, peak {peak // 1024} MB")
    assert answer.startswith(b"HTTP/1.1 200"), answer
    assert os.path.getsize(tmp_path / "root" / "big") == size
    assert peak < 300_000, (base, peak)
