"""Request validation of opensandbox-server 1.1.1, without pydantic: the server's request models (FastAPI's
422 bodies) and how every lifecycle route reads a request with them (``body``, ``q_last``, ``q_int``, ``q_page``,
``path_port``: the route modules call only these). Its own pre-provisioning checks for the Docker runtime (HTTP 400
``{code, message}``) are lifecycle/validation_checks.py.

A small declarative re-statement, on the engine in lifecycle/pydantic_lite.py, of the request models in the server's
``api/schema.py`` (field order,
aliases with ``populate_by_name``, ``extra="forbid"`` models, ``min_length``/``max_length``/``pattern``,
``ge``/``le``, ``Literal``, ``model_validator(mode="after")``), validated the way pydantic v2 validates
Python objects in lax mode (FastAPI calls ``validate_python`` on ``json.loads`` output). Error types,
messages, ``loc`` (the key the input used: alias or field name), ``input`` and ``ctx`` follow
pydantic-core; tiers/t2/server/test_server_oracle.py compares every rule here with the server's own models. Standard
library only.
"""

from __future__ import annotations

import urllib.parse
from datetime import datetime
from typing import Any

from mock_opensandbox.lifecycle import pydantic_lite as P
from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.lifecycle.pydantic_lite import (
    Bool,
    DateTime,
    DictOf,
    Field,
    Int,
    ListOf,
    Literal,
    Model,
    Opt,
    Str,
    ValidationFailed,
)
from mock_opensandbox.wire.http1 import Request

# =====================================================================================================
# the server's request models (api/schema.py)
# =====================================================================================================
_DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
OPENSANDBOX_LIFECYCLE = "OPENSANDBOX_LIFECYCLE"  # server constants.py

ImageAuth = Model("ImageAuth", [Field("username", Str(), required=True), Field("password", Str(), required=True)])
ImageSpec = Model("ImageSpec", [Field("uri", Str(), required=True), Field("auth", Opt(ImageAuth))])
PlatformSpec = Model("PlatformSpec", [Field("os", Str(), required=True), Field("arch", Str(), required=True)])
ResourceLimits = DictOf(Str())  # RootModel[Dict[str, str]]: errors carry no "root" segment
NetworkRule = Model(
    "NetworkRule", [Field("action", Str(), required=True), Field("target", Str(min_length=1), required=True)]
)
NetworkPolicy = Model(
    "NetworkPolicy",
    [Field("default_action", Opt(Str()), alias="defaultAction"), Field("egress", ListOf(NetworkRule), default=list)],
)
CredentialProxyConfig = Model("CredentialProxyConfig", [Field("enabled", Bool(), default=False)])


def _hook_after(h: dict[str, Any]) -> None:
    if not h["command"][0].strip():
        raise ValueError("Lifecycle hook command must not be empty.")


def _periodic_after(h: dict[str, Any]) -> None:
    h["name"], h["schedule"] = h["name"].strip(), h["schedule"].strip()
    if not h["name"]:
        raise ValueError("Periodic lifecycle hook name must not be blank.")
    if not h["schedule"]:
        raise ValueError("Periodic lifecycle hook schedule must not be blank.")
    if not h["command"][0].strip():
        raise ValueError("Periodic lifecycle hook command must not be empty.")


def _lifecycle_after(lc: dict[str, Any]) -> None:
    names = [h["name"] for h in lc.get("periodic") or []]
    if len(names) != len(set(names)):
        raise ValueError("Periodic lifecycle hook names must be unique.")


LifecycleHook = Model(
    "LifecycleHook",
    [
        Field("command", ListOf(Str(), min_length=1), required=True),
        Field("timeout_seconds", Opt(Int(ge=1, le=10800)), alias="timeoutSeconds"),
    ],
    forbid_extra=True,
    after=_hook_after,
)
PeriodicLifecycleHook = Model(
    "PeriodicLifecycleHook",
    [
        Field("name", Str(min_length=1), required=True),
        Field("schedule", Str(min_length=1), required=True),
        Field("command", ListOf(Str(), min_length=1), required=True),
        Field("timeout_seconds", Opt(Int(ge=1, le=300)), alias="timeoutSeconds"),
    ],
    forbid_extra=True,
    after=_periodic_after,
)
SandboxLifecycle = Model(
    "SandboxLifecycle",
    [
        Field("pre_start", Opt(LifecycleHook), alias="preStart"),
        Field("periodic", Opt(ListOf(PeriodicLifecycleHook))),
    ],
    forbid_extra=True,
    after=_lifecycle_after,
)

Host = Model("Host", [Field("path", Str(pattern=r"^(/|[A-Za-z]:[\\/])"), required=True)], populate_by_name=False)
PVC = Model(
    "PVC",
    [
        Field("claim_name", Str(pattern=_DNS_LABEL_PATTERN, max_length=253), alias="claimName", required=True),
        Field("create_if_not_exists", Bool(), alias="createIfNotExists", default=True),
        Field("delete_on_sandbox_termination", Bool(), alias="deleteOnSandboxTermination", default=False),
        Field("storage_class", Opt(Str()), alias="storageClass"),
        Field("storage", Opt(Str(pattern=r"^\d+(\.\d+)?(Ki|Mi|Gi|Ti|Pi|Ei)?$"))),
        Field("access_modes", Opt(ListOf(Str())), alias="accessModes"),
    ],
)


def _ossfs_after(o: dict[str, Any]) -> None:
    if not o.get("access_key_id") or not o.get("access_key_secret"):
        raise ValueError("OSSFS inline credentials are required: accessKeyId and accessKeySecret.")


OSSFS = Model(
    "OSSFS",
    [
        Field("bucket", Str(min_length=3, max_length=63), required=True),
        Field("endpoint", Str(min_length=1), required=True),
        Field("version", Literal("1.0", "2.0"), default="2.0"),
        Field("options", Opt(ListOf(Str()))),
        Field("access_key_id", Opt(Str(min_length=1)), alias="accessKeyId"),
        Field("access_key_secret", Opt(Str(min_length=1)), alias="accessKeySecret"),
    ],
    after=_ossfs_after,
)


def _volume_after(v: dict[str, Any]) -> None:
    n = sum(v.get(b) is not None for b in ("host", "pvc", "ossfs"))
    if n == 0:
        raise ValueError("Exactly one backend (host, pvc, ossfs) must be specified, but none was provided.")
    if n > 1:
        raise ValueError("Exactly one backend (host, pvc, ossfs) must be specified, but multiple were provided.")


Volume = Model(
    "Volume",
    [
        Field("name", Str(pattern=_DNS_LABEL_PATTERN, max_length=63), required=True),
        Field("host", Opt(Host)),
        Field("pvc", Opt(PVC)),
        Field("ossfs", Opt(OSSFS)),
        Field("mount_path", Str(pattern=r"^/.*"), alias="mountPath", required=True),
        Field("read_only", Bool(), alias="readOnly", default=False),
        Field("sub_path", Opt(Str()), alias="subPath"),
    ],
    after=_volume_after,
)


def _create_after(r: dict[str, Any]) -> None:
    """CreateSandboxRequest.validate_source_and_entrypoint (server api/schema.py); normalizes in place."""
    if r["env"] and OPENSANDBOX_LIFECYCLE in r["env"]:
        raise ValueError(
            "Environment variable '%s' is reserved. Use the lifecycle request field instead." % OPENSANDBOX_LIFECYCLE
        )
    tid = r["template_id"]
    if tid is not None and tid.strip():
        conflicts = {
            "image": r["image"] is not None,
            "snapshotId": bool((r["snapshot_id"] or "").strip()),
            "entrypoint": r["entrypoint"] is not None,
            "env": r["env"] is not None,
            "resourceLimits": r["resource_limits"] is not None,
            "resourceRequests": r["resource_requests"] is not None,
            "volumes": r["volumes"] is not None,
            "platform": r["platform"] is not None,
            "credentialProxy": r["credential_proxy"] is not None,
            "secureAccess": bool(r["secure_access"]),
            "lifecycle": r["lifecycle"] is not None,
        }
        present = sorted(k for k, v in conflicts.items() if v)
        if present:
            raise ValueError(
                "templateId cannot be combined with: %s; the workload shape is fixed by the "
                "template's golden image." % ", ".join(present)
            )
        if r["timeout"] is None:
            raise ValueError("timeout is required when templateId is provided.")
        return
    if tid is not None:
        r["template_id"] = None
    if (r["extensions"] or {}).get("poolRef", "").strip():
        if r["lifecycle"] is not None:
            raise ValueError("lifecycle cannot be used together with poolRef.")
        if (r["snapshot_id"] or "").strip():
            raise ValueError("snapshotId cannot be used together with poolRef.")
        if r["snapshot_id"] is not None and not r["snapshot_id"].strip():
            r["snapshot_id"] = None
        return
    if r["credential_proxy"] and r["credential_proxy"]["enabled"] and r["network_policy"] is None:
        raise ValueError("credentialProxy.enabled requires networkPolicy.")
    has_image = r["image"] is not None and bool(r["image"]["uri"].strip())
    has_snapshot = bool((r["snapshot_id"] or "").strip())
    if has_image == has_snapshot:
        raise ValueError("Exactly one of image or snapshotId must be provided.")
    if has_image and not r["entrypoint"]:
        raise ValueError("Entrypoint is required when image is provided.")
    if r["image"] is not None and not has_image:
        r["image"] = None
    if r["snapshot_id"] is not None and not has_snapshot:
        r["snapshot_id"] = None
    if r["resource_limits"] is None:
        raise ValueError("resourceLimits is required when poolRef is not provided.")


CreateSandboxRequest = Model(
    "CreateSandboxRequest",
    [
        Field("image", Opt(ImageSpec)),
        Field("snapshot_id", Opt(Str()), alias="snapshotId"),
        Field("platform", Opt(PlatformSpec)),
        Field("timeout", Opt(Int(ge=quirks.MIN_TIMEOUT))),
        Field("resource_limits", Opt(ResourceLimits), alias="resourceLimits"),
        Field("resource_requests", Opt(ResourceLimits), alias="resourceRequests"),
        Field("env", Opt(DictOf(Opt(Str())))),
        Field("metadata", Opt(DictOf(Str()))),
        Field("lifecycle", Opt(SandboxLifecycle)),
        Field("entrypoint", Opt(ListOf(Str(), min_length=1))),
        Field("network_policy", Opt(NetworkPolicy), alias="networkPolicy"),
        Field("credential_proxy", Opt(CredentialProxyConfig), alias="credentialProxy"),
        Field("secure_access", Bool(), alias="secureAccess", default=False),
        Field("volumes", Opt(ListOf(Volume))),
        Field("extensions", Opt(DictOf(Str()))),
        Field("template_id", Opt(Str(min_length=1)), alias="templateId"),
    ],
    after=_create_after,
)

RenewSandboxExpirationRequest = Model(
    "RenewSandboxExpirationRequest", [Field("expires_at", DateTime(), alias="expiresAt", required=True)]
)
PatchSandboxMetadataRequest = DictOf(Opt(Str()))  # Dict[str, Optional[str]]
CreateSnapshotRequest = Model("CreateSnapshotRequest", [Field("name", Opt(Str(min_length=1)))], populate_by_name=False)
MetricsEvent = Model(
    "MetricsEvent",
    [
        Field("event_type", Literal("sandbox.create"), alias="eventType", required=True),
        Field("sandbox_id", Opt(Str()), alias="sandboxId"),
        Field("image", Opt(Str())),
        Field("create_duration_ms", Int(ge=0), alias="createDurationMs", required=True),
        Field("success", Bool(), required=True),
    ],
)
PoolCapacitySpec = Model(
    "PoolCapacitySpec",
    [
        Field("buffer_max", Int(ge=0), alias="bufferMax", required=True),
        Field("buffer_min", Int(ge=0), alias="bufferMin", required=True),
        Field("pool_max", Int(ge=0), alias="poolMax", required=True),
        Field("pool_min", Int(ge=0), alias="poolMin", required=True),
    ],
)
CreatePoolRequest = Model(
    "CreatePoolRequest",
    [
        Field("name", Str(pattern=_DNS_LABEL_PATTERN, max_length=253), required=True),
        Field("template", DictOf(None), required=True),
        Field("capacity_spec", PoolCapacitySpec, alias="capacitySpec", required=True),
    ],
)
UpdatePoolRequest = Model(
    "UpdatePoolRequest", [Field("capacity_spec", PoolCapacitySpec, alias="capacitySpec", required=True)]
)
FsbTemplateReadiness = Model(
    "FsbTemplateReadiness", [Field("probe", Opt(Str())), Field("warmup_seconds", Opt(Int(ge=0)), alias="warmupSeconds")]
)
CreateFsbTemplateRequest = Model(
    "CreateFsbTemplateRequest",
    [
        Field("image", Str(min_length=1), required=True),
        Field("resource_limits", Opt(ResourceLimits), alias="resourceLimits"),
        Field("entrypoint", Opt(ListOf(Str(), min_length=1))),
        Field("env", Opt(DictOf(Str()))),
        Field("metadata", Opt(DictOf(Str()))),
        Field("readiness", Opt(FsbTemplateReadiness)),
        Field("publish", Str(min_length=1), required=True),
        Field("format", Literal("native", "overlaybd"), default="overlaybd"),
    ],
    forbid_extra=True,
)
NetworkRuleList = ListOf(NetworkRule)
TargetList = ListOf(Str())


# =====================================================================================================
# reading a request with them (FastAPI's Body, Path and Query validation)
# =====================================================================================================
def body(req: Request, spec: P.Spec, *, required: bool = True) -> Any:
    """The request's JSON body validated against ``spec`` (422 ValidationFailed, or FastAPI's 400/422 of an
    undecodable body: pydantic_lite.decode_body)."""
    return P.validate_body(spec, P.decode_body(req.body, req.headers.get("Content-Type")), required=required)


def validate_create(value: Any) -> dict[str, Any]:
    """CreateSandboxRequest as FastAPI validates a decoded JSON body (server api/schema.py)."""
    out: dict[str, Any] = P.validate_body(CreateSandboxRequest, value)
    return out


def to_int(value: Any, loc: list[Any], errors: list[Any]) -> int | None:
    """An int as pydantic reads it (lax), None with the error appended."""
    out = P.to_int(value, loc, errors)
    return None if out is P._MISSING else out


def to_bool(value: Any, loc: list[Any], errors: list[Any]) -> bool | None:
    out = P.to_bool(value, loc, errors)
    return None if out is P._MISSING else out


def to_datetime(value: Any, loc: list[Any], errors: list[Any]) -> datetime | None:
    out = P.to_datetime(value, loc, errors)
    return None if out is P._MISSING else out


def path_port(req: Request, errors: list[Any]) -> int | None:
    """The ``{port}`` path parameter (loc ["path", "port"])."""
    return to_int(req.params["port"], ["path", "port"], errors)


def q_last(req: Request, name: str) -> str | None:
    """A scalar query parameter as FastAPI reads it: the last of repeated values (Starlette QueryParams)."""
    vals = req.query.get(name)
    return vals[-1] if vals else None


def q_int(
    req: Request, name: str, default: int, errors: list[Any], *, ge: int | None = None, le: int | None = None
) -> int:
    """An int query parameter (FastAPI Query(default, ge=, le=), loc ["query", name]); the default with the error
    appended when it is bad."""
    raw = q_last(req, name)
    if raw is None:
        return default
    out = P.Int(ge=ge, le=le).run(raw, ["query", name], errors)
    return default if out is P._MISSING else out


def q_page(req: Request) -> tuple[int, int]:
    """``page`` (>= 1, default 1) and ``pageSize`` (1..MAX_PAGE_SIZE, default DEFAULT_PAGE_SIZE) of a list
    route (sandboxes, snapshots, templates, pools); 422 with both errors when either is bad."""
    errors: list[dict[str, Any]] = []
    page = q_int(req, "page", 1, errors, ge=1)
    size = q_int(req, "pageSize", quirks.DEFAULT_PAGE_SIZE, errors, ge=1, le=quirks.MAX_PAGE_SIZE)
    if errors:
        raise ValidationFailed(errors)
    return page, size


def list_query(req: Request) -> tuple[dict[str, str] | None, int, int]:
    """GET /sandboxes' query as the server checks it: (metadata filter or None, page, pageSize); 422 for the page,
    then 400 INVALID_METADATA_FORMAT (the Kubernetes list, k8s_sandboxes_routes.py, checks its query with this too)."""
    md_raw = q_last(req, "metadata")
    page, size = q_page(req)
    md = None
    if md_raw:
        try:
            md = dict(urllib.parse.parse_qsl(md_raw, keep_blank_values=True, strict_parsing=True))
        except ValueError as e:
            raise quirks.MockError(quirks.INVALID_METADATA_FORMAT, error=str(e)) from None
    return md or None, page, size
