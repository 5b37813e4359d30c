"""The SDK metrics route (server api/metrics.py, /v1 only). Routes only: an event is accepted, recorded nowhere."""

from __future__ import annotations

from mock_opensandbox.lifecycle import validation as V
from mock_opensandbox.wire.http1 import Request


class MetricsRoutes:
    def event(self, req: Request) -> None:
        V.body(req, V.MetricsEvent)
        req.send(204)
