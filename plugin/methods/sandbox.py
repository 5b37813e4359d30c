"""Sandbox lifecycle methods: sandbox.create / get / connect / list / kill / set_timeout / pause /
resume, and how an OpenSandbox Sandbox becomes an EPP SandboxRecord.

``rec NN`` = recording NN, fixtures/NN_*.json; the other facts are rows of mock_opensandbox/QUIRKS.md.
"""

from __future__ import annotations

import functools
import time

from config import CODE_INTERPRETER_ENTRYPOINT, Config
from context import Context
from epp import Request
from errors import EppError, bad_input, unsupported
from failures import is_http
from params import as_text, check_envs, is_number, sandbox_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

    from osb import OpenSandbox

STATE_TO_STATUS = {  # the lifecycle API's sandbox states (`status.state`) -> EPP status
    "Pending": "creating",
    "Running": "running",
    "Pausing": "paused",
    "Paused": "paused",
    "Resuming": "creating",
    "Stopping": "stopping",
    "Terminated": "stopped",
    "Failed": "error",
}
STATUS_TO_STATES = {
    "running": ["Running"],
    "paused": ["Paused", "Pausing"],
    "pausing": ["Pausing"],
    "creating": ["Pending", "Resuming"],
    "stopping": ["Stopping"],
    "stopped": ["Terminated"],
    "error": ["Failed"],
}


def _state(sb: dict[str, Any]) -> str:
    status = v if isinstance(v := sb.get("status"), dict) else {}
    return str(status.get("state") or "")


def to_record(sb: dict[str, Any], template: str | None = None) -> dict[str, Any]:
    """OpenSandbox Sandbox -> EPP SandboxRecord (no url/envd_url: commands and files go over EPP)."""
    image = v if isinstance(v := sb.get("image"), dict) else {}
    status = v if isinstance(v := sb.get("status"), dict) else {}
    state = _state(sb)
    rec: dict[str, Any] = {
        "sandbox_id": str(sb.get("id") or ""),
        "template": template or str(image.get("uri") or ""),
        "status": STATE_TO_STATUS.get(state, "error"),
        "metadata": sb.get("metadata") if isinstance(sb.get("metadata"), dict) else {},
        "region": "",
        "state": state,
    }
    for src, dst in (("createdAt", "created_at"), ("expiresAt", "expires_at")):
        if isinstance(sb.get(src), str) and sb[src]:
            rec[dst] = sb[src]
    if status.get("reason"):
        rec["state_reason"] = str(status["reason"])
    if status.get("message"):
        rec["state_message"] = str(status["message"])
    return rec


def m_sandbox_create(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    cfg = ctx.config().with_options(p.get("options"))  # registers a per-create registry password
    client = ctx.client()
    image = resolve_image(cfg, p.get("template"))
    body = create_body(cfg, p, image)
    budget = float(cfg.ready_timeout)
    if is_number(p.get("request_timeout")) and p["request_timeout"] > 0:
        budget = min(budget, max(1.0, float(p["request_timeout"]) - 1.0))
    deadline = time.monotonic() + budget
    reply = ctx.guard(lambda: client.create(body, timeout=max(cfg.http_timeout, budget)), op="create")
    sb = reply.json() if isinstance(reply.json(), dict) else {}
    sid = str(sb.get("id") or "")
    if not sid:
        raise EppError(-32000, "OpenSandbox accepted the create request but returned no sandbox id.")
    try:
        sb = wait_ready(ctx, req, client, sid, sb, deadline, budget)
    except BaseException:
        try:
            client.delete(sid)
        except Exception:  # noqa: BLE001 - best effort, the original error matters
            ctx.log(f"could not delete sandbox {sid} after a failed create")
        raise
    client.cache.prune()
    return to_record(sb, image)


def resolve_image(cfg: Config, template: object) -> str:
    """template -> image: an alias, then "base" -> default_image, else the image reference verbatim."""
    name = as_text(template)
    if not name or name == "base":
        return cfg.default_image
    return cfg.image_aliases.get(name, name)


_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_DNS_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"


def check_metadata(metadata: object) -> dict[str, Any]:
    """Kubernetes label syntax (OpenSandbox stores metadata as labels: QUIRKS.md, Create)."""
    import re

    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise bad_input("metadata must be an object of string keys and values.")
    out = {}
    for key, value in metadata.items():
        key = str(key)
        prefix, slash, name = key.partition("/")
        if not slash:
            prefix, name = "", key
        problem = None
        if key.startswith("opensandbox.io/"):
            problem = "the opensandbox.io/ prefix is reserved by OpenSandbox"
        elif not name or len(name) > 63 or not re.fullmatch(_LABEL_NAME, name):
            problem = (
                "the name part must be 1-63 characters of letters, digits, '-', '_' or '.', "
                "starting and ending with a letter or digit"
            )
        elif slash and (not prefix or len(prefix) > 253 or not re.fullmatch(_DNS_PREFIX, prefix)):
            problem = "the prefix before '/' must be a lower-case DNS subdomain"
        if problem:
            raise bad_input(
                f"metadata key {key!r} is not a valid label key: {problem}.",
                "Use keys like 'project' or 'example.com/team'.",
            )
        text = "" if value is None else str(value)
        if len(text) > 63 or (text and not re.fullmatch(_LABEL_NAME, text)):
            raise bad_input(
                f"metadata value of key {key!r} is not a valid label value: at most 63 "
                "characters of letters, digits, '-', '_' or '.', starting and ending with a "
                "letter or digit.",
                "Store longer or free-form text in a file in the sandbox.",
            )
        out[key] = text
    return out


def create_body(cfg: Config, p: dict[str, Any], image: str) -> dict[str, Any]:
    if p.get("disk") not in (None, 0):
        raise unsupported("disk", "OpenSandbox cannot size a sandbox's disk.", "Create the sandbox without disk=.")
    limits = {"cpu": "500m", "memory": "512Mi"}  # the official SDK's defaults (rec 18)
    cpu, memory, gpu = p.get("cpu"), p.get("memory"), p.get("gpu")
    if cpu is not None:
        limits["cpu"] = _quantity("cpu", cpu, lambda n: f"{int(round(n * 1000))}m")
    if memory is not None:
        limits["memory"] = _quantity("memory", memory, lambda n: f"{int(n)}Mi")
    if gpu not in (None, "", 0):
        if isinstance(gpu, bool) or not str(gpu).strip().isdigit():
            raise unsupported(
                "gpu",
                f"OpenSandbox takes a GPU count, not a model name ({str(gpu)[:40]!r}).",
                "Pass gpu as a number of devices, e.g. 1.",
            )
        limits["gpu"] = str(gpu).strip()
    body: dict[str, Any] = {"image": {"uri": image}, "resourceLimits": limits}
    if cfg.registry_username or cfg.registry_password:
        body["image"]["auth"] = {"username": cfg.registry_username, "password": cfg.registry_password}
    entrypoint = cfg.entrypoint
    if cfg.entrypoint_is_default and "code-interpreter" in image:
        entrypoint = list(CODE_INTERPRETER_ENTRYPOINT)  # keep the image's runtime script
    body["entrypoint"] = entrypoint
    ttl = p.get("timeout")
    if ttl is not None:
        if not is_number(ttl) or ttl < 0:
            raise bad_input("timeout must be a number of seconds.")
        if ttl > 0:
            body["timeout"] = max(60, int(ttl))  # OpenSandbox's minimum TTL (rec 03)
    envs = check_envs(p.get("envs"))
    if envs:
        body["env"] = envs  # create takes "env" (rec 15)
    metadata = check_metadata(p.get("metadata"))
    if metadata:
        body["metadata"] = metadata
    if cfg.network_policy:
        body["networkPolicy"] = cfg.network_policy
    if cfg.volumes:
        body["volumes"] = cfg.volumes  # the server checks and mounts them
    if cfg.platform:
        body["platform"] = cfg.platform
    if cfg.pool:
        body["extensions"] = {"poolRef": cfg.pool}  # the Kubernetes runtime's pools (Docker refuses it: 400)
    secure = p["secure"] if isinstance(p.get("secure"), bool) else cfg.secure_access
    if secure:
        body["secureAccess"] = True
    return body


def _quantity(field: str, value: object, fmt: Callable[[float], str]) -> str:
    if isinstance(value, bool):
        raise bad_input(f"{field} must be a number.")
    if isinstance(value, (int, float)):
        if not is_number(value) or value <= 0:
            raise bad_input(f"{field} must be a positive number.")
        return fmt(value)
    text = as_text(value)
    try:
        number = float(text)
        if not is_number(number) or number <= 0:
            raise bad_input(f"{field} must be a positive number.")
        return fmt(number)
    except ValueError:
        if text and text[0].isdigit():
            return text  # already a quantity like "250m" or "1Gi"
        raise bad_input(f"{field} must be a number or a resource quantity like 500m / 1Gi.") from None


def wait_ready(
    ctx: Context, req: Request, client: OpenSandbox, sid: str, sb: dict[str, Any], deadline: float, budget: float
) -> dict[str, Any]:
    """Until state Running AND execd answers /ping: the create answer already says Running before
    execd is up, and an entrypoint that exits turns the sandbox Failed a moment later (rec 15)."""
    from osb import HttpError, NetError

    interval, first, last_problem = 0.05, True, "state " + (_state(sb) or "unknown")
    while True:
        if req.cancelled.is_set():
            raise EppError(-32000, f"Creating sandbox {sid} was cancelled; it was deleted.")
        if not first:
            sb = ctx.guard(lambda: client.get(sid), op="sandbox").json() or sb
        first = False
        state = _state(sb)
        if state in ("Failed", "Terminated", "Stopping"):
            status = v if isinstance(v := sb.get("status"), dict) else {}
            detail = " ".join(str(status.get(k) or "") for k in ("reason", "message")).strip()
            raise EppError(
                -32000,
                f"Sandbox {sid} did not start: {state}" + (f" ({detail})" if detail else "") + ".",
                suggestion="Check the image and the entrypoint setting: the entrypoint must keep "
                "running (default: tail -f /dev/null).",
                state=state,
            )
        if state == "Running":
            try:
                execd = client.execd(sid)
                execd.ping(timeout=max(0.5, min(3.0, deadline - time.monotonic())))
                # an entrypoint that exits at once can lose the race against the ping: confirm the state
                # once more (rec 15: Failed 0.4 s after a create that said Running)
                again = ctx.guard(lambda: client.get(sid), op="sandbox").json() or sb
                if _state(again) == "Running":
                    return again
                sb, first = again, True
                continue
            except HttpError as exc:
                if exc.status in (401, 403) or (exc.plane == "lifecycle" and exc.status < 500):
                    raise ctx.error(exc, "create") from None
                last_problem = f"execd answered HTTP {exc.status}"
            except NetError as exc:
                last_problem = f"execd not reachable yet ({exc.kind})"
        else:
            last_problem = f"state {state or 'unknown'}"
        if time.monotonic() >= deadline:
            raise EppError(
                -32000,
                f"Sandbox {sid} was not ready within {budget:g} s ({last_problem}); it was deleted.",
                sdk_code="E3001",
                suggestion="Raise ready_timeout (image pulls can be slow), or check the server.",
            )
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
        interval = min(interval * 1.6, 0.5)


def m_sandbox_get(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    sid = sandbox_id(p)
    client = ctx.client()
    return to_record(ctx.guard(lambda: client.get(sid), op="sandbox").json() or {})


def m_sandbox_connect(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    """Like get, but a paused sandbox is resumed (what connect means for E2B-style hosts)."""
    sid = sandbox_id(p)
    client = ctx.client()
    sb = ctx.guard(lambda: client.get(sid), op="sandbox").json() or {}
    if _state(sb) == "Paused":
        _resume(ctx, client, sid)
        sb = ctx.guard(lambda: client.get(sid), op="sandbox").json() or sb
    return to_record(sb)


def m_sandbox_list(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    client = ctx.client()
    limit = p.get("limit")
    limit = limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else 100
    cursor = p.get("cursor")
    page = int(cursor) if isinstance(cursor, (str, int)) and str(cursor).isdigit() and int(cursor) > 0 else 1
    states: list[str] = []
    status = p.get("status")
    if status:
        found = STATUS_TO_STATES.get(str(status).lower())
        if found is None:
            raise bad_input(
                f"Unknown status filter {str(status)[:30]!r}; use one of " + ", ".join(sorted(STATUS_TO_STATES)) + "."
            )
        states = found
    metadata = ""
    if isinstance(p.get("metadata"), dict) and p["metadata"]:
        import urllib.parse

        metadata = "&".join(
            f"{urllib.parse.quote(str(k))}={urllib.parse.quote(str(v))}" for k, v in p["metadata"].items()
        )
    records: list[Any] = []
    next_page = None
    for _ in range(10_000):
        body = ctx.guard(
            functools.partial(client.list_page, page=page, page_size=200, states=states, metadata=metadata), op="list"
        )
        items = v if isinstance(v := body.get("items"), list) else []
        records += [to_record(sb) for sb in items if isinstance(sb, dict) and sb.get("id")]
        pagination = v if isinstance(v := body.get("pagination"), dict) else {}
        if not pagination.get("hasNextPage") or not items:
            next_page = None
            break
        page += 1
        next_page = str(page)
        if len(records) >= limit:
            break
    return {"sandboxes": records, "next": next_page}


def m_sandbox_kill(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    """Idempotent: an unknown or already deleted id answers {} (epp-host-ref §4.3)."""
    sid = sandbox_id(p)
    client = ctx.client()
    if ctx.terminals is not None:  # a terminal never outlives its sandbox
        ctx.terminals.close_sandbox(sid)
    try:
        client.delete(sid)
    except Exception as exc:  # noqa: BLE001 - mapped below; 404 means already gone
        if not is_http(exc, 404):
            raise ctx.error(exc, "sandbox") from None
        client.forget(sid)
    return {}


def m_sandbox_set_timeout(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    """renew-expiration with expiresAt = the server's clock (its Date header) + timeout, so a skewed
    local clock does not matter."""
    import datetime

    from osb import http_date

    sid = sandbox_id(p)
    seconds = p.get("timeout")
    if not is_number(seconds) or seconds <= 0:
        raise bad_input("timeout must be a positive number of seconds.")
    seconds = max(60, int(seconds))
    client = ctx.client()
    reply = ctx.guard(lambda: client.get(sid), op="sandbox")
    server_date = http_date(reply.headers.get("date"))
    if server_date is not None:
        # Date has whole seconds: the true time is in [D, D+1); add the time since it arrived.
        now = server_date + datetime.timedelta(seconds=0.5 + time.monotonic() - reply.received)
    else:
        now = datetime.datetime.now(datetime.timezone.utc)
    expires = (now + datetime.timedelta(seconds=seconds)).astimezone(datetime.timezone.utc)
    expires = expires.replace(microsecond=0) + datetime.timedelta(seconds=round(expires.microsecond / 1e6))
    stamp = expires.strftime("%Y-%m-%dT%H:%M:%SZ")
    ctx.guard(lambda: client.renew(sid, stamp), op="sandbox")
    return {"expires_at": stamp}


def m_sandbox_pause(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    sid = sandbox_id(p)
    client = ctx.client()
    _once(ctx, client, sid, client.pause, ("Paused", "Pausing"))
    return {}


def _resume(ctx: Context, client: OpenSandbox, sid: str) -> None:
    _once(ctx, client, sid, client.resume, ("Running", "Resuming"))


def _once(ctx: Context, client: OpenSandbox, sid: str, call: Callable[[str], object], done: tuple[str, ...]) -> None:
    """pause / resume, where repeating is not an error: rec 14 answers a second pause 409
    SANDBOX_NOT_RUNNING and a second resume 409 SANDBOX_NOT_PAUSED; a sandbox already in one of the
    ``done`` states counts as success."""
    try:
        call(sid)
    except Exception as exc:  # noqa: BLE001 - mapped below, unless the sandbox is already there
        if not (is_http(exc, 409) and _state(ctx.guard(lambda: client.get(sid), op="sandbox").json() or {}) in done):
            raise ctx.error(exc, "sandbox") from None


def m_sandbox_resume(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    sid = sandbox_id(p)
    _resume(ctx, ctx.client(), sid)
    return {}
