"""The /metrics group of the mock execd (controller/metric.go; router.go's "/metrics" routes): one sample, or
one per second as a stream. The samples are execd/metrics.py's (no HTTP)."""

from __future__ import annotations

import threading

from mock_opensandbox.execd import gin
from mock_opensandbox.execd.metrics import CPU_SAMPLE_S, sample
from mock_opensandbox.wire.gojson import go_json
from mock_opensandbox.wire.http1 import Request
from mock_opensandbox.wire.relay import client_gone

__all__ = ["MetricsRoutes"]


class MetricsRoutes:
    """The /metrics routes of one execd: ``get``, ``watch`` (ROUTES targets "metrics.*"). ``stopping``: the
    execd server's stop event (it ends a watch)."""

    def __init__(self, stopping: threading.Event):
        self._stopping = stopping

    def get(self, req: Request) -> None:
        gin.json_reply(req, 200, sample())

    def watch(self, req: Request) -> None:
        """controller/metric.go WatchMetrics: SSE headers, one JSON object + "\n" per second until the
        client leaves."""
        w = gin.sse_start(req)
        try:
            while not self._stopping.wait(1.0 - CPU_SAMPLE_S):
                if client_gone(req.handler.connection):
                    break
                w.write((go_json(sample()) + "\n").encode())
        except OSError:
            pass
        w.close()
        req.handler.close_connection = True
