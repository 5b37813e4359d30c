"""The Kubernetes oracle's controller stand-in (server_oracle_k8s_app.py says what it is for and cannot show):
OpenSandbox's BatchSandbox and Pool controllers (kubernetes/internal/controller/ at 3bb6fad) over the stand-in API
server of server_oracle_k8s_api.py."""

from __future__ import annotations

import copy
import hashlib
import json
import sys
import threading
from datetime import datetime, timezone

from server_oracle_k8s_api import (
    ALLOC,
    BS_NAME,
    CRD,
    ENDPOINTS,
    FAIL_REASONS,
    FINALIZER,
    NS,
    POD_INDEX,
    POOL_NAME,
    POOL_REV,
    RELEASE,
    RELEASED,
    TASKS,
    FakeApiServer,
    _now,
)


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


CASE = "case"  # the metadata key the tests give each create (the server makes metadata the BatchSandbox's labels)

PHASE_CONDS = {  # applyBatchSandboxPhaseConditions: (Ready, Progressing, Paused)
    "Pending": (("False",), ("True", "Creating", "Sandbox is being created"), ("False",)),
    "Succeed": (("True", "PodsReady", "Sandbox is running"), ("False",), ("False",)),
    "Failed": (("False",), ("False",), ("False",)),
}


class Controller:
    """The controller stand-in (see the module docstring); it writes through FakeApiServer, so every write is a
    watch event the server's informer sees."""

    def __init__(self, api: FakeApiServer) -> None:
        # alloc: pool -> {pod: sandbox} (the InMemoryAllocationStore); sticky: owner -> (to, reason); by_case: the
        # metadata ``case`` of a sandbox (a label on its BatchSandbox) -> (to, reason), given before its create
        self.api, self.alloc, self.sticky, self.by_case, self.kubeleted, self.ips = api, {}, {}, {}, set(), 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="oracle-controller", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """End the reconcile loop (the app never does: it lives as long as its process; tests in-process do)."""
        self._stop.set()
        self.api.changed.set()
        self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
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
        boxes = self.api.items(CRD, "batchsandboxes")
        cases = {b["metadata"]["name"]: (b["metadata"].get("labels") or {}).get(CASE, "") for b in boxes}
        # a BatchSandbox whose pods a kubelet may move: it has a phase (Pending since its pod was made). On a cluster
        # the pod gets its IP long after that; moving it in the pass that made it put the first phase and the first
        # endpoint IP in two events of one reconcile (endpoints first, as persistRuntimeView writes them), and the
        # server, reading the first, took the sandbox for "Allocated" (tiers/t2/k8s/test_oracle_controller.py)
        phased = {b["metadata"]["name"] for b in boxes if (b.get("status") or {}).get("phase")}
        for pod in self.api.items("api/v1", "pods"):
            refs = [r for r in pod["metadata"].get("ownerReferences") or [] if r.get("controller")]
            box = pod["metadata"]["labels"].get(BS_NAME)
            owner = box or pod["metadata"]["labels"].get(POOL_NAME)
            outcome = self.sticky.get(owner) or self.by_case.get(cases.get(owner, ""))
            if refs and refs[0]["uid"] not in owners:  # the garbage collector
                self.api.delete(("api/v1", "pods", NS, pod["metadata"]["name"]))
            elif pod["metadata"]["uid"] not in self.kubeleted and outcome and (not box or box in phased):
                self.kubelet(pod, *outcome)

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

    def condition_op(self, owner: str, typ: str, status: str, message: str) -> list[dict]:
        """Set a condition on BatchSandbox ``owner`` as a controller would (the reconcile keeps conditions of other
        types); its conditions after, [] for no such BatchSandbox."""
        key = (CRD, "batchsandboxes", NS, owner)
        with self.api.lock:
            bs = self.api.get(key)
            if bs is None:
                return []
            conds = _set_cond(list((bs.get("status") or {}).get("conditions") or []), typ, status, "", message)
            self.api.patch(key, {"status": {"conditions": conds}}, status=True)
            return conds

    def pods_op(self, owner: str, to: str, reason: str, sticky: bool, case: str = "") -> list[str]:
        """The pods of BatchSandbox or Pool ``owner`` go ``to`` (``sticky``: its later pods too); with ``case``
        instead, those of every BatchSandbox labelled ``case`` (a create's metadata) now and later: the outcome of a
        create given before it. The names of the pods moved now."""
        with self.api.lock:
            if case:
                self.by_case[case] = (to, reason)
                boxes = self.api.items(CRD, "batchsandboxes", NS, "%s=%s" % (CASE, case))
                owners = [b["metadata"]["name"] for b in boxes]
            else:
                owners = [owner]
                if sticky:
                    self.sticky[owner] = (to, reason)
            pods: list[dict] = []
            for name in owners:
                pods += self.api.items("api/v1", "pods", NS, "%s=%s" % (BS_NAME, name))
                pods += self.api.items("api/v1", "pods", NS, "%s=%s" % (POOL_NAME, name))
            for pod in pods:
                self.kubelet(pod, to, reason)
            return [p["metadata"]["name"] for p in pods]
