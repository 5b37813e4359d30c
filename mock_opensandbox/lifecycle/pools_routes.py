"""The pool routes of the Kubernetes runtime and its poolRef creates (server api/pool.py, services/k8s/pool_service.py,
services/k8s/kubernetes_service.py create_sandbox), over the state in lifecycle/pools.py (its ``PoolStore``, a mock
started with ``runtime="kubernetes"``). Without one the ``/pools`` routes answer as the Docker runtime does: the
body first, then 501 ``KUBERNETES::POOL_NOT_SUPPORTED``."""

from __future__ import annotations

import uuid
from typing import Any, Callable

from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.lifecycle import validation as V
from mock_opensandbox.lifecycle import validation_checks as C
from mock_opensandbox.lifecycle.model import Sandbox, SandboxStore, format_ts, validate_metadata
from mock_opensandbox.lifecycle.pools import CAPACITY_KEYS, PoolStore
from mock_opensandbox.lifecycle.quirks import MockError
from mock_opensandbox.wire.http1 import Request


def _capacity(spec: dict[str, int]) -> dict[str, int]:
    return {k: spec[k] for k in CAPACITY_KEYS}


def _capacity_of(r: dict[str, Any]) -> dict[str, int]:
    c = r["capacity_spec"]
    return _capacity(
        {"bufferMax": c["buffer_max"], "bufferMin": c["buffer_min"], "poolMax": c["pool_max"], "poolMin": c["pool_min"]}
    )


def _pod_spec(template: dict[str, Any]) -> dict[str, Any]:
    """The pool template's first container (image, command + args, resources.limits), as far as it is there."""
    containers = ((template.get("spec") or {}) if isinstance(template.get("spec"), dict) else {}).get("containers")
    first = containers[0] if isinstance(containers, list) and containers and isinstance(containers[0], dict) else {}
    limits = (first.get("resources") or {}).get("limits") if isinstance(first.get("resources"), dict) else None
    return {
        "image": first.get("image") if isinstance(first.get("image"), str) else "unknown",
        "limits": {k: str(v) for k, v in limits.items()} if isinstance(limits, dict) else None,
    }


class PoolsRoutes:
    """The pools API over ``pools`` (None: the Docker runtime) and the poolRef creates, which make their sandbox in
    ``store``; ``max_timeout`` and ``allowed_host_paths`` are the server config's, as a create's checks read them."""

    def __init__(
        self,
        store: SandboxStore,
        pools: PoolStore | None,
        *,
        max_timeout: int | None,
        allowed_host_paths: list[str],
    ):
        self.store = store
        self.pools = pools
        self.max_timeout = max_timeout
        self.allowed_host_paths = allowed_host_paths

    def _pools(self) -> PoolStore:
        if self.pools is None:
            raise MockError(quirks.POOLS_UNSUPPORTED)
        return self.pools

    def create(self, req: Request) -> None:
        """POST /pools: 201 with the pool (no status yet), 409 for a name in use."""
        r = V.body(req, V.CreatePoolRequest)
        req.send_json(201, self._pools().create(r["name"], r["template"], _capacity_of(r)))

    def list(self, req: Request) -> None:
        req.send_json(200, {"items": self._pools().list()})

    def get(self, req: Request) -> None:
        req.send_json(200, self._pools().get(req.params["pool"]))

    def update(self, req: Request) -> None:
        """PUT /pools/{name}: the body first, then the pool; only capacitySpec changes."""
        r = V.body(req, V.UpdatePoolRequest)
        req.send_json(200, self._pools().update(req.params["pool"], _capacity_of(r)))

    def delete(self, req: Request) -> None:
        self._pools().delete(req.params["pool"])
        req.send(204)

    def _pool_mode_checks(self, pools: PoolStore, r: dict[str, Any], pool: str) -> None:
        """server services/k8s/kubernetes_service.py create_sandbox, in its order, for a poolRef create (the image
        and entrypoint of the request are not resolved: the pool's pods are made already)."""
        C.validate_extensions(r["extensions"])  # api/lifecycle.py, before the service
        if r["network_policy"] is not None:
            raise MockError(quirks.POOL_MODE_NETWORK_POLICY)
        if r["credential_proxy"] and r["credential_proxy"]["enabled"]:
            raise MockError(quirks.POOL_MODE_CREDENTIAL_PROXY)
        validate_metadata(r["metadata"])
        C.ensure_platform_valid(r["platform"])
        C.timeout_or_raise(self.store.clock(), r["timeout"], self.max_timeout)
        if r["secure_access"]:
            raise MockError(quirks.K8S_SECURE_ACCESS_UNSUPPORTED)
        C.ensure_volumes_valid(r["volumes"], self.allowed_host_paths)
        if r["volumes"]:
            raise MockError(quirks.POOL_MODE_VOLUMES)
        if not pools.exists(pool):
            raise MockError(quirks.POOL_NOT_FOUND, name=pool)
        if r["platform"] is not None:
            raise MockError(quirks.POOL_MODE_PLATFORM)

    def create_from_pool(
        self, req: Request, r: dict[str, Any], on_bound: Callable[[Sandbox], None] | None = None
    ) -> None:
        """POST /sandboxes with ``extensions.poolRef``: the checks, a pod of the pool, then the mock's usual sandbox
        (the pool template's image, the request's entrypoint or the server's default) answered as the Kubernetes
        runtime answers a BatchSandbox whose pod is Ready (202 Running/RUNNING). ``on_bound(sandbox)``: once it has
        its pod (lifecycle/k8s_sandboxes.py notes the pool-mode workload)."""
        pool = r["extensions"][quirks.POOL_REF_KEY].strip()
        pools = self._pools()
        self._pool_mode_checks(pools, r, pool)
        key = pools.reserve(pool)
        if key is None:
            raise MockError(quirks.POOL_POD_READY_TIMEOUT, id=str(uuid.uuid4()), elapsed=0.0)
        try:
            template = pools.template(pool)
            pod = _pod_spec(template)
            ext = {k: v for k, v in r["extensions"].items() if k.startswith(quirks.EXTENSIONS_PREFIX)} or None
            sb = self.store.create(
                image={"uri": pod["image"]},
                entrypoint=r["entrypoint"] or list(quirks.K8S_DEFAULT_ENTRYPOINT),
                env={k: v for k, v in (r["env"] or {}).items() if v is not None},
                metadata=r["metadata"],
                resource_limits=pod["limits"],
                timeout=r["timeout"],
                extensions=ext,
            )
        except BaseException:
            pools.cancel(pool, key)
            raise
        pools.bind(pool, key, sb.id)
        if on_bound is not None:
            on_bound(sb)
        state, reason, message = quirks.K8S_STATUS_RUNNING
        status = {"state": state, "reason": reason, "message": message}
        status["lastTransitionAt"] = format_ts(sb.created_at.replace(microsecond=0))
        out: dict[str, Any] = {"id": sb.id, "status": status}
        if r["metadata"] is not None:
            out["metadata"] = dict(r["metadata"])
        if ext:
            out["extensions"] = dict(ext)
        if sb.expires_at is not None:
            out["expiresAt"] = format_ts(sb.expires_at)
        out["createdAt"] = format_ts(sb.created_at)
        if r["entrypoint"] is not None:
            out["entrypoint"] = list(r["entrypoint"])
        req.send_json(202, out)
