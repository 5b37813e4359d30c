"""Server oracle on two live sandboxes (oracle_support.py's ``sandboxes``, one with a timeout, one with manual
cleanup): renew, metadata patch, diagnostics, endpoints and the state machine; snapshots taken, listed, restored
and deleted on both sides; then the report of the whole oracle run (this module runs last of the three)."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from tiers.t2.clients import python_too_old
from tiers.t2.server import oracle_support as support
from tiers.t2.server.oracle_support import STATS, compare, mock_request
from tiers.toolkit.waits import wait_until

if python_too_old("requirements-server-oracle.txt"):  # one skip line for the module, not one per test
    pytest.skip("server oracle: " + python_too_old("requirements-server-oracle.txt"), allow_module_level=True)

pytestmark = pytest.mark.spec_exempt("server 1.1.1 behaviours the June OpenAPI spec does not document")
oracle, mock, sandboxes = support.oracle, support.mock, support.sandboxes  # the module's fixtures


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


def test_report(capsys):
    """Not a check: prints how many exchanges were compared and how many differences were explained."""
    with capsys.disabled():
        print("\nserver oracle: %(compared)d exchanges compared, %(explained)d explained differences" % STATS)
