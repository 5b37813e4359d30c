"""The Kubernetes oracle's stand-in API server (server_oracle_k8s_app.py says what it is for): an in-memory store of
the resources in KINDS answering the ``kubernetes`` client's HTTP as a kube-apiserver does, and the names the
controller stand-in (server_oracle_k8s_controller.py) shares with it."""

from __future__ import annotations

import base64
import bisect
import copy
import http
import json
import random
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


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


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
        self.quotas: dict[str, tuple[str, int]] = {}  # plural -> (ResourceQuota name, hard count/<resource>)
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
            refused = self._over_quota(prefix, plural, ns, name)
            if refused is not None:
                return 403, refused
            if key in self.objs:
                return 409, _status(409, "AlreadyExists", '%s "%s" already exists' % (_res(prefix, plural), name))
            md.update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=_now(), generation=1)
            obj.update(apiVersion=obj.get("apiVersion") or prefix.partition("/")[2], kind=kind)
            if prefix == CRD:
                obj.pop("status", None)  # the status subresource ignores status on create
            self.objs[key] = obj
            self._event(key, "ADDED", obj)
            return 201, copy.deepcopy(obj)

    def _over_quota(self, prefix: str, plural: str, ns: str, name: str) -> dict | None:
        """The ResourceQuota admission of an object count (``count/<resource>``, set by the ``quota`` op): over its
        hard limit, 403 as kube-apiserver words it (k8s.io/apiserver admission/plugin/resourcequota controller.go
        "exceeded quota: ...", apimachinery errors.NewForbidden "<resource> \"<name>\" is forbidden: ...")."""
        if plural not in self.quotas:
            return None
        quota, hard = self.quotas[plural]
        used = sum(1 for k in self.objs if k[:3] == (prefix, plural, ns))
        if used + 1 <= hard:
            return None
        res = "count/" + _res(prefix, plural)
        why = "exceeded quota: %s, requested: %s=1, used: %s=%d, limited: %s=%d" % (quota, res, res, used, res, hard)
        doc = _status(403, "Forbidden", '%s "%s" is forbidden: %s' % (_res(prefix, plural), name, why))
        doc["details"] = {"name": name, "group": prefix.split("/")[1] if prefix != "api/v1" else "", "kind": plural}
        return doc

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
