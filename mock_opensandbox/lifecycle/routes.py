"""Lifecycle routes of the mock OpenSandbox server (FastAPI/uvicorn in reality).

/health, /version, /v1/sandboxes... (also served without /v1), the server-side proxy
/v1/sandboxes/{id}/proxy/{port}/{path}, and the unimplemented snapshot/template/egress routes.
Request validation reproduces FastAPI/pydantic 422 bodies for the shapes the recordings show
(lifecycle/pydantic_lite.py; lifecycle/validation.py reads every request with them); the proxy itself is lifecycle/proxy.py, the snapshot and
diagnostics routes lifecycle/snapshot_routes.py and lifecycle/diagnostics_routes.py. The Docker service behind the
routes is given to LifecycleApp (the facade passes docker/'s snapshot store and diagnostics text): this layer never
imports docker/ or the workbench, which adds its /__mock__/faults routes to the router itself
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
from typing import Any, Protocol, cast

from mock_opensandbox.lifecycle import diagnostics_routes, pool_routes, quirks, snapshot_routes, validation_checks
from mock_opensandbox.lifecycle import pydantic_lite as P
from mock_opensandbox.lifecycle import validation as V
from mock_opensandbox.lifecycle.ingress import Ingress
from mock_opensandbox.lifecycle.model import Sandbox, SandboxStore, apply_metadata_patch, format_ts
from mock_opensandbox.lifecycle.pools import PoolStore
from mock_opensandbox.lifecycle.proxy import BackendError, forward
from mock_opensandbox.lifecycle.quirks import MockError
from mock_opensandbox.lifecycle.services import ContainerService, DiagnosticsText, SnapshotService, VolumeService
from mock_opensandbox.wire.http1 import Handler, Request, Router, host_allowed, new_request_id
from mock_opensandbox.wire.listener import App, FaultRules

# =====================================================================================================
# the application
# =====================================================================================================
EXEMPT_PREFIXES = ("/health", "/version", "/docs", "/redoc", "/openapi.json")  # server middleware/auth.py
_PROXY_PATH_RE = re.compile(r"^(/v1)?/sandboxes/[^/]+/proxy/\d+(/|$)")


class LifecycleApp(App):
    """Routes + policy of the lifecycle listener. What the runtime service gives it is declared in
    lifecycle/services.py: ``provisioner`` answers endpoint questions (``endpoint(sb, port) -> (endpoint,
    headers|None)``), ``volumes``, ``snapshots`` and ``diagnostics`` are docker/'s."""

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
        self.pools = pools  # the Kubernetes runtime's PoolStore (lifecycle/pools.py); None: the Docker runtime
        self.ingress = ingress  # the Kubernetes runtime's [ingress] gateway (lifecycle/ingress.py), or None
        # server config: [server] max_sandbox_timeout_seconds (unset), [storage] allowed_host_paths ([])
        self.max_timeout = max_timeout
        self.allowed_host_paths = list(allowed_host_paths or [])
        self.volumes = volumes  # volumes.VolumeStore (None: a mock without a runtime refuses volumes)
        # the Docker service's snapshots (docker/snapshots.py SnapshotStore: create, list, get, delete,
        # lookup) and diagnostics text (docker/diagnostics.py: logs_text, events_text, inspect_text,
        # summary_text, limit_lines, inline), both given by the facade (server.py)
        self.snapshots = snapshots
        self.diagnostics = diagnostics
        # the listener's fault rules (wire/listener.py FaultRules: workbench/faults.py, injected by wire/http1.py)
        self.faults = faults
        self.provisioner = provisioner
        self.api_key = api_key
        self.bind_host = bind_host
        self.verbose = verbose
        self.check_host = check_host
        self.reject_origin = reject_origin
        self.router = Router()
        r = self.router
        # server main.py: lifecycle, devops, pool, templates, proxy and policy routers at the root and under
        # /v1 (in that order); the metrics router only under /v1; /health and /version at the root only
        any_method = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
        for prefix in ("", "/v1"):
            r.add("POST", prefix + "/sandboxes", self.create)
            r.add("GET", prefix + "/sandboxes", self.list)
            r.add("GET", prefix + "/sandboxes/{sid}", self.get)
            r.add("PATCH", prefix + "/sandboxes/{sid}/metadata", self.patch_metadata)
            r.add("DELETE", prefix + "/sandboxes/{sid}", self.delete)
            r.add("POST", prefix + "/sandboxes/{sid}/pause", self.pause)
            r.add("POST", prefix + "/sandboxes/{sid}/resume", self.resume)
            r.add("POST", prefix + "/sandboxes/{sid}/renew-expiration", self.renew)
            r.add("POST", prefix + "/sandboxes/{sid}/snapshots", self.snapshot_create)
            r.add("GET", prefix + "/snapshots", self.snapshot_list)
            r.add("GET", prefix + "/snapshots/{snap}", self.snapshot_get)
            r.add("DELETE", prefix + "/snapshots/{snap}", self.snapshot_delete)
            r.add("GET", prefix + "/sandboxes/{sid}/endpoints/{port}", self.endpoint)
            r.add("GET", prefix + "/sandboxes/{sid}/diagnostics/logs", self.diag_logs)
            r.add("GET", prefix + "/sandboxes/{sid}/diagnostics/inspect", self.diag_inspect)
            r.add("GET", prefix + "/sandboxes/{sid}/diagnostics/events", self.diag_events)
            r.add("GET", prefix + "/sandboxes/{sid}/diagnostics/summary", self.diag_summary)
            r.add("POST", prefix + "/pools", self.pools_create)
            r.add("GET", prefix + "/pools", self.pools_list)
            r.add("GET", prefix + "/pools/{pool}", self.pools_get)
            r.add("PUT", prefix + "/pools/{pool}", self.pools_update)
            r.add("DELETE", prefix + "/pools/{pool}", self.pools_delete)
            r.add("POST", prefix + "/templates", self.templates_create)
            r.add("GET", prefix + "/templates", self.templates_list)
            r.add("GET", prefix + "/templates/{tid}", self.templates_unsupported)
            r.add("DELETE", prefix + "/templates/{tid}", self.templates_unsupported)
            if prefix:
                r.add("POST", prefix + "/metrics/events", self.metrics_event)
            r.add(any_method, prefix + "/sandboxes/{sid}/proxy/{port}", self.proxy)
            r.add(any_method, prefix + "/sandboxes/{sid}/proxy/{port}/{rest:path}", self.proxy)
            r.add("GET", prefix + "/sandboxes/{sid}/networkpolicy", self.policy_get)
            r.add("PUT", prefix + "/sandboxes/{sid}/networkpolicy", self.policy_put)
            r.add("PATCH", prefix + "/sandboxes/{sid}/networkpolicy", self.policy_patch)
            r.add("DELETE", prefix + "/sandboxes/{sid}/networkpolicy", self.policy_delete)
        r.add("GET", "/health", self.health)
        r.add("GET", "/version", self.version)

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
        except Exception:  # FastAPI's answer to an unhandled exception
            if self.verbose:
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

    # -- routes ---------------------------------------------------------------------------------------
    def health(self, req: Request) -> None:
        # body exactly as recorded (rec 01); the mock-only isolation detail rides in a header [choice]
        req.send_json(200, quirks.HEALTH_BODY, headers={"x-mock-isolation": self.isolation()})

    def isolation(self) -> str:
        note = getattr(self.provisioner, "isolation", None)
        try:
            return note() if callable(note) else "unknown"
        except Exception:  # pragma: no cover
            return "unknown"

    def container(self) -> ContainerService:
        """The runtime service behind the routes (a lifecycle app alone, in a test, has none: a 500)."""
        if self.provisioner is None:
            raise RuntimeError("this lifecycle app has no runtime service")
        return self.provisioner

    def version(self, req: Request) -> None:
        req.send_json(200, quirks.VERSION_BODY)

    def create_checks(self, r: dict[str, Any]) -> tuple[bool, dict[str, Any]]:
        """(secure access granted, the checked request: env, limits, snapshot) of a create's decoded body, or the
        MockError a check raises; nothing is made. ``r["secure_access"]`` is cleared when the gateway grants it."""
        # the provisioner's [egress] image/mode and docker network_mode (egress/: "off" = no egress image)
        egress_mode, network = getattr(self.provisioner, "egress_settings", ("off", "bridge"))
        # secureAccess with the Kubernetes runtime's gateway: accepted, a token granted (lifecycle/ingress.py)
        secure = bool(r["secure_access"]) and self.ingress is not None
        r["secure_access"] = r["secure_access"] and not secure
        checks = validation_checks.docker_create_checks(
            r,
            now=self.store.clock(),
            max_timeout=self.max_timeout,
            allowed_host_paths=self.allowed_host_paths,
            snapshots=self.snapshots,
            egress_mode=egress_mode,
            network=network,
        )
        return secure, checks

    def create(self, req: Request) -> None:
        r = V.body(req, V.CreateSandboxRequest)
        if self.pools is not None and (r["extensions"] or {}).get(quirks.POOL_REF_KEY, "").strip():
            return pool_routes.create_from_pool(self, req, r)
        req.send_json(202, self.create_sandbox(r).create_json())

    def create_sandbox(self, r: dict[str, Any]) -> Sandbox:
        """The Docker runtime's create of a validated CreateSandboxRequest (``r``, V.body's): its checks, its
        volumes, the sandbox (the Kubernetes create, k8s_sandboxes.py, makes its sandbox with this too)."""
        secure, checks = self.create_checks(r)
        vols = None
        if r["volumes"]:
            if self.volumes is None:
                raise MockError(quirks.VOLUMES_UNSUPPORTED)
            vols = self.volumes.prepare(r["volumes"])  # server _validate_volumes (docker/volumes.py)
        env = {k: v for k, v in checks["env"].items() if v is not None}
        restore = checks["snapshot"]  # a snapshot's image keeps its container's env under the request's
        if restore is not None:
            env = dict(restore.env, **env)
        ext = {k: v for k, v in (r["extensions"] or {}).items() if k.startswith(quirks.EXTENSIONS_PREFIX)} or None
        try:
            sb = self.store.create(
                image={"uri": r["image"]["uri"]},
                entrypoint=r["entrypoint"],
                env=env,
                metadata=r["metadata"],
                resource_limits=r["resource_limits"],
                timeout=r["timeout"],
                platform=r["platform"],
                extensions=ext,
                limits=checks["limits"],
                volumes=vols,
                image_auth=r["image"]["auth"],
                snapshot=restore,
                network_policy=r["network_policy"],
            )
        except BaseException:
            if vols is not None and self.volumes is not None:  # the server removes the volumes it auto-created
                self.volumes.abandon(vols)
            raise
        if secure and self.ingress is not None:
            self.ingress.grant(sb.id)
        return sb

    def list(self, req: Request) -> None:
        states = req.query.get("state") or None
        md, page, size = V.list_query(req)
        items, pagination = self.store.list(states=states, metadata=md, page=page, page_size=size)
        req.send_json(200, {"items": [sb.to_json() for sb in items], "pagination": pagination})

    def get(self, req: Request) -> None:
        req.send_json(200, self.store.get(req.params["sid"]).to_json())

    def delete(self, req: Request) -> None:
        self.store.delete(req.params["sid"])
        req.send(204)

    def pause(self, req: Request) -> None:
        self.store.pause(req.params["sid"])
        req.send(202)

    def resume(self, req: Request) -> None:
        self.store.resume(req.params["sid"])
        req.send(202)

    def renew(self, req: Request) -> None:
        r = V.body(req, V.RenewSandboxExpirationRequest)
        new = self.store.renew(req.params["sid"], r["expires_at"])
        req.send_json(200, {"expiresAt": format_ts(new)})

    def patch_metadata(self, req: Request) -> None:
        """JSON Merge Patch of metadata (server api/lifecycle.py, services/docker/docker_service.py
        patch_sandbox_metadata): the sandbox first, then reserved keys (null ones too), then label syntax."""
        patch = V.body(req, V.PatchSandboxMetadataRequest)
        sb = self.store.get(req.params["sid"])
        apply_metadata_patch(sb, patch)
        req.send_json(200, sb.to_json())

    def endpoint(self, req: Request) -> None:
        errors: list[dict[str, Any]] = []
        port = V.path_port(req, errors)
        usp_raw = V.q_last(req, "use_server_proxy")
        use_proxy = V.to_bool(usp_raw, ["query", "use_server_proxy"], errors) if usp_raw is not None else False
        exp_raw = V.q_last(req, "expires")
        expires = V.to_int(exp_raw, ["query", "expires"], errors) if exp_raw is not None else None
        if errors:
            raise P.ValidationFailed(errors)
        assert port is not None and use_proxy is not None
        if self.ingress is not None:  # the Kubernetes runtime's gateway endpoints (lifecycle/ingress.py)
            req.send_json(200, self.ingress.endpoint(self, req, req.params["sid"], port, use_proxy, expires))
            return
        if use_proxy and expires is not None:
            raise MockError(quirks.SERVER_PROXY_WITH_EXPIRES)
        if expires is not None:
            raise MockError(quirks.SIGNED_ROUTES_UNSUPPORTED)
        if not 1 <= port <= 65535:
            raise MockError(quirks.INVALID_PORT)
        sid = req.params["sid"]
        sb = self.store.get(sid)
        endpoint, headers = self.container().endpoint(sb, port)
        if use_proxy:
            # server api/lifecycle.py: same host and mount prefix the client used, no scheme
            mount = req.path.split("/sandboxes/", 1)[0]
            endpoint = "%s%s/sandboxes/%s/proxy/%d" % (req.headers.get("Host") or "", mount, sid, port)
            if headers:
                headers = {k: v for k, v in headers.items() if k.lower() != quirks.INGRESS_HEADER.lower()} or None
        out: dict[str, Any] = {"endpoint": endpoint}
        if headers:
            out["headers"] = headers
        req.send_json(200, out)

    def proxy(self, req: Request) -> None:
        errors: list[dict[str, Any]] = []
        port = V.path_port(req, errors)
        if errors:
            raise P.ValidationFailed(errors)
        assert port is not None
        if (req.headers.get("Upgrade") or "").lower() == "websocket":
            req.send_json(400, {"detail": quirks.WEBSOCKET_UNSUPPORTED_DETAIL})
            return
        if not 1 <= port <= 65535:
            raise MockError(quirks.INVALID_PORT)
        sid = req.params["sid"]
        sb = self.store.get(sid)
        endpoint, headers = self.container().endpoint(sb, port)
        proxy_suffix = "/sandboxes/%s/proxy/%s" % (sid, req.params["port"])
        idx = req.path.find(proxy_suffix)
        location_prefix = req.path[: idx + len(proxy_suffix)] if idx >= 0 else None

        def connect_failed(e: Exception) -> None:
            req.send_json(
                502, quirks.BACKEND_CONNECTION_FAILED.body(endpoint=endpoint, error="All connection attempts failed")
            )

        hdrs = {k: v for k, v in (headers or {}).items() if k.lower() != "opensandbox-secure-access"}
        try:
            forward(
                req,
                endpoint,
                req.params.get("rest", ""),
                extra_headers=hdrs,
                client_facing=True,
                on_connect_error=connect_failed,
                location_prefix=location_prefix,
            )
        except BackendError as e:
            if req.responded:  # the answer was already streaming: cut it, the client sees a short body
                req.handler.close_connection = True
                return
            # server api/proxy.py: any other httpx error -> 500 {"detail": "An internal error occurred ..."}
            req.send_json(500, {"detail": "An internal error occurred in the proxy: %s" % (e.__cause__ or e)})

    # -- snapshots: lifecycle/snapshot_routes.py over docker/snapshots.py (self.snapshots: a SnapshotStore) ------------------
    def snapshot_create(self, req: Request) -> None:
        snapshot_routes.create(self, req)

    def snapshot_list(self, req: Request) -> None:
        snapshot_routes.list_(self, req)

    def snapshot_get(self, req: Request) -> None:
        snapshot_routes.get(self, req)

    def snapshot_delete(self, req: Request) -> None:
        snapshot_routes.delete(self, req)

    # -- pools and templates: Kubernetes only (server api/pool.py, api/templates.py); bodies first. With a
    #    PoolStore (runtime kubernetes) the pools are lifecycle/pool_routes.py's ------------------------------
    def pools_create(self, req: Request) -> None:
        if self.pools is not None:
            return pool_routes.create(self, req)
        V.body(req, V.CreatePoolRequest)
        raise MockError(quirks.POOLS_UNSUPPORTED)

    def pools_update(self, req: Request) -> None:
        if self.pools is not None:
            return pool_routes.update(self, req)
        V.body(req, V.UpdatePoolRequest)
        raise MockError(quirks.POOLS_UNSUPPORTED)

    def pools_list(self, req: Request) -> None:
        self._pools_or_501(req, pool_routes.list_)

    def pools_get(self, req: Request) -> None:
        self._pools_or_501(req, pool_routes.get)

    def pools_delete(self, req: Request) -> None:
        self._pools_or_501(req, pool_routes.delete)

    def _pools_or_501(self, req: Request, route: Any) -> None:
        if self.pools is None:
            raise MockError(quirks.POOLS_UNSUPPORTED)
        route(self, req)

    def templates_create(self, req: Request) -> None:
        V.body(req, V.CreateFsbTemplateRequest)
        raise MockError(quirks.TEMPLATES_UNSUPPORTED)

    def templates_list(self, req: Request) -> None:
        V.q_page(req)
        raise MockError(quirks.TEMPLATES_UNSUPPORTED)

    def templates_unsupported(self, req: Request) -> None:
        raise MockError(quirks.TEMPLATES_UNSUPPORTED)

    # -- SDK metrics (server api/metrics.py, /v1 only): accepted, recorded nowhere ---------------------------
    def metrics_event(self, req: Request) -> None:
        V.body(req, V.MetricsEvent)
        req.send(204)

    # -- egress network policy (server api/network_policy.py): the body, then the sandbox's egress sidecar
    #    on port 18080 through execd's proxy, like every Docker sandbox without a sidecar -----------------
    def _policy(self, req: Request, spec: P.Spec | None) -> None:
        if spec is not None:
            V.body(req, spec)
        sid = req.params["sid"]
        if sid.startswith("fsb-"):
            raise MockError(quirks.FSB_SANDBOX_NOT_FOUND)
        sb = self.store.get(sid)
        endpoint, headers = self.container().endpoint(sb, quirks.EGRESS_PORT)
        hdrs = {k: v for k, v in (headers or {}).items() if k.lower() != "opensandbox-secure-access"}

        def connect_failed(e: Exception) -> None:
            req.send_json(
                502, quirks.BACKEND_CONNECTION_FAILED.body(endpoint=endpoint, error="All connection attempts failed")
            )

        try:
            forward(req, endpoint, "policy", extra_headers=hdrs, client_facing=True, on_connect_error=connect_failed)
        except BackendError as e:
            if req.responded:
                req.handler.close_connection = True
                return
            raise MockError(quirks.BACKEND_RESPONSE_FAILED, endpoint=endpoint, error=e.__cause__ or e) from None

    def policy_get(self, req: Request) -> None:
        self._policy(req, None)

    def policy_put(self, req: Request) -> None:
        self._policy(req, V.NetworkPolicy)

    def policy_patch(self, req: Request) -> None:
        self._policy(req, V.NetworkRuleList)

    def policy_delete(self, req: Request) -> None:
        self._policy(req, V.TargetList)

    # -- diagnostics: lifecycle/diagnostics_routes.py over docker/diagnostics.py (self.diagnostics) ---------
    def diag_logs(self, req: Request) -> None:
        diagnostics_routes.logs(self, req)

    def diag_events(self, req: Request) -> None:
        diagnostics_routes.events(self, req)

    def diag_inspect(self, req: Request) -> None:
        diagnostics_routes.inspect(self, req)

    def diag_summary(self, req: Request) -> None:
        diagnostics_routes.summary(self, req)


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
