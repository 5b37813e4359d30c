"""The mock with ``runtime="kubernetes"`` against the Kubernetes oracle (tiers/t2/clients/server_oracle_k8s_app.py:
the real server 1.1.1 app over a stand-in API server and controller): the sandbox lifecycle (create, get, list with
its filters, metadata, renew, pause/resume, delete, diagnostics, the missing sandbox, bad creates) and the
``KUBERNETES::*`` errors a create ends in, the same requests to both, compared on status and body (ids, timestamps
and elapsed seconds normalised only; in the pod's diagnostics text also what only a cluster knows: node, IPs, logs).

The oracle's pods move when the test says so (``pods``, or before the create: ``pending_create(..., to=...)``);
the mock's sandbox is Ready once it started, unless a fault rule of kind ``pod`` (docs/FAULTS.md) says what its pod
does: ``ready`` later, ``failed`` or ``unschedulable``.
Both wait 5 s for a pod that is never Ready (the oracle's ``sandbox_create_timeout_seconds``).
"""

from __future__ import annotations

import json
import re
import threading
import time
from concurrent.futures import Future
from typing import Any

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.t2.k8s.test_server_oracle_k8s import CREATE, TEMPLATE, K8sOracle, pending_create
from tiers.t2.k8s.test_server_oracle_k8s_pools import mock_call, settled
from tiers.t2.server.oracle_support import urllib_exchange
from tiers.toolkit.waits import poll

pytestmark = pytest.mark.spec_exempt("server 1.1.1 Kubernetes-runtime sandboxes the June OpenAPI spec does not show")

TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
ELAPSED = re.compile(r"Elapsed: \d+\.\ds")
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


@pytest.fixture(scope="module")
def mock():
    """Overrides the toolkit's ``mock`` (tiers/toolkit/fixtures.py): a mock on the Kubernetes runtime with the
    oracle's 5 s create timeout, one per module like the oracle."""
    with MockOpenSandbox(
        runtime="kubernetes", egress_mode="off", timing="fast", sandbox_create_timeout=5, pool_acquisition_timeout=2
    ) as m:
        yield m


def _norm(doc: Any) -> Any:
    """Ids (sandbox ids, pod names), timestamps and elapsed seconds only."""
    if isinstance(doc, dict):
        return {k: _norm(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [_norm(v) for v in doc]
    if isinstance(doc, str):
        return ELAPSED.sub("Elapsed: <s>", TS.sub("<ts>", UUID.sub("<id>", doc)))
    return doc


def same(label: str, got: tuple[int, Any], want: tuple[int, Any]) -> None:
    g, w = (got[0], _norm(got[1])), (want[0], _norm(want[1]))
    assert g == w, "%s\n oracle: %r\n mock:   %r" % (label, w, g)


def both(oracle: K8sOracle, mock: MockOpenSandbox, method: str, opath: str, mpath: str, body: Any = None) -> Any:
    """The same request (on each side's own sandbox) to both; equal after normalisation. The oracle's body."""
    ost, _, odoc = oracle.request(method, opath, body)
    got = mock_call(mock, method, mpath, body)
    same("%s %s %s" % (method, opath, json.dumps(body)[:200]), got, (ost, odoc))
    return odoc


def mock_start(mock: MockOpenSandbox, body: dict) -> Future:
    out: Future = Future()

    def run() -> None:
        try:
            out.set_result(mock_call(mock, "POST", "/v1/sandboxes", body))
        except BaseException as e:  # pragma: no cover - surfaced by result()
            out.set_exception(e)

    threading.Thread(target=run, name="k8s-mock-create", daemon=True).start()
    return out


def mock_pending(mock: MockOpenSandbox, body: dict, case: str, **pod: Any) -> tuple[Future, str]:
    """A mock create whose pod does ``pod`` (a fault rule of kind pod), and its sandbox id from the list (from its
    answer when it failed before the list showed it, as ``pending_create``)."""
    mock.faults.add(kind="pod", count=1, **pod)
    fut = mock_start(mock, dict(body, metadata={"case": case}))

    def mine():
        st, doc = mock_call(mock, "GET", "/v1/sandboxes?metadata=case%3D" + case)
        assert st == 200, doc
        return [s["id"] for s in doc["items"]]

    found = poll(mine, lambda ids: ids or fut.done(), timeout=5)
    if not found and fut.done():  # {"code": "KUBERNETES::POD_FAILED", "message": "Sandbox <id> failed: ..."}
        found = sorted(set(UUID.findall(json.dumps(fut.result()[1]))))
    assert len(found) == 1, (found, fut.done() and fut.result())
    return fut, found[0]


def ready_pair(oracle: K8sOracle, mock: MockOpenSandbox, body: dict, case: str) -> tuple[str, str, Any]:
    """One Running sandbox on each side (the oracle's pod Ready, said before the create); their ids and the
    oracle's 202 body."""
    fut, oid = pending_create(oracle, body, case, to="ready")
    ost, _, odoc = fut.result(timeout=10)
    got = mock_call(mock, "POST", "/v1/sandboxes", dict(body, metadata={"case": case}))
    same("create " + case, got, (ost, odoc))
    return oid, got[1]["id"], odoc


def test_create_is_pending_until_the_pod_is_ready(oracle, mock):
    """Pending/CREATING (GET, list, state filter) while the pod is not Ready, pause and resume refused meanwhile;
    then 202 Running/RUNNING with the request's entrypoint, and GET with the bootstrap before it."""
    ofut, oid = pending_create(oracle, CREATE, "sb-pending")
    mfut, mid = mock_pending(mock, CREATE, "sb-pending", pod="ready", after=3)
    sb = "/v1/sandboxes/"
    both(oracle, mock, "GET", sb + oid, sb + mid)
    for query in ("?metadata=case%3Dsb-pending", "?state=Pending&metadata=case%3Dsb-pending", "?state=Running"):
        both(oracle, mock, "GET", "/v1/sandboxes" + query, "/v1/sandboxes" + query)
    oracle.pods(oid, "scheduled")  # a node and an IP, still not Ready: still Pending
    poll(lambda: oracle.get("batchsandboxes", oid), lambda b: b and b[0].get("status", {}).get("allocated"))
    both(oracle, mock, "GET", sb + oid, sb + mid)
    for op in ("pause", "resume"):
        both(oracle, mock, "POST", sb + oid + "/" + op, sb + mid + "/" + op)
    assert not ofut.done() and not mfut.done()
    oracle.pods(oid, "ready")
    ost, _, odoc = ofut.result(timeout=10)
    same("create", mfut.result(timeout=10), (ost, odoc))
    both(oracle, mock, "GET", sb + oid, sb + mid)
    for sid, call in ((oid, oracle.request), (mid, lambda m, p: mock_call(mock, m, p))):
        assert call("DELETE", sb + sid)[0] == 204


def test_sandbox_routes_on_a_running_sandbox(oracle, mock):
    """GET, list (state, metadata, pages, bad pages), metadata patch (set, remove, reserved, bad label), renew (a
    later time, a past one, a sandbox without expiry), resume of a Running one, pause, delete, then 404s."""
    oid, mid, _ = ready_pair(oracle, mock, CREATE, "sb-routes")
    sb = "/v1/sandboxes/"
    both(oracle, mock, "GET", sb + oid, sb + mid)
    for query in (
        "?state=Running&metadata=case%3Dsb-routes&page=1&pageSize=1",
        "?state=running&state=Paused&metadata=case%3Dsb-routes",
        "?metadata=case%3Dsb-routes&page=2&pageSize=1",
        "?metadata=case%3Dnobody",
        "?page=0",
        "?pageSize=500",
        "?metadata=%3D%3D",
    ):
        both(oracle, mock, "GET", "/v1/sandboxes" + query, "/v1/sandboxes" + query)
    for patch in ({"team": "a", "case": "sb-routes"}, {"team": None}, {"opensandbox.io/x": "y"}, {"bad key!": "v"}):
        both(oracle, mock, "PATCH", sb + oid + "/metadata", sb + mid + "/metadata", patch)
    both(oracle, mock, "GET", sb + oid, sb + mid)
    for when in ("2099-01-01T00:00:00Z", "2000-01-01T00:00:00Z", "not a time"):
        both(oracle, mock, "POST", sb + oid + "/renew-expiration", sb + mid + "/renew-expiration", {"expiresAt": when})
    both(oracle, mock, "GET", sb + oid, sb + mid)
    both(oracle, mock, "POST", sb + oid + "/resume", sb + mid + "/resume")
    both(oracle, mock, "POST", sb + oid + "/pause", sb + mid + "/pause")  # 202 (the stand-in does not pause)
    assert mock_call(mock, "POST", sb + mid + "/resume")[0] == 202
    both(oracle, mock, "DELETE", sb + oid, sb + mid)
    both(oracle, mock, "GET", sb + oid, sb + mid)
    both(oracle, mock, "DELETE", sb + oid, sb + mid)
    no_timeout = {k: v for k, v in CREATE.items() if k != "timeout"}
    oid, mid, _ = ready_pair(oracle, mock, no_timeout, "sb-no-expiry")
    both(oracle, mock, "GET", sb + oid, sb + mid)
    later = {"expiresAt": "2099-01-01T00:00:00Z"}
    both(oracle, mock, "POST", sb + oid + "/renew-expiration", sb + mid + "/renew-expiration", later)
    both(oracle, mock, "DELETE", sb + oid, sb + mid)


MISSING = [
    ("GET", "", None),
    ("DELETE", "", None),
    ("POST", "/pause", None),
    ("POST", "/resume", None),
    ("POST", "/renew-expiration", {"expiresAt": "2099-01-01T00:00:00Z"}),
    ("POST", "/renew-expiration", {"expiresAt": "2000-01-01T00:00:00Z"}),
    ("PATCH", "/metadata", {"a": "b"}),
    ("GET", "/diagnostics/logs", None),
    ("GET", "/diagnostics/events", None),
    ("GET", "/diagnostics/inspect", None),
    ("GET", "/diagnostics/summary", None),
]


def test_missing_sandbox(oracle, mock):
    """Every sandbox route on an id nobody has: 404 KUBERNETES::SANDBOX_NOT_FOUND "Sandbox '<id>' not found" (a
    renew to a past time: its 400 first)."""
    for method, tail, body in MISSING:
        path = "/v1/sandboxes/no-such-sandbox" + tail
        both(oracle, mock, method, path, path, body)


@pytest.mark.parametrize("reason", ["ImagePullBackOff", "CrashLoopBackOff"])
def test_failed_pod_fails_the_create(oracle, mock, reason):
    """A container waiting on ``reason``: 500 KUBERNETES::POD_FAILED with the controller's message; the workload is
    deleted (GET 404)."""
    ofut, oid = pending_create(oracle, CREATE, "sb-failed-" + reason.lower(), to="failed", reason=reason)
    mfut, mid = mock_pending(mock, CREATE, "sb-failed-" + reason.lower(), pod="failed", reason=reason, after=0.5)
    ost, _, odoc = ofut.result(timeout=10)
    same("create", mfut.result(timeout=10), (ost, odoc))
    assert poll(lambda: oracle.get("batchsandboxes", oid), lambda b: not b) == []
    both(oracle, mock, "GET", "/v1/sandboxes/" + oid, "/v1/sandboxes/" + mid)


def test_pod_never_ready_times_out(oracle, mock):
    """A pod that is never Ready (unschedulable): Pending for the create timeout, then 504
    KUBERNETES::POD_READY_TIMEOUT "... Elapsed: <s>, Last state: Pending"; the workload is deleted."""
    ofut, oid = pending_create(oracle, CREATE, "sb-timeout", to="unschedulable")
    mfut, mid = mock_pending(mock, CREATE, "sb-timeout", pod="unschedulable")
    both(oracle, mock, "GET", "/v1/sandboxes/" + oid, "/v1/sandboxes/" + mid)
    t0 = time.monotonic()
    ost, _, odoc = ofut.result(timeout=15)
    same("create", mfut.result(timeout=15), (ost, odoc))
    assert time.monotonic() - t0 < 10
    assert poll(lambda: oracle.get("batchsandboxes", oid), lambda b: not b) == []
    both(oracle, mock, "GET", "/v1/sandboxes/" + oid, "/v1/sandboxes/" + mid)


def test_quota_exceeded_is_403_and_leaves_nothing(oracle, mock):
    """A namespace ResourceQuota that admits no more BatchSandboxes: the create's workload is refused by the API
    server (403 "exceeded quota"), the server answers 403 KUBERNETES::QUOTA_EXCEEDED "Namespace ResourceQuota
    exceeded: <the API server's message>" at once, and nothing is left. The mock: a fault rule of kind pod,
    ``quota``, with the mock's own count of workloads as used and limited."""
    oid, mid, _ = ready_pair(oracle, mock, CREATE, "sb-quota-first")
    used = len(oracle.get("batchsandboxes"))
    assert used == len(mock_call(mock, "GET", "/v1/sandboxes")[1]["items"])
    oracle.quota("batchsandboxes", used)
    try:
        bad = dict(CREATE, metadata={"opensandbox.io/x": "1"})  # the request's own check comes first
        mock.faults.add(kind="pod", pod="quota", count=1)
        both(oracle, mock, "POST", "/v1/sandboxes", "/v1/sandboxes", bad)
        mock.faults.add(kind="pod", pod="quota", count=1)
        ost, _, odoc = oracle.request("POST", "/v1/sandboxes", dict(CREATE, metadata={"case": "sb-quota"}))
        got = mock_call(mock, "POST", "/v1/sandboxes", dict(CREATE, metadata={"case": "sb-quota"}))
        same("create over the quota", got, (ost, odoc))
        assert ost == 403 and odoc["code"] == "KUBERNETES::QUOTA_EXCEEDED", odoc
        assert "exceeded quota: sandbox-quota" in odoc["message"], odoc
        both(oracle, mock, "GET", "/v1/sandboxes?metadata=case%3Dsb-quota", "/v1/sandboxes?metadata=case%3Dsb-quota")
    finally:
        oracle.quota("batchsandboxes", None)
    both(oracle, mock, "DELETE", "/v1/sandboxes/" + oid, "/v1/sandboxes/" + mid)


def test_pool_capacity_exhausted_is_429_after_the_acquisition_timeout(oracle, mock):
    """A controller that reports exhausted Pool capacity (the PoolAllocationPending condition; none at 3bb6fad
    does): Pending / POOL_CAPACITY_EXHAUSTED "Pool capacity is currently unavailable", then, after
    ``pool_acquisition_timeout_seconds`` (2 s, under the 5 s create timeout), 429 KUBERNETES::POOL_CAPACITY_EXHAUSTED
    with ``Retry-After`` its whole seconds; the workload is deleted. The mock: a fault rule of kind pod, ``capacity``."""
    ofut, oid = pending_create(oracle, CREATE, "sb-capacity")
    mock.faults.add(kind="pod", pod="capacity", count=1)
    mfut: Future = Future()
    raw = json.dumps(dict(CREATE, metadata={"case": "sb-capacity"})).encode()
    headers = {"Content-Type": "application/json", "OPEN-SANDBOX-API-KEY": mock.api_key}
    threading.Thread(
        target=lambda: mfut.set_result(urllib_exchange(mock.base_url + "/v1/sandboxes", "POST", headers, raw, 30)),
        daemon=True,
    ).start()
    found = poll(lambda: mock_call(mock, "GET", "/v1/sandboxes?metadata=case%3Dsb-capacity")[1]["items"], bool)
    mid = found[0]["id"]
    oracle.condition(oid, "PoolAllocationPending")
    odoc = poll(lambda: oracle.request("GET", "/v1/sandboxes/" + oid)[2], lambda d: d["status"]["reason"] != "CREATING")
    assert odoc["status"]["reason"] == "POOL_CAPACITY_EXHAUSTED", odoc
    poll(lambda: mock_call(mock, "GET", "/v1/sandboxes/" + mid)[1], lambda d: d["status"]["reason"] != "CREATING")
    both(oracle, mock, "GET", "/v1/sandboxes/" + oid, "/v1/sandboxes/" + mid)
    ost, oh, obody = ofut.result(timeout=15)
    mst, mh, mraw = mfut.result(timeout=15)
    same("create", (mst, json.loads(mraw)), (ost, obody))
    retry = [{k.lower(): v for k, v in h.items()}.get("retry-after") for h in (oh, mh)]
    assert ost == 429 and retry == ["2", "2"], (ost, retry)
    assert poll(lambda: oracle.get("batchsandboxes", oid), lambda b: not b) == []
    both(oracle, mock, "GET", "/v1/sandboxes/" + oid, "/v1/sandboxes/" + mid)


def test_pool_sandbox_as_get_and_list_show_it(oracle, mock):
    """A poolRef sandbox: GET and list show image ``unknown`` and entrypoint ``[]`` (no pod template), Running;
    its metadata patch and delete as any other's."""
    cap = {"bufferMin": 1, "bufferMax": 1, "poolMin": 0, "poolMax": 2}
    pool = {"name": "sb-pool", "template": TEMPLATE, "capacitySpec": cap}
    both(oracle, mock, "POST", "/v1/pools", "/v1/pools", pool)
    oracle.pods("sb-pool", "ready", sticky=True)
    settled(oracle, "sb-pool")
    body = dict(CREATE, extensions={"poolRef": "sb-pool"}, metadata={"case": "sb-pool"})
    ost, _, odoc = oracle.request("POST", "/v1/sandboxes", body)
    mst, mdoc = mock_call(mock, "POST", "/v1/sandboxes", body)
    if odoc.get("status", {}).get("reason") == "IP_ASSIGNED":  # the controller's race (QUIRKS.md): either answer
        odoc["status"].update(reason="RUNNING", message="Sandbox is running")
    same("pool create", (mst, mdoc), (ost, odoc))
    oid, mid, sb = odoc["id"], mdoc["id"], "/v1/sandboxes/"
    both(oracle, mock, "GET", sb + oid, sb + mid)
    both(oracle, mock, "GET", "/v1/sandboxes?metadata=case%3Dsb-pool", "/v1/sandboxes?metadata=case%3Dsb-pool")
    both(oracle, mock, "PATCH", sb + oid + "/metadata", sb + mid + "/metadata", {"team": "b"})
    both(oracle, mock, "DELETE", sb + oid, sb + mid)
    both(oracle, mock, "DELETE", "/v1/pools/sb-pool", "/v1/pools/sb-pool")


BAD_CREATES = [
    {},
    dict(CREATE, entrypoint=[]),
    {k: v for k, v in CREATE.items() if k != "entrypoint"},
    dict(CREATE, timeout=10),
    dict(CREATE, metadata={"opensandbox.io/x": "y"}),
    dict(CREATE, metadata={"bad key!": "y"}),
    dict(CREATE, networkPolicy={"defaultAction": "deny", "egress": [{"action": "allow", "target": "pypi.org"}]}),
    dict(CREATE, volumes=[{"name": "v", "host": {"path": "/tmp"}, "mountPath": "/mnt"}]),
    dict(CREATE, image={"uri": ""}),
    dict(CREATE, credentialProxy={"enabled": True}),
]


def test_bad_creates(oracle, mock):
    """Template-mode creates refused before any workload: the model's 422s (no image, an empty or missing
    entrypoint, a short timeout, an empty image, credentialProxy without networkPolicy), then the service's 400s
    (reserved or bad metadata, networkPolicy without an egress image, a host path not allowed)."""
    for body in BAD_CREATES:
        both(oracle, mock, "POST", "/v1/sandboxes", "/v1/sandboxes", body)


POD_FACTS = re.compile(r"^(Node|Pod IP|Host IP):( +)(?!N/A$|None$).*$", re.M)
POD_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\+00:00")


def _pod_text(doc: Any) -> Any:
    """What only the cluster knows (node, pod and host IP, start time) normalised; the log section dropped (the
    stand-in has no kubelet, so no logs: the mock's are its sandbox's own)."""
    if not isinstance(doc, str):
        return doc
    doc = POD_TIME.sub("<time>", POD_FACTS.sub(r"\1:\2<cluster>", doc))
    return doc.split("LOGS (last", 1)[0]


def _no_content(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k not in ("content", "contentLength", "truncated")}


def test_diagnostics_of_the_pod(oracle, mock):
    """inspect (Pending, then Ready), events (no events), logs' unknown container 404 and bad scope 400, the
    inline shapes, summary (without its log tail): the pod as k8s_diagnostics.py describes it."""
    body = dict(CREATE, resourceLimits={"cpu": "1", "memory": "256Mi"})
    ofut, oid = pending_create(oracle, body, "sb-diag")
    mfut, mid = mock_pending(mock, body, "sb-diag", pod="ready", after=2)
    d = "/v1/sandboxes/%s/diagnostics/"

    def cmp(tail: str, text: bool = False) -> None:
        ost, _, odoc = oracle.request("GET", d % oid + tail)
        mst, mdoc = mock_call(mock, "GET", d % mid + tail)
        same(tail, (mst, _pod_text(mdoc)), (ost, _pod_text(odoc)))

    cmp("inspect")
    oracle.pods(oid, "ready")
    assert ofut.result(timeout=10)[0] == 202 and mfut.result(timeout=10)[0] == 202
    for tail in ("inspect", "events", "events?scope=runtime", "events?scope=all", "summary?tail=5"):
        cmp(tail)
    for tail in ("logs?container=nope", "logs?scope=bad", "logs?tail=0", "events?scope=Pods"):
        cmp(tail)
    for tail in ("logs?scope=all", "logs?scope=container"):
        (ost, _, odoc), (mst, mdoc) = oracle.request("GET", d % oid + tail), mock_call(mock, "GET", d % mid + tail)
        same(tail, (mst, _no_content(mdoc)), (ost, _no_content(odoc)))
    for sid, call in ((oid, oracle.request), (mid, lambda m, p: mock_call(mock, m, p))):
        assert call("DELETE", "/v1/sandboxes/" + sid)[0] == 204
