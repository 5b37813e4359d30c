"""The Kubernetes-runtime server oracle (tiers/t2/clients/server_oracle_k8s_app.py): the real opensandbox-server
1.1.1 app with ``runtime.type = "kubernetes"``, the BatchSandbox provider and the ingress gateway in header mode
with secure access, over a stand-in Kubernetes API whose controller reconciles BatchSandbox and Pool resources the
way OpenSandbox's controller does at 3bb6fad. These tests show, through the server's own HTTP API, what it answers
on that runtime: the pools API, creates (plain and ``extensions.poolRef``) that stay ``Pending`` until the pod is
Ready, gateway endpoints with their headers, and the ``KUBERNETES::*`` errors of a missing pool, a failed pod and a
pod that never becomes Ready.

The test plays the cluster's scheduler and kubelet (``pods``): pods move only when it says so. A create the test
wants to end gets its pod's outcome before it is sent (``pending_create(..., to=...)``), so the server's 5 s create
timeout runs against the controller, not against the test finding the sandbox in the list.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import struct
import subprocess
import threading
import time
from concurrent.futures import Future
from typing import Any

import pytest

from tiers.t2.clients import REPO, Unavailable, python_env, python_too_old
from tiers.toolkit.procs import close_and_wait
from tiers.toolkit.waits import poll

if python_too_old("requirements-server-oracle.txt"):  # one skip line for the module, not one per test
    pytest.skip("server oracle: " + python_too_old("requirements-server-oracle.txt"), allow_module_level=True)

pytestmark = pytest.mark.spec_exempt("server 1.1.1 Kubernetes-runtime behaviours the June OpenAPI spec does not show")

APP = REPO + "/tiers/t2/clients/server_oracle_k8s_app.py"
JSON = {"Content-Type": "application/json"}
TEMPLATE = {
    "metadata": {"labels": {"app": "oracle"}},
    "spec": {"containers": [{"name": "sandbox", "image": "local/python:3-slim"}]},
}
SANDBOX_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
CREATE = {
    "image": {"uri": "local/python:3-slim"},
    "entrypoint": ["tail", "-f", "/dev/null"],
    "resourceLimits": {"cpu": "500m", "memory": "512Mi"},
    "timeout": 600,
}


class K8sOracle:
    """The oracle process; answers are matched to requests by ``seq``, so a create can wait while others run."""

    def __init__(self, route: str = "header") -> None:
        py = python_env("server", "requirements-server-oracle.txt")
        self.proc = subprocess.Popen(
            [py, APP, "--route", route],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=REPO,
        )
        self.hello = json.loads(self.proc.stdout.readline() or "{}")
        if not self.hello.get("ready"):
            self.close()
            raise Unavailable("the Kubernetes server oracle did not start")
        self.lock = threading.Lock()
        self.seq = 0
        self.pending: dict[int, Future] = {}
        threading.Thread(target=self._read, name="k8s-oracle-reader", daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            doc = json.loads(line)
            with self.lock:
                fut = self.pending.pop(doc.pop("seq", None), None)
            if fut is not None:
                fut.set_result(doc)

    def submit(self, msg: dict) -> Future:
        fut: Future = Future()
        with self.lock:
            self.seq += 1
            self.pending[self.seq] = fut
            self.proc.stdin.write(json.dumps(dict(msg, seq=self.seq)) + "\n")
            self.proc.stdin.flush()
        return fut

    def start(self, method: str, path: str, body: Any = None) -> Future:
        """A request to the server; its Future gives (status, headers, JSON body or text)."""
        headers = dict(JSON, **{"OPEN-SANDBOX-API-KEY": self.hello["api_key"]})
        raw = json.dumps(body) if body is not None else None
        inner = self.submit({"op": "request", "method": method, "path": path, "headers": headers, "body": raw})
        out: Future = Future()

        def done(f: Future) -> None:
            r = f.result()
            text = r["body"].encode("latin-1").decode("utf-8")
            ctype = {k.lower(): v for k, v in r["headers"].items()}.get("content-type", "")
            out.set_result((r["status"], r["headers"], json.loads(text) if "json" in ctype and text else text))

        inner.add_done_callback(done)
        return out

    def request(self, method: str, path: str, body: Any = None) -> tuple[int, dict, Any]:
        return self.start(method, path, body).result(timeout=30)

    def pods(self, owner: str, to: str, reason: str = "", sticky: bool = False) -> list[str]:
        msg = {"op": "pods", "owner": owner, "to": to, "reason": reason, "sticky": sticky}
        return self.submit(msg).result(timeout=10)["pods"]

    def pods_of_case(self, case: str, to: str, reason: str = "") -> list[str]:
        """The pods of the sandbox created with metadata ``case`` go ``to``, those of a create still to come too."""
        return self.submit({"op": "pods", "case": case, "to": to, "reason": reason}).result(timeout=10)["pods"]

    def condition(self, owner: str, typ: str, status: str = "True", message: str = "") -> list[dict]:
        msg = {"op": "condition", "owner": owner, "type": typ, "status": status, "message": message}
        return self.submit(msg).result(timeout=10)["conditions"]

    def quota(self, plural: str, hard: int | None, name: str = "sandbox-quota") -> dict:
        """A ResourceQuota on the count of ``plural`` (None: none): creates over it get kube-apiserver's 403."""
        return self.submit({"op": "quota", "plural": plural, "hard": hard, "name": name}).result(timeout=10)["quotas"]

    def get(self, plural: str, name: str | None = None) -> list[dict]:
        return self.submit({"op": "get", "plural": plural, "name": name}).result(timeout=10)["items"]

    def close(self) -> None:
        close_and_wait(self.proc, 10)


def pending_create(oracle: K8sOracle, body: dict, case: str, to: str = "", reason: str = "") -> tuple[Future, str]:
    """Start a create (it answers only once the pod is Ready or it fails) and find its sandbox id in the list.
    ``to``: what its pod does (``pods``), said before the create; none: the pod waits for the test's ``pods``. A
    create that failed before the list showed it (its workload deleted) gives the id its answer names."""
    if to:
        oracle.pods_of_case(case, to, reason)
    fut = oracle.start("POST", "/v1/sandboxes", dict(body, metadata={"case": case}))

    def mine():
        st, _, doc = oracle.request("GET", "/v1/sandboxes")
        assert st == 200, doc
        return [s["id"] for s in doc["items"] if (s.get("metadata") or {}).get("case") == case]

    found = poll(mine, lambda ids: ids or fut.done(), timeout=5)
    if not found and fut.done():  # {"code": "KUBERNETES::POD_FAILED", "message": "Sandbox <id> failed: ..."}
        found = sorted(set(SANDBOX_ID.findall(json.dumps(fut.result()[2]))))
    assert len(found) == 1, (found, fut.done() and fut.result())
    return fut, found[0]


def pool_status(oracle: K8sOracle, name: str, **want) -> dict:
    def get():
        return oracle.request("GET", "/v1/pools/" + name)[2].get("status") or {}

    got = poll(get, lambda s: all(s.get(k) == v for k, v in want.items()), timeout=5)
    assert all(got.get(k) == v for k, v in want.items()), (want, got)
    return got


def pool_pods(oracle: K8sOracle, pool: str) -> list[str]:
    pods = oracle.get("pods")
    return [
        p["metadata"]["name"] for p in pods if p["metadata"]["labels"].get("sandbox.opensandbox.io/pool-name") == pool
    ]


def test_pools_api_create_list_get_resize_delete(oracle):
    """/v1/pools on the Kubernetes runtime: 201, 409, list, status from the controller, PUT resize, 204, 404."""
    cap = {"bufferMin": 1, "bufferMax": 2, "poolMin": 0, "poolMax": 3}
    st, _, doc = oracle.request("POST", "/v1/pools", {"name": "pool-api", "template": TEMPLATE, "capacitySpec": cap})
    assert st == 201, doc
    assert doc["name"] == "pool-api" and doc["capacitySpec"] == cap and "status" not in doc
    st, _, doc = oracle.request("POST", "/v1/pools", {"name": "pool-api", "template": TEMPLATE, "capacitySpec": cap})
    assert (st, doc["code"]) == (409, "KUBERNETES::POOL_ALREADY_EXISTS"), doc
    pool_status(oracle, "pool-api", total=1, allocated=0, available=0)  # created, not Ready: no kubelet yet
    oracle.pods("pool-api", "ready", sticky=True)
    got = pool_status(oracle, "pool-api", total=1, allocated=0, available=1)
    assert len(got["revision"]) == 16
    st, _, doc = oracle.request("GET", "/v1/pools")
    assert st == 200 and [p["name"] for p in doc["items"]] == ["pool-api"], doc
    bigger = {"bufferMin": 2, "bufferMax": 4, "poolMin": 0, "poolMax": 5}
    st, _, doc = oracle.request("PUT", "/v1/pools/pool-api", {"capacitySpec": bigger})
    assert st == 200 and doc["capacitySpec"] == bigger, doc
    # buffer 1 < bufferMin: aim at (2 + 4) / 2 = 3, but the 25 % maxUnavailable ramp adds one pod; at 2 the
    # buffer is within [bufferMin, bufferMax] and scalePool keeps it (pool_controller.go at 3bb6fad)
    pool_status(oracle, "pool-api", total=2, allocated=0, available=2)
    assert len(pool_pods(oracle, "pool-api")) == 2
    st, _, doc = oracle.request("DELETE", "/v1/pools/pool-api")
    assert (st, doc) == (204, ""), doc
    for method in ("GET", "DELETE"):
        st, _, doc = oracle.request(method, "/v1/pools/pool-api")
        assert (st, doc["code"]) == (404, "KUBERNETES::POOL_NOT_FOUND"), (method, doc)
    assert poll(lambda: pool_pods(oracle, "pool-api"), lambda pods: not pods, timeout=5) == []  # garbage-collected


def test_create_is_pending_until_the_pod_is_ready(oracle):
    """A template-mode create waits; the sandbox is Pending (even with a pod IP) until the pod is Ready, then 202
    Running; the BatchSandbox carries the controller's status and endpoints annotation."""
    fut, sid = pending_create(oracle, CREATE, "pending")
    st, _, doc = oracle.request("GET", "/v1/sandboxes/" + sid)
    assert st == 200 and doc["status"]["state"] == "Pending", doc
    oracle.pods(sid, "scheduled")
    bs = poll(lambda: oracle.get("batchsandboxes", sid), lambda b: b and b[0].get("status", {}).get("allocated"))[0]
    ip = json.loads(bs["metadata"]["annotations"]["sandbox.opensandbox.io/endpoints"])
    assert bs["status"]["phase"] == "Pending" and bs["status"]["ready"] == 0 and ip[0].startswith("10.244."), bs
    st, _, doc = oracle.request("GET", "/v1/sandboxes/" + sid)
    assert (doc["status"]["state"], doc["status"]["reason"]) == ("Pending", "CREATING"), doc
    assert not fut.done()
    oracle.pods(sid, "ready")
    st, _, doc = fut.result(timeout=10)
    assert st == 202 and doc["id"] == sid and doc["status"]["state"] == "Running", doc
    assert doc["status"]["reason"] == "RUNNING", doc
    st, _, doc = oracle.request("GET", "/v1/sandboxes/" + sid)
    assert st == 200 and doc["status"]["state"] == "Running", doc
    bs = oracle.get("batchsandboxes", sid)[0]
    assert bs["status"]["phase"] == "Succeed" and bs["status"]["ready"] == 1, bs
    assert {c["type"]: c["status"] for c in bs["status"]["conditions"]} == {"Ready": "True"}, bs
    st, _, doc = oracle.request("DELETE", "/v1/sandboxes/" + sid)
    assert st == 204, doc
    st, _, doc = oracle.request("GET", "/v1/sandboxes/" + sid)
    assert (st, doc["code"]) == (404, "KUBERNETES::SANDBOX_NOT_FOUND"), doc


def test_create_with_pool_ref_takes_a_ready_pool_pod(oracle):
    """``extensions.poolRef``: 202 Running at once from a Ready pool pod, the pool counts it allocated and refills
    its buffer; deleting the sandbox releases (deletes) the pod."""
    cap = {"bufferMin": 1, "bufferMax": 1, "poolMin": 0, "poolMax": 2}
    st, _, doc = oracle.request("POST", "/v1/pools", {"name": "pool-ref", "template": TEMPLATE, "capacitySpec": cap})
    assert st == 201, doc
    oracle.pods("pool-ref", "ready", sticky=True)
    pool_status(oracle, "pool-ref", total=1, available=1)
    warm = pool_pods(oracle, "pool-ref")
    body = dict(CREATE, extensions={"poolRef": "pool-ref"})
    st, _, doc = oracle.request("POST", "/v1/sandboxes", body)
    assert st == 202 and doc["status"]["state"] == "Running", doc
    sid = doc["id"]
    bs = oracle.get("batchsandboxes", sid)[0]
    assert bs["spec"]["poolRef"] == "pool-ref" and "template" not in bs["spec"], bs
    assert json.loads(bs["metadata"]["annotations"]["sandbox.opensandbox.io/alloc-status"]) == {"pods": warm}, bs
    pool_status(oracle, "pool-ref", total=2, allocated=1, available=1)
    assert oracle.request("DELETE", "/v1/sandboxes/" + sid)[0] == 204
    pool_status(oracle, "pool-ref", allocated=0, available=1)
    assert warm[0] not in pool_pods(oracle, "pool-ref")  # the Delete recycle
    assert oracle.request("DELETE", "/v1/pools/pool-ref")[0] == 204


def test_create_with_a_missing_pool_is_the_servers_404(oracle):
    """A poolRef naming no Pool: 404 KUBERNETES::POOL_NOT_FOUND before any workload is created."""
    body = dict(CREATE, extensions={"poolRef": "no-such-pool"}, metadata={"case": "missing-pool"})
    st, _, doc = oracle.request("POST", "/v1/sandboxes", body)
    assert (st, doc) == (404, {"code": "KUBERNETES::POOL_NOT_FOUND", "message": "Pool 'no-such-pool' not found."})
    assert [b for b in oracle.get("batchsandboxes") if b["metadata"]["labels"].get("case") == "missing-pool"] == []


def _signature(secret: bytes, key_id: str, sid: str, port: int, expires_b36: str) -> str:
    """The signed route of services/signing.py (OSEP-0011), recomputed here from its documented scheme."""
    canonical = ("v1\nshort\n%s\n%d\n%s\n" % (sid, port, expires_b36)).encode()
    inner = struct.pack(">I", len(secret)) + secret + struct.pack(">I", len(canonical)) + canonical
    return hashlib.sha256(inner).hexdigest()[:8] + key_id


def _b36(n: int) -> str:
    digits = ""
    while n:
        n, r = divmod(n, 36)
        digits = "0123456789abcdefghijklmnopqrstuvwxyz"[r] + digits
    return digits or "0"


def test_gateway_endpoint_headers_and_signed_route(oracle):
    """``[ingress] mode = "gateway"``, header route: the endpoint is the gateway address with the routing header
    and, for a secureAccess sandbox, its access token; ``?expires=`` gives a signed route instead."""
    fut, sid = pending_create(oracle, dict(CREATE, secureAccess=True), "gateway", to="ready")
    assert fut.result(timeout=10)[0] == 202
    token = oracle.get("batchsandboxes", sid)[0]["metadata"]["annotations"]["opensandbox.io/secure-access-token"]
    st, _, doc = oracle.request("GET", "/v1/sandboxes/%s/endpoints/44772" % sid)
    want = {"OpenSandbox-Ingress-To": "%s-44772" % sid, "OpenSandbox-Secure-Access": token}
    assert (st, doc) == (200, {"endpoint": oracle.hello["gateway"], "headers": want}), doc
    expires = int(time.time()) + 600
    st, _, doc = oracle.request("GET", "/v1/sandboxes/%s/endpoints/44772?expires=%d" % (sid, expires))
    secret = base64.b64decode(oracle.hello["secure_access"]["key"])
    route = "%s-44772-%s-%s" % (sid, _b36(expires), _signature(secret, "a", sid, 44772, _b36(expires)))
    assert (st, doc) == (200, {"endpoint": oracle.hello["gateway"], "headers": {"OpenSandbox-Ingress-To": route}})
    assert oracle.request("DELETE", "/v1/sandboxes/" + sid)[0] == 204


def test_failed_pod_fails_the_create(oracle):
    """A container stuck in ImagePullBackOff: the controller marks the BatchSandbox Failed, the create answers 500
    KUBERNETES::POD_FAILED with the controller's message, and the server deletes the workload."""
    fut, sid = pending_create(oracle, CREATE, "failed", to="failed", reason="ImagePullBackOff")
    st, _, doc = fut.result(timeout=10)
    assert (st, doc["code"]) == (500, "KUBERNETES::POD_FAILED"), doc
    pod = sid + "-0"
    want = "Sandbox %s failed: 1/1 observed pods failed; primary reason=ImagePullBackOff; sample pod=%s" % (sid, pod)
    assert doc["message"] == want, doc
    assert poll(lambda: oracle.get("batchsandboxes", sid), lambda b: not b) == []


def test_unschedulable_pod_times_out_pending(oracle):
    """A pod the scheduler cannot place keeps the sandbox Pending until sandbox_create_timeout_seconds (5 s): 504
    KUBERNETES::POD_READY_TIMEOUT (the controller at 3bb6fad sets no status.selector, so the provider's
    POD_PLATFORM_UNSCHEDULABLE path is not reached)."""
    fut, sid = pending_create(oracle, CREATE, "unschedulable", to="unschedulable")
    st, _, doc = oracle.request("GET", "/v1/sandboxes/" + sid)
    assert doc["status"]["state"] == "Pending", doc
    st, _, doc = fut.result(timeout=15)
    assert (st, doc["code"]) == (504, "KUBERNETES::POD_READY_TIMEOUT"), doc
    assert doc["message"].startswith("Timeout waiting for sandbox %s to be Running with IP." % sid), doc
    assert doc["message"].endswith("Last state: Pending"), doc
