"""The pool routes of the Kubernetes runtime and its poolRef creates (server api/pool.py, services/k8s/pool_service.py,
services/k8s/kubernetes_service.py create_sandbox), over the model in lifecycle/pools.py. ``LifecycleApp`` routes
here when it has a PoolStore (``app.pools``, a mock started with ``runtime="kubernetes"``); without one its
``/pools`` routes answer as the Docker runtime does (501 ``KUBERNETES::POOL_NOT_SUPPORTED``, lifecycle/routes.py)."""

from __future__ import annotations

import uuid
from typing import Any, Callable

from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.lifecycle import validation as V
from mock_opensandbox.lifecycle import validation_checks as C
from mock_opensandbox.lifecycle.model import Sandbox, format_ts, validate_metadata
from mock_opensandbox.lifecycle.pools import CAPACITY_KEYS
from mock_opensandbox.lifecycle.quirks import MockError
from mock_opensandbox.wire.http1 import Request


def _capacity(spec: dict[str, int]) -> dict[str, int]:
    return {k: spec[k] for k in CAPACITY_KEYS}


def _capacity_of(r: dict[str, Any]) -> dict[str, int]:
    c = r["capacity_spec"]
    return _capacity(
        {"bufferMax": c["buffer_max"], "bufferMin": c["buffer_min"], "poolMax": c["pool_max"], "poolMin": c["pool_min"]}
    )


def create(app: Any, req: Request) -> None:
    """POST /pools: 201 with the pool (no status yet), 409 for a name in use."""
    r = V.body(req, V.CreatePoolRequest)
    req.send_json(201, app.pools.create(r["name"], r["template"], _capacity_of(r)))


def list_(app: Any, req: Request) -> None:
    req.send_json(200, {"items": app.pools.list()})


def get(app: Any, req: Request) -> None:
    req.send_json(200, app.pools.get(req.params["pool"]))


def update(app: Any, req: Request) -> None:
    """PUT /pools/{name}: the body first, then the pool; only capacitySpec changes."""
    r = V.body(req, V.UpdatePoolRequest)
    req.send_json(200, app.pools.update(req.params["pool"], _capacity_of(r)))


def delete(app: Any, req: Request) -> None:
    app.pools.delete(req.params["pool"])
    req.send(204)


def _pool_mode_checks(app: Any, r: dict[str, Any], pool: str) -> None:
    """server services/k8s/kubernetes_service.py create_sandbox, in its order, for a poolRef create (the image
    and entrypoint of the request are not resolved: the pool's pods are made already)."""
    C.validate_extensions(r["extensions"])  # api/lifecycle.py, before the service
    if r["network_policy"] is not None:
        raise MockError(quirks.POOL_MODE_NETWORK_POLICY)
    if r["credential_proxy"] and r["credential_proxy"]["enabled"]:
        raise MockError(quirks.POOL_MODE_CREDENTIAL_PROXY)
    validate_metadata(r["metadata"])
    C.ensure_platform_valid(r["platform"])
    C.timeout_or_raise(app.store.clock(), r["timeout"], app.max_timeout)
    if r["secure_access"]:
        raise MockError(quirks.K8S_SECURE_ACCESS_UNSUPPORTED)
    C.ensure_volumes_valid(r["volumes"], app.allowed_host_paths)
    if r["volumes"]:
        raise MockError(quirks.POOL_MODE_VOLUMES)
    if not app.pools.exists(pool):
        raise MockError(quirks.POOL_NOT_FOUND, name=pool)
    if r["platform"] is not None:
        raise MockError(quirks.POOL_MODE_PLATFORM)


def _pod_spec(template: dict[str, Any]) -> dict[str, Any]:
    """The pool template's first container (image, command + args, resources.limits), as far as it is there."""
    containers = ((template.get("spec") or {}) if isinstance(template.get("spec"), dict) else {}).get("containers")
    first = containers[0] if isinstance(containers, list) and containers and isinstance(containers[0], dict) else {}
    limits = (first.get("resources") or {}).get("limits") if isinstance(first.get("resources"), dict) else None
    return {
        "image": first.get("image") if isinstance(first.get("image"), str) else "unknown",
        "limits": {k: str(v) for k, v in limits.items()} if isinstance(limits, dict) else None,
    }


def create_from_pool(
    app: Any, req: Request, r: dict[str, Any], on_bound: Callable[[Sandbox], None] | None = None
) -> None:
    """POST /sandboxes with ``extensions.poolRef``: the checks, a pod of the pool, then the mock's usual sandbox
    (the pool template's image, the request's entrypoint or the server's default) answered as the Kubernetes
    runtime answers a BatchSandbox whose pod is Ready (202 Running/RUNNING). ``on_bound(sandbox)``: once it has
    its pod (lifecycle/k8s_sandboxes.py notes the pool-mode workload)."""
    pool = r["extensions"][quirks.POOL_REF_KEY].strip()
    _pool_mode_checks(app, r, pool)
    key = app.pools.reserve(pool)
    if key is None:
        raise MockError(quirks.POOL_POD_READY_TIMEOUT, id=str(uuid.uuid4()), elapsed=0.0)
    try:
        template = app.pools.template(pool)
        pod = _pod_spec(template)
        ext = {k: v for k, v in r["extensions"].items() if k.startswith(quirks.EXTENSIONS_PREFIX)} or None
        sb = app.store.create(
            image={"uri": pod["image"]},
            entrypoint=r["entrypoint"] or list(quirks.K8S_DEFAULT_ENTRYPOINT),
            env={k: v for k, v in (r["env"] or {}).items() if v is not None},
            metadata=r["metadata"],
            resource_limits=pod["limits"],
            timeout=r["timeout"],
            extensions=ext,
        )
    except BaseException:
        app.pools.cancel(pool, key)
        raise
    app.pools.bind(pool, key, sb.id)
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
