"""The lifecycle app of the mock OpenSandbox server (FastAPI/uvicorn in reality): wiring only. ``LifecycleApp``
holds the route table (/health, /version, /v1/sandboxes... also served without /v1, snapshots, diagnostics,
pools, templates, metrics, the server-side proxy and the network policy), the dispatch, the API-key and host
checks and the mapping of errors to FastAPI's answers; each route is a method of one ``<Api>Routes`` of a
``lifecycle/<api>_routes.py`` (tiers/t0/repo/test_routes_layout.py). Request validation reproduces FastAPI/pydantic
422 bodies (lifecycle/pydantic_lite.py, lifecycle/validation.py). The Docker service behind the routes is given to
LifecycleApp as lifecycle/services.py protocols (the facade passes docker/'s snapshot store and diagnostics text):
this layer never imports docker/ or the workbench, which adds its /__mock__/faults routes to the router itself
(workbench/fault_routes.py).
"""

from __future__ import annotations

import email.utils
import hmac
import json
import re
import socket
import sys
import traceback
from typing import Protocol, cast

from mock_opensandbox.lifecycle import pydantic_lite as P
from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.lifecycle.diagnostics_routes import DiagnosticsRoutes
from mock_opensandbox.lifecycle.health_routes import HealthRoutes
from mock_opensandbox.lifecycle.ingress import Ingress
from mock_opensandbox.lifecycle.metrics_routes import MetricsRoutes
from mock_opensandbox.lifecycle.model import SandboxStore
from mock_opensandbox.lifecycle.pools import PoolStore
from mock_opensandbox.lifecycle.pools_routes import PoolsRoutes
from mock_opensandbox.lifecycle.quirks import MockError
from mock_opensandbox.lifecycle.sandboxes_routes import SandboxesRoutes
from mock_opensandbox.lifecycle.services import ContainerService, DiagnosticsText, SnapshotService, VolumeService
from mock_opensandbox.lifecycle.snapshots_routes import SnapshotsRoutes
from mock_opensandbox.lifecycle.templates_routes import TemplatesRoutes
from mock_opensandbox.wire.http1 import Handler, Request, Router, host_allowed, new_request_id
from mock_opensandbox.wire.listener import App, FaultRules

# =====================================================================================================
# the application
# =====================================================================================================
EXEMPT_PREFIXES = ("/health", "/version", "/docs", "/redoc", "/openapi.json")  # server middleware/auth.py
_PROXY_PATH_RE = re.compile(r"^(/v1)?/sandboxes/[^/]+/proxy/\d+(/|$)")


class LifecycleApp(App):
    """The route table and policy of the lifecycle listener: each route class gets what it uses. What the runtime
    service gives is declared in lifecycle/services.py: ``provisioner`` answers endpoint questions
    (``endpoint(sb, port) -> (endpoint, headers|None)``), ``volumes``, ``snapshots`` and ``diagnostics`` are
    docker/'s."""

    def __init__(
        self,
        store: SandboxStore,
        provisioner: ContainerService | None,
        *,
        api_key: str | None,
        bind_host: str = "127.0.0.1",
        verbose: bool = False,
        check_host: bool = True,
        reject_origin: bool = True,
        faults: FaultRules | None = None,
        max_timeout: int | None = None,
        allowed_host_paths: list[str] | None = None,
        volumes: VolumeService | None = None,
        snapshots: SnapshotService | None = None,
        diagnostics: DiagnosticsText | None = None,
        pools: PoolStore | None = None,
        ingress: Ingress | None = None,
    ):
        self.store = store
        # the listener's fault rules (wire/listener.py FaultRules: workbench/faults.py, injected by wire/http1.py)
        self.faults = faults
        self.api_key = api_key
        self.bind_host = bind_host
        self.verbose = verbose
        self.check_host = check_host
        self.reject_origin = reject_origin
        # server config: [server] max_sandbox_timeout_seconds (unset), [storage] allowed_host_paths ([])
        host_paths = list(allowed_host_paths or [])
        self.health = HealthRoutes(provisioner)
        # the Kubernetes runtime's PoolStore (lifecycle/pools.py); None: the Docker runtime (501s)
        self.pools = PoolsRoutes(store, pools, max_timeout=max_timeout, allowed_host_paths=host_paths)
        self.sandboxes = SandboxesRoutes(
            store,
            provisioner,
            self.pools,
            max_timeout=max_timeout,
            allowed_host_paths=host_paths,
            volumes=volumes,
            snapshots=snapshots,
            ingress=ingress,
        )
        # the Docker service's snapshots (docker/snapshots.py SnapshotStore) and diagnostics text
        # (docker/diagnostics.py), both given by the facade (server.py)
        self.snapshots = SnapshotsRoutes(snapshots)
        self.diagnostics = DiagnosticsRoutes(store, diagnostics)
        self.templates = TemplatesRoutes()
        self.metrics = MetricsRoutes()
        self.router = Router()
        r = self.router
        # server main.py: lifecycle, devops, pool, templates, proxy and policy routers at the root and under
        # /v1 (in that order); the metrics router only under /v1; /health and /version at the root only
        any_method = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
        for prefix in ("", "/v1"):
            r.add("POST", prefix + "/sandboxes", self.sandboxes.create)
            r.add("GET", prefix + "/sandboxes", self.sandboxes.list)
            r.add("GET", prefix + "/sandboxes/{sid}", self.sandboxes.get)
            r.add("PATCH", prefix + "/sandboxes/{sid}/metadata", self.sandboxes.patch_metadata)
            r.add("DELETE", prefix + "/sandboxes/{sid}", self.sandboxes.delete)
            r.add("POST", prefix + "/sandboxes/{sid}/pause", self.sandboxes.pause)
            r.add("POST", prefix + "/sandboxes/{sid}/resume", self.sandboxes.resume)
            r.add("POST", prefix + "/sandboxes/{sid}/renew-expiration", self.sandboxes.renew)
            r.add("POST", prefix + "/sandboxes/{sid}/snapshots", self.snapshots.create)
            r.add("GET", prefix + "/snapshots", self.snapshots.list)
            r.add("GET", prefix + "/snapshots/{snap}", self.snapshots.get)
            r.add("DELETE", prefix + "/snapshots/{snap}", self.snapshots.delete)
            r.add("GET", prefix + "/sandboxes/{sid}/endpoints/{port}", self.sandboxes.endpoint)
            r.add("GET", prefix + "/sandboxes/{sid}/diagnostics/logs", self.diagnostics.logs)
            r.add("GET", prefix + "/sandboxes/{sid}/diagnostics/inspect", self.diagnostics.inspect)
            r.add("GET", prefix + "/sandboxes/{sid}/diagnostics/events", self.diagnostics.events)
            r.add("GET", prefix + "/sandboxes/{sid}/diagnostics/summary", self.diagnostics.summary)
            r.add("POST", prefix + "/pools", self.pools.create)
            r.add("GET", prefix + "/pools", self.pools.list)
            r.add("GET", prefix + "/pools/{pool}", self.pools.get)
            r.add("PUT", prefix + "/pools/{pool}", self.pools.update)
            r.add("DELETE", prefix + "/pools/{pool}", self.pools.delete)
            r.add("POST", prefix + "/templates", self.templates.create)
            r.add("GET", prefix + "/templates", self.templates.list)
            r.add("GET", prefix + "/templates/{tid}", self.templates.unsupported)
            r.add("DELETE", prefix + "/templates/{tid}", self.templates.unsupported)
            if prefix:
                r.add("POST", prefix + "/metrics/events", self.metrics.event)
            r.add(any_method, prefix + "/sandboxes/{sid}/proxy/{port}", self.sandboxes.proxy)
            r.add(any_method, prefix + "/sandboxes/{sid}/proxy/{port}/{rest:path}", self.sandboxes.proxy)
            r.add("GET", prefix + "/sandboxes/{sid}/networkpolicy", self.sandboxes.policy_get)
            r.add("PUT", prefix + "/sandboxes/{sid}/networkpolicy", self.sandboxes.policy_put)
            r.add("PATCH", prefix + "/sandboxes/{sid}/networkpolicy", self.sandboxes.policy_patch)
            r.add("DELETE", prefix + "/sandboxes/{sid}/networkpolicy", self.sandboxes.policy_delete)
        r.add("GET", "/health", self.health.health)
        r.add("GET", "/version", self.health.version)

    # -- dispatch -------------------------------------------------------------------------------------
    def handle(self, req: Request) -> None:
        h = req.handler
        raw_rid = req.headers.get("X-Request-ID")
        cast(LifecycleHandler, h).request_id = (
            raw_rid and raw_rid.strip()
        ) or new_request_id()  # server middleware/request_id.py
        try:
            if self.check_host and not self._host_allowed(req.headers.get("Host")):
                raise MockError(quirks.HOST_NOT_ALLOWED, host=(req.headers.get("Host") or "")[:200])
            if self.reject_origin and req.headers.get("Origin") is not None:
                raise MockError(quirks.ORIGIN_NOT_ALLOWED)
            self._authenticate(req)
            fn, params, path_seen = self.router.match(req.method, req.path)
            if fn is None:
                if path_seen:
                    req.send_json(405, quirks.FASTAPI_METHOD_NOT_ALLOWED, headers={"allow": self._allowed(req.path)})
                else:
                    req.send_json(404, quirks.FASTAPI_NOT_FOUND)
                return
            req.params = params
            fn(req)
        except MockError as e:
            if not req.responded:
                req.send_json(e.status, e.body())
        except P.DetailError as e:
            if not req.responded:
                req.send_json(e.status, {"detail": e.detail})
        except P.ValidationFailed as e:
            if not req.responded:
                try:  # Starlette's JSONResponse uses allow_nan=False: a NaN input in an error -> 500
                    json.dumps(e.errors, allow_nan=False)
                except ValueError:
                    req.send_text(500, "Internal Server Error", "text/plain; charset=utf-8")
                else:
                    req.send_json(422, {"detail": e.errors})
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            raise
        except Exception:  # FastAPI's answer to an unhandled exception; uvicorn logs it with its traceback
            print("ERROR:    Exception in ASGI application", file=sys.stderr)
            traceback.print_exc(file=sys.stderr)
            if not req.responded:
                req.send_text(500, "Internal Server Error")
            else:
                h.close_connection = True

    def _allowed(self, path: str) -> str:
        """Starlette's Allow header: the methods of the first route whose path matches (FastAPI's APIRoute
        adds no HEAD to GET routes; oracle)."""
        first = None
        methods: list[str] = []
        for m, rx, fn in self.router.routes:
            if rx.match(path):
                if first is None:
                    first = (rx.pattern, fn)
                if (rx.pattern, fn) == first:
                    methods.append(m)
        return ", ".join(methods)

    def _host_allowed(self, host: str | None) -> bool:
        return host_allowed(host, self.bind_host)

    def _authenticate(self, req: Request) -> None:
        path = req.path
        if path.startswith(EXEMPT_PREFIXES):
            return
        if ".." not in path and _PROXY_PATH_RE.match(path):
            return
        if self.api_key is None:
            return
        key = req.headers.get("OPEN-SANDBOX-API-KEY")
        if not key:
            raise MockError(quirks.MISSING_API_KEY)
        if not hmac.compare_digest(key.encode("utf-8", "surrogateescape"), self.api_key.encode("utf-8")):
            raise MockError(quirks.INVALID_API_KEY)


class _Front(Protocol):
    """What the lifecycle listener serves: a LifecycleApp, or the workbench's AdminLayer in front of one."""

    store: SandboxStore

    def handle(self, req: Request) -> None: ...


class LifecycleHandler(Handler):
    flavor = "uvicorn"
    browser_guard = False  # LifecycleApp.handle answers these with ErrorResponse bodies (lifecycle/quirks.py)
    request_id = ""

    def base_headers(self) -> dict[str, str]:
        # CORS middleware adds vary: Origin; request-id middleware adds x-request-id (recording 01)
        return {"vary": "Origin", "x-request-id": self.request_id or new_request_id()}

    def dispatch(self, req: Request) -> None:
        cast(_Front, self.server.app).handle(req)

    def date_time_string(self, timestamp: float | None = None) -> str:
        # the Date header is the server's clock: with MockOpenSandbox(clock=) it follows that clock
        if timestamp is None:
            timestamp = cast(_Front, self.server.app).store.clock().timestamp()
        return email.utils.formatdate(timestamp, usegmt=True)
