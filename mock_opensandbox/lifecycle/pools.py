"""Pools of the Kubernetes runtime (``--runtime kubernetes``): state only, no HTTP (lifecycle/pools_routes.py).

A pool is what the server keeps in its Pool resource (server services/k8s/pool_service.py: name, template,
capacitySpec, creationTimestamp) plus the status OpenSandbox's pool controller writes for it
(kubernetes/internal/controller/pool_controller.go, allocator.go at 3bb6fad): ``total`` pods, ``allocated`` to
sandboxes, ``available`` (idle and Ready), ``revision``. The mock holds no pods: a pool is counts, and every pod it
would make is Ready at once, so the status is the controller's fixpoint once the pods are Ready (``_settle``):

- the buffer is the idle pods; the controller aims at ``allocated + shortage + buffer`` while the buffer is within
  [bufferMin, bufferMax], else ``allocated + shortage + (bufferMin + bufferMax) // 2``, at least poolMin;
- it creates at most poolMax - total pods a round, and at most the 25 % maxUnavailable ramp (ceil(desired / 4),
  at least one); it deletes idle pods above the aim;
- a poolRef create takes one idle pod (packed allocation) or, with none idle, one new pod while total < poolMax;
  a deleted sandbox's pod is released and deleted (Delete recycle), and the pool refills;
- the answer to a create carries no status (the controller has not reconciled it yet); an update answers with the
  status of the capacity before it (the patch returns the stored status); every later read has the fixpoint.

What the mock simplifies (QUIRKS.md, "Kubernetes runtime: pools"): no pod is ever pending, so ``available`` never
lags ``total``; a release is seen on the next read, not after the controller's round trip; the revision is the
oracle's hash of the template (16 hex digits of sha256 over its sorted JSON), not the Go controller's; the template
is stored, never checked.
"""

from __future__ import annotations

import copy
import hashlib
import json
import threading
import uuid
from datetime import datetime, timezone
from typing import Any, Callable

from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.lifecycle.quirks import MockError

CAPACITY_KEYS = ("bufferMax", "bufferMin", "poolMax", "poolMin")  # PoolCapacitySpec's field order (api/schema.py)


def creation_timestamp(dt: datetime) -> str:
    """metadata.creationTimestamp as the API server stamps it and pydantic gives it back: whole seconds, ``Z``."""
    return dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def revision(template: Any) -> str:
    """status.revision: the oracle's template hash (the Go controller's own hash is not reproduced)."""
    return hashlib.sha256(json.dumps(template, sort_keys=True).encode()).hexdigest()[:16]


class Pool:
    def __init__(self, name: str, template: dict[str, Any], capacity: dict[str, int], created_at: datetime):
        self.name = name
        self.template = copy.deepcopy(template)
        self.capacity = dict(capacity)
        self.created_at = created_at
        self.total = 0  # pods, all Ready
        self.allocations: dict[str, str | None] = {}  # allocation key -> sandbox id (None: a create in progress)
        self.status: dict[str, Any] | None = None  # what the controller last wrote (None: not reconciled yet)

    @property
    def allocated(self) -> int:
        return len(self.allocations)

    def to_json(self, with_status: bool = True) -> dict[str, Any]:
        """PoolResponse with exclude_none (server api/pool.py, services/k8s/pool_service.py _pool_from_raw)."""
        out: dict[str, Any] = {"name": self.name, "capacitySpec": {k: self.capacity[k] for k in CAPACITY_KEYS}}
        if with_status and self.status is not None:
            out["status"] = dict(self.status)
        out["createdAt"] = creation_timestamp(self.created_at)
        return out

    # -- the controller's rounds (pool_controller.go scalePool at 3bb6fad), every pod Ready --------------------
    def _desired(self, shortage: int = 0) -> int:
        lo, hi = self.capacity["bufferMin"], self.capacity["bufferMax"]
        buffer = self.total - self.allocated
        aim = self.allocated + shortage + (buffer if lo <= buffer <= hi else (lo + hi) // 2)
        return max(aim, self.capacity["poolMin"])

    def _round(self, shortage: int = 0) -> bool:
        desired, room = self._desired(shortage), max(self.capacity["poolMax"] - self.total, 0)
        if desired > self.total and room > 0:
            self.total += min(desired - self.total, room, max(-(-desired * 25 // 100), 1))
            return True
        idle = self.total - self.allocated
        if desired < self.total and idle > 0:
            self.total -= min(self.total - desired, idle)
            return True
        return False

    def settle(self, alive: Callable[[str], bool]) -> None:
        """Release the allocations of sandboxes that are gone (their pods deleted), then scale to the fixpoint."""
        for key, sid in list(self.allocations.items()):
            if sid is not None and not alive(sid):
                del self.allocations[key]
                self.total -= 1
        for _ in range(10_000):  # each round moves toward the aim; the bound only guards a bad capacity
            if not self._round():
                break
        self.status = {
            "total": self.total,
            "allocated": self.allocated,
            "available": self.total - self.allocated,
            "revision": revision(self.template),
        }

    def allocate(self) -> str | None:
        """One pod for a poolRef create: an idle one, else a new one while total < poolMax; None when exhausted."""
        if self.total - self.allocated <= 0:
            if not self._round(shortage=1) or self.total - self.allocated <= 0:
                return None
        key = uuid.uuid4().hex
        self.allocations[key] = None
        return key


class PoolStore:
    """The namespace's Pool resources. ``alive(sandbox_id)`` says whether a sandbox still exists (its pod is
    released otherwise)."""

    def __init__(self, clock: Callable[[], datetime], alive: Callable[[str], bool] | None = None):
        self.clock = clock
        self.alive = alive or (lambda sid: True)
        self.lock = threading.RLock()
        self._pools: dict[str, Pool] = {}

    def _get(self, name: str) -> Pool:
        pool = self._pools.get(name)
        if pool is None:
            raise MockError(quirks.POOL_NOT_FOUND, name=name)
        return pool

    def exists(self, name: str) -> bool:
        with self.lock:
            return name in self._pools

    def create(self, name: str, template: dict[str, Any], capacity: dict[str, int]) -> dict[str, Any]:
        with self.lock:
            if name in self._pools:
                raise MockError(quirks.POOL_ALREADY_EXISTS, name=name)
            pool = self._pools[name] = Pool(name, template, capacity, self.clock())
            return pool.to_json(with_status=False)

    def get(self, name: str) -> dict[str, Any]:
        with self.lock:
            pool = self._get(name)
            pool.settle(self.alive)
            return pool.to_json()

    def list(self) -> list[dict[str, Any]]:
        """By name, as the API server lists a namespace's objects."""
        with self.lock:
            out = []
            for name in sorted(self._pools):
                self._pools[name].settle(self.alive)
                out.append(self._pools[name].to_json())
            return out

    def update(self, name: str, capacity: dict[str, int]) -> dict[str, Any]:
        with self.lock:
            pool = self._get(name)
            pool.settle(self.alive)
            pool.capacity = dict(capacity)
            return pool.to_json()

    def template(self, name: str) -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy(self._get(name).template)

    def delete(self, name: str) -> None:
        """Its pods go with it (garbage collection); its sandboxes stay, their pods gone."""
        with self.lock:
            self._get(name)
            del self._pools[name]

    def clear(self) -> int:
        """Every pool gone (the workbench's reset); how many there were."""
        with self.lock:
            n = len(self._pools)
            self._pools.clear()
            return n

    # -- poolRef creates ------------------------------------------------------------------------------------------
    def reserve(self, name: str) -> str | None:
        """A pod of pool ``name`` for a create in progress (MockError 404 without the pool); None: exhausted."""
        with self.lock:
            pool = self._get(name)
            pool.settle(self.alive)
            return pool.allocate()

    def bind(self, name: str, key: str, sandbox_id: str) -> None:
        with self.lock:
            pool = self._pools.get(name)
            if pool is not None and key in pool.allocations:
                pool.allocations[key] = sandbox_id

    def cancel(self, name: str, key: str) -> None:
        """A create that failed after its reservation: the server deletes the BatchSandbox, the pod is released."""
        with self.lock:
            pool = self._pools.get(name)
            if pool is not None and pool.allocations.pop(key, "gone") != "gone":
                pool.total -= 1
