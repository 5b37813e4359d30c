"""OpenSandbox failures as EPP errors: ``map_osb_error`` (the client's ``HttpError`` / ``NetError``,
with the host's ``sdk_code`` and a suggestion) and ``op_kind`` (which kind of call a method is).
Never raises from a mapper; never puts a secret value in a message (``errors.SECRETS`` masks what
slips through). The client is imported only when a failure is mapped.
"""

from __future__ import annotations

from errors import EppError, unsupported

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from config import Config
    from osb import HttpError, NetError


def op_kind(method: str) -> str:
    if method == "sandbox.create":
        return "create"
    if method == "sandbox.list":
        return "list"
    return {"files": "files", "exec": "exec", "process": "process", "ports": "ports"}.get(
        method.split(".", 1)[0], "sandbox"
    )


_SERVER_HINT = "Check that the OpenSandbox server is running and that base_url points at it."


def map_osb_error(exc: Exception, *, op: str, cfg: Config | None = None, target: str = "") -> EppError:
    """OpenSandbox failure -> EPP error. ``op`` is the kind of call: sandbox (an existing sandbox),
    create, list, files, exec, process or ports. Never raises; never includes a secret value."""
    from osb import HttpError, NetError

    try:
        if isinstance(exc, EppError):
            return exc
        if isinstance(exc, NetError):
            return _map_net_error(exc, cfg)
        if isinstance(exc, HttpError):
            return _map_http_error(exc, op, target)
        if isinstance(exc, UnicodeError):  # e.g. a lone surrogate in an id or path: no URL can carry it
            return EppError(
                -32602,
                "Invalid params: a text parameter is not valid Unicode (it contains a lone "
                "surrogate) and cannot be sent to OpenSandbox.",
            )
        return EppError(
            -32603 if isinstance(exc, (TypeError, AttributeError, KeyError)) else -32000,
            f"opensandbox provider internal error: {type(exc).__name__}: {exc}",
            suggestion="Please report this with the plugin's stderr output.",
        )
    except Exception as bug:  # noqa: BLE001 - a mapper that raised would lose the answer
        return EppError(-32000, f"opensandbox provider error ({type(bug).__name__})")


def _map_net_error(exc: NetError, cfg: Config | None) -> EppError:
    where = exc.target
    if exc.kind == "timeout":
        return EppError(
            -32000,
            f"OpenSandbox did not answer in time ({exc.what}, {where}).",
            sdk_code="E3001",
            retryable=True,
            suggestion="The server or sandbox may be overloaded or paused; retry, or raise "
            "http_timeout. A paused sandbox answers only after resume.",
        )
    if exc.kind == "incomplete":
        return EppError(
            -32000,
            f"The answer from OpenSandbox at {where} was cut short ({exc.what}): {exc.detail}",
            sdk_code="E5001",
            retryable=True,
            suggestion="A proxy or the server closed the connection mid-answer; retry. Nothing partial was used.",
        )
    if exc.kind in ("refused", "reset", "dns"):
        from osb import safe_url

        server = safe_url(cfg.server) if cfg is not None else ""
        if cfg is not None and not where.startswith(server):
            hint = (
                "Is the sandbox still running? If its ports are not reachable from this machine, "
                "set use_server_proxy=true."
            )
        else:
            hint = _SERVER_HINT + (f" (now {server})." if server else "")
        what = {"refused": "connection refused", "reset": "connection reset", "dns": "host name not found"}[exc.kind]
        return EppError(
            -32000,
            f"Cannot reach OpenSandbox at {where} ({exc.what}): {what}.",
            sdk_code="E5001",
            suggestion=hint,
            retryable=exc.kind != "dns",
        )
    return EppError(
        -32000,
        f"Network error talking to OpenSandbox at {where} ({exc.what}): {exc.detail}",
        sdk_code="E5000",
        suggestion=_SERVER_HINT,
    )


def _map_http_error(exc: HttpError, op: str, target: str) -> EppError:
    status, code, msg = exc.status, exc.code or "", exc.message
    plane = "execd" if exc.plane == "execd" else "OpenSandbox"
    text = f"{plane} HTTP {status} ({exc.what}): {msg}"
    extra: dict[str, Any] = {"http_status": status, "osb_code": code or None, "request_id": exc.request_id or None}
    # a quota by its code, whatever the status (a Kubernetes namespace ResourceQuota answers 403)
    if "QUOTA" in code.upper() or code.upper().endswith("CAPACITY_EXHAUSTED"):
        return EppError(-32004, text, **extra, suggestion="Delete unused sandboxes or raise the quota.")
    if status == 401:
        if exc.plane == "execd":
            return EppError(
                -32001,
                text,
                sdk_code="E1001",
                **extra,
                suggestion="Set execd_access_token (ABX_OPENSANDBOX_EXECD_ACCESS_TOKEN) to the "
                "token execd was started with.",
            )
        return EppError(
            -32001,
            text,
            sdk_code="E1001",
            **extra,
            suggestion="Set api_key (ABX_OPENSANDBOX_API_KEY or OPEN_SANDBOX_API_KEY) to the server's API key.",
        )
    if status == 403:
        if op == "files":
            return EppError(
                -32000, text, sdk_code="E4002", **extra, suggestion="The sandbox user may not access this path."
            )
        return EppError(-32001, text, **extra, suggestion="The credentials are valid but not allowed to do this.")
    kube = _map_kubernetes_error(exc, code.upper(), text, extra)
    if kube is not None:
        return kube
    if "IMAGE_PULL" in code.upper():
        return EppError(
            -32000,
            text,
            sdk_code="E2001",
            **extra,
            suggestion="Check the template (image name), the registry and registry_username/registry_password.",
        )
    if status == 501 or code.upper().endswith("NOT_SUPPORTED"):
        return unsupported(op, text, "This OpenSandbox runtime does not offer the operation.")
    if status == 404:
        upper = code.upper()
        if upper.endswith("SANDBOX_NOT_FOUND") or (exc.plane == "lifecycle" and op != "ports"):
            return EppError(
                -32002,
                text,
                sdk_code="E2009",
                **extra,
                suggestion="Run list to see the sandboxes; a killed or expired sandbox cannot be reconnected.",
            )
        if upper == "FILE_NOT_FOUND" or op == "files":
            return EppError(
                -32002,
                text,
                sdk_code="E4001",
                **extra,
                path=target or None,
                suggestion="Check the path; list the parent directory to see what exists.",
            )
        if msg.strip() == "404 page not found":
            return EppError(
                -32000, text, **extra, suggestion="This execd does not serve the route; use a newer execd image."
            )
        return EppError(
            -32002, text, **extra, suggestion="It may have finished or been removed already; list it again."
        )
    if status == 409:
        return EppError(-32000, text, **extra, suggestion="The sandbox is not in a state that allows this now.")
    if status in (400, 422):
        return EppError(-32000, text, **extra, suggestion="OpenSandbox rejected the request; see the message.")
    if status == 429:
        from osb import retry_after_seconds

        after = retry_after_seconds(exc.headers.get("retry-after"))
        hint = f"Too many requests; retry in {after:g} s." if after is not None else "Too many requests; retry later."
        return EppError(-32000, text, retryable=True, retry_after=after, **extra, suggestion=hint)
    if status in (502, 503, 504):
        return EppError(
            -32000,
            text,
            retryable=True,
            **extra,
            suggestion="The server, or a proxy in front of it, is unavailable; retry later.",
        )
    if status >= 500:
        return EppError(-32000, text, **extra, suggestion="OpenSandbox failed; see the server log.")
    return EppError(-32000, text, **extra, suggestion="See the message; retry if the condition was temporary.")


_IMAGE_REASONS = ("ImagePullBackOff", "ErrImagePull", "InvalidImageName", "ErrImageNeverPull")


def _map_kubernetes_error(exc: HttpError, upper: str, text: str, extra: dict[str, Any]) -> EppError | None:
    """The Kubernetes runtime's create failures (server services/k8s/kubernetes_service.py
    _wait_for_sandbox_ready, create_sandbox; the server deletes the workload of a failed create):
    the same EPP errors as the plugin's own readiness wait (methods/sandbox.py wait_ready)."""
    if upper == "KUBERNETES::POD_READY_TIMEOUT":
        return EppError(
            -32000,
            text,
            sdk_code="E3001",
            retryable=True,
            **extra,
            suggestion="The sandbox's pod did not become Ready in the server's sandbox_create_timeout_seconds "
            "(no node could take it, or a slow image pull); the server deleted it. Retry, or check the cluster.",
        )
    if upper == "KUBERNETES::POD_FAILED":
        if any(reason in exc.message for reason in _IMAGE_REASONS):
            return EppError(
                -32000,
                text,
                sdk_code="E2001",
                **extra,
                suggestion="Check the template (image name), the registry and registry_username/registry_password.",
            )
        return EppError(
            -32000,
            text,
            state="Failed",
            **extra,
            suggestion="Check the image and the entrypoint setting: the entrypoint must keep "
            "running (default: tail -f /dev/null).",
        )
    if upper == "KUBERNETES::POOL_NOT_FOUND":
        return EppError(
            -32002,
            text,
            sdk_code="E2001",
            **extra,
            suggestion="Check the pool setting (ABX_OPENSANDBOX_POOL or the pool option): the server has no such pool.",
        )
    return None


def is_http(exc: BaseException, *statuses: int) -> bool:
    """Whether ``exc`` is the client's HttpError with one of ``statuses``."""
    from osb import HttpError

    return isinstance(exc, HttpError) and exc.status in statuses
