"""The pre-provisioning checks of opensandbox-server 1.1.1 for the Docker runtime: what the server checks between
a valid ``CreateSandboxRequest`` (the request models: lifecycle/validation.py) and touching Docker, each failure a
``MockError`` with the server's status, code and message (HTTP 400 ``{code, message}``; a ``snapshotId`` it cannot
restore from: 404 or 409). Extensions, resource limits, platform, volumes, egress env, timeout, and
``docker_create_checks``, all of them in the server's order (``extensions/validation.py``,
``services/validators.py``, ``services/helpers.py``, ``services/docker/*``); tiers/t2/server/test_server_oracle.py compares
them with the server's own. Standard library only.
"""

from __future__ import annotations

import math
import re
from datetime import datetime, timedelta
from typing import Any, Iterable, Mapping

from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.lifecycle.model import validate_metadata
from mock_opensandbox.lifecycle.quirks import MockError, Quirk
from mock_opensandbox.lifecycle.services import SnapshotService


def _bad(code: str, message: str, status: int = 400) -> MockError:
    return MockError(Quirk(status, code, "{m}", "server"), m=message)


INVALID_PARAMETER = "SANDBOX::INVALID_PARAMETER"
WINDOWS_UNSUPPORTED = Quirk(
    400,
    INVALID_PARAMETER,
    "platform.os 'windows' is not supported by the mock OpenSandbox (it runs Linux processes only).",
    "[choice]",
)
_DNS_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?\Z")
ACCESS_RENEW_KEY = "access.renew.extend.seconds"  # server extensions/keys.py
ACCESS_RENEW_MIN, ACCESS_RENEW_MAX = 300, 86400
EGRESS_ENV_PREFIX = "OPENSANDBOX_EGRESS_"
ALLOWED_EGRESS_ENV_VARS = frozenset(
    {  # server services/constants.py
        "OPENSANDBOX_EGRESS_LOG_LEVEL",
        "OPENSANDBOX_EGRESS_DNS_UPSTREAM_TIMEOUT",
        "OPENSANDBOX_EGRESS_MITMPROXY_SSL_INSECURE",
        "OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT",
        "OPENSANDBOX_EGRESS_MITMPROXY_EXTRA_PORTS",
        "OPENSANDBOX_EGRESS_DENY_WEBHOOK",
        "OPENSANDBOX_EGRESS_METRICS_EXTRA_ATTRS",
        "OPENSANDBOX_EGRESS_CREDENTIAL_VAULT_REQUIRE_TLS",
        "OPENSANDBOX_EGRESS_CREDENTIAL_VAULT_REQUIRE_SCOPED_MATCH",
        "OPENSANDBOX_EGRESS_CREDENTIAL_VAULT_TRUSTED_PROXY_CIDRS",
        "OPENSANDBOX_EGRESS_POLICY_FILE",
    }
)


def validate_extensions(ext: Mapping[str, str] | None) -> None:
    """server extensions/validation.py _validate_access_renew_extend_seconds."""
    if not ext or ACCESS_RENEW_KEY not in ext:
        return
    raw = ext[ACCESS_RENEW_KEY]
    key = ACCESS_RENEW_KEY
    s = str(raw).strip()
    if not s:
        raise _bad(
            INVALID_PARAMETER,
            'Invalid extensions["%s"]: empty value; omit the key to disable renew-on-'
            "access, or use an integer between %d and %d seconds." % (key, ACCESS_RENEW_MIN, ACCESS_RENEW_MAX),
        )
    try:
        n = int(s)
    except ValueError:
        raise _bad(
            INVALID_PARAMETER,
            'Invalid extensions["%s"]: must be a base-10 integer string between %d and '
            "%d, got %r." % (key, ACCESS_RENEW_MIN, ACCESS_RENEW_MAX, raw),
        ) from None
    if n < ACCESS_RENEW_MIN or n > ACCESS_RENEW_MAX:
        raise _bad(
            INVALID_PARAMETER,
            'Invalid extensions["%s"]: must be between %d and %d seconds (5 minutes to '
            "24 hours inclusive), got %d." % (key, ACCESS_RENEW_MIN, ACCESS_RENEW_MAX, n),
        )


_MEMORY_RE = re.compile(r"^\s*(\d+)([kmgti]i?|[kmgti]?b)?\s*\Z", re.IGNORECASE)
_MEMORY_MULT = {
    "": 1,
    "b": 1,
    "k": 10**3,
    "kb": 10**3,
    "ki": 1024,
    "m": 10**6,
    "mb": 10**6,
    "mi": 1024**2,
    "g": 10**9,
    "gb": 10**9,
    "gi": 1024**3,
    "t": 10**12,
    "tb": 10**12,
    "ti": 1024**4,
}


def parse_memory_limit(value: str) -> int | None:
    """server services/helpers.py parse_memory_limit."""
    if not value:
        return None
    m = _MEMORY_RE.match(value)
    if not m:
        return None
    mult = _MEMORY_MULT.get((m.group(2) or "").lower())
    if not mult:
        return None
    return int(m.group(1)) * mult


def parse_nano_cpus(value: str) -> int | None:
    """server services/helpers.py parse_nano_cpus (Python float() syntax)."""
    if not value:
        return None
    s = value.strip().lower()
    try:
        cpus = float(s[:-1]) / 1000 if s.endswith("m") else float(s)
    except ValueError:
        return None
    if not math.isfinite(cpus) or cpus <= 0:
        return None
    nano = cpus * 1_000_000_000
    if not math.isfinite(nano):
        return None
    nano = int(nano)
    if nano > (1 << 63) - 1:
        return None
    return nano


def parse_gpu_request(value: str) -> int | None:
    if not value:
        return None
    s = value.strip().lower()
    if s == "all":
        return -1
    try:
        n = int(s)
    except ValueError:
        return None
    return n if n > 0 else None


def resolve_resource_limits(limits: Mapping[str, str] | None) -> dict[str, int | None]:
    """server services/docker/container_ops.py _resolve_resource_limits (Linux platform)."""
    limits = limits or {}
    out: dict[str, int | None] = {}
    for key, parser in (("memory", parse_memory_limit), ("cpu", parse_nano_cpus), ("gpu", parse_gpu_request)):
        if key not in limits:
            out[key] = None
            continue
        value = limits[key]
        try:
            parsed = parser(value)
        except ValueError:
            parsed = None
        if parsed is None or (parsed <= 0 and not (key == "gpu" and parsed == -1)):
            preview = repr(value[:80])
            if len(value) > 80:
                preview += "... (%d characters)" % len(value)
            raise _bad(
                INVALID_PARAMETER,
                "Invalid resourceLimits.%s: %s; must resolve to a " % (key, preview)
                + ("positive device count or 'all'." if key == "gpu" else "positive resource limit."),
            )
        out[key] = parsed
    return out


def ensure_platform_valid(platform: dict[str, Any] | None) -> None:
    if platform is None:
        return
    os_, arch = platform["os"].strip().lower(), platform["arch"].strip().lower()
    if os_ not in ("linux", "windows"):
        raise _bad(
            INVALID_PARAMETER, "Unsupported platform.os '%s'. Supported values: ['linux', 'windows']." % platform["os"]
        )
    if arch not in ("amd64", "arm64"):
        raise _bad(
            INVALID_PARAMETER,
            "Unsupported platform.arch '%s'. Supported values: ['amd64', 'arm64']." % platform["arch"],
        )
    platform["os"], platform["arch"] = os_, arch


def _host_path_errors(path: str, allowed: list[str] | None) -> None:
    """server services/validators.py ensure_valid_host_path."""
    code = "VOLUME::INVALID_HOST_PATH"
    if not path:
        raise _bad(code, "Host path cannot be empty.")
    if not re.match(r"^(/|[A-Za-z]:[\\/])", path):
        raise _bad(
            code,
            "Host path '%s' must be an absolute path starting with '/' or a Windows drive letter "
            "(e.g. 'C:\\' or 'D:/')." % path,
        )
    fwd = path.replace("\\", "/")
    tail = fwd[2:] if re.match(r"^[A-Za-z]:/", fwd) else fwd
    if "/.." in tail or tail == "/..":
        raise _bad(code, "Host path '%s' contains path traversal component '..'." % path)
    if "//" in tail or (len(tail) > 1 and tail.endswith("/")):
        raise _bad(code, "Host path '%s' is not normalized. Remove redundant slashes." % path)
    if allowed is not None:

        def norm(p: str) -> str:
            p = p.replace("\\", "/")
            if re.match(r"^[A-Za-z]:", p):
                p = p[0].lower() + p[1:]
            return p[:-1] if len(p) > 1 and p.endswith("/") else p

        n = norm(path)
        if not any(n == norm(a) or n.startswith(norm(a) + "/") for a in allowed):
            raise _bad(
                "VOLUME::HOST_PATH_NOT_ALLOWED",
                "Host path '%s' is not under any allowed prefix. Allowed prefixes: %s" % (path, allowed),
            )


def ensure_volumes_valid(volumes: list[dict[str, Any]] | None, allowed_host_prefixes: list[str] | None) -> None:
    """server services/validators.py ensure_volumes_valid."""
    if not volumes:
        return
    seen: set[str] = set()
    for v in volumes:
        name = v["name"]
        if name in seen:
            raise _bad(
                "VOLUME::DUPLICATE_NAME", "Duplicate volume name '%s'. Each volume must have a unique name." % name
            )
        seen.add(name)
        sub = v.get("sub_path")
        if sub:
            if sub.startswith("/"):
                raise _bad("VOLUME::INVALID_SUB_PATH", "SubPath '%s' must be a relative path, not absolute." % sub)
            if any(p == ".." for p in sub.split("/")):
                raise _bad(
                    "VOLUME::INVALID_SUB_PATH", "SubPath '%s' contains path traversal '..' which is not allowed." % sub
                )
        if v.get("host") is not None:
            _host_path_errors(v["host"]["path"], allowed_host_prefixes)
        if v.get("pvc") is not None:
            pass  # claimName: already a DNS label of <= 253 characters (the model's pattern)
        o = v.get("ossfs")
        if o is not None:
            if not o["bucket"].strip():
                raise _bad("VOLUME::INVALID_OSSFS_BUCKET", "OSSFS bucket cannot be empty.")
            if not o["endpoint"].strip():
                raise _bad("VOLUME::INVALID_OSSFS_ENDPOINT", "OSSFS endpoint cannot be empty.")
            for opt in o.get("options") or []:
                if not opt.strip():
                    raise _bad("VOLUME::INVALID_OSSFS_OPTION", "OSSFS options must be non-empty strings.")
                if opt.strip().startswith("-"):
                    raise _bad(
                        "VOLUME::INVALID_OSSFS_OPTION",
                        "OSSFS options must be raw option payloads without "
                        "'-' prefix (e.g. 'allow_other', 'uid=1000').",
                    )


def split_egress_env(env: Mapping[str, str | None] | None) -> dict[str, str | None]:
    """server services/helpers.py split_egress_env: the sandbox's part; unknown OPENSANDBOX_EGRESS_* -> 400."""
    out: dict[str, str | None] = {}
    for k, v in (env or {}).items():
        if k.startswith(EGRESS_ENV_PREFIX):
            if k not in ALLOWED_EGRESS_ENV_VARS:
                raise _bad(
                    INVALID_PARAMETER,
                    "Environment variable '%s' is not allowed; permitted "
                    "OPENSANDBOX_EGRESS_ keys: %s" % (k, sorted(ALLOWED_EGRESS_ENV_VARS)),
                )
            if k == "OPENSANDBOX_EGRESS_MITMPROXY_TRANSPARENT":
                out[k] = v
        else:
            out[k] = v
    return out


def timeout_or_raise(now: datetime, timeout: int | None, max_timeout: int | None) -> datetime | None:
    """server services/validators.py ensure_timeout_within_limit + calculate_expiration_or_raise."""
    if timeout is None:
        return None
    try:
        expires = now + timedelta(seconds=timeout)
    except (OverflowError, ValueError):
        raise MockError(quirks.TIMEOUT_TOO_LARGE, timeout=timeout) from None
    if max_timeout is not None and timeout > max_timeout:
        raise _bad(INVALID_PARAMETER, "Sandbox timeout %ds exceeds configured maximum of %ds." % (timeout, max_timeout))
    return expires


def docker_create_checks(
    r: dict[str, Any],
    *,
    now: datetime,
    max_timeout: int | None = None,
    allowed_host_paths: Iterable[str] | None = (),
    snapshots: SnapshotService | None = None,
    egress_mode: str = "off",
    network: str = "bridge",
) -> dict[str, Any]:
    """Everything the server checks between a valid CreateSandboxRequest and touching Docker, in its order
    (server api/lifecycle.py create_sandbox -> services/docker/docker_service.py create_sandbox). Returns
    {"env", "limits", "snapshot"}; raises MockError with the server's status/code/message. ``snapshots``
    (snapshots.SnapshotStore) resolves a ``snapshotId``: the request then names the snapshot's image and,
    without an entrypoint, gets the server's default one (services/snapshot_restore.py). The expiry itself is the
    store's (SandboxStore.create): the server's second calculate_expiration_or_raise (in
    _prepare_creation_context) cannot fail once ensure_timeout_within_limit passed."""
    validate_extensions(r["extensions"])
    snap = (r["snapshot_id"] or "").strip()
    has_image = r["image"] is not None and bool(r["image"]["uri"].strip())
    restore = None
    if not (r["template_id"] or "").strip() and snap and not has_image:
        # server services/snapshot_restore.py: 404 unknown, 409 not Ready; a mock without snapshots knows none
        if snapshots is None:
            raise _bad("SNAPSHOT::NOT_FOUND", "Snapshot %s not found" % snap, 404)
        restore = snapshots.for_restore(snap)
        r["image"] = {"uri": restore.image.ref, "auth": None}
        r["snapshot_id"] = snap
        if not r["entrypoint"]:
            r["entrypoint"] = list(quirks.SNAPSHOT_RESTORE_ENTRYPOINT)
    if r["lifecycle"] is not None:
        raise _bad(INVALID_PARAMETER, "lifecycle hooks are not supported by the Docker provider.")
    if (r["extensions"] or {}).get("poolRef", "").strip():
        raise _bad(
            "SANDBOX::UNSUPPORTED_POOL_REF",
            "poolRef is not supported by the Docker provider. Use Kubernetes BatchSandbox provider instead.",
        )
    if not r["entrypoint"]:
        raise _bad("DOCKER::INVALID_ENTRYPOINT", "Entrypoint must contain at least one command.")
    validate_metadata(r["metadata"])
    ensure_platform_valid(r["platform"])
    timeout_or_raise(now, r["timeout"], max_timeout)
    if r["secure_access"]:
        raise MockError(quirks.SECURE_ACCESS_UNSUPPORTED)
    if r["network_policy"] is not None:  # services/docker/networking.py validate_network_policy
        if network == "host":
            raise _bad(INVALID_PARAMETER, "networkPolicy is not supported when docker network_mode=host.")
        if egress_mode == "off":  # a server without an egress sidecar image ([egress] image unset)
            raise MockError(quirks.NETWORK_POLICY_UNSUPPORTED)
    plat = r["platform"]
    windows = plat is not None and plat["os"] == "windows"
    limits = {} if windows else resolve_resource_limits(r["resource_limits"])
    env = split_egress_env(r["env"])
    allowed = list(allowed_host_paths) if allowed_host_paths is not None else None
    ensure_volumes_valid(r["volumes"], allowed)
    if windows:  # [choice] the server would boot a dockur/windows VM; the mock runs Linux processes only
        raise MockError(WINDOWS_UNSUPPORTED)
    return {"env": env, "limits": limits, "snapshot": restore}
