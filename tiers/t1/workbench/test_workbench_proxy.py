"""t1: the fault proxy (mock_opensandbox/workbench/proxy.py) in front of the mock: forwarding, endpoint rewriting
(endpoint headers and execd token kept), fault rules on lifecycle and execd traffic, the journal and
admin API, recording and ``python -m record compare``, and the command line."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from mock_opensandbox.server import MockOpenSandbox
from mock_opensandbox.workbench.proxy import FaultProxy
from tiers.toolkit import rest

pytestmark = pytest.mark.spec_exempt("fault proxy: deliberately faulted answers and mock-only /__mock__/ routes")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CREATE = {
    "image": {"uri": "local/python:3-slim"},
    "entrypoint": ["tail", "-f", "/dev/null"],
    "timeout": 600,
    "resourceLimits": {"cpu": "500m", "memory": "512Mi"},
}
TOKEN = "exec-token-4711"


def call(hostport, method, path, body=None, headers=None):
    r = rest.call(hostport, method, path, body, headers)
    return r.status, r.headers, (r.json() if "json" in r.headers.get("content-type", "") else r.body)


def hp(url):
    return url.split("://", 1)[1]


@pytest.fixture
def stack(tmp_path):
    mock = MockOpenSandbox(execd_token=TOKEN, gateway=True, execd_close_delay=0.0).start()
    proxy = FaultProxy(mock.base_url, api_key=mock.api_key, record=str(tmp_path / "rec"), record_name="flow").start()
    try:
        yield mock, proxy
    finally:
        proxy.stop()
        mock.stop()


def test_forwarding_and_endpoint_rewriting(stack):
    mock, proxy = stack
    key = {"OPEN-SANDBOX-API-KEY": mock.api_key}
    st, h, body = call(hp(proxy.base_url), "POST", "/v1/sandboxes", CREATE, key)
    assert st == 202 and h["server"] == "uvicorn" and "x-request-id" in h  # the upstream's answer, as is
    sid = body["id"]
    assert sid in mock.sandboxes
    st, _, ep = call(hp(proxy.base_url), "GET", f"/v1/sandboxes/{sid}/endpoints/44772", headers=key)
    assert st == 200
    direct = call(hp(mock.base_url), "GET", f"/v1/sandboxes/{sid}/endpoints/44772", headers=key)[2]
    assert ep["headers"] == direct["headers"] and ep["headers"]  # gateway routing headers kept
    local, _, rest = ep["endpoint"].partition("/")
    assert rest == direct["endpoint"].partition("/")[2] == "proxy/44772"
    assert local != direct["endpoint"].partition("/")[0] and local.startswith("127.0.0.1:")
    ehdr = dict(ep["headers"], **{"X-EXECD-ACCESS-TOKEN": TOKEN})
    st, h, out = call(local, "POST", "/proxy/44772/command", {"command": "echo via-proxy"}, ehdr)
    assert st == 200 and h["content-type"] == "text/event-stream"
    assert b'"text":"via-proxy"' in out and out.endswith(b"\n\n")
    assert call(local, "GET", "/proxy/44772/ping", headers=ep["headers"])[0] == 401  # no token: execd's 401
    assert call(local, "GET", "/proxy/44772/ping", headers={"X-EXECD-ACCESS-TOKEN": TOKEN})[0] == 404  # no route header
    # a server-proxy endpoint points at the proxy's own lifecycle address
    st, _, sp = call(
        hp(proxy.base_url), "GET", f"/v1/sandboxes/{sid}/endpoints/44772?use_server_proxy=true", headers=key
    )
    assert sp["endpoint"] == f"{hp(proxy.base_url)}/v1/sandboxes/{sid}/proxy/44772"
    st, _, _ = call(
        hp(proxy.base_url), "GET", f"/v1/sandboxes/{sid}/proxy/44772/ping", headers={"X-EXECD-ACCESS-TOKEN": TOKEN}
    )
    assert st == 200
    # journal: both listeners, the sandbox known on each
    seen = [(e["listener"], e["method"], e["path"].split("?")[0], e["status"]) for e in proxy.requests(sandbox=sid)]
    assert ("execd", "POST", "/proxy/44772/command", 200) in seen and (
        "lifecycle",
        "POST",
        "/v1/sandboxes",
        202,
    ) in seen
    text = json.dumps(proxy.requests())
    assert mock.api_key not in text and TOKEN not in text
    # admin state from the upstream; kill through the admin API deletes upstream
    st, _, s = call(hp(proxy.base_url), "GET", f"/__mock__/sandboxes/{sid}", headers=key)
    assert st == 200 and s["state"] == "Running" and s["created_through_proxy"] is True
    assert s["endpoints"][0]["local"] == local and 590 < s["ttl_left_s"] <= 600
    assert call(hp(proxy.base_url), "GET", "/__mock__/sandboxes", headers={"OPEN-SANDBOX-API-KEY": "x"})[0] == 401
    assert call(hp(proxy.base_url), "DELETE", f"/__mock__/sandboxes/{sid}", headers=key)[0] == 204
    assert sid not in mock.sandboxes and proxy.listeners == {}


def test_faults_on_both_listeners_and_reset(stack):
    mock, proxy = stack
    key = {"OPEN-SANDBOX-API-KEY": mock.api_key}
    sids = [call(hp(proxy.base_url), "POST", "/v1/sandboxes", CREATE, key)[2]["id"] for _ in range(2)]
    eps = [call(hp(proxy.base_url), "GET", f"/v1/sandboxes/{s}/endpoints/44772", headers=key)[2] for s in sids]
    hdrs = [dict(e["headers"], **{"X-EXECD-ACCESS-TOKEN": TOKEN}) for e in eps]
    locals_ = [e["endpoint"].partition("/")[0] for e in eps]
    st, _, _ = call(
        hp(proxy.base_url),
        "POST",
        "/__mock__/faults",
        {
            "kind": "status",
            "status": 502,
            "listener": "execd",
            "path": "^/files/info$",
            "sandbox": sids[0],
            "id": "bad-gw",
        },
        key,
    )
    assert st == 201
    proxy.faults.add(kind="reset", method="GET", path="^/v1/sandboxes$", count=1, id="rst")
    st, h, body = call(locals_[0], "GET", "/proxy/44772/files/info?path=/tmp", headers=hdrs[0])
    assert st == 502 and h["x-mock-fault"] == "bad-gw" and b"502 Bad Gateway" in body
    assert call(locals_[1], "GET", "/proxy/44772/files/info?path=/tmp", headers=hdrs[1])[0] == 200  # other sandbox
    with pytest.raises((ConnectionError, http.client.HTTPException)):
        call(hp(proxy.base_url), "GET", "/v1/sandboxes", headers=key)
    assert call(hp(proxy.base_url), "GET", "/v1/sandboxes", headers=key)[0] == 200  # count=1
    assert [e["status"] for e in proxy.requests(fault="bad-gw")] == [502]
    assert proxy.assert_requested(fault="rst", count=1)[0]["error"] == "connection reset (no answer)"
    # the admin routes are never faulted, and reset deletes what was created through the proxy, upstream
    proxy.faults.add(kind="status", status=500, id="all")
    st, _, out = call(hp(proxy.base_url), "POST", "/__mock__/reset", {}, key)
    assert st == 200 and out["sandboxes_removed"] == 2 and out["rules_removed"] == 3
    assert mock.sandboxes == {} and proxy.requests() == [] and proxy.listeners == {}


def test_recording_compares_clean_against_the_mock(stack, tmp_path):
    mock, proxy = stack
    key = {"OPEN-SANDBOX-API-KEY": mock.api_key}
    sid = call(
        hp(proxy.base_url), "POST", "/v1/sandboxes", dict(CREATE, env={"SERVICE_TOKEN": "tok-very-secret-99"}), key
    )[2]["id"]
    ep = call(hp(proxy.base_url), "GET", f"/v1/sandboxes/{sid}/endpoints/44772", headers=key)[2]
    local = ep["endpoint"].partition("/")[0]
    hdrs = dict(ep["headers"], **{"X-EXECD-ACCESS-TOKEN": TOKEN})
    call(local, "POST", "/proxy/44772/command", {"command": "echo recorded; exit 2"}, hdrs)
    time.sleep(0.6)  # the client's pause is recorded (wait_before_s)
    call(local, "GET", "/proxy/44772/files/info?path=%2Fetc", headers=hdrs)
    proxy.faults.add(kind="status", status=503, path="^/v1/sandboxes/[^/]+$", method="GET", count=1)
    assert call(hp(proxy.base_url), "GET", f"/v1/sandboxes/{sid}", headers=key)[0] == 503  # never reached upstream
    call(hp(proxy.base_url), "GET", f"/v1/sandboxes/{sid}", headers=key)
    call(hp(proxy.base_url), "DELETE", f"/v1/sandboxes/{sid}", headers=key)
    path = tmp_path / "rec" / "flow.json"
    fx = json.loads(path.read_text())
    assert fx["fixture_format"] == 1 and fx["recorded"]["templated"] is False
    assert [i for i, e in enumerate(fx["exchanges"]) if "wait_before_s" in e] == [3]
    assert 0.5 <= fx["exchanges"][3]["wait_before_s"] < 5
    assert [(e["request"]["method"], e["response"]["status"]) for e in fx["exchanges"]] == [
        ("POST", 202),
        ("GET", 200),
        ("POST", 200),
        ("GET", 200),
        ("GET", 200),
        ("DELETE", 204),
    ]
    # as the upstream saw it: its own Host, its own endpoint address; no secret anywhere
    direct = call(hp(mock.base_url), "GET", f"/v1/sandboxes/{sid}/endpoints/44772", headers=key)
    assert direct[0] == 404  # (deleted by now) so use the recorded endpoint answer
    upstream_ep = json.loads(fx["exchanges"][1]["response"]["body"])["endpoint"]
    assert fx["exchanges"][2]["request"]["headers"]["Host"] == upstream_ep.partition("/")[0] != local
    text = path.read_text()
    assert mock.api_key not in text and TOKEN not in text and "<api-key>" in text and "<execd-token>" in text
    assert "tok-very-secret-99" not in text and '\\"SERVICE_TOKEN\\": \\"<redacted>\\"' in text
    assert hp(mock.base_url) in text and hp(proxy.base_url) not in text
    argv = [sys.executable, "-m", "record", "compare", str(tmp_path / "rec"), "--gateway", "--execd-token", "t0k3n"]
    res = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "0 unexplained difference(s)" in res.stdout and "flow" in res.stdout
    # a difference is reported (and fails) when the mock answers otherwise
    fx["exchanges"][2]["response"]["body"] = fx["exchanges"][2]["response"]["body"].replace("recorded", "other")
    path.write_text(json.dumps(fx))
    argv = [sys.executable, "-m", "record", "compare", str(tmp_path / "rec"), "--gateway", "--execd-token", "t0k3n"]
    res = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert res.returncode == 1 and "DIFF      flow #2 POST /proxy/44772/command: sse-output" in res.stdout


def test_unreachable_upstream_is_a_typed_502():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]  # bound, never listening: connections are refused
        with FaultProxy(f"http://127.0.0.1:{dead}", api_key="k") as proxy:
            st, _h, body = call(hp(proxy.base_url), "GET", "/v1/sandboxes", headers={"OPEN-SANDBOX-API-KEY": "k"})
            assert st == 502 and body["code"] == "PROXY::UPSTREAM_UNREACHABLE" and str(dead) in body["message"]
            assert proxy.requests()[0]["status"] == 502
    with pytest.raises(ValueError, match="http:// URL"):
        FaultProxy("https://example.invalid")


def test_command_line(tmp_path):
    with MockOpenSandbox() as mock:
        env = dict(os.environ, OPENSANDBOX_API_KEY=mock.api_key, PYTHONPATH=REPO)
        p = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mock_opensandbox.workbench.proxy",
                "--upstream",
                mock.base_url + "/v1",
                "--port",
                "0",
                "--fault",
                '{"kind": "status", "status": 418, "path": "^/version$"}',
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=str(tmp_path),
        )
        try:
            line = p.stdout.readline()
            assert line.startswith("Fault proxy listening on http://127.0.0.1:"), line + p.stderr.read()
            url = line.split()[4]
            assert call(hp(url), "GET", "/version")[0] == 418
            assert call(hp(url), "GET", "/health")[2] == {"status": "healthy"}
            assert (
                call(hp(url), "GET", "/__mock__/requests", headers={"OPEN-SANDBOX-API-KEY": mock.api_key})[2]["count"]
                == 2
            )
        finally:
            p.send_signal(signal.SIGTERM)
            assert p.wait(timeout=10) == 0
            p.stdout.close()
            p.stderr.close()
    bad = subprocess.run(
        [sys.executable, "-m", "mock_opensandbox.workbench.proxy", "--upstream", "ftp://x"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert bad.returncode == 2 and "--upstream must be an http:// URL" in bad.stderr and "Traceback" not in bad.stderr


def test_terminal_websocket_through_the_proxy(tmp_path):
    """The plugin's terminal (execd /pty + a WebSocket upgrade) through the proxy: the upgrade is tunnelled."""
    from tiers.t1.plugin.test_plugin_pty import Terminal
    from tiers.toolkit.epp import EppClient

    with (
        MockOpenSandbox(execd_mode="latest", execd_close_delay=0.0) as mock,
        FaultProxy(mock.base_url, api_key=mock.api_key) as proxy,
        EppClient(str(tmp_path / "d"), {"base_url": proxy.base_url, "api_key": mock.api_key}) as epp,
    ):
        sid = epp.call("sandbox.create", {"template": "base", "timeout": 300})["sandbox_id"]
        term = Terminal(epp, sid)
        term.write("echo $((6*7))\n")
        term.expect(b"42")
        term.write("exit 3\n")
        assert term.wait_exit()["exit_code"] == 3
        ups = proxy.requests(listener="execd", status=101, sandbox=sid)
        assert ups and "/pty/" in ups[0]["path"]
        epp.call("sandbox.kill", {"sandbox_id": sid})
