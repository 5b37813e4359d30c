"""The sandbox routes of the Kubernetes runtime (``--runtime kubernetes``): create, get, list, delete, pause, resume,
renew, metadata and the diagnostics' missing sandbox, answered as server 1.1.1's ``KubernetesSandboxService`` with
the BatchSandbox provider answers them (server services/k8s/kubernetes_service.py, batchsandbox_provider.py,
workload_mapper.py, error_helpers.py). QUIRKS.md, "Kubernetes runtime: sandboxes", lists each behaviour and its
source; tiers/t2/k8s/test_server_oracle_k8s_sandboxes.py compares them with the Kubernetes oracle.

``install(app, create_timeout)`` puts these routes in front of the Docker ones of ``LifecycleApp`` (lifecycle/
app.py); the facade calls it for ``runtime="kubernetes"``. The mock's sandbox underneath is its usual one: a
create goes through the Docker route (validation, images, the sandbox's start) and its answer is replaced by the
Kubernetes one once the pod is Ready. The workload state is lifecycle/k8s_workloads.py's table; a create's pod
outcome comes from a fault rule of kind ``pod`` (docs/FAULTS.md) on the request's handler (``pod_outcome``).
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from contextlib import contextmanager
from datetime import timezone
from typing import TYPE_CHECKING, Any, Callable, Iterator
from urllib.parse import parse_qsl

from mock_opensandbox.lifecycle import k8s_diagnostics, quirks
from mock_opensandbox.lifecycle import validation as V
from mock_opensandbox.lifecycle.diagnostics_routes import DiagnosticsRoutes
from mock_opensandbox.lifecycle.k8s_workloads import PodOutcome, Workload, Workloads
from mock_opensandbox.lifecycle.model import Sandbox, apply_metadata_patch, format_ts
from mock_opensandbox.lifecycle.quirks import MockError
from mock_opensandbox.wire.http1 import Request, Router

if TYPE_CHECKING:  # app.py never imports this module; the facade installs it (server.py)
    from mock_opensandbox.lifecycle.app import LifecycleApp

_NOT_FOUND = ("DOCKER::SANDBOX_NOT_FOUND",)
_PULL_FAILED = "DOCKER::SANDBOX_IMAGE_PULL_FAILED"


@contextmanager
def _k8s_errors(sandbox_id: str) -> Iterator[None]:
    """The Docker route's missing sandbox as the Kubernetes service says it (error_helpers.py)."""
    try:
        yield
    except MockError as e:
        if e.quirk.code in _NOT_FOUND:
            raise MockError(quirks.K8S_SANDBOX_NOT_FOUND, id=sandbox_id) from None
        raise


class K8sSandboxes:
    def __init__(self, app: "LifecycleApp", create_timeout: float, pool_timeout: float = 30.0):
        self.app = app
        self.store = app.store
        self.workloads = Workloads()
        self.create_timeout = float(create_timeout)  # [kubernetes] sandbox_create_timeout_seconds
        self.pool_timeout = float(pool_timeout)  # [kubernetes] pool_acquisition_timeout_seconds
        self.closing = threading.Event()

    # -- the BatchSandbox as the API shows it ------------------------------------------------------------------
    def _status(self, sb: Sandbox, w: Workload | None) -> tuple[str, str, str]:
        """batchsandbox_provider.py get_status: Pending (CREATING) until the pod is Ready, then the phase's."""
        if w is not None and w.phase == "Pending" and w.capacity:
            return quirks.K8S_STATUS_POOL_CAPACITY
        if w is None or w.phase == "Pending":
            return quirks.K8S_STATUS_PENDING
        if sb.paused:
            return quirks.K8S_STATUS_PAUSED
        return quirks.K8S_STATUS_RUNNING

    def sandbox_json(self, sb: Sandbox) -> dict[str, Any]:
        """workload_mapper.py _build_sandbox_from_workload: the template's container image and command (the execd
        bootstrap first), ``unknown`` and ``[]`` for a pool's; times from the BatchSandbox (whole seconds)."""
        w = self.workloads.get(sb.id)
        created = w.created if w is not None else sb.created_at.replace(microsecond=0)
        pooled = w is not None and w.pooled
        with sb.lock:
            state, reason, message = self._status(sb, w)
            out: dict[str, Any] = {"id": sb.id, "image": {"uri": "unknown" if pooled else sb.image["uri"]}}
            out["status"] = {
                "state": state,
                "reason": reason,
                "message": message,
                "lastTransitionAt": format_ts(created),
            }
            if sb.metadata:
                out["metadata"] = dict(sb.metadata)
            if sb.extensions:
                out["extensions"] = dict(sb.extensions)
            out["entrypoint"] = [] if pooled else [quirks.K8S_BOOTSTRAP, *sb.entrypoint]
            if sb.expires_at is not None:
                out["expiresAt"] = format_ts(sb.expires_at)
            out["createdAt"] = format_ts(created)
            return out

    def _sandbox(self, sandbox_id: str) -> Sandbox:
        with _k8s_errors(sandbox_id):
            sb: Sandbox = self.store.get(sandbox_id)
            return sb

    # -- create -----------------------------------------------------------------------------------------------
    def create(self, req: Request) -> None:
        r = V.body(req, V.CreateSandboxRequest)
        if (r["extensions"] or {}).get(quirks.POOL_REF_KEY, "").strip():
            return self.app.pools.create_from_pool(
                req, r, on_bound=lambda sb: self.workloads.ready(sb.id, sb.created_at, pooled=True)
            )
        told = req.handler.pod_outcome  # what a fault rule of kind pod says (workbench/faultinject.py), or None
        outcome = told if isinstance(told, PodOutcome) else PodOutcome()
        if outcome.to == "quota":  # the API server refuses the workload: nothing is made, nothing to roll back
            self.app.sandboxes.create_checks(
                dict(r)
            )  # the request's own 400s come first (the server checks before it creates)
            used = sum(1 for sb in self.store.snapshot().values() if not sb.deleted)
            raise MockError(quirks.K8S_QUOTA_EXCEEDED, id=str(uuid.uuid4()), quota=quirks.K8S_QUOTA_NAME, used=used)
        try:
            made = self.app.sandboxes.create_sandbox(
                dict(r)
            )  # the Docker route's create (its checks, volumes, the sandbox)
        except MockError as e:  # the image cannot be pulled: on Kubernetes, the pod's container waits on it
            if e.quirk.code != _PULL_FAILED:
                raise
            raise MockError(quirks.K8S_POD_FAILED, id=str(uuid.uuid4()), total=1, reason="ErrImagePull") from None
        sb = self.store.get(made.id)
        w = self.workloads.pending(sb.id, sb.created_at)
        start = time.monotonic()
        if outcome.to == "capacity":
            return self._no_capacity(req, sb, w, start)
        wait = outcome.after if outcome.to != "unschedulable" else self.create_timeout
        self.closing.wait(min(wait, self.create_timeout))
        if outcome.to == "failed" and outcome.after < self.create_timeout:
            self._abandon(sb.id)
            raise MockError(quirks.K8S_POD_FAILED, id=sb.id, total=1, reason=outcome.reason)
        if outcome.to == "unschedulable" or outcome.after >= self.create_timeout:
            self._abandon(sb.id)
            raise MockError(quirks.K8S_POD_READY_TIMEOUT, id=sb.id, elapsed=time.monotonic() - start)
        self.workloads.ready(sb.id, sb.created_at)
        req.send_json(202, self._create_json(sb, w, r))

    def _no_capacity(self, req: Request, sb: Sandbox, w: Workload, start: float) -> None:
        """_wait_for_sandbox_ready while the workload reports exhausted Pool capacity: 429 once that lasted
        pool_acquisition_timeout_seconds, unless the create timeout (checked first) ends the wait before it."""
        w.capacity = True
        self.closing.wait(min(self.pool_timeout, self.create_timeout))
        self._abandon(sb.id)
        if self.pool_timeout >= self.create_timeout:
            raise MockError(quirks.K8S_POD_READY_TIMEOUT, id=sb.id, elapsed=time.monotonic() - start)
        retry = str(max(1, math.ceil(self.pool_timeout)))
        req.send_json(429, quirks.K8S_POOL_CAPACITY_EXHAUSTED.body(), {"Retry-After": retry})

    def _abandon(self, sandbox_id: str) -> None:
        """The server deletes the workload of a create that failed (kubernetes_service.py create_sandbox)."""
        self.workloads.forget(sandbox_id)
        try:
            self.store.delete(sandbox_id)
        except MockError:
            pass

    def _create_json(self, sb: Sandbox, w: Workload, r: dict[str, Any]) -> dict[str, Any]:
        """CreateSandboxResponse: the request's metadata and entrypoint, the Ready status, createdAt of the request."""
        state, reason, message = quirks.K8S_STATUS_RUNNING
        out: dict[str, Any] = {"id": sb.id}
        out["status"] = {"state": state, "reason": reason, "message": message, "lastTransitionAt": format_ts(w.created)}
        if r["metadata"] is not None:
            out["metadata"] = dict(r["metadata"])
        if sb.extensions:
            out["extensions"] = dict(sb.extensions)
        if sb.expires_at is not None:
            out["expiresAt"] = format_ts(sb.expires_at)
        out["createdAt"] = format_ts(sb.created_at)
        if r["entrypoint"] is not None:
            out["entrypoint"] = list(r["entrypoint"])
        return out

    # -- the other sandbox routes -----------------------------------------------------------------------------
    def get(self, req: Request) -> None:
        req.send_json(200, self.sandbox_json(self._sandbox(req.params["sid"])))

    def list(self, req: Request) -> None:
        """list_helpers.py: the state and metadata filters on the mapped sandboxes, newest creationTimestamp first
        (whole seconds; ties in the API server's order, by name), then the page."""
        # the query's checks (422 page, pageSize; 400 metadata) as the Docker route's
        _, page, size = V.list_query(req)
        states = {s.lower() for s in req.query.get("state") or []}
        raw = (req.query.get("metadata") or [""])[-1]
        wanted = dict(parse_qsl(raw, keep_blank_values=True)) if raw else {}
        items = []
        for sb in sorted(self.store.snapshot().values(), key=lambda s: s.id):
            doc = self.sandbox_json(sb)
            if sb.deleted or (states and doc["status"]["state"].lower() not in states):
                continue
            if any((doc.get("metadata") or {}).get(k) != v for k, v in wanted.items()):
                continue
            items.append(doc)
        items.sort(key=lambda d: d["createdAt"], reverse=True)
        total = len(items)
        pages = (total + size - 1) // size
        pagination = {"page": page, "pageSize": size, "totalItems": total, "totalPages": pages}
        pagination["hasNextPage"] = page < pages
        req.send_json(200, {"items": items[(page - 1) * size : page * size], "pagination": pagination})

    def delete(self, req: Request) -> None:
        sid = req.params["sid"]
        with _k8s_errors(sid):
            self.store.delete(sid)
        self.workloads.forget(sid)
        req.send(204)

    def pause(self, req: Request) -> None:
        """batchsandbox_provider.py pause_sandbox: only a Ready (Succeed) workload; the mock pauses its sandbox at
        once (Paused, no Pausing in between) [choice]."""
        sb = self._sandbox(req.params["sid"])
        w = self.workloads.get(sb.id)
        if w is None or w.phase == "Pending":
            raise MockError(quirks.K8S_INVALID_STATE, message="Cannot pause: sandbox is being created (phase=Pending)")
        if sb.paused:
            raise MockError(quirks.K8S_INVALID_STATE, message="Sandbox is already paused")
        with _k8s_errors(sb.id):
            self.store.pause(sb.id)
        req.send(202)

    def resume(self, req: Request) -> None:
        sb = self._sandbox(req.params["sid"])
        w = self.workloads.get(sb.id)
        if w is None or w.phase == "Pending":
            raise MockError(quirks.K8S_INVALID_STATE, message="Cannot resume: sandbox is being created (phase=Pending)")
        if not sb.paused:
            raise MockError(quirks.K8S_INVALID_STATE, message="Cannot resume sandbox in state Running, expected Paused")
        with _k8s_errors(sb.id):
            self.store.resume(sb.id)
        req.send(202)

    def renew(self, req: Request) -> None:
        """kubernetes_service.py renew_expiration: the time first (400), then the sandbox (404), then 409 for one
        without expiry; the codes and messages are the Docker ones (shared validators)."""
        r = V.body(req, V.RenewSandboxExpirationRequest)
        when = r["expires_at"]
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        if when <= self.store.clock():
            raise MockError(quirks.INVALID_EXPIRATION)
        sid = req.params["sid"]
        with _k8s_errors(sid):
            new = self.store.renew(sid, r["expires_at"])
        req.send_json(200, {"expiresAt": format_ts(new)})

    def patch_metadata(self, req: Request) -> None:
        """kubernetes_service.py patch_sandbox_metadata: the body, the sandbox, then the label checks; the answer is
        the sandbox as GET shows it."""
        patch = V.body(req, V.PatchSandboxMetadataRequest)
        sb = self._sandbox(req.params["sid"])
        apply_metadata_patch(sb, patch)
        req.send_json(200, self.sandbox_json(sb))

    def diagnostics(self, route: Callable[[DiagnosticsRoutes, Workloads, Request], None]) -> Callable[[Request], None]:
        """A diagnostics route of lifecycle/k8s_diagnostics.py, its missing sandbox as the Kubernetes service's."""

        def run(req: Request) -> None:
            with _k8s_errors(req.params["sid"]):
                route(self.app.diagnostics, self.workloads, req)

        return run


def install(app: "LifecycleApp", create_timeout: float, pool_timeout: float = 30.0) -> K8sSandboxes:
    """The Kubernetes runtime's sandbox routes in front of ``app``'s (a LifecycleApp with a PoolStore)."""
    ks = K8sSandboxes(app, create_timeout, pool_timeout)
    r = Router()
    for prefix in ("", "/v1"):
        s = prefix + "/sandboxes"
        r.add("POST", s, ks.create)
        r.add("GET", s, ks.list)
        r.add("GET", s + "/{sid}", ks.get)
        r.add("PATCH", s + "/{sid}/metadata", ks.patch_metadata)
        r.add("DELETE", s + "/{sid}", ks.delete)
        r.add("POST", s + "/{sid}/pause", ks.pause)
        r.add("POST", s + "/{sid}/resume", ks.resume)
        r.add("POST", s + "/{sid}/renew-expiration", ks.renew)
        for kind in ("logs", "inspect", "events", "summary"):
            r.add("GET", s + "/{sid}/diagnostics/" + kind, ks.diagnostics(getattr(k8s_diagnostics, kind)))
    app.router.routes[:0] = r.routes
    return ks
