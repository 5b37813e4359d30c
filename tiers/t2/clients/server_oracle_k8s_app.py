"""The real opensandbox-server 1.1.1 app (``opensandbox_server.main:app``) with ``runtime.type = "kubernetes"`` as a
test oracle without a cluster, in ``.venv-server`` only; its protocol extends its Docker twin, server_oracle_app.py.

Seam: the HTTP transport of the ``kubernetes`` client. Each ``RESTClientObject`` the server builds gets a
``pool_manager`` answering from ``FakeApiServer`` in this process. Everything above it is real: routes, validation,
``KubernetesSandboxService``, ``BatchSandboxProvider``, ``PoolService``, ``K8sClient`` and its informer (LIST, then
WATCH as an event stream with resourceVersions), endpoint resolver, secure-access signing, and the client's own
serialisation, models (V1Pod...) and ``ApiException`` mapping (404/409 Status bodies). Config (``_config``):
namespace ``opensandbox``, BatchSandbox provider, ``[ingress] mode = "gateway"`` (route ``header`` or ``uri``,
``--route``) with ``[ingress.secure_access]`` (one key), a 5 s create timeout (a test that wants a create to end
gives its pod's outcome before the create, ``pods`` by ``case``, not after finding the sandbox in the list).

``Controller`` stands in for OpenSandbox's (kubernetes/internal/controller/ at 3bb6fad), level-triggered on each
change and every 0.5 s. BatchSandbox (batchsandbox_controller.go, batchsandbox_status.go): expireTime deletes;
template mode creates owned pods ``<name>-<index>``; pool mode adds the task-cleanup finalizer and takes its pods
from ``alloc-status``; status replicas / allocated (node or IP) / ready, phase Pending / Succeed / Failed (a
container waiting on CrashLoopBackOff, ImagePullBackOff, ErrImagePull or CreateContainerConfigError: PodFailed),
the Ready / Progressing / Paused conditions, the ``sandbox.opensandbox.io/endpoints`` annotation; no status write
for a fresh workload without pods. Pool (pool_controller.go, allocator.go, algorithm/packed.go): in-memory
allocation, packed allocation of Ready idle pods, release (Delete recycle) of a deleted sandbox's pods, scaling by
bufferMin/bufferMax/poolMin/poolMax with the 25 % maxUnavailable ramp, status total / allocated / available /
revision / updated. Pods whose owner is gone are garbage-collected.

What the stand-in cannot show: no scheduler (no node fit, affinity, taints or quota admission: a pod is
unschedulable only when the driver says so; the only ResourceQuota is an object count set by the ``quota`` op); no kubelet (no images, containers,
execd, probes, restarts, logs or events: pods move only by ``{"op": "pods"}``); no task-executor (pool-mode task
counts follow pod readiness, ``taskFailed`` never rises); no pause/resume or snapshots (spec.pause is stored, not
acted on); no pool auto-assign (``poolRef = "*"``); no PoolAllocationPending condition (the controller at 3bb6fad
never sets it, so POOL_CAPACITY_EXHAUSTED is not reached); no agent-sandbox or fast-sandbox CRDs (404, as on a
cluster without them; the fsb snapshot informer logs retries); no admission webhooks, CRD schema validation, RBAC
or strategic merge (merge patch only); the pool revision hash is not Go's; timing is this process's, not a
cluster's (informer lag, requeues). No gateway: endpoints are what the server answers; nothing routes them.

Files: this one (the config, the app, the protocol), server_oracle_k8s_api.py (the API server), server_oracle_k8s_controller.py
(the controller).

Protocol (JSON lines; a message may carry ``seq``, echoed in its answer; requests run concurrently, so answers may
come out of order): ``{"op": "request", "method", "path", "headers", "body"}`` -> ``{"status", "headers", "body"}``
(latin-1 bodies); ``{"op": "pods", "owner", "to", "reason"?, "sticky"?}`` -> ``{"pods": [names]}``: the pods of
BatchSandbox or Pool ``owner`` go ``to`` ``scheduled`` (node, IP), ``ready``, ``failed`` (a waiting container,
``reason`` ImagePullBackOff by default) or ``unschedulable``; ``sticky``: its later pods too; ``{"op": "pods",
"case", "to", "reason"?}`` instead: the pods of every BatchSandbox whose create had ``metadata`` ``case`` (the
server makes a create's metadata its BatchSandbox's labels), those there now and those of a later create, so a
test says what a create's pod does before the create; ``{"op": "condition", "owner", "type", "status"?,
"message"?}`` -> ``{"conditions"}``: a condition on BatchSandbox ``owner`` that the controller keeps
(PoolAllocationPending: a controller that reports exhausted Pool capacity, which the one at 3bb6fad never does);
``{"op": "quota", "plural", "hard", "name"?}`` -> ``{"quotas"}``: a ResourceQuota of ``hard`` objects of that
resource (``name`` sandbox-quota; ``hard`` null removes it), refused on create with kube-apiserver's 403;
``{"op": "get", "plural", "name"?}`` -> ``{"items": [...]}``, the stored objects.
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
import threading

from server_oracle_k8s_api import API_KEY, CRD, GATEWAY, NS, SECURE_KEY, FakeApiServer
from server_oracle_k8s_controller import Controller

KUBECONFIG = """{"apiVersion": "v1", "kind": "Config", "current-context": "x",
 "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
 "users": [{"name": "u", "user": {"token": "oracle"}}],
 "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "opensandbox"}}]}"""


def _config(root: str, route: str) -> str:
    with open(os.path.join(root, "kubeconfig"), "w") as fh:  # loaded by K8sClient; its server is never dialled
        fh.write(KUBECONFIG)
    with open(os.path.join(root, "sandbox.toml"), "w") as fh:
        fh.write(f"""
server = {{ host = "127.0.0.1", port = 8080, api_key = "{API_KEY}" }}
runtime = {{ type = "kubernetes", execd_image = "local/execd:v1.0.19-src3bb6fad" }}
store = {{ type = "sqlite", path = "{root}/store.db" }}
[kubernetes]
kubeconfig_path = "{root}/kubeconfig"
namespace = "{NS}"
workload_provider = "batchsandbox"
sandbox_create_timeout_seconds = 5
sandbox_create_poll_interval_seconds = 0.2
pool_acquisition_timeout_seconds = 2
[ingress]
mode = "gateway"
gateway = {{ address = "{GATEWAY}", route = {{ mode = "{route}" }} }}
secure_access = {{ active_key = "a", keys = [{{ key_id = "a", key = "{SECURE_KEY}" }}] }}
""")
    return os.path.join(root, "sandbox.toml")


def build(route: str):
    root = tempfile.mkdtemp(prefix="osb-k8s-oracle-")
    atexit.register(shutil.rmtree, root, True)
    os.environ["SANDBOX_CONFIG_PATH"] = _config(root, route)
    os.environ["HOME"] = root
    from kubernetes.client import rest

    api, original = FakeApiServer(), rest.RESTClientObject.__init__

    def init(self, configuration):  # the seam: the client's urllib3 pool manager
        original(self, configuration)
        self.pool_manager = api

    rest.RESTClientObject.__init__ = init
    controller = Controller(api)
    from opensandbox_server.main import app

    return app, api, controller, root


def main() -> int:
    route = sys.argv[sys.argv.index("--route") + 1] if "--route" in sys.argv else "header"
    out, sys.stdout = sys.stdout, sys.stderr  # the server's prints never reach the protocol
    app, api, controller, root = build(route)
    from fastapi.testclient import TestClient

    client = TestClient(app, raise_server_exceptions=False, base_url="http://127.0.0.1:8080")
    lock = threading.Lock()

    def reply(msg: dict, doc: dict) -> None:
        with lock:
            print(json.dumps(dict(doc, seq=msg["seq"]) if "seq" in msg else doc), file=out, flush=True)

    def request(msg: dict) -> None:
        body = msg.get("body").encode("latin-1") if msg.get("body") is not None else None
        r = client.request(msg["method"], msg["path"], headers=msg.get("headers") or {}, content=body)
        reply(msg, {"status": r.status_code, "headers": dict(r.headers), "body": r.content.decode("latin-1")})

    hello = {"ready": True, "api_key": API_KEY, "root": root, "gateway": GATEWAY, "route": route}
    reply({}, dict(hello, secure_access={"active_key": "a", "key": SECURE_KEY}))
    for line in filter(str.strip, sys.stdin):
        msg = json.loads(line)
        if msg.get("op") == "request":
            threading.Thread(target=request, args=(msg,), daemon=True).start()
        elif msg.get("op") == "pods":
            sticky, case = bool(msg.get("sticky")), msg.get("case") or ""
            names = controller.pods_op(msg.get("owner") or "", msg["to"], msg.get("reason") or "", sticky, case)
            reply(msg, {"pods": names})
        elif msg.get("op") == "condition":  # a BatchSandbox condition no controller at 3bb6fad sets, kept
            conds = controller.condition_op(
                msg["owner"], msg["type"], msg.get("status", "True"), msg.get("message", "")
            )
            reply(msg, {"conditions": conds})
        elif msg.get("op") == "quota":  # a ResourceQuota on the count of one resource; hard None: none
            with api.lock:
                if msg.get("hard") is None:
                    api.quotas.pop(msg["plural"], None)
                else:
                    api.quotas[msg["plural"]] = (msg.get("name") or "sandbox-quota", int(msg["hard"]))
            reply(msg, {"quotas": {k: list(v) for k, v in api.quotas.items()}})
        elif msg.get("op") == "get":
            key = (CRD if msg["plural"] != "pods" else "api/v1", msg["plural"], NS, msg.get("name"))
            reply(msg, {"items": [i for i in ([api.get(key)] if key[3] else api.items(*key[:3])) if i]})
        else:
            reply(msg, {"error": "unknown op %r" % msg.get("op")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
