"""t1: the workbench admin API (workbench/admin.py, workbench/journal.py) over HTTP, in Python and through the fixture:
reset (everything or one sandbox, no process left), the request journal (every listener, filters,
timing, faults, scrubbed previews), the internal sandbox state, the dashboard's session login and
its event stream."""

from __future__ import annotations

import http.client
import json
import os
import textwrap
import time

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit import rest
from tiers.toolkit.waits import wait_until

pytestmark = pytest.mark.spec_exempt("the /__mock__/ workbench routes are mock-only (not in the OpenSandbox spec)")
pytest_plugins = ["pytester"]

CREATE = {
    "image": {"uri": "local/python:3-slim"},
    "entrypoint": ["tail", "-f", "/dev/null"],
    "timeout": 600,
    "resourceLimits": {"cpu": "500m", "memory": "512Mi"},
}


def call(osb, method, path, body=None, headers=None, key=True, hostport=None):
    h = {"OPEN-SANDBOX-API-KEY": osb.api_key} if key and osb.api_key else {}
    r = rest.call(hostport or osb.base_url, method, path, body, {**h, **(headers or {})})
    return r.status, r.headers, (r.json() if "json" in r.headers.get("content-type", "") else r.body)


def create(osb, **extra):
    st, _, body = call(osb, "POST", "/v1/sandboxes", dict(CREATE, **extra))
    assert st == 202, body
    return body["id"]


def execd(osb, sid):
    st, _, body = call(osb, "GET", f"/v1/sandboxes/{sid}/endpoints/44772")
    assert st == 200
    return body["endpoint"].split("/", 1)[0]


def run(osb, sid, command):
    st, _, body = call(
        osb,
        "POST",
        "/proxy/44772/command",
        {"command": command},
        key=False,
        hostport=execd(osb, sid),
        headers={"X-EXECD-ACCESS-TOKEN": osb.execd_token} if osb.execd_token else None,
    )
    assert st == 200
    return body


def alive(pid):
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] not in (b"Z", b"X")
    except OSError:
        return False


@pytest.fixture
def osb():
    m = MockOpenSandbox(execd_token="tok-secret-123")
    m.start()
    try:
        yield m
    finally:
        m.stop()


# ---- journal -------------------------------------------------------------------------------------------------
def test_journal_records_lifecycle_and_execd_with_filters(osb):
    sid = create(osb, env={"OPENAI_API_KEY": "sk-very-secret-value"})
    hp = execd(osb, sid)
    st, _, _ = call(
        osb,
        "POST",
        "/proxy/44772/command",
        {"command": "echo journal-me"},
        key=False,
        hostport=hp,
        headers={"X-EXECD-ACCESS-TOKEN": "tok-secret-123"},
    )
    assert st == 200
    call(osb, "GET", "/v1/sandboxes/does-not-exist")
    st, _, doc = call(osb, "GET", "/__mock__/requests")
    assert st == 200
    got = [(e["method"], e["path"].split("?")[0], e["status"], e["listener"]) for e in doc["requests"]]
    assert got == [
        ("POST", "/v1/sandboxes", 202, "lifecycle"),
        ("GET", f"/v1/sandboxes/{sid}/endpoints/44772", 200, "lifecycle"),
        ("POST", "/proxy/44772/command", 200, "execd"),
        ("GET", "/v1/sandboxes/does-not-exist", 404, "lifecycle"),
    ]
    first, cmd = doc["requests"][0], doc["requests"][2]
    assert first["sandbox"] == sid and cmd["sandbox"] == sid  # the create learns its id from the answer
    assert cmd["duration_ms"] > 0 and '"journal-me"' not in cmd["request"]["body_preview"]
    assert "echo journal-me" in cmd["request"]["body_preview"]
    assert '"text":"journal-me"' in cmd["response"]["body_preview"]
    assert dict(cmd["request"]["headers"])["X-EXECD-ACCESS-TOKEN"] == "<redacted>"
    text = json.dumps(doc)
    assert osb.api_key not in text and "tok-secret-123" not in text and "sk-very-secret-value" not in text
    # filters
    _, _, d = call(osb, "GET", f"/__mock__/requests?listener=execd&sandbox={sid}")
    assert [e["path"] for e in d["requests"]] == ["/proxy/44772/command"]
    _, _, d = call(osb, "GET", "/__mock__/requests?status=4xx")
    assert [e["status"] for e in d["requests"]] == [404]
    _, _, d = call(osb, "GET", "/__mock__/requests?method=GET|POST&path=/endpoints/&limit=5")
    assert len(d["requests"]) == 1
    _, _, d = call(osb, "GET", f"/__mock__/requests?since={first['seq']}&limit=1")
    assert [e["status"] for e in d["requests"]] == [404]
    assert call(osb, "GET", "/__mock__/requests?path=(")[0] == 400
    assert call(osb, "GET", "/__mock__/requests?status=teapot")[0] == 400
    assert call(osb, "GET", "/__mock__/requests?limit=-1")[0] == 400
    # the admin API is behind the key, and never journals itself
    assert call(osb, "GET", "/__mock__/requests", key=False)[0] == 401
    assert call(osb, "GET", "/__mock__/requests", headers={"OPEN-SANDBOX-API-KEY": "wrong"}, key=False)[0] == 401
    _, _, d = call(osb, "GET", "/__mock__/requests")
    assert not [e for e in d["requests"] if e["path"].startswith("/__mock__")]
    assert call(osb, "DELETE", "/__mock__/requests")[0] == 204
    assert call(osb, "GET", "/__mock__/requests")[2]["requests"] == []


def test_journal_counts_a_download_sent_by_sendfile(osb):
    """A download's body leaves by sendfile (execd/files_routes.py), past the journal's write: the entry still has
    its size, its first bytes and its end."""
    sid = create(osb)
    hp = execd(osb, sid)
    tok = {"X-EXECD-ACCESS-TOKEN": "tok-secret-123"}
    run(osb, sid, "head -c 300000 /dev/zero | tr '\\0' 'q' > /tmp/j.bin")
    st, _, body = call(osb, "GET", "/proxy/44772/files/download?path=/tmp/j.bin", key=False, hostport=hp, headers=tok)
    assert st == 200 and body == b"q" * 300_000
    _, _, doc = call(osb, "GET", f"/__mock__/requests?listener=execd&sandbox={sid}&path=/files/download")
    (e,) = doc["requests"]
    assert e["status"] == 200 and e["response"]["body_bytes"] == 300_000 and e["duration_ms"] > 0
    assert e["response"]["body_preview"].startswith("qqqq")


def test_journal_shows_faults_resets_and_is_bounded():
    with MockOpenSandbox() as osb:
        osb.faults.add(kind="status", status=503, path="^/v1/sandboxes$", method="GET", count=1, id="five-oh-three")
        osb.faults.add(kind="reset", path="^/version$", count=1, id="rst")
        assert call(osb, "GET", "/v1/sandboxes")[0] == 503
        with pytest.raises((ConnectionError, http.client.HTTPException, OSError)):
            call(osb, "GET", "/version")
        wait_until(lambda: len(osb.requests()) >= 2, 5)
        a, b = osb.requests()
        assert (a["status"], a["fault"]) == (503, {"id": "five-oh-three", "kind": "status"})
        assert "nginx" in a["response"]["body_preview"] or "503" in a["response"]["body_preview"]
        assert (b["status"], b["fault"]["id"], b["error"]) == (0, "rst", "connection reset (no answer)")
        assert osb.requests(fault="*") == [a, b] and osb.requests(fault="rst") == [b]
    small = MockOpenSandbox()
    small.journal = small.admin.journal = type(small.journal)(max_entries=3)
    with small:
        for _ in range(5):
            call(small, "GET", "/health")
        assert [e["seq"] for e in small.requests()] == [3, 4, 5] and small.journal.dropped == 2


# ---- sandbox state -----------------------------------------------------------------------------------------
def test_sandbox_state(osb):
    sid = create(osb)
    run(osb, sid, "echo hi")
    st, _, s = call(osb, "GET", f"/__mock__/sandboxes/{sid}")
    assert st == 200
    assert s["id"] == sid and s["state"] == "Running" and s["paused"] is False and s["image"] == "local/python:3-slim"
    assert 590 <= s["ttl_left_s"] <= 600
    assert os.path.isdir(s["root"]) and s["root"].endswith(sid)
    assert s["execd"]["mode"] == "v1.1.0" and s["execd"]["access_token"] == "<set>" and s["execd"]["gateway"] is False
    assert any("tail -f /dev/null" in p["cmdline"] for p in s["processes"]), s["processes"]
    assert [c["content"] for c in s["commands"]] == ["echo hi"]
    assert "tok-secret-123" not in json.dumps(s)
    osb.set_execd_mode(sid, "latest")
    assert call(osb, "POST", f"/v1/sandboxes/{sid}/pause")[0] == 202
    s = osb.sandbox_state(sid)
    assert s["paused"] is True and s["state"] == "Paused" and s["execd"]["mode"] == "latest"
    assert all(p["state"] in ("T", "t") for p in s["processes"])
    assert call(osb, "GET", "/__mock__/sandboxes")[2]["sandboxes"][0]["id"] == sid
    assert call(osb, "GET", "/__mock__/sandboxes/nope")[0] == 404
    assert osb.sandbox_state("nope") is None
    st, _, state = call(osb, "GET", "/__mock__/state")
    assert st == 200 and state["info"]["execd_mode"] == "v1.1.0" and state["sandboxes"][0]["id"] == sid
    assert state["info"]["isolation"]


# ---- reset ---------------------------------------------------------------------------------------------------
def test_reset_one_sandbox_then_everything(osb):
    keep, drop = create(osb), create(osb)
    run(osb, drop, "sleep 300 >/dev/null 2>&1 &")
    pids = [p["pid"] for p in osb.sandbox_state(drop)["processes"]]
    root = osb.sandbox_state(drop)["root"]
    assert pids and all(alive(p) for p in pids)
    osb.faults.add(kind="delay", delay=0, sandbox=drop, id="scoped")
    osb.faults.add(kind="delay", delay=0, sandbox=keep, id="other")
    assert call(osb, "POST", "/__mock__/reset", {"sandbox": "nope"})[0] == 404
    assert call(osb, "POST", "/__mock__/reset", "[1]")[0] == 400
    assert call(osb, "GET", "/__mock__/reset")[0] == 405
    st, _, out = call(osb, "POST", f"/__mock__/reset?sandbox={drop}")
    assert st == 200 and out["sandboxes_removed"] == 1 and out["rules_removed"] == 1 and out["requests_removed"] >= 2
    assert set(osb.sandboxes) == {keep} and [r.id for r in osb.faults.rules] == ["other"]
    assert not any(alive(p) for p in pids) and not os.path.exists(root)
    assert osb.requests(sandbox=drop) == [] and osb.requests(sandbox=keep)
    keep_pids = [p["pid"] for p in osb.sandbox_state(keep)["processes"]]
    osb.execd_mode = "latest"
    st, _, out = call(osb, "POST", "/__mock__/reset", {})
    assert st == 200 and out == {
        "sandboxes_removed": 1,
        "snapshots_removed": 0,
        "volumes_removed": 0,
        "rules_removed": 1,
        "requests_removed": out["requests_removed"],
    }
    assert osb.sandboxes == {} and osb.faults.rules == [] and osb.requests() == [] and osb.execd_mode == "v1.1.0"
    assert not any(alive(p) for p in keep_pids)
    assert sorted(os.listdir(osb.root)) == []
    # the mock still works after a reset
    sid = create(osb)
    assert '"text":"again"' in run(osb, sid, "echo again").decode()


def test_python_helpers(osb):
    sid = create(osb)
    run(osb, sid, "true")
    run(osb, sid, "true")
    assert len(osb.assert_requested(method="POST", path=r"/command$", sandbox=sid, count=2)) == 2
    assert osb.assert_requested(path="/endpoints/44772", at_least=2)
    with pytest.raises(AssertionError) as info:
        osb.assert_requested(method="DELETE", path="^/v1/sandboxes/")
    msg = str(info.value)
    assert "expected at least 1 request(s) matching method='DELETE'" in msg and "POST /proxy/44772/command" in msg
    with pytest.raises(AssertionError, match="exactly 1"):
        osb.assert_requested(method="POST", path="/command$", count=1)
    assert [e["listener"] for e in osb.requests(sandbox=sid, method="POST")] == ["lifecycle", "execd", "execd"]
    assert osb.reset() == {
        "sandboxes_removed": 1,
        "snapshots_removed": 0,
        "volumes_removed": 0,
        "rules_removed": 0,
        "requests_removed": 5,
    }
    assert osb.requests() == []


# ---- the dashboard's session and event stream ----------------------------------------------------------------
def test_dashboard_login_cookie_and_origin_rules(osb):
    st, _, _ = call(osb, "GET", "/__mock__/?key=wrong", key=False)
    assert st == 401
    st, h, _ = call(osb, "GET", "/__mock__/?key=" + osb.api_key, key=False)
    assert st == 303 and h["location"] == "/__mock__/"
    cookie = h["set-cookie"].split(";", 1)[0]
    assert "HttpOnly" in h["set-cookie"] and "SameSite=Strict" in h["set-cookie"] and osb.api_key not in cookie
    st, h, page = call(osb, "GET", "/__mock__/", headers={"Cookie": cookie}, key=False)
    assert st == 200 and h["content-type"].startswith("text/html") and b"<html" in page.lower()
    assert call(osb, "GET", "/__mock__/", key=False)[0] == 401
    own = "http://" + osb.base_url.split("://", 1)[1]
    st, _, _body = call(
        osb,
        "POST",
        "/__mock__/faults",
        {"kind": "delay", "delay": 0, "id": "from-ui"},
        headers={"Cookie": cookie, "Origin": own},
        key=False,
    )
    assert st == 201 and osb.faults.get("from-ui") is not None
    assert (
        call(osb, "DELETE", "/__mock__/faults/from-ui", headers={"Cookie": cookie, "Origin": own}, key=False)[0] == 204
    )
    assert (
        call(osb, "POST", "/__mock__/reset", headers={"Cookie": cookie, "Origin": "http://evil.example"}, key=False)[0]
        == 403
    )
    assert call(osb, "GET", "/__mock__/state", headers={"Origin": own})[0] == 403  # a key but no session
    assert call(osb, "GET", "/__mock__/state", headers={"Host": "evil.example"})[0] == 403
    # the fault routes keep the lifecycle app's behaviour for API-key clients
    assert call(osb, "GET", "/__mock__/faults", key=False)[2]["code"] == "MISSING_API_KEY"


def test_event_stream_sends_state_on_change(osb):
    c = http.client.HTTPConnection(osb.base_url.split("://", 1)[1], timeout=20)
    try:
        c.request("GET", "/__mock__/events", headers={"OPEN-SANDBOX-API-KEY": osb.api_key})
        r = c.getresponse()
        assert r.status == 200 and r.getheader("Content-Type").startswith("text/event-stream")

        def next_state():
            data = None
            while True:
                line = r.fp.readline()
                assert line, "stream ended"
                line = line.rstrip(b"\r\n")
                if line.startswith(b"data: "):
                    data = json.loads(line[6:])
                elif line == b"" and data is not None:
                    return data

        first = next_state()
        assert first["sandboxes"] == [] and "info" in first
        sid = create(osb)
        deadline = time.monotonic() + 10
        while True:
            doc = next_state()
            if [s["id"] for s in doc["sandboxes"]] == [sid]:
                break
            assert time.monotonic() < deadline
        assert any(e["path"] == "/v1/sandboxes" for e in doc["requests"])
    finally:
        c.close()


# ---- through the pytest fixture ------------------------------------------------------------------------------
def test_shared_fixture_resets_between_tests(pytester):
    pytester.makepyfile(
        test_shared=textwrap.dedent("""
        import json, urllib.request
        SEEN = {}

        def _create(osb):
            req = urllib.request.Request(osb.base_url + "/v1/sandboxes", method="POST", data=json.dumps(
                {"image": {"uri": "x"}, "entrypoint": ["tail", "-f", "/dev/null"], "timeout": 60,
                 "resourceLimits": {"cpu": "1"}}).encode(), headers={"OPEN-SANDBOX-API-KEY": osb.api_key,
                                                                    "Content-Type": "application/json"})
            return json.load(urllib.request.urlopen(req))["id"]

        def test_one(opensandbox_mock_shared):
            SEEN["mock"] = opensandbox_mock_shared
            SEEN["sid"] = _create(opensandbox_mock_shared)
            opensandbox_mock_shared.faults.add(kind="delay", delay=0)
            opensandbox_mock_shared.assert_requested(method="POST", path="^/v1/sandboxes$", count=1)

        def test_two(opensandbox_mock_shared):
            assert opensandbox_mock_shared is SEEN["mock"]
            assert opensandbox_mock_shared.sandboxes == {} and opensandbox_mock_shared.faults.rules == []
            assert opensandbox_mock_shared.requests() == []
            assert opensandbox_mock_shared.sandbox_state(SEEN["sid"]) is None
    """)
    )
    res = pytester.runpytest_inprocess("-p", "pytest_opensandbox_mock", "-q", "-p", "no:cacheprovider")
    res.assert_outcomes(passed=2)
