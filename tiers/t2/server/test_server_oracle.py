"""Oracle: the real opensandbox-server 1.1.1 app (its own FastAPI routes, middleware, exception handlers,
pydantic models and validators; only the Docker client is a stand-in, tiers/t2/clients/server_oracle_app.py)
and the mock get the same requests; they must give the same answer: status, and for errors the whole body
(422 ``detail`` items: type, loc, msg, input, ctx; 4xx/5xx ``{code, message}``).

The server runs in its own pinned venv (.venv-server, requirements-server-oracle.txt, created on first use);
no Docker is needed. Hypothesis example counts are small in ``make test`` and large under ``-m slow``.
Explained differences (the mock cannot do what Docker does) are listed in ``EXPLAINED`` and counted.
"""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.request
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mock_opensandbox.server import MockOpenSandbox
from tiers.t2.clients import REPO, Unavailable, python_env, python_too_old
from tiers.toolkit.procs import close_and_wait
from tiers.toolkit.waits import wait_until

if python_too_old("requirements-server-oracle.txt"):  # one skip line for the module, not one per test
    pytest.skip("server oracle: " + python_too_old("requirements-server-oracle.txt"), allow_module_level=True)

pytestmark = pytest.mark.spec_exempt("server 1.1.1 behaviours the June OpenAPI spec does not document")
APP = REPO + "/tiers/t2/clients/server_oracle_app.py"
FAST = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
SLOW = settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
STATS = {"compared": 0, "explained": 0}


class Oracle:
    def __init__(self) -> None:
        py = python_env("server", "requirements-server-oracle.txt")
        self.proc = subprocess.Popen(
            [py, APP], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO
        )
        hello = json.loads(self.proc.stdout.readline() or "{}")
        if not hello.get("ready"):
            self.close()
            raise Unavailable("the server oracle did not start")
        self.api_key = hello["api_key"]
        self.root = hello["root"]  # its [storage] allowed_host_paths = [root/host], named volumes in root/volumes
        self.lock = threading.Lock()

    def _call(self, msg: dict) -> dict:
        with self.lock:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
            return json.loads(self.proc.stdout.readline())

    def add(self, sid: str, timeout: bool) -> None:
        self._call({"op": "add", "id": sid, "timeout": timeout})

    def request(self, method: str, path: str, headers: dict, body: bytes | None) -> tuple[int, dict, bytes]:
        h = dict(headers)
        h.setdefault("OPEN-SANDBOX-API-KEY", self.api_key)
        r = self._call(
            {
                "op": "request",
                "method": method,
                "path": path,
                "headers": h,
                "body": body.decode("latin-1") if body is not None else None,
            }
        )
        return r["status"], {k.lower(): v for k, v in r["headers"].items()}, r["body"].encode("latin-1")

    def close(self) -> None:
        close_and_wait(self.proc, 10)


@pytest.fixture(scope="module")
def oracle():
    try:
        o = Oracle()
    except Unavailable as e:
        pytest.skip("server oracle unavailable: %s" % e)
    try:
        yield o
    finally:
        o.close()


@pytest.fixture
def slow_only(request):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("slow fuzzing: run with `make test-slow` (-m slow)")


@pytest.fixture(scope="module")
def mock(oracle):
    """Overrides the toolkit's ``mock`` (tiers/toolkit/fixtures.py): the oracle's storage configuration, the same
    host prefix and the same named-volume directory."""
    with MockOpenSandbox(
        egress_mode="off", volumes_dir=oracle.root + "/volumes", allowed_host_paths=[oracle.root + "/host"]
    ) as m:
        yield m


def urllib_exchange(url: str, method: str, headers: dict, body: bytes | None, timeout: float):
    """(status, lower-cased headers, body) of one request through urllib, error statuses included: how the corpus
    reaches the mock here and the live server in tiers/t4/server/test_live_oracle.py."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    if body is None and method in ("POST", "PUT", "PATCH"):
        req.add_header("Content-Length", "0")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def mock_request(m: MockOpenSandbox, method: str, path: str, headers: dict, body: bytes | None):
    h = dict(headers)
    h.setdefault("OPEN-SANDBOX-API-KEY", m.api_key)
    return urllib_exchange(m.base_url + path, method, h, body, 30)


@pytest.fixture(scope="module")
def sandboxes(mock, oracle):
    """Two mock sandboxes (with a timeout, and manual cleanup) the oracle knows under the same ids."""
    out = {}
    for name, body in (("timed", {"timeout": 3600}), ("manual", {})):
        body.update(
            {
                "image": {"uri": "local/python:3-slim"},
                "entrypoint": ["tail", "-f", "/dev/null"],
                "resourceLimits": {"cpu": "500m"},
            }
        )
        st_, _, raw = mock_request(
            mock, "POST", "/v1/sandboxes", {"Content-Type": "application/json"}, json.dumps(body).encode()
        )
        assert st_ == 202, raw
        sid = json.loads(raw)["id"]
        oracle.add(sid, timeout=name == "timed")
        out[name] = sid
    return out


def _norm(status: int, headers: dict, body: bytes) -> Any:
    ctype = headers.get("content-type", "")
    if not body:  # HEAD, 204
        return status, ""
    if status in (200, 202) and "json" in ctype:
        doc = json.loads(body)
        if isinstance(doc, dict):  # ids and timestamps differ; the shape must not
            return status, sorted(doc)
        return status, doc
    if "json" in ctype:
        return status, json.loads(body)
    return status, body.decode("utf-8", "replace")


def _cleanup(m: MockOpenSandbox, status: int, body: bytes) -> None:
    if status == 202 and body:
        sid = json.loads(body).get("id")
        if sid:
            mock_request(m, "DELETE", "/v1/sandboxes/" + sid, {}, None)


EXPLAINED: list[tuple[str, Any]] = [
    # (why, predicate on (oracle status, oracle body, mock status, mock body))
    (
        "windows: the mock runs Linux processes only [choice, QUIRKS.md]",
        lambda os_, ob, ms, mb: os_ == 202 and ms == 400 and b"'windows' is not supported by the mock" in mb,
    ),
    (
        "ossfs: the oracle's provisioning is a stand-in that mounts nothing; the mock fails as a server without "
        "ossfs installed [QUIRKS.md Volumes]",
        lambda os_, ob, ms, mb: os_ == 202 and ms == 500 and b"VOLUME::OSSFS_MOUNT_FAILED" in mb,
    ),
    (
        "a mount target Docker/runc refuse when the container starts (the oracle's container is a stand-in)",
        lambda os_, ob, ms, mb: os_ == 202 and ms == 500 and b"DOCKER::SANDBOX_START_FAILED" in mb,
    ),
]


def compare(
    mock, oracle, method: str, path: str, body: Any = None, headers: dict | None = None, raw: bytes | None = None
) -> tuple[int, Any]:
    headers = dict(headers or {})
    if raw is None and body is not None:
        raw = json.dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
    os_, oh, ob = oracle.request(method, path, headers, raw)
    ms, mh, mb = mock_request(mock, method, path, headers, raw)
    try:
        STATS["compared"] += 1
        for why, pred in EXPLAINED:
            if pred(os_, ob, ms, mb):
                STATS["explained"] += 1
                return os_, why
        want, got = _norm(os_, oh, ob), _norm(ms, mh, mb)
        assert got == want, "%s %s %r\n oracle: %s %s\n mock:   %s %s" % (
            method,
            path,
            raw,
            os_,
            ob[:600],
            ms,
            mb[:600],
        )
        if os_ == 405:  # Starlette's Allow header: the methods of the first route matching the path
            assert mh.get("allow") == oh.get("allow"), (method, path, mh.get("allow"), oh.get("allow"))
        if "x-request-id" in headers:
            assert mh.get("x-request-id") == oh.get("x-request-id") == headers["x-request-id"].strip()
        return os_, want
    finally:
        _cleanup(mock, ms, mb)


# =====================================================================================================
# fixed corpus: recordings 03/04 shapes, routes the Docker runtime lacks, malformed input, unknown routes
# =====================================================================================================
GOOD = {
    "image": {"uri": "local/python:3-slim"},
    "entrypoint": ["tail", "-f", "/dev/null"],
    "resourceLimits": {"cpu": "500m", "memory": "512Mi"},
}
FIXED = [
    ("POST", "/v1/sandboxes", {}),
    ("POST", "/v1/sandboxes", dict(GOOD, timeout=10)),
    ("POST", "/v1/sandboxes", dict(GOOD, entrypoint=[])),
    ("POST", "/v1/sandboxes", dict(GOOD, timeout=10**30)),
    ("POST", "/v1/sandboxes", dict(GOOD, resourceLimits={"cpu": "0"})),
    ("POST", "/v1/sandboxes", dict(GOOD, resourceLimits={"memory": "12Q"})),
    ("POST", "/v1/sandboxes", dict(GOOD, resourceLimits={"gpu": "all", "cpu": "x" * 100})),
    ("POST", "/v1/sandboxes", dict(GOOD, metadata={"opensandbox.io/x": "1"})),
    ("POST", "/v1/sandboxes", dict(GOOD, metadata={"a b": "1"})),
    ("POST", "/v1/sandboxes", dict(GOOD, metadata={"k": "-bad-"})),
    ("POST", "/v1/sandboxes", dict(GOOD, secureAccess=True)),
    ("POST", "/v1/sandboxes", dict(GOOD, networkPolicy={"defaultAction": "deny"})),
    ("POST", "/v1/sandboxes", dict(GOOD, networkPolicy={"egress": [{"action": "allow", "target": ""}]})),
    ("POST", "/v1/sandboxes", dict(GOOD, lifecycle={"preStart": {"command": ["echo"]}})),
    ("POST", "/v1/sandboxes", dict(GOOD, lifecycle={"preStart": {"command": ["  "]}})),
    ("POST", "/v1/sandboxes", dict(GOOD, lifecycle={"bogus": 1})),
    ("POST", "/v1/sandboxes", dict(GOOD, extensions={"poolRef": "p"})),
    ("POST", "/v1/sandboxes", {"extensions": {"poolRef": "p"}}),
    ("POST", "/v1/sandboxes", dict(GOOD, extensions={"access.renew.extend.seconds": "10"})),
    ("POST", "/v1/sandboxes", dict(GOOD, extensions={"access.renew.extend.seconds": " "})),
    ("POST", "/v1/sandboxes", dict(GOOD, extensions={"access.renew.extend.seconds": "5m"})),
    ("POST", "/v1/sandboxes", {"snapshotId": "snap-1", "resourceLimits": {}}),
    ("POST", "/v1/sandboxes", {"templateId": "tpl-1", "timeout": 600}),
    ("POST", "/v1/sandboxes", {"templateId": "tpl-1"}),
    ("POST", "/v1/sandboxes", dict(GOOD, templateId="tpl-1")),
    ("POST", "/v1/sandboxes", dict(GOOD, env={"OPENSANDBOX_LIFECYCLE": "x"})),
    ("POST", "/v1/sandboxes", dict(GOOD, env={"OPENSANDBOX_EGRESS_NOPE": "x"})),
    ("POST", "/v1/sandboxes", dict(GOOD, platform={"os": "plan9", "arch": "amd64"})),
    ("POST", "/v1/sandboxes", dict(GOOD, platform={"os": "Linux ", "arch": "mips"})),
    ("POST", "/v1/sandboxes", dict(GOOD, volumes=[{"name": "v", "mountPath": "/m", "host": {"path": "/data"}}])),
    ("POST", "/v1/sandboxes", dict(GOOD, volumes=[{"name": "v", "mountPath": "/m", "host": {"path": "/a/../b"}}])),
    (
        "POST",
        "/v1/sandboxes",
        dict(GOOD, volumes=[{"name": "v", "mountPath": "/m", "pvc": {"claimName": "c"}, "subPath": "../x"}]),
    ),
    (
        "POST",
        "/v1/sandboxes",
        dict(
            GOOD,
            volumes=[
                {"name": "v", "mountPath": "/m", "pvc": {"claimName": "c"}},
                {"name": "v", "mountPath": "/n", "pvc": {"claimName": "d"}},
            ],
        ),
    ),
    ("POST", "/v1/sandboxes", dict(GOOD, volumes=[{"name": "v", "mountPath": "/m"}])),
    (
        "POST",
        "/v1/sandboxes",
        dict(
            GOOD,
            volumes=[
                {
                    "name": "v",
                    "mountPath": "/m",
                    "ossfs": {
                        "bucket": "bkt",
                        "endpoint": "e",
                        "options": ["-o"],
                        "accessKeyId": "a",
                        "accessKeySecret": "b",
                    },
                }
            ],
        ),
    ),
    ("POST", "/v1/sandboxes", dict(GOOD, credentialProxy={"enabled": True})),
    ("POST", "/v1/sandboxes", [GOOD]),
    ("POST", "/v1/sandboxes", "text"),
    ("POST", "/v1/sandboxes", None),
    ("GET", "/v1/sandboxes?page=0&pageSize=500", None),
    ("GET", "/v1/sandboxes?metadata=a%3D1%26broken", None),
    ("GET", "/v1/sandboxes?page=abc&page=2", None),
    ("GET", "/v1/sandboxes?pageSize=1&pageSize=0", None),
    ("GET", "/v1/sandboxes?page=%201%20&pageSize=1_0", None),
    ("GET", "/v1/sandboxes?state=", None),
    ("GET", "/v1/sandboxes?metadata=", None),
    ("GET", "/v1/snapshots?page=x&pageSize=999", None),
    ("GET", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/diagnostics/logs?tail=1&tail=x", None),
    ("GET", "/v1/sandboxes/00000000-0000-0000-0000-000000000000", None),
    ("DELETE", "/v1/sandboxes/00000000-0000-0000-0000-000000000000", None),
    ("POST", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/pause", None),
    ("POST", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/resume", None),
    ("POST", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/renew-expiration", {"expiresAt": "not-a-date"}),
    (
        "POST",
        "/v1/sandboxes/00000000-0000-0000-0000-000000000000/renew-expiration",
        {"expiresAt": "2999-01-01T00:00:00Z"},
    ),
    ("PATCH", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/metadata", {"a": "b"}),
    ("GET", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/endpoints/44772", None),
    ("GET", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/endpoints/x", None),
    ("GET", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/diagnostics/logs", None),
    ("GET", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/diagnostics/logs?scope=container", None),
    ("GET", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/diagnostics/logs?scope=Pods", None),
    ("GET", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/diagnostics/logs?tail=0", None),
    ("GET", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/diagnostics/events?scope=runtime", None),
    ("GET", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/diagnostics/events?limit=501", None),
    ("GET", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/diagnostics/inspect", None),
    ("GET", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/diagnostics/summary?event_limit=x", None),
    ("GET", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/diagnostics/summary", None),
    ("GET", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/networkpolicy", None),
    ("PUT", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/networkpolicy", {"egress": "x"}),
    ("PUT", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/networkpolicy", {"defaultAction": "deny"}),
    ("PATCH", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/networkpolicy", [{"action": "allow"}]),
    ("DELETE", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/networkpolicy", ["a.com", 3]),
    ("GET", "/v1/sandboxes/fsb-1/networkpolicy", None),
    ("POST", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/snapshots", None),
    ("POST", "/v1/sandboxes/00000000-0000-0000-0000-000000000000/snapshots", {"name": ""}),
    ("GET", "/v1/snapshots", None),
    ("GET", "/v1/snapshots?pageSize=0", None),
    ("GET", "/v1/snapshots/snap-1", None),
    ("DELETE", "/v1/snapshots/snap-1", None),
    ("GET", "/v1/pools", None),
    ("POST", "/v1/pools", {}),
    (
        "POST",
        "/v1/pools",
        {"name": "p", "template": {}, "capacitySpec": {"bufferMax": 1, "bufferMin": 0, "poolMax": 2, "poolMin": 0}},
    ),
    ("GET", "/v1/pools/p", None),
    ("PUT", "/v1/pools/p", {"capacitySpec": {"bufferMax": -1}}),
    ("DELETE", "/v1/pools/p", None),
    ("GET", "/v1/templates", None),
    ("GET", "/v1/templates?page=0", None),
    ("POST", "/v1/templates", {"image": "i", "publish": "s3://b", "bogus": 1}),
    ("POST", "/v1/templates", {"image": "i", "publish": "s3://b"}),
    ("GET", "/v1/templates/t", None),
    ("DELETE", "/v1/templates/t", None),
    ("POST", "/v1/metrics/events", {"eventType": "sandbox.create", "createDurationMs": 12, "success": True}),
    ("POST", "/v1/metrics/events", {"eventType": "other", "createDurationMs": -1}),
    ("POST", "/metrics/events", {"eventType": "sandbox.create", "createDurationMs": 12, "success": True}),
    ("GET", "/v1/metrics/events", None),
    ("GET", "/v1/nope", None),
    ("GET", "/nope/deeper", None),
    ("PUT", "/v1/sandboxes", None),
    ("DELETE", "/v1/sandboxes", None),
    ("POST", "/v1/sandboxes/x", None),
    ("PUT", "/v1/sandboxes/x/diagnostics/logs", None),
    ("POST", "/health", None),
    ("HEAD", "/health", None),
    ("HEAD", "/v1/sandboxes", None),
    ("GET", "/health", None),
    ("GET", "/version", None),
    ("GET", "/v1/health", None),
]


@pytest.mark.parametrize("method,path,body", FIXED, ids=["%s %s %s" % (m, p, json.dumps(b)[:40]) for m, p, b in FIXED])
def test_fixed_corpus(mock, oracle, method, path, body):
    compare(mock, oracle, method, path, body)


def _vol(**v):
    return dict(GOOD, volumes=[dict({"name": "v", "mountPath": "/m"}, **v)])


def test_volume_answers(mock, oracle):
    """Named volumes and host binds against the server's own _validate_volumes (QUIRKS.md, Volumes): both sides see the
    same prefix and the same volume directory, links planted in them included."""
    import os

    host, vols = oracle.root + "/host", oracle.root + "/volumes"
    os.makedirs(vols + "/planted/real", exist_ok=True)
    for name, target in (("root", "/"), ("up", "../../../../../../etc"), ("inlink", "real")):
        if not os.path.lexists(vols + "/planted/" + name):
            os.symlink(target, vols + "/planted/" + name)
    if not os.path.lexists(host + "/out"):
        os.symlink("/etc", host + "/out")
    cases = [
        _vol(pvc={"claimName": "oracle-new"}),  # created: 202 both
        _vol(pvc={"claimName": "oracle-absent", "createIfNotExists": False}),  # PVC_NOT_FOUND
        _vol(pvc={"claimName": "planted"}, subPath="root"),  # escapes after realpath
        _vol(pvc={"claimName": "planted"}, subPath="up"),
        _vol(pvc={"claimName": "planted"}, subPath="inlink"),  # stays inside: 202
        _vol(pvc={"claimName": "planted"}, subPath="real/missing"),  # missing tail: 202
        _vol(pvc={"claimName": "planted"}, subPath="a/./b"),
        _vol(host={"path": host + "/proj"}),  # made, 202
        _vol(host={"path": host}, subPath="proj/sub", readOnly=True),
        _vol(host={"path": host + "/out"}),  # a link out: refused
        _vol(host={"path": host}, subPath="out"),
        _vol(host={"path": host}, subPath="out/passwd"),
        _vol(host={"path": host + "x"}),  # a sibling, not the prefix
        _vol(host={"path": "/etc"}),
        _vol(host={"path": host + "/"}),
    ]
    for body in cases:
        compare(mock, oracle, "POST", "/v1/sandboxes", body)
    assert not os.path.exists("/etc/osb-oracle-missing")


RAW = [
    (b"{not json", "application/json"),
    (b'{"a": 1,}', "application/json"),
    (b"\xff\xfe", "application/json"),
    (b'{"a": "\xc3("}', "application/json"),
    (b"[" * 100000, "application/json"),
    (b"", "application/json"),
    (b"{}", "text/plain"),
    (b'{"image": {"uri": "x"}}', None),
    (b"{}", "application/merge-patch+json"),
    (b"{}", "application/json; charset=utf-8"),
    (b'{"timeout": NaN}', "application/json"),
    (b'{"timeout": Infinity, "image": {"uri": "x"}}', "application/json"),
    (b"[" * 50 + b"]" * 50, "application/json"),
    (b'{"metadata": {"k": "' + b"v" * 200000 + b'"}}', "application/json"),
]


@pytest.mark.parametrize("raw,ctype", RAW, ids=[repr(r[:20]) + str(c) for r, c in RAW])
@pytest.mark.parametrize(
    "path",
    [
        "/v1/sandboxes",
        "/sandboxes/00000000-0000-0000-0000-000000000000/renew-expiration",
        "/v1/sandboxes/00000000-0000-0000-0000-000000000000/metadata",
    ],
)
def test_malformed_bodies(mock, oracle, raw, ctype, path):
    method = "PATCH" if path.endswith("/metadata") else "POST"
    compare(mock, oracle, method, path, headers={"Content-Type": ctype} if ctype else {}, raw=raw)


@pytest.mark.parametrize(
    "headers",
    [
        {"OPEN-SANDBOX-API-KEY": ""},
        {"OPEN-SANDBOX-API-KEY": "wrong-key"},
        {"x-request-id": "my-trace-1"},
        {"x-request-id": "  padded  "},
        {},
    ],
)
def test_auth_and_request_id(mock, oracle, headers):
    """Recording 02 (auth) and the X-Request-ID middleware: same status/body, the id echoed (stripped)."""
    compare(mock, oracle, "GET", "/v1/sandboxes/00000000-0000-0000-0000-000000000000", headers=headers)


def test_missing_api_key(mock, oracle):
    r = oracle._call({"op": "request", "method": "GET", "path": "/v1/sandboxes", "headers": {}, "body": None})
    with pytest.raises(urllib.error.HTTPError) as ei:
        urllib.request.urlopen(mock.base_url + "/v1/sandboxes", timeout=10)
    assert (ei.value.code, json.loads(ei.value.read())) == (r["status"], json.loads(r["body"]))


# =====================================================================================================
# renew / patch / state machine on live sandboxes
# =====================================================================================================
def test_state_machine_on_sandboxes(mock, oracle, sandboxes):
    timed, manual = sandboxes["timed"], sandboxes["manual"]
    future = (datetime.now(timezone.utc) + timedelta(hours=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    compare(mock, oracle, "POST", "/v1/sandboxes/%s/renew-expiration" % timed, {"expiresAt": future})
    compare(mock, oracle, "POST", "/v1/sandboxes/%s/renew-expiration" % manual, {"expiresAt": future})
    compare(mock, oracle, "POST", "/v1/sandboxes/%s/renew-expiration" % manual, {"expiresAt": "2001-01-01"})
    compare(mock, oracle, "PATCH", "/v1/sandboxes/%s/metadata" % timed, {"team": "a", "gone": None})
    compare(mock, oracle, "PATCH", "/v1/sandboxes/%s/metadata" % timed, {"opensandbox.io/id": None})
    compare(mock, oracle, "PATCH", "/v1/sandboxes/%s/metadata" % timed, {"ok": "x", "bad": "-x-"})
    compare(mock, oracle, "GET", "/v1/sandboxes/%s/diagnostics/logs?scope=nope" % timed)
    compare(mock, oracle, "GET", "/v1/sandboxes/%s/diagnostics/events?scope=all" % timed)
    compare(mock, oracle, "POST", "/v1/sandboxes/%s/snapshots" % timed, {"name": ""})
    compare(mock, oracle, "GET", "/v1/sandboxes/%s" % timed)
    compare(mock, oracle, "GET", "/sandboxes/%s" % manual)
    for q in (
        "44772",
        "8080",
        "0",
        "70000",
        "x",
        "44772?use_server_proxy=true",
        "44772?expires=10",
        "44772?use_server_proxy=1&expires=10",
        "44772?use_server_proxy=maybe",
        "8080?expires=x",
    ):
        compare(mock, oracle, "GET", "/v1/sandboxes/%s/endpoints/%s" % (timed, q))


# =====================================================================================================
# generated bodies
# =====================================================================================================
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**4), 10**4),
    st.sampled_from([1.5, 60.0, -0.0]),
    st.text(alphabet="ab -_./:0", max_size=6),
)
junk = st.recursive(
    scalars,
    lambda c: st.one_of(
        st.lists(c, max_size=2), st.dictionaries(st.sampled_from(["a", "uri", "os", "x"]), c, max_size=2)
    ),
    max_leaves=4,
)
label = st.text(alphabet="abAZ09-_./ ", min_size=0, max_size=8)
cpu = st.sampled_from(["500m", "1", "0", "-1", "1e3", "inf", "nan", "x", "", " 2 ", "0.5m", "1.5"])
mem = st.sampled_from(["512Mi", "1G", "0", "12Q", "", " 1Gi ", "1.5Gi", "100"])
FIELDS = {
    "image": st.one_of(
        junk,
        st.fixed_dictionaries({"uri": st.sampled_from(["local/python:3-slim", "", "  ", 5])}, optional={"auth": junk}),
    ),
    "snapshotId": st.one_of(scalars, st.sampled_from(["", " ", "snap"])),
    "platform": st.one_of(
        junk,
        st.fixed_dictionaries(
            {
                "os": st.sampled_from(["linux", "LINUX", "darwin", 3]),
                "arch": st.sampled_from(["amd64", "arm64 ", "x", None]),
            }
        ),
    ),
    "timeout": st.one_of(scalars, st.integers(0, 200), st.sampled_from(["60", " 70 ", "6_0", "60.0", 10**20])),
    "resourceLimits": st.one_of(
        junk,
        st.fixed_dictionaries(
            {}, optional={"cpu": cpu, "memory": mem, "gpu": st.sampled_from(["1", "all", "0"]), "disk": junk}
        ),
    ),
    "resource_limits": st.one_of(junk, st.just({"cpu": "1"})),
    "env": st.one_of(
        junk,
        st.dictionaries(
            st.sampled_from(["A", "OPENSANDBOX_EGRESS_LOG_LEVEL", "OPENSANDBOX_EGRESS_X", "OPENSANDBOX_LIFECYCLE"]),
            scalars,
            max_size=2,
        ),
    ),
    "metadata": st.one_of(junk, st.dictionaries(label, st.one_of(label, scalars), max_size=2)),
    "entrypoint": st.one_of(junk, st.lists(st.sampled_from(["true", "sleep", "1", 1, None]), max_size=3)),
    "secureAccess": st.one_of(st.booleans(), st.sampled_from(["true", "no", "maybe", 0, 1, 2, None])),
    "extensions": st.one_of(
        junk,
        st.dictionaries(
            st.sampled_from(["poolRef", "x", "access.renew.extend.seconds", "opensandbox.extensions.k"]),
            st.one_of(scalars, st.sampled_from(["300", "86401", "p"])),
            max_size=2,
        ),
    ),
    "templateId": st.one_of(scalars, st.just("tpl")),
    "lifecycle": st.one_of(
        junk,
        st.fixed_dictionaries(
            {},
            optional={
                "preStart": st.one_of(
                    junk,
                    st.fixed_dictionaries(
                        {"command": st.lists(st.sampled_from(["x", " ", 1]), max_size=2)},
                        optional={"timeoutSeconds": st.sampled_from([0, 5, 10801]), "extra": scalars},
                    ),
                ),
                "periodic": st.one_of(
                    junk,
                    st.lists(
                        st.fixed_dictionaries(
                            {
                                "name": st.sampled_from(["a", " a", " ", ""]),
                                "schedule": st.sampled_from(["@every 1m", " "]),
                                "command": st.sampled_from([["x"], [], [" "]]),
                            },
                            optional={"timeoutSeconds": st.sampled_from([1, 300, 301])},
                        ),
                        max_size=2,
                    ),
                ),
                "bogus": scalars,
            },
        ),
    ),
    "networkPolicy": st.one_of(
        junk,
        st.fixed_dictionaries(
            {},
            optional={
                "defaultAction": st.one_of(scalars, st.sampled_from(["allow", "deny"])),
                "default_action": st.sampled_from(["deny"]),
                "egress": st.one_of(
                    junk,
                    st.lists(
                        st.fixed_dictionaries(
                            {},
                            optional={
                                "action": st.one_of(scalars, st.just("allow")),
                                "target": st.sampled_from(["", "a.com", 3]),
                            },
                        ),
                        max_size=2,
                    ),
                ),
            },
        ),
    ),
    "credentialProxy": st.one_of(junk, st.just({"enabled": True})),
    "volumes": st.one_of(
        junk,
        st.lists(
            st.fixed_dictionaries(
                {"name": st.sampled_from(["v", "V", "v1"]), "mountPath": st.sampled_from(["/m", "m"])},
                optional={
                    "host": st.fixed_dictionaries(
                        {"path": st.sampled_from(["/data", "rel", "C:\\x", "/a//b", "/a/../b", "/a/"])}
                    ),
                    "pvc": st.fixed_dictionaries(
                        {"claimName": st.sampled_from(["c", "C", ""])},
                        optional={
                            "storage": st.sampled_from(["1Gi", "1X"]),
                            "accessModes": st.sampled_from([["rw"], "rw"]),
                            "createIfNotExists": st.sampled_from([False, "x"]),
                        },
                    ),
                    "ossfs": st.fixed_dictionaries(
                        {"bucket": st.sampled_from(["bkt", "b", " " * 3]), "endpoint": st.sampled_from(["e", "", " "])},
                        optional={
                            "version": st.sampled_from(["1.0", "3"]),
                            "options": st.sampled_from([["-o"], [" "], ["ok"]]),
                            "accessKeyId": st.sampled_from(["a", ""]),
                            "accessKeySecret": st.just("s"),
                        },
                    ),
                    "readOnly": st.sampled_from([True, "x"]),
                    "subPath": st.sampled_from(["a", "/a", "../a", ""]),
                },
            ),
            max_size=2,
        ),
    ),
}


create_bodies = st.one_of(
    st.fixed_dictionaries({}, optional=FIELDS),
    # mostly-valid bodies with one or two fields perturbed
    st.fixed_dictionaries(
        {},
        optional={
            k: FIELDS[k]
            for k in ("timeout", "metadata", "resourceLimits", "env", "platform", "extensions", "secureAccess")
        },
    ).map(lambda d: dict(GOOD, **d)),
)


def _create_case(mock, oracle, body):
    compare(mock, oracle, "POST", "/v1/sandboxes", body)


# =====================================================================================================
# snapshots (QUIRKS.md, Snapshots): the server's snapshot service + Docker snapshot runtime over the fake daemon's
# commit/images (server_oracle_app.py), next to the mock; snapshot ids differ per side and are normalised
# =====================================================================================================
def _snap_norm(status: int, body: bytes, ids: dict) -> Any:
    text = body.decode("utf-8", "replace")
    for real, name in ids.items():
        text = text.replace(real, name)
    if not text:
        return status, ""
    doc = json.loads(text)
    if isinstance(doc, dict) and status in (200, 202):
        st_ = doc.get("status")
        if isinstance(st_, dict):  # timestamps differ; the state, reason and message must not
            doc["status"] = {k: v for k, v in st_.items() if k != "lastTransitionAt"}
        doc.pop("createdAt", None)
        doc.pop("expiresAt", None)
        if "items" in doc:
            doc["items"] = [
                dict(x, status={k: v for k, v in x["status"].items() if k != "lastTransitionAt"}, createdAt=None)
                for x in doc["items"]
            ]
    return status, doc


def test_snapshots_on_sandboxes(mock, oracle, sandboxes):
    timed = sandboxes["timed"]
    hj = {"Content-Type": "application/json"}
    ids: dict = {}

    def both(method, path_of, body=None):
        raw = json.dumps(body).encode() if body is not None else None
        os_, _oh, ob = oracle.request(method, path_of("oracle"), hj if raw else {}, raw)
        ms, _mh, mb = mock_request(mock, method, path_of("mock"), hj if raw else {}, raw)
        STATS["compared"] += 1
        return (os_, ob), (ms, mb)

    def same(pair):
        (os_, ob), (ms, mb) = pair
        want, got = _snap_norm(os_, ob, ids), _snap_norm(ms, mb, ids)
        assert got == want, "\n oracle: %s %s\n mock:   %s %s" % (os_, ob[:600], ms, mb[:600])
        return want

    o, m = both("POST", lambda side: "/v1/sandboxes/%s/snapshots" % timed, {"name": "o"})
    snap = {"oracle": json.loads(o[1])["id"], "mock": json.loads(m[1])["id"]}
    ids.update({snap["oracle"]: "<snap>", snap["mock"]: "<snap>"})
    assert same((o, m))[1]["status"]["state"] == "Creating"
    mock.snapshots.wait(30)
    assert wait_until(
        lambda: (
            json.loads(oracle.request("GET", "/v1/snapshots/" + snap["oracle"], {}, None)[2])["status"]["state"]
            != "Creating"
        ),
        30,
    )
    assert same(both("GET", lambda side: "/v1/snapshots/" + snap[side]))[1]["status"]["state"] == "Ready"
    same(both("GET", lambda side: "/v1/snapshots?sandboxId=%s&state=Ready&state=Failed&pageSize=5" % timed))
    same(both("GET", lambda side: "/v1/snapshots?sandboxId=%s&name=other" % timed))

    # a restore: the same answer shape; then the snapshot is in use
    def restore_body(side):
        return json.dumps({"snapshotId": snap[side], "resourceLimits": {"cpu": "500m"}, "timeout": 600}).encode()

    os_, _oh, ob = oracle.request("POST", "/v1/sandboxes", hj, restore_body("oracle"))
    ms, _mh, mb = mock_request(mock, "POST", "/v1/sandboxes", hj, restore_body("mock"))
    assert (os_, ms) == (202, 202), (ob, mb)
    restored = {"oracle": json.loads(ob)["id"], "mock": json.loads(mb)["id"]}
    ids.update({restored["oracle"]: "<restored>", restored["mock"]: "<restored>"})
    assert same(((os_, ob), (ms, mb)))[1]["entrypoint"] == ["tail", "-f", "/dev/null"]
    got = same(both("GET", lambda side: "/v1/sandboxes/" + restored[side]))
    assert got[1]["snapshotId"] == "<snap>" and "image" not in got[1]
    assert same(both("DELETE", lambda side: "/v1/snapshots/" + snap[side]))[0] == 409
    assert same(both("GET", lambda side: "/v1/snapshots/" + snap[side]))[1]["status"]["state"] == "Deleting"
    o = oracle.request("POST", "/v1/sandboxes", hj, restore_body("oracle"))
    m = mock_request(mock, "POST", "/v1/sandboxes", hj, restore_body("mock"))
    assert same(((o[0], o[2]), (m[0], m[2]))) == (
        409,
        {"code": "SNAPSHOT::NOT_READY", "message": "Snapshot <snap> is not ready for restore."},
    )
    assert same(both("DELETE", lambda side: "/v1/sandboxes/" + restored[side]))[0] == 204
    assert same(both("DELETE", lambda side: "/v1/snapshots/" + snap[side]))[0] == 204
    assert same(both("GET", lambda side: "/v1/snapshots/" + snap[side]))[0] == 404
    assert same(both("GET", lambda side: "/v1/sandboxes/%s" % timed))[1]["status"]["state"] == "Running"


@FAST
@given(create_bodies)
def test_generated_create_bodies(mock, oracle, body):
    _create_case(mock, oracle, body)


expires = st.one_of(
    scalars,
    st.sampled_from(
        [
            "not-a-date",
            "2001-01-01",
            "2999-12-31T23:59:59Z",
            "2999-12-31",
            "2999-12-31T23:59:59+25:00",
            "2999-02-30T00:00:00Z",
            "1e12",
            4102444800,
            4102444800000,
            "2999-12-31 10:00",
            "2999-12-31T10:00:00.123456789",
        ]
    ),
)
renew_bodies = st.one_of(
    junk, st.fixed_dictionaries({}, optional={"expiresAt": expires, "expires_at": expires, "other": junk})
)
patch_bodies = st.one_of(
    junk,
    st.dictionaries(
        st.one_of(label, st.sampled_from(["opensandbox.io/x", "a/b", "A.b"])),
        st.one_of(label, st.none(), scalars),
        max_size=3,
    ),
)


@FAST
@given(renew_bodies, st.sampled_from(["timed", "manual", "unknown"]))
def test_generated_renew_bodies(mock, oracle, sandboxes, body, which):
    sid = sandboxes.get(which, "00000000-0000-0000-0000-000000000000")
    compare(mock, oracle, "POST", "/v1/sandboxes/%s/renew-expiration" % sid, body)


@FAST
@given(patch_bodies, st.sampled_from(["timed", "unknown"]))
def test_generated_patch_bodies(mock, oracle, sandboxes, body, which):
    sid = sandboxes.get(which, "00000000-0000-0000-0000-000000000000")
    compare(mock, oracle, "PATCH", "/v1/sandboxes/%s/metadata" % sid, body)


@pytest.mark.slow
@SLOW
@given(create_bodies)
def test_generated_create_bodies_slow(slow_only, mock, oracle, body):
    _create_case(mock, oracle, body)


@pytest.mark.slow
@SLOW
@given(renew_bodies, patch_bodies)
def test_generated_renew_patch_slow(slow_only, mock, oracle, sandboxes, rbody, pbody):
    compare(mock, oracle, "POST", "/v1/sandboxes/%s/renew-expiration" % sandboxes["timed"], rbody)
    compare(mock, oracle, "PATCH", "/v1/sandboxes/%s/metadata" % sandboxes["timed"], pbody)


def test_report(capsys):
    """Not a check: prints how many exchanges were compared and how many differences were explained."""
    with capsys.disabled():
        print("\nserver oracle: %(compared)d exchanges compared, %(explained)d explained differences" % STATS)
