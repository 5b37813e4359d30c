"""The sandboxes of the Kubernetes runtime (``--runtime kubernetes``): state and answers, no HTTP. What server 1.1.1's
``KubernetesSandboxService`` with the BatchSandbox provider keeps and answers (server services/k8s/
kubernetes_service.py, batchsandbox_provider.py, workload_mapper.py, error_helpers.py): the workloads, the service's
timeouts, a create's wait for its pod, the sandbox as the API shows it, and its errors. QUIRKS.md, "Kubernetes
runtime: sandboxes", lists each behaviour and its source; tiers/t2/k8s/test_server_oracle_k8s_sandboxes.py compares
them with the Kubernetes oracle.

The routes are lifecycle/k8s_sandboxes_routes.py's (``K8sSandboxesRoutes``; ``install`` puts them in front of the
Docker ones of ``LifecycleApp``). The mock's sandbox underneath is its usual one (lifecycle/model.py); the workload
state is lifecycle/k8s_workloads.py's table.
"""

from __future__ import annotations

import math
import threading
import time
import uuid
from contextlib import contextmanager
from datetime import datetime, timezone
from typing import Any, Iterator, Mapping

from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.lifecycle.k8s_workloads import PodOutcome, Workload, Workloads
from mock_opensandbox.lifecycle.model import Sandbox, SandboxStore, apply_metadata_patch, format_ts
from mock_opensandbox.lifecycle.quirks import MockError

_NOT_FOUND = ("DOCKER::SANDBOX_NOT_FOUND",)
_PULL_FAILED = "DOCKER::SANDBOX_IMAGE_PULL_FAILED"


@contextmanager
def k8s_errors(sandbox_id: str) -> Iterator[None]:
    """The Docker route's missing sandbox as the Kubernetes service says it (error_helpers.py)."""
    try:
        yield
    except MockError as e:
        if e.quirk.code in _NOT_FOUND:
            raise MockError(quirks.K8S_SANDBOX_NOT_FOUND, id=sandbox_id) from None
        raise


def pod_failed_on_pull(e: MockError) -> MockError | None:
    """A Docker create's error as the Kubernetes create answers it: an image that cannot be pulled is a pod whose
    container waits on it (500 POD_FAILED, ErrImagePull); None: any other error, answered as it is."""
    if e.quirk.code != _PULL_FAILED:
        return None
    return MockError(quirks.K8S_POD_FAILED, id=str(uuid.uuid4()), total=1, reason="ErrImagePull")


class K8sSandboxes:
    """The sandboxes in ``store`` as the Kubernetes service keeps them: their workloads, and the server's
    ``[kubernetes]`` sandbox_create_timeout_seconds and pool_acquisition_timeout_seconds. ``closing`` ends the
    creates waiting for a pod (the facade sets it at stop)."""

    def __init__(self, store: SandboxStore, create_timeout: float, pool_timeout: float = 30.0):
        self.store = store
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

    def sandbox(self, sandbox_id: str) -> Sandbox:
        with k8s_errors(sandbox_id):
            sb: Sandbox = self.store.get(sandbox_id)
            return sb

    # -- create -----------------------------------------------------------------------------------------------
    def pooled(self, sb: Sandbox) -> None:
        """A poolRef create's sandbox has its pod (lifecycle/pools_routes.py ``on_bound``): a pool-mode workload."""
        self.workloads.ready(sb.id, sb.created_at, pooled=True)

    def quota_exceeded(self) -> MockError:
        """A namespace ResourceQuota refuses the workload: nothing is made, nothing to roll back."""
        used = sum(1 for sb in self.store.snapshot().values() if not sb.deleted)
        return MockError(quirks.K8S_QUOTA_EXCEEDED, id=str(uuid.uuid4()), quota=quirks.K8S_QUOTA_NAME, used=used)

    def pod_ready(self, sandbox_id: str, outcome: PodOutcome) -> tuple[Sandbox, Workload] | None:
        """kubernetes_service.py _wait_for_sandbox_ready for the sandbox a create just made: its workload Pending
        until the pod does what ``outcome`` says; (the sandbox, its workload) once Ready. A pod that fails or is
        never Ready raises (the workload deleted); None when Pool capacity stayed exhausted (the workload deleted,
        the create answers 429 with ``retry_after()``)."""
        sb = self.store.get(sandbox_id)
        w = self.workloads.pending(sb.id, sb.created_at)
        start = time.monotonic()
        if outcome.to == "capacity":
            self._no_capacity(sb, w, start)
            return None
        wait = outcome.after if outcome.to != "unschedulable" else self.create_timeout
        self.closing.wait(min(wait, self.create_timeout))
        if outcome.to == "failed" and outcome.after < self.create_timeout:
            self._abandon(sb.id)
            raise MockError(quirks.K8S_POD_FAILED, id=sb.id, total=1, reason=outcome.reason)
        if outcome.to == "unschedulable" or outcome.after >= self.create_timeout:
            self._abandon(sb.id)
            raise MockError(quirks.K8S_POD_READY_TIMEOUT, id=sb.id, elapsed=time.monotonic() - start)
        self.workloads.ready(sb.id, sb.created_at)
        return sb, w

    def _no_capacity(self, sb: Sandbox, w: Workload, start: float) -> None:
        """_wait_for_sandbox_ready while the workload reports exhausted Pool capacity: the 429 once that lasted
        pool_acquisition_timeout_seconds, unless the create timeout (checked first) ends the wait before it."""
        w.capacity = True
        self.closing.wait(min(self.pool_timeout, self.create_timeout))
        self._abandon(sb.id)
        if self.pool_timeout >= self.create_timeout:
            raise MockError(quirks.K8S_POD_READY_TIMEOUT, id=sb.id, elapsed=time.monotonic() - start)

    def retry_after(self) -> str:
        """The 429's Retry-After: the acquisition timeout in whole seconds, at least 1."""
        return str(max(1, math.ceil(self.pool_timeout)))

    def _abandon(self, sandbox_id: str) -> None:
        """The server deletes the workload of a create that failed (kubernetes_service.py create_sandbox)."""
        self.workloads.forget(sandbox_id)
        try:
            self.store.delete(sandbox_id)
        except MockError:
            pass

    def create_json(self, sb: Sandbox, w: Workload, r: dict[str, Any]) -> dict[str, Any]:
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

    # -- the other sandbox operations -------------------------------------------------------------------------
    def page(self, states: set[str], wanted: Mapping[str, str], page: int, size: int) -> dict[str, Any]:
        """list_helpers.py: the state and metadata filters on the mapped sandboxes, newest creationTimestamp first
        (whole seconds; ties in the API server's order, by name), then the page."""
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
        return {"items": items[(page - 1) * size : page * size], "pagination": pagination}

    def delete(self, sandbox_id: str) -> None:
        with k8s_errors(sandbox_id):
            self.store.delete(sandbox_id)
        self.workloads.forget(sandbox_id)

    def pause(self, sandbox_id: str) -> None:
        """batchsandbox_provider.py pause_sandbox: only a Ready (Succeed) workload; the mock pauses its sandbox at
        once (Paused, no Pausing in between) [choice]."""
        sb = self.sandbox(sandbox_id)
        w = self.workloads.get(sb.id)
        if w is None or w.phase == "Pending":
            raise MockError(quirks.K8S_INVALID_STATE, message="Cannot pause: sandbox is being created (phase=Pending)")
        if sb.paused:
            raise MockError(quirks.K8S_INVALID_STATE, message="Sandbox is already paused")
        with k8s_errors(sb.id):
            self.store.pause(sb.id)

    def resume(self, sandbox_id: str) -> None:
        sb = self.sandbox(sandbox_id)
        w = self.workloads.get(sb.id)
        if w is None or w.phase == "Pending":
            raise MockError(quirks.K8S_INVALID_STATE, message="Cannot resume: sandbox is being created (phase=Pending)")
        if not sb.paused:
            raise MockError(quirks.K8S_INVALID_STATE, message="Cannot resume sandbox in state Running, expected Paused")
        with k8s_errors(sb.id):
            self.store.resume(sb.id)

    def renew(self, sandbox_id: str, expires_at: datetime) -> datetime:
        """kubernetes_service.py renew_expiration: the time first (400), then the sandbox (404), then 409 for one
        without expiry; the codes and messages are the Docker ones (shared validators). The new expiry."""
        when = expires_at
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        if when <= self.store.clock():
            raise MockError(quirks.INVALID_EXPIRATION)
        with k8s_errors(sandbox_id):
            return self.store.renew(sandbox_id, expires_at)

    def patch_metadata(self, sandbox_id: str, patch: Mapping[str, str | None]) -> Sandbox:
        """kubernetes_service.py patch_sandbox_metadata: the sandbox, then the label checks; the patched sandbox."""
        sb = self.sandbox(sandbox_id)
        apply_metadata_patch(sb, patch)
        return sb
