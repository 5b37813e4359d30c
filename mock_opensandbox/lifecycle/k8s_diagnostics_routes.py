"""The diagnostics routes of the Kubernetes runtime (``--runtime kubernetes``): logs, events, inspect and summary of a
sandbox's pod (server api/devops.py over services/k8s/k8s_diagnostics.py). Routes only over the pod's text
(lifecycle/k8s_diagnostics.py) and the workloads (lifecycle/k8s_workloads.py); the query checks, the scopes and the
inline JSON are ``DiagnosticsRoutes.diag``'s (lifecycle/diagnostics_routes.py, the same FastAPI routes on both
runtimes); a missing sandbox is the Kubernetes service's 404 (lifecycle/k8s_sandboxes.py ``k8s_errors``).
lifecycle/k8s_sandboxes_routes.py ``install`` routes here."""

from __future__ import annotations

from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.lifecycle import validation as V
from mock_opensandbox.lifecycle.diagnostics_routes import DiagnosticsRoutes
from mock_opensandbox.lifecycle.k8s_diagnostics import NO_EVENTS, check_container, inspect_text, summary_text
from mock_opensandbox.lifecycle.k8s_sandboxes import k8s_errors
from mock_opensandbox.lifecycle.k8s_workloads import Workloads
from mock_opensandbox.lifecycle.model import Sandbox
from mock_opensandbox.wire.http1 import Request


class K8sDiagnosticsRoutes:
    """GET .../diagnostics/{logs,events,inspect,summary} of the sandboxes ``diagnostics`` reads (its store and
    text), each one's pod as its workload in ``workloads`` shows it."""

    def __init__(self, diagnostics: DiagnosticsRoutes, workloads: Workloads):
        self.diagnostics = diagnostics
        self.workloads = workloads

    def logs(self, req: Request) -> None:
        with k8s_errors(req.params["sid"]):
            routes = self.diagnostics
            now = routes.store.clock()
            diag = routes.text()

            def legacy(sb: Sandbox, tail: int) -> str:
                check_container(V.q_last(req, "container"), sb)
                return str(diag.logs_text(sb, tail, V.q_last(req, "since"), now=now))

            routes.diag(
                req,
                "logs",
                ("tail", 100, 10000),
                ("container", "all"),
                lambda sb: diag.limit_lines(diag.logs_text(sb, 101, now=now), 100, True),
                legacy,
                quirks.DIAG_LOGS_ALL_WARNING,
            )

    def events(self, req: Request) -> None:
        with k8s_errors(req.params["sid"]):
            self.diagnostics.diag(
                req,
                "events",
                ("limit", 50, 500),
                ("runtime", "all"),
                lambda sb: (NO_EVENTS, False),
                lambda sb, _limit: NO_EVENTS,
                quirks.DIAG_EVENTS_ALL_WARNING,
            )

    def inspect(self, req: Request) -> None:
        with k8s_errors(req.params["sid"]):
            sb = self.diagnostics.store.get(req.params["sid"])
            req.send_text(200, inspect_text(sb, self.workloads.get(sb.id)), "text/plain; charset=utf-8")

    def summary(self, req: Request) -> None:
        """api/devops.py get_sandbox_diagnostics_summary over the pod's inspect, events and log tail."""
        with k8s_errors(req.params["sid"]):
            routes = self.diagnostics
            tail = routes.summary_tail(req)
            sid = req.params["sid"]
            sb = routes.store.get(sid)
            w = self.workloads.get(sid)
            logs = routes.text().logs_text(sb, tail, now=routes.store.clock())
            req.send_text(200, summary_text(sid, sb, w, tail, logs), "text/plain; charset=utf-8")
