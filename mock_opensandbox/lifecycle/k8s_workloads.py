"""The Kubernetes runtime's workloads (``--runtime kubernetes``): state only, no HTTP (lifecycle/k8s_sandboxes.py).

The server on Kubernetes keeps a sandbox as a BatchSandbox resource; what its API answers comes from that resource
(server services/k8s/batchsandbox_provider.py get_status, workload_mapper.py _build_sandbox_from_workload). The mock's
sandbox underneath is its usual one (lifecycle/model.py); this table holds what the BatchSandbox adds: its phase,
its creationTimestamp (whole seconds), and whether it was made from a pool (``spec.poolRef``, no pod template, so
no image and no command to show). A sandbox the table does not know yet is a create in progress: phase Pending.

Phases (the controller's, upstream kubernetes/internal/controller/batchsandbox_status.go at 3bb6fad): ``Pending``
until the pod is Ready (the mock: until its sandbox started and the create's pod outcome, a fault rule
(docs/FAULTS.md, kind ``pod``), let it be Ready), then ``Succeed``; ``Paused`` while the mock's sandbox is paused.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime


@dataclass
class Workload:
    created: datetime  # metadata.creationTimestamp (whole seconds)
    phase: str = "Pending"  # status.phase: Pending, Succeed
    pooled: bool = False  # spec.poolRef: no template, image "unknown", command []
    capacity: bool = False  # the PoolAllocationPending condition: Pool capacity exhausted


class Workloads:
    """The namespace's BatchSandboxes by sandbox id."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, Workload] = {}

    def get(self, sandbox_id: str) -> Workload | None:
        with self._lock:
            return self._items.get(sandbox_id)

    def pending(self, sandbox_id: str, created: datetime, pooled: bool = False) -> Workload:
        with self._lock:
            w = self._items[sandbox_id] = Workload(created.replace(microsecond=0), "Pending", pooled)
            return w

    def ready(self, sandbox_id: str, created: datetime, pooled: bool = False) -> None:
        with self._lock:
            w = self._items.get(sandbox_id)
            if w is None:
                w = self._items[sandbox_id] = Workload(created.replace(microsecond=0), pooled=pooled)
            w.phase = "Succeed"

    def forget(self, sandbox_id: str) -> None:
        with self._lock:
            self._items.pop(sandbox_id, None)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


POD_OUTCOMES = ("ready", "failed", "unschedulable", "quota", "capacity")
FAIL_REASONS = ("ImagePullBackOff", "ErrImagePull", "CrashLoopBackOff", "CreateContainerConfigError")


@dataclass(frozen=True)
class PodOutcome:
    """What a create's pod does (a fault rule of kind ``pod``, workbench/faults.py; docs/FAULTS.md): ``ready``
    after ``after`` seconds Pending, ``failed`` after ``after`` seconds (a container waiting on ``reason``),
    ``unschedulable``: never Ready, Pending until the server's create timeout, ``quota``: the workload itself
    refused by a namespace ResourceQuota (no pod at all), or ``capacity``: no Pool capacity for it (the
    PoolAllocationPending condition of a controller that reports it)."""

    to: str = "ready"
    after: float = 0.0
    reason: str = "ImagePullBackOff"
