"""The /ping route of the mock execd (controller/ping.go; router.go's "/ping"): 200 with an empty body.
Routes only: a health check keeps no state."""

from __future__ import annotations

from mock_opensandbox.execd import gin
from mock_opensandbox.wire.http1 import Request

__all__ = ["PingRoutes"]


class PingRoutes:
    """The /ping route of one execd: ``ping`` (ROUTES target "ping.ping")."""

    def ping(self, req: Request) -> None:
        gin.ok(req)
