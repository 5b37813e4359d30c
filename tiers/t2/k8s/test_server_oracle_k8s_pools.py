"""The mock with ``runtime="kubernetes"`` against the Kubernetes oracle (tiers/t2/clients/server_oracle_k8s_app.py:
the real server 1.1.1 app over a stand-in API server and controller): the /v1/pools routes and extensions.poolRef
creates, the same requests to both, compared on status and body (ids and timestamps normalised only).

The mock's pods are Ready at once (lifecycle/pools.py); the oracle's move only when the test says so, so each test
makes its pools' pods Ready (``pods ... sticky``) and waits for the oracle's controller to settle before it reads a
pool's status. The Docker runtime's /v1/pools answers (501 after the body) are checked against the Docker oracle.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.t2.clients import Unavailable
from tiers.t2.k8s.test_server_oracle_k8s import CREATE, TEMPLATE, K8sOracle
from tiers.t2.server import oracle_support
from tiers.toolkit.waits import poll

pytestmark = pytest.mark.spec_exempt("server 1.1.1 Kubernetes-runtime pools the June OpenAPI spec does not show")

JSON = {"Content-Type": "application/json"}
TS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")


@pytest.fixture(scope="module")
def mock():
    """Overrides the toolkit's ``mock`` (tiers/toolkit/fixtures.py): a mock on the Kubernetes runtime, one per
    module like the oracle."""
    with MockOpenSandbox(runtime="kubernetes", egress_mode="off", timing="fast") as m:
        yield m


def _norm(doc: Any) -> Any:
    """Ids and timestamps only: every other field is compared as it is."""
    if isinstance(doc, dict):
        return {k: "<id>" if k == "id" else _norm(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_norm(v) for v in doc]
    if isinstance(doc, str) and TS.match(doc):
        return "<ts>"
    return doc


def mock_call(mock: MockOpenSandbox, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    raw = json.dumps(body).encode() if body is not None else None
    h = dict(JSON, **{"OPEN-SANDBOX-API-KEY": mock.api_key})
    st, hdrs, out = oracle_support.urllib_exchange(mock.base_url + path, method, h, raw, 30)
    return st, json.loads(out) if out and "json" in hdrs.get("content-type", "") else out.decode()


def both(
    oracle: K8sOracle, mock: MockOpenSandbox, method: str, path: str, body: Any = None, pool_create: bool = False
) -> tuple[Any, Any]:
    """The same request to both; their (status, raw body) after the ids and timestamps are normalised: equal.
    pool_create: a poolRef create, whose answer on a cluster may be either RUNNING or the controller's IP_ASSIGNED
    race (QUIRKS.md; the mock gives the first)."""
    ost, _, odoc = oracle.request(method, path, body)
    mst, mdoc = mock_call(mock, method, path, body)
    if pool_create and isinstance(odoc, dict) and odoc.get("status", {}).get("reason") == "IP_ASSIGNED":
        odoc["status"].update(reason="RUNNING", message="Sandbox is running")
    want, got = (ost, _norm(odoc)), (mst, _norm(mdoc))
    assert got == want, "%s %s %s\n oracle: %r\n mock:   %r" % (method, path, json.dumps(body)[:300], want, got)
    return odoc, mdoc


def settled(oracle: K8sOracle, name: str) -> dict:
    """The oracle's pool once its controller stopped moving: every pod Ready (allocated + available = total) in
    two reads in a row 0.3 s apart."""
    seen: list = []

    def read():
        doc = oracle.request("GET", "/v1/pools/" + name)[2]
        seen.append(doc.get("status"))
        return seen[-2:]

    def still(last):
        st = last[-1] or {}
        return len(last) == 2 and last[0] == last[1] and st and st["allocated"] + st["available"] == st["total"]

    got = poll(read, still, timeout=10, interval=0.3)
    assert still(got), got
    return got[-1]


def pool(name: str, **cap: int) -> dict:
    return {"name": name, "template": TEMPLATE, "capacitySpec": cap}


def test_pools_routes_with_good_input(oracle, mock):
    """create (no status yet), duplicate 409, get, list, resize (the old status), delete 204, then 404s."""
    cap = {"bufferMin": 1, "bufferMax": 2, "poolMin": 0, "poolMax": 3}
    both(oracle, mock, "POST", "/v1/pools", pool("pr-good", **cap))
    oracle.pods("pr-good", "ready", sticky=True)
    both(oracle, mock, "POST", "/v1/pools", pool("pr-good", **cap))
    settled(oracle, "pr-good")
    both(oracle, mock, "GET", "/v1/pools/pr-good")
    both(oracle, mock, "GET", "/v1/pools")
    bigger = {"bufferMin": 2, "bufferMax": 4, "poolMin": 0, "poolMax": 5}
    both(oracle, mock, "PUT", "/v1/pools/pr-good", {"capacitySpec": bigger})
    assert settled(oracle, "pr-good")["total"] == 2  # the 25 % ramp: one pod, then the buffer is within bounds
    both(oracle, mock, "GET", "/v1/pools/pr-good")
    smaller = {"bufferMin": 0, "bufferMax": 0, "poolMin": 1, "poolMax": 1}
    both(oracle, mock, "PUT", "/v1/pools/pr-good", {"capacitySpec": smaller})
    settled(oracle, "pr-good")
    both(oracle, mock, "GET", "/v1/pools/pr-good")
    both(oracle, mock, "DELETE", "/v1/pools/pr-good")
    for method in ("GET", "DELETE"):
        both(oracle, mock, method, "/v1/pools/pr-good")
    both(oracle, mock, "GET", "/v1/pools")


BAD_CREATES = [
    {},
    {"name": "pr-bad"},
    {"name": "pr-bad", "template": TEMPLATE},
    {"name": 7, "template": [], "capacitySpec": "big"},
    {
        "name": "Bad_Name",
        "template": TEMPLATE,
        "capacitySpec": {"bufferMin": 1, "bufferMax": 1, "poolMin": 0, "poolMax": 1},
    },
    {
        "name": "-dash",
        "template": TEMPLATE,
        "capacitySpec": {"bufferMin": 1, "bufferMax": 1, "poolMin": 0, "poolMax": 1},
    },
    {
        "name": "a" * 254,
        "template": TEMPLATE,
        "capacitySpec": {"bufferMin": 1, "bufferMax": 1, "poolMin": 0, "poolMax": 1},
    },
    {"name": "pr-bad", "template": "x", "capacitySpec": {"bufferMin": -1, "bufferMax": "a", "poolMin": 0}},
    {"name": "pr-bad", "template": TEMPLATE, "capacitySpec": {"bufferMin": 1.5, "bufferMax": True, "poolMin": None}},
    {
        "name": "pr-bad",
        "template": TEMPLATE,
        "capacitySpec": {"bufferMin": 0, "bufferMax": 0, "poolMin": 0, "poolMax": -3},
    },
    [],
]
BAD_UPDATES = [
    {},
    {"capacitySpec": {}},
    {"capacitySpec": {"bufferMin": -1, "bufferMax": 0, "poolMin": 0, "poolMax": "x"}},
]


def test_pools_bad_bodies_and_missing_pools(oracle, mock):
    """422 bodies of FastAPI/pydantic for bad creates and updates (the body before the pool), 404 for a missing
    pool on get, update and delete; buffer above poolMax is no error: the pool stops at poolMax."""
    for body in BAD_CREATES:
        both(oracle, mock, "POST", "/v1/pools", body)
    for body in BAD_UPDATES:
        both(oracle, mock, "PUT", "/v1/pools/pr-missing", body)
    good = {"capacitySpec": {"bufferMin": 1, "bufferMax": 1, "poolMin": 0, "poolMax": 1}}
    for method, body in (("GET", None), ("PUT", good), ("DELETE", None)):
        both(oracle, mock, method, "/v1/pools/pr-missing", body)
    both(oracle, mock, "POST", "/v1/pools", pool("pr-over", bufferMin=5, bufferMax=9, poolMin=0, poolMax=2))
    oracle.pods("pr-over", "ready", sticky=True)
    assert settled(oracle, "pr-over")["total"] == 2
    both(oracle, mock, "GET", "/v1/pools/pr-over")
    both(oracle, mock, "POST", "/v1/pools", pool("pr-min", bufferMin=0, bufferMax=0, poolMin=3, poolMax=4))
    oracle.pods("pr-min", "ready", sticky=True)
    settled(oracle, "pr-min")
    both(oracle, mock, "GET", "/v1/pools")
    for name in ("pr-over", "pr-min"):
        both(oracle, mock, "DELETE", "/v1/pools/" + name)


def test_pool_ref_create_counts_against_the_pool(oracle, mock):
    """A poolRef create: 202 Running/RUNNING from an idle pod, the pool counts it allocated and refills its
    buffer; a second create takes the refill; deleting the sandboxes gives their pods back and deletes them (the
    Delete recycle: total falls back to 1, which a buffer of up to 3 would not do by itself)."""
    both(oracle, mock, "POST", "/v1/pools", pool("pr-ref", bufferMin=1, bufferMax=3, poolMin=0, poolMax=3))
    oracle.pods("pr-ref", "ready", sticky=True)
    settled(oracle, "pr-ref")
    both(oracle, mock, "GET", "/v1/pools/pr-ref")
    ids = []
    for body in (dict(CREATE, extensions={"poolRef": "pr-ref"}), {"extensions": {"poolRef": "pr-ref"}, "timeout": 600}):
        odoc, mdoc = both(oracle, mock, "POST", "/v1/sandboxes", body, pool_create=True)
        ids.append((odoc["id"], mdoc["id"]))
        settled(oracle, "pr-ref")
        both(oracle, mock, "GET", "/v1/pools/pr-ref")
    assert mock.sandbox_state(ids[0][1]) is not None  # the mock's usual sandbox underneath
    for oid, mid in ids:
        assert oracle.request("DELETE", "/v1/sandboxes/" + oid)[0] == 204
        assert mock_call(mock, "DELETE", "/v1/sandboxes/" + mid)[0] == 204
    poll(lambda: settled(oracle, "pr-ref"), lambda st: st["allocated"] == 0, timeout=10)
    both(oracle, mock, "GET", "/v1/pools/pr-ref")
    both(oracle, mock, "DELETE", "/v1/pools/pr-ref")


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"networkPolicy": {"defaultAction": "deny", "egress": [{"action": "allow", "target": "pypi.org"}]}},
        {"lifecycle": {"preStop": {"exec": {"command": ["true"]}}}},
        {"metadata": {"opensandbox.io/x": "y"}},
    ],
    ids=["missing", "network-policy", "lifecycle", "reserved-metadata"],
)
def test_pool_ref_create_refused(oracle, mock, extra):
    """A poolRef naming no Pool: the server's 404 before any workload; the pool-mode refusals before it."""
    body = dict(CREATE, extensions={"poolRef": "no-such-pool"}, **extra)
    both(oracle, mock, "POST", "/v1/sandboxes", body)


def test_docker_runtime_pools_unchanged():
    """The default (Docker) mock still answers /v1/pools as the Docker oracle does: the body first, then 501."""
    try:
        docker = oracle_support.Oracle()
    except Unavailable as e:
        pytest.skip("server oracle unavailable: %s" % e)
    try:
        with MockOpenSandbox(egress_mode="off") as m:
            cap = {"bufferMin": 1, "bufferMax": 2, "poolMin": 0, "poolMax": 3}
            cases = [
                ("POST", "/v1/pools", pool("pd", **cap)),
                ("POST", "/v1/pools", {"name": "pd"}),
                ("GET", "/v1/pools", None),
                ("GET", "/v1/pools/pd", None),
                ("PUT", "/v1/pools/pd", {"capacitySpec": cap}),
                ("PUT", "/v1/pools/pd", {}),
                ("DELETE", "/v1/pools/pd", None),
                ("POST", "/v1/sandboxes", dict(CREATE, extensions={"poolRef": "pd"})),
            ]
            for method, path, body in cases:
                raw = json.dumps(body).encode() if body is not None else None
                ost, _, ob = docker.request(method, path, JSON, raw)
                mst, _, mb = oracle_support.mock_request(m, method, path, JSON, raw)
                assert (mst, json.loads(mb)) == (ost, json.loads(ob)), (method, path, body)
    finally:
        docker.close()
