"""Oracle: the real opensandbox-server 1.1.1 app (its own FastAPI routes, middleware, exception handlers,
pydantic models and validators; only the Docker client is a stand-in, tiers/t2/clients/server_oracle_app.py)
and the mock get the same requests; they must give the same answer: status, and for errors the whole body
(422 ``detail`` items: type, loc, msg, input, ctx; 4xx/5xx ``{code, message}``).

The server runs in its own pinned venv (.venv-server, requirements-server-oracle.txt, created on first use);
no Docker is needed. Hypothesis example counts are small in ``make test`` and large under ``-m slow``.
Explained differences (the mock cannot do what Docker does) are listed in ``EXPLAINED`` and counted.

The tests sit in three modules beside oracle_support.py (the oracle, the fixtures and ``compare``): this one,
the fixed corpus (recordings 03/04 shapes, routes the Docker runtime lacks, malformed input, unknown routes,
volumes, auth; tiers/t4/server/test_live_oracle.py sends it to a live server too); test_server_oracle_generated.py,
the hypothesis bodies; test_server_oracle_sandboxes.py, renew/patch/the state machine and snapshots on two live
sandboxes, then the report.
"""

from __future__ import annotations

import json
import urllib.request

import pytest

from tiers.t2.clients import python_too_old
from tiers.t2.server import oracle_support as support
from tiers.t2.server.oracle_support import GOOD, compare

if python_too_old("requirements-server-oracle.txt"):  # one skip line for the module, not one per test
    pytest.skip("server oracle: " + python_too_old("requirements-server-oracle.txt"), allow_module_level=True)

pytestmark = pytest.mark.spec_exempt("server 1.1.1 behaviours the June OpenAPI spec does not document")
oracle, mock = support.oracle, support.mock  # the module's fixtures (oracle_support.py)


# =====================================================================================================
# fixed corpus: recordings 03/04 shapes, routes the Docker runtime lacks, malformed input, unknown routes
# =====================================================================================================
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
