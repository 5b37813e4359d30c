"""t1: the mock's fault injection on the wire: every kind as a client sees it, the admin API behind the
API key, sandbox scoping across the lifecycle and execd listeners, the CLI option, and stop() ending
whatever a fault holds (stalls, delays, dribbles)."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit import rest
from tiers.toolkit.waits import wait_until

pytestmark = pytest.mark.spec_exempt("fault injection: deliberately broken answers and the mock-only admin API")

BODY = {"image": {"uri": "python:3"}, "entrypoint": ["tail", "-f", "/dev/null"], "resourceLimits": {}}


@pytest.fixture(scope="module")
def osb():
    with MockOpenSandbox() as m:
        yield m


@pytest.fixture(autouse=True)
def no_rules_left(osb):
    yield
    osb.faults.clear()
    assert osb.faults.wait_idle(10)


def call(osb, method, path, body=None, *, key=True, port=None, headers=None, timeout=5):
    h = {"OPEN-SANDBOX-API-KEY": osb.api_key} if key else {}
    if isinstance(body, bytes):
        h["Content-Type"] = "application/json"
    r = rest.call(port or osb.port, method, path, body, {**h, **(headers or {})}, timeout=timeout)
    return r.status, r.headers, r.body


def raw_get(port, path, key, timeout=3.0):
    """Send one GET on a raw socket and return (bytes received, how it ended: eof/reset/timeout)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.sendall(b"GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nOPEN-SANDBOX-API-KEY: %s\r\n\r\n" % (path.encode(), key.encode()))
    got = bytearray()
    try:
        while True:
            try:
                data = s.recv(65536)
            except ConnectionResetError:
                return bytes(got), "reset"
            except socket.timeout:
                return bytes(got), "timeout"
            if not data:
                return bytes(got), "eof"
            got += data
    finally:
        s.close()


def split(raw):
    head, _, body = raw.partition(b"\r\n\r\n")
    headers = dict(line.split(b": ", 1) for line in head.split(b"\r\n")[1:])
    return head.split(b"\r\n")[0], {k.decode().lower(): v.decode() for k, v in headers.items()}, body


# ---- admin API -----------------------------------------------------------------------------------------


def test_admin_api_is_behind_the_api_key_and_edits_rules(osb):
    assert call(osb, "GET", "/__mock__/faults", key=False)[0] == 401
    assert call(osb, "POST", "/__mock__/faults", {"kind": "reset"}, key=False)[0] == 401
    assert osb.faults.rules == []
    status, _, body = call(
        osb,
        "POST",
        "/__mock__/faults",
        [
            {"kind": "status", "status": 503, "method": "GET", "path": "^/v1/sandboxes$", "count": 1, "id": "once"},
            {"kind": "delay", "delay": 0.01, "path": "^/version$"},
        ],
    )
    assert status == 201 and [r["id"] for r in json.loads(body)["rules"]][0] == "once"
    listed = json.loads(call(osb, "GET", "/__mock__/faults")[2])["rules"]
    assert [r["kind"] for r in listed] == ["status", "delay"] and listed[0]["active"] is True
    assert call(osb, "GET", "/v1/sandboxes")[0] == 503  # the admin call itself is never faulted
    assert call(osb, "GET", "/v1/sandboxes")[0] == 200
    one = json.loads(call(osb, "GET", "/__mock__/faults/once")[2])
    assert one["hits"] == 1 and one["count"] == 0 and one["active"] is False
    assert call(osb, "DELETE", "/__mock__/faults/once")[0] == 204
    assert call(osb, "DELETE", "/__mock__/faults/once")[0] == 404
    status, _, body = call(osb, "POST", "/__mock__/faults", b"{nope")
    assert status == 400 and json.loads(body)["code"] == "MOCK::INVALID_FAULT"
    status, _, body = call(osb, "POST", "/__mock__/faults", {"kind": "status", "status": 503, "bogus": 1})
    assert status == 400 and "bogus" in json.loads(body)["message"]
    assert call(osb, "DELETE", "/__mock__/faults")[0] == 204 and osb.faults.rules == []


# ---- every kind on the wire ----------------------------------------------------------------------------------


def test_status_override_is_a_proxy_page_and_keeps_the_connection(osb):
    osb.faults.add(kind="status", status=429, retry_after=3, path="^/v1/sandboxes$", count=1)
    c = http.client.HTTPConnection("127.0.0.1", osb.port, timeout=5)
    try:
        c.request("GET", "/v1/sandboxes", headers={"OPEN-SANDBOX-API-KEY": osb.api_key})
        r = c.getresponse()
        body = r.read()
        assert r.status == 429 and r.getheader("Retry-After") == "3" and r.getheader("X-Mock-Fault")
        assert b"<title>429 Too Many Requests</title>" in body and r.getheader("Content-Type") == "text/html"
        c.request("GET", "/v1/sandboxes", headers={"OPEN-SANDBOX-API-KEY": osb.api_key})
        assert c.getresponse().status == 200  # same keep-alive connection
    finally:
        c.close()


def test_status_override_can_echo_request_headers(osb):
    osb.faults.add(kind="status", status=502, echo_headers=True, path="^/version$")
    _, _, body = call(osb, "GET", "/version", headers={"X-Probe": "seen"})
    assert b"X-Probe: seen" in body and b"502 Bad Gateway" in body
    osb.faults.clear()
    osb.faults.add(kind="status", status=500, echo_headers=True, content_type="application/json", path="^/version$")
    _, headers, body = call(osb, "GET", "/version", headers={"X-Probe": "seen"})
    assert headers["content-type"] == "application/json" and "X-Probe: seen" in json.loads(body)["message"]


def test_reset_before_headers(osb):
    osb.faults.add(kind="reset", path="^/v1/sandboxes$", count=1)
    got, end = raw_get(osb.port, "/v1/sandboxes", osb.api_key)
    assert got == b"" and end in ("reset", "eof")
    assert call(osb, "GET", "/v1/sandboxes")[0] == 200


def test_reset_after_k_body_bytes(osb):
    full = call(osb, "GET", "/v1/sandboxes?pageSize=5")[2]
    osb.faults.add(kind="reset_body", after_bytes=10, path="^/v1/sandboxes$")
    got, end = raw_get(osb.port, "/v1/sandboxes?pageSize=5", osb.api_key)
    assert end == "reset"
    if got:  # an RST may discard what was in flight: at most 10 bytes
        line, _headers, body = split(got)
        assert line.startswith(b"HTTP/1.1 200") and len(body) <= 10 and full.startswith(body)


def test_truncate_sends_k_bytes_under_a_longer_content_length(osb):
    full = call(osb, "GET", "/v1/sandboxes?pageSize=5")[2]
    osb.faults.add(kind="truncate", after_bytes=10, path="^/v1/sandboxes$")
    got, end = raw_get(osb.port, "/v1/sandboxes?pageSize=5", osb.api_key)
    line, headers, body = split(got)
    assert end == "eof" and line.startswith(b"HTTP/1.1 200")
    assert int(headers["content-length"]) == len(full) > 10 and body == full[:10]


def test_body_shorter_than_k_goes_through_intact(osb):
    osb.faults.add(kind="truncate", after_bytes=10_000, path="^/v1/sandboxes$")
    status, _, body = call(osb, "GET", "/v1/sandboxes")
    assert status == 200 and json.loads(body)["items"] is not None


def test_dribble_delivers_the_whole_body_slowly(osb):
    full = call(osb, "GET", "/v1/sandboxes?pageSize=5")[2]
    rule = osb.faults.add(kind="dribble", chunk=16, interval=0.01, path="^/v1/sandboxes$")
    status, _, body = call(osb, "GET", "/v1/sandboxes?pageSize=5")
    assert status == 200 and body == full and rule.hits == 1


def test_delay_then_a_normal_answer(osb):
    rule = osb.faults.add(kind="delay", delay=0.2, delay_max=0.3, seed=1, path="^/version$")
    started = time.monotonic()
    assert call(osb, "GET", "/version")[0] == 200
    assert time.monotonic() - started >= 0.2 and rule.hits == 1


def test_stall_holds_until_the_client_leaves(osb):
    osb.faults.add(kind="stall", path="^/v1/sandboxes$")
    got, end = raw_get(osb.port, "/v1/sandboxes", osb.api_key, timeout=0.5)
    assert (got, end) == (b"", "timeout")
    osb.faults.clear()
    assert osb.faults.wait_idle(5), "the stall noticed that the client left"


def test_probability_and_count_on_the_wire(osb):
    osb.faults.add(kind="status", status=503, path="^/version$", probability=0.5, seed=3)
    first = [call(osb, "GET", "/version")[0] for _ in range(20)]
    osb.faults.clear()
    osb.faults.add(kind="status", status=503, path="^/version$", probability=0.5, seed=3)
    assert [call(osb, "GET", "/version")[0] for _ in range(20)] == first
    assert {200, 503} == set(first)


# ---- scoping ---------------------------------------------------------------------------------------------


def test_sandbox_scope_covers_its_execd_and_its_lifecycle_paths(osb):
    a = json.loads(call(osb, "POST", "/v1/sandboxes", BODY)[2])["id"]
    b = json.loads(call(osb, "POST", "/v1/sandboxes", BODY)[2])["id"]
    try:
        ports = {
            sid: int(
                json.loads(call(osb, "GET", f"/v1/sandboxes/{sid}/endpoints/44772")[2])["endpoint"]
                .split(":")[1]
                .split("/")[0]
            )
            for sid in (a, b)
        }
        osb.faults.add(kind="status", status=503, sandbox=a, path="/ping$", listener="execd")
        osb.faults.add(kind="status", status=502, sandbox=a, method="GET", path=r"^/v1/sandboxes/[^/]+$")
        assert call(osb, "GET", "/ping", key=False, port=ports[a])[0] == 503
        assert call(osb, "GET", "/proxy/44772/ping", key=False, port=ports[a])[0] == 503
        assert call(osb, "GET", "/ping", key=False, port=ports[b])[0] == 200
        assert call(osb, "GET", f"/v1/sandboxes/{a}")[0] == 502
        assert call(osb, "GET", f"/v1/sandboxes/{b}")[0] == 200
        assert call(osb, "GET", f"/v1/sandboxes/{a}/proxy/44772/ping")[0] == 503  # through the server proxy
    finally:
        osb.faults.clear()
        for sid in (a, b):
            call(osb, "DELETE", f"/v1/sandboxes/{sid}")


def test_stop_ends_stalls_delays_and_dribbles():
    before = threading.active_count()
    m = MockOpenSandbox().start()
    m.faults.add(kind="stall", path="^/v1/sandboxes$")
    m.faults.add(kind="delay", delay=600, path="^/version$")
    m.faults.add(kind="dribble", chunk=1, interval=30, path="^/health$")
    ends: list = []

    def client(path):
        ends.append(raw_get(m.port, path, m.api_key, timeout=30)[1])

    threads = [threading.Thread(target=client, args=(p,)) for p in ("/v1/sandboxes", "/version", "/health")]
    for t in threads:
        t.start()
    wait_until(lambda: m.faults.active >= 3, 5)
    assert m.faults.active == 3
    m.stop()
    for t in threads:
        t.join(10)
    assert sorted(ends) == ["eof", "eof", "eof"] and m.faults.active == 0
    wait_until(lambda: threading.active_count() <= before, 5)
    assert threading.active_count() <= before


def test_verbose_log_names_the_fault_but_no_header(capfd):
    with MockOpenSandbox(verbose=True, api_key="key-" + "9" * 20) as m:
        m.faults.add(kind="status", status=503, path="^/version$")
        call(m, "GET", "/version")
    err = capfd.readouterr().err
    assert "mock fault f1 (status) on GET /version" in err and "key-999" not in err


# ---- CLI -------------------------------------------------------------------------------------------------


def test_cli_fault_option(tmp_path):
    rule = json.dumps({"kind": "status", "status": 503, "path": "^/version$", "id": "cli"})
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    bad = subprocess.run(
        [sys.executable, "-m", "mock_opensandbox", "--port", "0", "--fault", '{"kind": "boom"}'],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    assert bad.returncode == 2 and "--fault" in bad.stderr
    (tmp_path / "rules.json").write_text(json.dumps([{"kind": "delay", "delay": 0.01}]))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mock_opensandbox",
            "--port",
            "0",
            "--insecure",
            "--fault",
            rule,
            "--fault",
            "@" + str(tmp_path / "rules.json"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        lines = []
        while not any("Press Ctrl-C" in ln for ln in lines):
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            lines.append(line)
        port = int(next(ln for ln in lines if "listening on" in ln).rsplit(":", 1)[1])
        assert any(ln.startswith("Fault rule cli:") for ln in lines)
        c = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
        c.request("GET", "/version")
        assert c.getresponse().status == 503
        c.close()
    finally:
        proc.terminate()
        proc.wait(10)
        proc.stdout.close()
        proc.stderr.close()
