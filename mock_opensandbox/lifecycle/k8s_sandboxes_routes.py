"""The sandbox routes of the Kubernetes runtime (``--runtime kubernetes``): create, get, list, delete, pause, resume,
renew and metadata, answered as server 1.1.1's ``KubernetesSandboxService`` with the BatchSandbox provider answers
them. Routes only: each reads its request and answers with what lifecycle/k8s_sandboxes.py ``K8sSandboxes`` (the
workloads, the create's wait for its pod, the sandbox as the API shows it) says. QUIRKS.md, "Kubernetes runtime:
sandboxes", lists each behaviour and its source.

``install(app, create_timeout)`` puts these routes and the diagnostics' (lifecycle/k8s_diagnostics_routes.py) in
front of the Docker ones of ``LifecycleApp`` (lifecycle/app.py); the facade calls it for ``runtime="kubernetes"``.
A create goes through the Docker route's checks and sandbox (lifecycle/sandboxes_routes.py ``SandboxesRoutes``),
a poolRef create through ``PoolsRoutes``, and its answer is the Kubernetes one once the pod is Ready. A create's pod
outcome comes from a fault rule of kind ``pod`` (docs/FAULTS.md) on the request's handler (``pod_outcome``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.lifecycle import validation as V
from mock_opensandbox.lifecycle.k8s_diagnostics_routes import K8sDiagnosticsRoutes
from mock_opensandbox.lifecycle.k8s_sandboxes import K8sSandboxes, pod_failed_on_pull
from mock_opensandbox.lifecycle.k8s_workloads import PodOutcome
from mock_opensandbox.lifecycle.model import format_ts
from mock_opensandbox.lifecycle.pools_routes import PoolsRoutes
from mock_opensandbox.lifecycle.quirks import MockError
from mock_opensandbox.lifecycle.sandboxes_routes import SandboxesRoutes
from mock_opensandbox.wire.http1 import Request, Router

if TYPE_CHECKING:  # app.py never imports this module; the facade installs it (server.py)
    from mock_opensandbox.lifecycle.app import LifecycleApp


class K8sSandboxesRoutes:
    """The Kubernetes sandbox routes over ``k8s`` (its sandboxes and workloads); a create is checked and made by
    the Docker ``sandboxes`` routes, a poolRef create by ``pools``."""

    def __init__(self, k8s: K8sSandboxes, sandboxes: SandboxesRoutes, pools: PoolsRoutes):
        self.k8s = k8s
        self.sandboxes = sandboxes
        self.pools = pools

    def create(self, req: Request) -> None:
        r = V.body(req, V.CreateSandboxRequest)
        if (r["extensions"] or {}).get(quirks.POOL_REF_KEY, "").strip():
            return self.pools.create_from_pool(req, r, on_bound=self.k8s.pooled)
        told = req.handler.pod_outcome  # what a fault rule of kind pod says (workbench/faultinject.py), or None
        outcome = told if isinstance(told, PodOutcome) else PodOutcome()
        if outcome.to == "quota":  # the API server refuses the workload: nothing is made, nothing to roll back
            self.sandboxes.create_checks(dict(r))  # the request's own 400s come first (the server checks first)
            raise self.k8s.quota_exceeded()
        try:
            made = self.sandboxes.create_sandbox(dict(r))  # the Docker route's create (its checks, volumes, sandbox)
        except MockError as e:  # the image cannot be pulled: on Kubernetes, the pod's container waits on it
            failed = pod_failed_on_pull(e)
            if failed is None:
                raise
            raise failed from None
        ready = self.k8s.pod_ready(made.id, outcome)
        if ready is None:  # Pool capacity stayed exhausted
            retry = self.k8s.retry_after()
            req.send_json(429, quirks.K8S_POOL_CAPACITY_EXHAUSTED.body(), {"Retry-After": retry})
            return
        sb, w = ready
        req.send_json(202, self.k8s.create_json(sb, w, r))

    def get(self, req: Request) -> None:
        req.send_json(200, self.k8s.sandbox_json(self.k8s.sandbox(req.params["sid"])))

    def list(self, req: Request) -> None:
        # the query's checks (422 page, pageSize; 400 metadata) and its metadata filter, as the Docker route's
        wanted, page, size = V.list_query(req)
        states = {s.lower() for s in req.query.get("state") or []}
        req.send_json(200, self.k8s.page(states, wanted or {}, page, size))

    def delete(self, req: Request) -> None:
        self.k8s.delete(req.params["sid"])
        req.send(204)

    def pause(self, req: Request) -> None:
        self.k8s.pause(req.params["sid"])
        req.send(202)

    def resume(self, req: Request) -> None:
        self.k8s.resume(req.params["sid"])
        req.send(202)

    def renew(self, req: Request) -> None:
        r = V.body(req, V.RenewSandboxExpirationRequest)
        new = self.k8s.renew(req.params["sid"], r["expires_at"])
        req.send_json(200, {"expiresAt": format_ts(new)})

    def patch_metadata(self, req: Request) -> None:
        """The body first (422), then the sandbox and its labels; the answer is the sandbox as GET shows it."""
        patch = V.body(req, V.PatchSandboxMetadataRequest)
        req.send_json(200, self.k8s.sandbox_json(self.k8s.patch_metadata(req.params["sid"], patch)))


def install(app: "LifecycleApp", create_timeout: float, pool_timeout: float = 30.0) -> K8sSandboxes:
    """The Kubernetes runtime's sandbox and diagnostics routes in front of ``app``'s (a LifecycleApp with a
    PoolStore); the sandboxes' Kubernetes state, which the facade ends at stop (``closing``)."""
    k8s = K8sSandboxes(app.store, create_timeout, pool_timeout)
    ks = K8sSandboxesRoutes(k8s, app.sandboxes, app.pools)
    kd = K8sDiagnosticsRoutes(app.diagnostics, k8s.workloads)
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
        r.add("GET", s + "/{sid}/diagnostics/logs", kd.logs)
        r.add("GET", s + "/{sid}/diagnostics/inspect", kd.inspect)
        r.add("GET", s + "/{sid}/diagnostics/events", kd.events)
        r.add("GET", s + "/{sid}/diagnostics/summary", kd.summary)
    app.router.prepend(r)
    return k8s
