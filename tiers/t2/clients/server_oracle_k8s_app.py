"""The real opensandbox-server 1.1.1 app (``opensandbox_server.main:app``) with ``runtime.type = "kubernetes"`` as a
test oracle without a cluster, in ``.venv-server`` only; its protocol extends its Docker twin, server_oracle_app.py.

Seam: the HTTP transport of the ``kubernetes`` client. Each ``RESTClientObject`` the server builds gets a
``pool_manager`` answering from ``FakeApiServer`` in this process. Everything above it is real: routes, validation,
``KubernetesSandboxService``, ``BatchSandboxProvider``, ``PoolService``, ``K8sClient`` and its informer (LIST, then
WATCH as an event stream with resourceVersions), endpoint resolver, secure-access signing, and the client's own
serialisation, models (V1Pod...) and ``ApiException`` mapping (404/409 Status bodies). Config (``_config``):
namespace ``opensandbox``, BatchSandbox provider, ``[ingress] mode = "gateway"`` (route ``header`` or ``uri``,
``--route``) with ``[ingress.secure_access]`` (one key), a 5 s create timeout.

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
unschedulable only when the driver says so; a ResourceQuota 403 never happens); no kubelet (no images, containers,
execd, probes, restarts, logs or events: pods move only by ``{"op": "pods"}``); no task-executor (pool-mode task
counts follow pod readiness, ``taskFailed`` never rises); no pause/resume or snapshots (spec.pause is stored, not
acted on); no pool auto-assign (``poolRef = "*"``); no PoolAllocationPending condition (the controller at 3bb6fad
never sets it, so POOL_CAPACITY_EXHAUSTED is not reached); no agent-sandbox or fast-sandbox CRDs (404, as on a
cluster without them; the fsb snapshot informer logs retries); no admission webhooks, CRD schema validation, RBAC
or strategic merge (merge patch only); the pool revision hash is not Go's; timing is this process's, not a
cluster's (informer lag, requeues). No gateway: endpoints are what the server answers; nothing routes them.

Protocol (JSON lines; a message may carry ``seq``, echoed in its answer; requests run concurrently, so answers may
come out of order): ``{"op": "request", "method", "path", "headers", "body"}`` -> ``{"status", "headers", "body"}``
(latin-1 bodies); ``{"op": "pods", "owner", "to", "reason"?, "sticky"?}`` -> ``{"pods": [names]}``: the pods of
BatchSandbox or Pool ``owner`` go ``to`` ``scheduled`` (node, IP), ``ready``, ``failed`` (a waiting container,
``reason`` ImagePullBackOff by default) or ``unschedulable``; ``sticky``: its later pods too; ``{"op": "get",
"plural", "name"?}`` -> ``{"items": [...]}``, the stored objects.
"""

from __future__ import annotations

import atexit
import base64
import bisect
import copy
import hashlib
import http
import json
import os
import random
import shutil
import sys
import tempfile
import threading
import time
import uuid
from datetime import datetime, timezone
from urllib.parse import parse_qs, urlsplit

API_KEY, NS, GATEWAY = "oracle-key", "opensandbox", "127.0.0.1:18090"
SECURE_KEY = base64.b64encode(b"oracle-secure-access-signing-key").decode()
CRD = "apis/sandbox.opensandbox.io/v1alpha1"
_CORE = {"pods": "Pod", "secrets": "Secret", "persistentvolumeclaims": "PersistentVolumeClaim", "events": "Event"}
_CRS = {"batchsandboxes": "BatchSandbox", "pools": "Pool", "sandboxsnapshots": "SandboxSnapshot"}
KINDS = {**{(CRD, p): k for p, k in _CRS.items()}, **{("api/v1", p): k for p, k in _CORE.items()}}
A = "sandbox.opensandbox.io/"  # annotations and labels of the controller (apis.go, pool_controller.go at 3bb6fad)
ENDPOINTS, ALLOC, RELEASE, RELEASED = A + "endpoints", A + "alloc-status", A + "alloc-release", A + "alloc-released"
POOL_NAME, POOL_REV = A + "pool-name", A + "pool-revision"
B = "batch-sandbox.sandbox.opensandbox.io/"
FINALIZER, POD_INDEX, BS_NAME = B + "task-cleanup", B + "pod-index", B + "name"
TASKS = ("taskRunning", "taskSucceed", "taskFailed", "taskPending", "taskUnknown")
FAIL_REASONS = ("CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError")
KUBECONFIG = """{"apiVersion": "v1", "kind": "Config", "current-context": "x",
 "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
 "users": [{"name": "u", "user": {"token": "oracle"}}],
 "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u", "namespace": "opensandbox"}}]}"""


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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
pool_acquisition_timeout_seconds = 5
[ingress]
mode = "gateway"
gateway = {{ address = "{GATEWAY}", route = {{ mode = "{route}" }} }}
secure_access = {{ active_key = "a", keys = [{{ key_id = "a", key = "{SECURE_KEY}" }}] }}
""")
    return os.path.join(root, "sandbox.toml")


def _merge(target, patch):
    """RFC 7386 JSON merge patch (what CustomObjectsApi.patch sends: application/merge-patch+json)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = _merge(out.get(k), v)
    return out


def _selected(obj: dict, selector: str) -> bool:
    """The label selector terms the server sends: ``key``, ``!key``, ``key=value``, ``key!=value``."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    for term in filter(None, (t.strip() for t in (selector or "").split(","))):
        neg = "!=" in term
        k, eq, v = term.replace("!=", "=").replace("==", "=").partition("=")
        k = k.strip()
        ok = (labels.get(k) == v.strip()) != neg if eq else (k.lstrip("!") in labels) != k.startswith("!")
        if not ok:
            return False
    return True


def _status(code: int, reason: str, message: str) -> dict:
    return dict(kind="Status", apiVersion="v1", status="Failure", message=message, reason=reason, code=code)


def _res(prefix: str, plural: str) -> str:  # "pools.sandbox.opensandbox.io", "pods"
    return plural if prefix == "api/v1" else "%s.%s" % (plural, prefix.split("/")[1])


class _Resp:
    """What the kubernetes client reads of a urllib3 response: status, reason, headers, data, stream()."""

    def __init__(self, status: int, doc=None, chunks=None, ctype: str = "application/json"):
        import urllib3

        self.status, self.reason = status, http.HTTPStatus(status).phrase
        self.headers = urllib3.HTTPHeaderDict({"content-type": ctype})
        self.data = doc if isinstance(doc, bytes) else (json.dumps(doc).encode() if doc is not None else b"")
        self._chunks, self.closed = chunks, False

    def stream(self, amt=None, decode_content=True):
        yield from (self._chunks(self) if self._chunks else [self.data])

    def close(self):
        self.closed = True

    def release_conn(self):
        return None


class FakeApiServer:
    """An in-memory API server for the resources in KINDS: create (generateName, uid, resourceVersion,
    generation), get, list and watch (labelSelector, resourceVersion, timeoutSeconds), merge patch (status kept
    unless the writer is the controller: the status subresource), delete (finalizers -> deletionTimestamp)."""

    def __init__(self) -> None:
        self.lock = threading.Condition(threading.RLock())
        self.objs: dict[tuple, dict] = {}
        self.rv, self.log, self.rvs = 1000, [], []  # log: (rv, (prefix, plural, ns), type, obj)
        self.changed = threading.Event()

    def _event(self, key: tuple, typ: str, obj: dict) -> None:
        self.rv += 1
        if typ != "DELETED":
            obj["metadata"]["resourceVersion"] = str(self.rv)
        self.log.append((self.rv, key[:3], typ, copy.deepcopy(obj)))
        self.rvs.append(self.rv)
        self.changed.set()
        self.lock.notify_all()

    def create(self, prefix: str, plural: str, ns: str, body: dict) -> tuple[int, dict]:
        with self.lock:
            obj = copy.deepcopy(body)
            md = obj.setdefault("metadata", {})
            if not md.get("name") and md.get("generateName"):
                md["name"] = md["generateName"] + "".join(random.choices("bcdfghjklmnpqrstvwxz2456789", k=5))
            name, kind = md.get("name"), KINDS[(prefix, plural)]
            if not name:
                return 422, _status(422, "Invalid", "%s is invalid: metadata.name: Required value" % kind)
            key = (prefix, plural, ns, name)
            if key in self.objs:
                return 409, _status(409, "AlreadyExists", '%s "%s" already exists' % (_res(prefix, plural), name))
            md.update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
            obj.update(apiVersion=obj.get("apiVersion") or prefix.partition("/")[2], kind=kind)
            if prefix == CRD:
                obj.pop("status", None)  # the status subresource ignores status on create
            self.objs[key] = obj
            self._event(key, "ADDED", obj)
            return 201, copy.deepcopy(obj)

    def get(self, key: tuple) -> dict | None:
        with self.lock:
            return copy.deepcopy(self.objs.get(key))

    def items(self, prefix: str, plural: str, ns: str | None = NS, selector: str = "") -> list[dict]:
        with self.lock:
            found = [o for (p, pl, n, _), o in sorted(self.objs.items()) if (p, pl, ns or n) == (prefix, plural, n)]
            return [copy.deepcopy(o) for o in found if _selected(o, selector)]

    def patch(self, key: tuple, patch: dict, status: bool = False) -> tuple[int, dict]:
        with self.lock:
            old = self.objs.get(key)
            if old is None:
                return 404, self._not_found(key)
            new = _merge(old, patch)
            for k in ("name", "namespace", "uid", "creationTimestamp", "generation", "deletionTimestamp"):
                if k in old["metadata"]:
                    new["metadata"][k] = old["metadata"][k]
            if not status and key[0] == CRD:
                new.pop("status", None)
                new.update({"status": old["status"]} if "status" in old else {})
            if new == old:
                return 200, copy.deepcopy(old)
            if new.get("spec") != old.get("spec"):
                new["metadata"]["generation"] = old["metadata"].get("generation", 1) + 1
            gone = new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers")
            if gone:
                del self.objs[key]
            else:
                self.objs[key] = new
            self._event(key, "DELETED" if gone else "MODIFIED", new)
            return 200, copy.deepcopy(new)

    def delete(self, key: tuple) -> tuple[int, dict]:
        with self.lock:
            obj = self.objs.get(key)
            if obj is None:
                return 404, self._not_found(key)
            if not obj["metadata"].get("finalizers"):
                del self.objs[key]
                self._event(key, "DELETED", obj)
            elif not obj["metadata"].get("deletionTimestamp"):
                obj["metadata"]["deletionTimestamp"] = _now()
                self._event(key, "MODIFIED", obj)
            return 200, copy.deepcopy(obj)

    def _not_found(self, key: tuple) -> dict:
        return _status(404, "NotFound", '%s "%s" not found' % (_res(*key[:2]), key[3]))

    def _watch(self, coll: tuple, rv: int, timeout: float, selector: str):
        def chunks(resp: _Resp):
            deadline, pos = time.monotonic() + timeout, rv
            while not resp.closed:
                with self.lock:
                    events = self.log[bisect.bisect_right(self.rvs, pos) :]
                    if not events:
                        if deadline <= time.monotonic():
                            return
                        self.lock.wait(min(deadline - time.monotonic(), 0.5))
                        continue
                for erv, ecoll, typ, obj in events:
                    pos = erv
                    if (ecoll == coll or (coll[2] is None and ecoll[:2] == coll[:2])) and _selected(obj, selector):
                        yield (json.dumps({"type": typ, "object": obj}) + "\n").encode()

        return chunks

    def request(self, method, url, fields=None, body=None, timeout=None, headers=None, **kw) -> _Resp:
        """urllib3's PoolManager.request, as RESTClientObject calls it."""
        parts = urlsplit(url)
        q = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        segs = parts.path.strip("/").split("/")
        n = 2 if segs[0] == "api" else 3
        prefix, rest, ns = "/".join(segs[:n]), segs[n:], None
        if rest[:1] == ["namespaces"] and len(rest) > 2:
            ns, rest = rest[1], rest[2:]
        plural, name, sub = (rest + [None, None, None])[:3]
        if (prefix, plural) not in KINDS:  # discovery, namespaces, other groups: none served
            return _Resp(404, _status(404, "NotFound", "the server could not find the requested resource"))
        doc = json.loads(body) if isinstance(body, (str, bytes)) and body else body
        key = (prefix, plural, ns, name)
        if method == "GET" and name is None:
            sel = q.get("labelSelector", "")
            if q.get("watch", "").lower() in ("true", "1"):
                rv, wait = int(q.get("resourceVersion") or self.rv), float(q.get("timeoutSeconds", 5))
                return _Resp(200, chunks=self._watch((prefix, plural, ns), rv, wait, sel))
            with self.lock:
                meta, items = {"resourceVersion": str(self.rv)}, self.items(prefix, plural, ns, sel)
            return _Resp(200, {"kind": KINDS[(prefix, plural)] + "List", "metadata": meta, "items": items})
        if method == "GET":
            obj = self.get(key)
            if sub == "log":
                return _Resp(200, b"", ctype="text/plain") if obj else _Resp(404, self._not_found(key))
            return _Resp(200, obj) if obj is not None else _Resp(404, self._not_found(key))
        if method == "POST" and name is None:
            return _Resp(*self.create(prefix, plural, ns, doc or {}))
        if method in ("PATCH", "DELETE"):
            return _Resp(*(self.patch(key, doc or {}) if method == "PATCH" else self.delete(key)))
        return _Resp(405, _status(405, "MethodNotAllowed", "the server does not allow this method"))


def _ready(pod: dict) -> bool:  # utils.IsPodReady
    st = pod.get("status") or {}
    ready = [c for c in st.get("conditions") or [] if c.get("type") == "Ready" and c.get("status") == "True"]
    return st.get("phase") == "Running" and bool(ready)


def _ann_pods(obj: dict, key: str) -> list[str]:
    raw = ((obj.get("metadata") or {}).get("annotations") or {}).get(key)
    return list(json.loads(raw).get("pods") or []) if raw else []


def _pod_failure(pods: list[dict]) -> tuple[str, str] | None:
    """getPodFailureReasonAndMessage / summarizePodFailures (batchsandbox_status.go at 3bb6fad)."""
    by_reason: dict[str, list[str]] = {}
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in FAIL_REASONS:
                by_reason.setdefault(waiting["reason"], []).append(pod["metadata"]["name"])
                break
    if not by_reason:
        return None
    top, failed = max(by_reason, key=lambda r: len(by_reason[r])), sum(map(len, by_reason.values()))
    return top, f"{failed}/{len(pods)} observed pods failed; primary reason={top}; sample pod={by_reason[top][0]}"


def _set_cond(conds: list[dict], typ: str, status: str, reason: str = "", message: str = "") -> list[dict]:
    """setConditionInStatus (batchsandbox_status.go at 3bb6fad): False removes, True adds or updates."""
    new = {"type": typ, "status": status, "reason": reason, "message": message, "lastTransitionTime": _now()}
    new = {k: v for k, v in new.items() if v != ""}
    out, found = [], False
    for c in conds:
        found = found or c.get("type") == typ
        if c.get("type") != typ:
            out.append(c)
        elif status == "True":
            same = (c.get("status"), c.get("reason", ""), c.get("message", "")) == (status, reason, message)
            out.append(c if same else new)
    return out + ([new] if not found and status == "True" else [])


PHASE_CONDS = {  # applyBatchSandboxPhaseConditions: (Ready, Progressing, Paused)
    "Pending": (("False",), ("True", "Creating", "Sandbox is being created"), ("False",)),
    "Succeed": (("True", "PodsReady", "Sandbox is running"), ("False",), ("False",)),
    "Failed": (("False",), ("False",), ("False",)),
}


class Controller:
    """The controller stand-in (see the module docstring); it writes through FakeApiServer, so every write is a
    watch event the server's informer sees."""

    def __init__(self, api: FakeApiServer) -> None:
        # alloc: pool -> {pod: sandbox} (the InMemoryAllocationStore); sticky: owner -> (to, reason)
        self.api, self.alloc, self.sticky, self.kubeleted, self.ips = api, {}, {}, set(), 0
        threading.Thread(target=self._run, name="oracle-controller", daemon=True).start()

    def _run(self) -> None:
        while True:
            self.api.changed.wait(0.5)
            self.api.changed.clear()
            try:
                with self.api.lock:
                    self.reconcile()
            except Exception as exc:  # noqa: BLE001 - a controller logs and requeues
                print("controller: %r" % exc, file=sys.stderr)

    def reconcile(self) -> None:
        for bs in self.api.items(CRD, "batchsandboxes"):
            self._batchsandbox(bs)
        for pool in self.api.items(CRD, "pools"):
            self._pool(pool)
        owners = {o["metadata"]["uid"] for pl in ("batchsandboxes", "pools") for o in self.api.items(CRD, pl)}
        for pod in self.api.items("api/v1", "pods"):
            refs = [r for r in pod["metadata"].get("ownerReferences") or [] if r.get("controller")]
            owner = pod["metadata"]["labels"].get(BS_NAME) or pod["metadata"]["labels"].get(POOL_NAME)
            if refs and refs[0]["uid"] not in owners:  # the garbage collector
                self.api.delete(("api/v1", "pods", NS, pod["metadata"]["name"]))
            elif pod["metadata"]["uid"] not in self.kubeleted and owner in self.sticky:
                self.kubelet(pod, *self.sticky[owner])

    def _owned(self, owner: dict) -> list[dict]:
        uid, pods = owner["metadata"]["uid"], self.api.items("api/v1", "pods")
        refs = [(p, [r["uid"] for r in p["metadata"].get("ownerReferences") or []]) for p in pods]
        return [p for p, uids in refs if uid in uids and not p["metadata"].get("deletionTimestamp")]

    def _new_pod(self, template: dict, owner: dict, kind: str, labels: dict, **meta) -> None:
        """utils.GetPodFromTemplate with a controller reference, created."""
        tmeta = template.get("metadata") or {}
        ref = {"apiVersion": "sandbox.opensandbox.io/v1alpha1", "kind": kind, "name": owner["metadata"]["name"]}
        ref.update(uid=owner["metadata"]["uid"], controller=True, blockOwnerDeletion=True)
        md = dict(meta, labels=dict(tmeta.get("labels") or {}, **labels), ownerReferences=[ref])
        md["annotations"] = dict(tmeta.get("annotations") or {})
        pod = {"metadata": md, "spec": copy.deepcopy(template.get("spec") or {}), "status": {"phase": "Pending"}}
        self.api.create("api/v1", "pods", NS, pod)

    def _batchsandbox(self, bs: dict) -> None:
        md, spec, st = bs["metadata"], bs.get("spec") or {}, bs.get("status") or {}
        key, gen, replicas = (CRD, "batchsandboxes", NS, md["name"]), md.get("generation", 1), spec.get("replicas") or 0
        expire = spec.get("expireTime")
        if expire and not md.get("deletionTimestamp"):
            if datetime.fromisoformat(expire.replace("Z", "+00:00")) < datetime.now(timezone.utc):
                self.api.delete(key)
                return
        need_task, finalizers = spec.get("taskTemplate") is not None, md.get("finalizers") or []
        if md.get("deletionTimestamp"):
            if need_task and FINALIZER in finalizers:  # tasks stopped; the pool releases the pods
                self.api.patch(key, {"metadata": {"finalizers": [f for f in finalizers if f != FINALIZER] or None}})
            return
        if need_task and FINALIZER not in finalizers:
            self.api.patch(key, {"metadata": {"finalizers": finalizers + [FINALIZER]}})
            return
        if spec.get("poolRef"):
            names = [p for p in _ann_pods(bs, ALLOC) if p not in set(_ann_pods(bs, RELEASE))]
            pods = [p for p in (self.api.get(("api/v1", "pods", NS, n)) for n in names) if p]
        else:
            pods = sorted(self._owned(bs), key=lambda p: int(p["metadata"]["labels"].get(POD_INDEX, 0)))
            have = {int(p["metadata"]["labels"].get(POD_INDEX, -1)) for p in pods}
            for idx in [i for i in range(replicas) if i not in have] if st.get("phase") != "Paused" else []:
                labels = {POD_INDEX: str(idx), BS_NAME: md["name"]}
                self._new_pod(spec.get("template") or {}, bs, "BatchSandbox", labels, name="%s-%d" % (md["name"], idx))
        assigned = [bool(p["spec"].get("nodeName") or p["status"].get("podIP")) for p in pods]  # utils.IsAssigned
        ready = sum(1 for p in pods if not p["metadata"].get("deletionTimestamp") and _ready(p))
        new = dict(st, observedGeneration=gen, replicas=len(pods), allocated=sum(assigned), ready=ready)
        new.update({k: new.get(k, 0) for k in TASKS})
        conds, failure = list(st.get("conditions") or []), _pod_failure(pods)
        if st.get("phase") != "Failed" and failure:
            conds, new["phase"] = _set_cond(conds, "PodFailed", "True", *failure), "Failed"
        elif st.get("phase") != "Failed":
            conds, new["phase"] = _set_cond(conds, "PodFailed", "False"), "Succeed" if ready > 0 else "Pending"
        for typ, args in zip(("Ready", "Progressing", "Paused"), PHASE_CONDS.get(new["phase"], ()), strict=False):
            conds = _set_cond(conds, typ, *args)
        new = {k: v for k, v in dict(new, conditions=conds).items() if k != "conditions" or v}
        new["pauseObservedGeneration"] = max(new.get("pauseObservedGeneration", 0), gen)
        if need_task:  # no task-executor: a task on a Ready pod runs, one on another pod is unknown
            new.update(taskRunning=ready, taskUnknown=len(pods) - ready, taskPending=max(replicas - len(pods), 0))
        raw = json.dumps([p["status"].get("podIP", "") if a else "" for p, a in zip(pods, assigned, strict=True)])
        raw = raw.replace(", ", ",")
        anns = md.get("annotations") or {}
        if anns.get(ENDPOINTS) != raw and (ENDPOINTS in anns or raw != "[]"):
            self.api.patch(key, {"metadata": {"annotations": {ENDPOINTS: raw}}})
        if new != st and not (not pods and not st.get("phase") and replicas > 0):
            self.api.patch(key, {"status": new}, status=True)

    def _pool(self, pool: dict) -> None:
        md, spec = pool["metadata"], pool.get("spec") or {}
        cap, name = spec.get("capacitySpec") or {}, md["name"]
        pods = sorted(self._owned(pool), key=lambda p: (p["metadata"]["creationTimestamp"], p["metadata"]["name"]))
        every = self.api.items(CRD, "batchsandboxes")
        pooled = [b for b in every if b["spec"].get("poolRef") == name and not b["spec"].get("template")]
        boxes = {b["metadata"]["name"]: b for b in pooled}
        if name not in self.alloc:  # InMemoryAllocationStore.Recover: from the sandboxes' annotations
            gone = {p for o in boxes.values() for p in _ann_pods(o, RELEASED)}
            self.alloc[name] = {p: b for b, o in boxes.items() for p in _ann_pods(o, ALLOC) if p not in gone}
        alloc, release, supply = self.alloc[name], {}, 0
        idle_ready = [p["metadata"]["name"] for p in pods if p["metadata"]["name"] not in alloc and _ready(p)]
        for sbx, b in boxes.items():
            mine, released = [p for p, s in alloc.items() if s == sbx], set(_ann_pods(b, RELEASED))
            if b["metadata"].get("deletionTimestamp"):
                release[sbx] = [p for p in mine if p not in released]
                continue
            release[sbx] = [p for p in _ann_pods(b, RELEASE) if p not in released]
            need = (b.get("spec") or {}).get("replicas", 0) - len(mine)
            if need > 0:  # algorithm/packed.go
                got, idle_ready = idle_ready[:need], idle_ready[need:]
                supply += need - len(got)
                alloc.update({p: sbx for p in got})
                body = json.dumps({"pods": _ann_pods(b, ALLOC) + got}, separators=(",", ":"))
                if got:
                    self.api.patch((CRD, "batchsandboxes", NS, sbx), {"metadata": {"annotations": {ALLOC: body}}})
        for pod, sbx in list(alloc.items()):
            if sbx not in boxes:  # GC of the allocations of deleted sandboxes
                release.setdefault(sbx, []).append(pod)
        for sbx, names in release.items():
            for p in names:
                alloc.pop(p, None)
                if ((spec.get("recycleStrategy") or {}).get("type") or "Delete") != "Noop":
                    self.api.delete(("api/v1", "pods", NS, p))
            if names and sbx in boxes:
                done = json.dumps({"pods": sorted(set(_ann_pods(boxes[sbx], RELEASED)) | set(names))})
                self.api.patch((CRD, "batchsandboxes", NS, sbx), {"metadata": {"annotations": {RELEASED: done}}})
        pods = [p for p in pods if self.api.get(("api/v1", "pods", NS, p["metadata"]["name"]))]
        revision = hashlib.sha256(json.dumps(spec.get("template"), sort_keys=True).encode()).hexdigest()[:16]
        idle = [p for p in pods if p["metadata"]["name"] not in alloc]
        buffer, lo, hi = len(idle), cap.get("bufferMin", 0), cap.get("bufferMax", 0)
        desired = max(len(alloc) + supply + (buffer if lo <= buffer <= hi else (lo + hi) // 2), cap.get("poolMin", 0))
        max_new = max(cap.get("poolMax", 0) - len(pods), 0)
        if desired > len(pods) and max_new > 0:
            unavailable = ((spec.get("scaleStrategy") or {}).get("maxUnavailable")) or "25%"
            if isinstance(unavailable, str) and unavailable.endswith("%"):
                unavailable = -(-desired * int(unavailable[:-1]) // 100)
            create = min(desired - len(pods), max_new, max(int(unavailable), 1) - sum(not _ready(p) for p in pods))
            for _ in range(max(create, 0)):
                labels = {POOL_NAME: name, POOL_REV: revision}
                self._new_pod(spec.get("template") or {}, pool, "Pool", labels, generateName=name + "-")
        for pod in idle[: max(len(pods) - desired, 0)]:
            self.api.delete(("api/v1", "pods", NS, pod["metadata"]["name"]))
        status = {"observedGeneration": md.get("generation", 1), "revision": revision, "total": len(pods)}
        status.update(allocated=len(alloc), available=sum(1 for p in idle if _ready(p)))
        status["updated"] = sum(1 for p in pods if p["metadata"]["labels"].get(POOL_REV) == revision)
        status = {k: v for k, v in status.items() if v or k != "updated"}  # updated is omitempty
        if pool.get("status") != status:
            self.api.patch((CRD, "pools", NS, name), {"status": status}, status=True)

    def kubelet(self, pod: dict, to: str, reason: str = "") -> None:
        """The driver's scheduler and kubelet: one pod to ``to``."""
        key, now, up = ("api/v1", "pods", NS, pod["metadata"]["name"]), _now(), to == "ready"
        self.kubeleted.add(pod["metadata"]["uid"])
        if to == "unschedulable":
            msg = "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available."
            cond = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg}
            status = {"phase": "Pending", "conditions": [dict(cond, lastTransitionTime=now)]}
            self.api.patch(key, {"status": status}, status=True)
            return
        self.ips += 0 if pod["status"].get("podIP") else 1
        ip = pod["status"].get("podIP") or "10.244.%d.%d" % (self.ips // 250, self.ips % 250 + 2)
        conds = [
            {"type": t, "status": "True" if up or t == "PodScheduled" else "False", "lastTransitionTime": now}
            for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ]
        state = {"running": {"startedAt": now}} if up else {"waiting": {"reason": "ContainerCreating"}}
        if to == "failed":
            state = {"waiting": {"reason": reason or "ImagePullBackOff", "message": "Back-off pulling image"}}
        base = {"imageID": "", "ready": up, "restartCount": 0, "state": state}
        containers = pod["spec"].get("containers") or []
        statuses = [dict(base, name=c.get("name"), image=c.get("image", "")) for c in containers]
        status = {"phase": "Running" if up else "Pending", "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "10.0.0.1"}
        status.update(conditions=conds, containerStatuses=statuses, startTime=now)
        self.api.patch(key, {"spec": {"nodeName": "oracle-node"}, "status": status}, status=True)

    def pods_op(self, owner: str, to: str, reason: str, sticky: bool) -> list[str]:
        with self.api.lock:
            if sticky:
                self.sticky[owner] = (to, reason)
            pods = self.api.items("api/v1", "pods", NS, "%s=%s" % (BS_NAME, owner))
            pods += self.api.items("api/v1", "pods", NS, "%s=%s" % (POOL_NAME, owner))
            for pod in pods:
                self.kubelet(pod, to, reason)
            return [p["metadata"]["name"] for p in pods]


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
            names = controller.pods_op(msg["owner"], msg["to"], msg.get("reason", ""), bool(msg.get("sticky")))
            reply(msg, {"pods": names})
        elif msg.get("op") == "get":
            key = (CRD if msg["plural"] != "pods" else "api/v1", msg["plural"], NS, msg.get("name"))
            reply(msg, {"items": [i for i in ([api.get(key)] if key[3] else api.items(*key[:3])) if i]})
        else:
            reply(msg, {"error": "unknown op %r" % msg.get("op")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
