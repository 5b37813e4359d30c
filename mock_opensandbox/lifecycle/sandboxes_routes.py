"""The sandbox routes of the lifecycle listener (server api/lifecycle.py, api/proxy.py, api/network_policy.py):
create, list, get, delete, pause, resume, renew, metadata, endpoints, the server-side proxy
/v1/sandboxes/{id}/proxy/{port}/{path} and the egress network policy. HTTP only: the state is the sandbox table,
lifecycle/model.py's ``SandboxStore`` (the state module of this API, named in tiers/t0/repo/test_routes_layout.py);
the proxy itself is lifecycle/proxy.py. What the runtime service above gives these routes is declared in
lifecycle/services.py (``ContainerService``, ``VolumeService``, ``SnapshotService``): this layer never imports
docker/."""

from __future__ import annotations

from typing import Any

from mock_opensandbox.lifecycle import pydantic_lite as P
from mock_opensandbox.lifecycle import quirks, validation_checks
from mock_opensandbox.lifecycle import validation as V
from mock_opensandbox.lifecycle.ingress import Ingress
from mock_opensandbox.lifecycle.model import Sandbox, SandboxStore, apply_metadata_patch, format_ts
from mock_opensandbox.lifecycle.pools_routes import PoolsRoutes
from mock_opensandbox.lifecycle.proxy import BackendError, forward
from mock_opensandbox.lifecycle.quirks import MockError
from mock_opensandbox.lifecycle.services import ContainerService, SnapshotService, VolumeService
from mock_opensandbox.wire.http1 import Request


class SandboxesRoutes:
    """The sandbox routes over ``store``. ``provisioner`` answers endpoint questions (``endpoint(sb, port) ->
    (endpoint, headers|None)``) and the egress settings; ``volumes`` and ``snapshots`` are docker/'s (None: a
    lifecycle app without a runtime refuses volumes, knows no snapshot); ``pools`` takes the poolRef creates of the
    Kubernetes runtime; ``ingress`` is its [ingress] gateway (lifecycle/ingress.py), or None. ``max_timeout`` and
    ``allowed_host_paths`` are the server config's [server] max_sandbox_timeout_seconds and [storage]
    allowed_host_paths."""

    def __init__(
        self,
        store: SandboxStore,
        provisioner: ContainerService | None,
        pools: PoolsRoutes,
        *,
        max_timeout: int | None,
        allowed_host_paths: list[str],
        volumes: VolumeService | None,
        snapshots: SnapshotService | None,
        ingress: Ingress | None,
    ):
        self.store = store
        self.provisioner = provisioner
        self.pools = pools
        self.max_timeout = max_timeout
        self.allowed_host_paths = allowed_host_paths
        self.volumes = volumes
        self.snapshots = snapshots
        self.ingress = ingress

    def container(self) -> ContainerService:
        """The runtime service behind the routes (a lifecycle app alone, in a test, has none: a 500)."""
        if self.provisioner is None:
            raise RuntimeError("this lifecycle app has no runtime service")
        return self.provisioner

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
        if self.pools.pools is not None and (r["extensions"] or {}).get(quirks.POOL_REF_KEY, "").strip():
            return self.pools.create_from_pool(req, r)
        req.send_json(202, self.create_sandbox(r).create_json())

    def create_sandbox(self, r: dict[str, Any]) -> Sandbox:
        """The Docker runtime's create of a validated CreateSandboxRequest (``r``, V.body's): its checks, its
        volumes, the sandbox (the Kubernetes create, k8s_sandboxes_routes.py, makes its sandbox with this too)."""
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
            req.send_json(200, self.ingress.endpoint(self.store, req, req.params["sid"], port, use_proxy, expires))
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
