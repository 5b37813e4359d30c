"""The diagnostics routes of the lifecycle listener (server api/devops.py). Routes only: the state is behind
``services.DiagnosticsText``, served by docker/ (``docker/diagnostics.py``: ``logs_text``, ``events_text``,
``inspect_text``, ``summary_text``, ``limit_lines``, ``inline``), over the sandbox table (lifecycle/model.py).
The Kubernetes runtime's diagnostics (lifecycle/k8s_diagnostics_routes.py) use ``DiagnosticsRoutes.diag`` too."""

from __future__ import annotations

from typing import Any, Callable

from mock_opensandbox.lifecycle import pydantic_lite as P
from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.lifecycle import validation as V
from mock_opensandbox.lifecycle.model import Sandbox, SandboxStore
from mock_opensandbox.lifecycle.quirks import MockError
from mock_opensandbox.lifecycle.services import DiagnosticsText
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


class DiagnosticsRoutes:
    """The diagnostics routes of the sandboxes in ``store``, their text ``diagnostics``'s (None: a lifecycle app
    without a runtime, a 500 once the sandbox is found)."""

    def __init__(self, store: SandboxStore, diagnostics: DiagnosticsText | None):
        self.store = store
        self.diagnostics = diagnostics

    def text(self) -> DiagnosticsText:
        if self.diagnostics is None:
            raise RuntimeError("this lifecycle app has no diagnostics")
        return self.diagnostics

    def diag(
        self,
        req: Request,
        kind: str,
        knob: tuple[str, int, int],
        scopes: tuple[str, ...],
        inline: Callable[[Sandbox], tuple[str, bool]],
        legacy: Callable[[Sandbox, int], str],
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
        sb = self.store.get(sid)
        if scope is not None:
            content, truncated = inline(sb)
            req.send_json(200, self.text().inline(sid, kind, scope, content, truncated, warning))
            return
        req.send_text(200, legacy(sb, bound), "text/plain; charset=utf-8", headers={"deprecation": "true"})

    def logs(self, req: Request) -> None:
        now = self.store.clock()
        self.diag(
            req,
            "logs",
            ("tail", 100, 10000),
            ("container", "all"),
            lambda sb: self.text().limit_lines(self.text().logs_text(sb, 101, now=now), 100, True),
            lambda sb, tail: self.text().logs_text(sb, tail, V.q_last(req, "since"), now=now),
            quirks.DIAG_LOGS_ALL_WARNING,
        )

    def events(self, req: Request) -> None:
        # `limit` only bounds Docker health-check entries, which a mock sandbox has none of
        self.diag(
            req,
            "events",
            ("limit", 50, 500),
            ("runtime", "all"),
            lambda sb: self.text().limit_lines(self.text().events_text(sb), 50, False),
            lambda sb, _limit: self.text().events_text(sb),
            quirks.DIAG_EVENTS_ALL_WARNING,
        )

    def inspect(self, req: Request) -> None:
        text = self.text()  # before the sandbox, as the server's route reads its service
        req.send_text(200, text.inspect_text(self.store.get(req.params["sid"])), "text/plain; charset=utf-8")

    @staticmethod
    def summary_tail(req: Request) -> int:
        """The summary route's query (api/devops.py: tail 1-10000, event_limit 1-500, both checked): its tail."""
        errors: list[dict[str, Any]] = []
        tail = V.q_int(req, "tail", 50, errors, ge=1, le=10000)
        V.q_int(req, "event_limit", 20, errors, ge=1, le=500)
        if errors:
            raise P.ValidationFailed(errors)
        return tail

    def summary(self, req: Request) -> None:
        tail = self.summary_tail(req)
        sid = req.params["sid"]
        text = self.text()
        req.send_text(
            200, text.summary_text(sid, self.store.get(sid), tail, now=self.store.clock()), "text/plain; charset=utf-8"
        )
