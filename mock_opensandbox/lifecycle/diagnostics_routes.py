"""The diagnostics routes of the lifecycle listener (server api/devops.py), over the Docker diagnostics text in
``docker/diagnostics.py``. ``LifecycleApp`` routes here; ``app.diagnostics`` is what the facade gives it
(``logs_text``, ``events_text``, ``inspect_text``, ``summary_text``, ``limit_lines``, ``inline``) and
``app.store`` the sandbox table."""

from __future__ import annotations

from typing import Any, Callable

from mock_opensandbox.lifecycle import pydantic_lite as P
from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.lifecycle import validation as V
from mock_opensandbox.lifecycle.quirks import MockError
from mock_opensandbox.wire.http1 import Request


def _scope(req: Request, kind: str, supported: tuple[str, ...]) -> str | None:
    scope = V.q_last(req, "scope")
    if scope is None:
        return None
    norm = scope.strip().lower()
    if norm not in supported:
        raise MockError(
            quirks.DIAGNOSTICS_SCOPE_UNSUPPORTED, kind=kind, scope=repr(scope), supported=", ".join(supported)
        )
    return norm


def diag(
    app: Any,
    req: Request,
    kind: str,
    knob: tuple[str, int, int],
    scopes: tuple[str, ...],
    inline: Callable[[Any], tuple[str, bool]],
    legacy: Callable[[Any, int], str],
    warning: str,
) -> None:
    """GET .../diagnostics/{logs,events}: with `scope`, the JSON inline form (its own fixed bound); without,
    the deprecated plain-text form bounded by the `knob` query parameter (name, default, maximum)."""
    errors: list[dict[str, Any]] = []
    bound = V.q_int(req, knob[0], knob[1], errors, ge=1, le=knob[2])
    if errors:
        raise P.ValidationFailed(errors)
    scope = _scope(req, kind, scopes)
    sid = req.params["sid"]
    sb = app.store.get(sid)
    if scope is not None:
        content, truncated = inline(sb)
        req.send_json(200, app.diagnostics.inline(sid, kind, scope, content, truncated, warning))
        return
    req.send_text(200, legacy(sb, bound), "text/plain; charset=utf-8", headers={"deprecation": "true"})


def logs(app: Any, req: Request) -> None:
    now = app.store.clock()
    diag(
        app,
        req,
        "logs",
        ("tail", 100, 10000),
        ("container", "all"),
        lambda sb: app.diagnostics.limit_lines(app.diagnostics.logs_text(sb, 101, now=now), 100, True),
        lambda sb, tail: app.diagnostics.logs_text(sb, tail, V.q_last(req, "since"), now=now),
        quirks.DIAG_LOGS_ALL_WARNING,
    )


def events(app: Any, req: Request) -> None:
    # `limit` only bounds Docker health-check entries, which a mock sandbox has none of
    diag(
        app,
        req,
        "events",
        ("limit", 50, 500),
        ("runtime", "all"),
        lambda sb: app.diagnostics.limit_lines(app.diagnostics.events_text(sb), 50, False),
        lambda sb, _limit: app.diagnostics.events_text(sb),
        quirks.DIAG_EVENTS_ALL_WARNING,
    )


def inspect(app: Any, req: Request) -> None:
    req.send_text(200, app.diagnostics.inspect_text(app.store.get(req.params["sid"])), "text/plain; charset=utf-8")


def summary(app: Any, req: Request) -> None:
    errors: list[dict[str, Any]] = []
    tail = V.q_int(req, "tail", 50, errors, ge=1, le=10000)
    V.q_int(req, "event_limit", 20, errors, ge=1, le=500)
    if errors:
        raise P.ValidationFailed(errors)
    sid = req.params["sid"]
    req.send_text(
        200,
        app.diagnostics.summary_text(sid, app.store.get(sid), tail, now=app.store.clock()),
        "text/plain; charset=utf-8",
    )
