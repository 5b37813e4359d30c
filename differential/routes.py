"""execd's route table as the differential check knows it (router.go at 3bb6fad)."""

from __future__ import annotations

__all__ = ["ROUTES", "MIDDLEWARE"]

# router.go NewRouter at 3bb6fad, in its order (gin ":param" notation)
ROUTES = (
    "GET /ping",
    "DELETE /files",
    "GET /files/info",
    "POST /files/mv",
    "POST /files/permissions",
    "GET /files/search",
    "POST /files/replace",
    "POST /files/upload",
    "GET /files/download",
    "GET /directories/list",
    "POST /directories",
    "DELETE /directories",
    "POST /code",
    "DELETE /code",
    "POST /code/context",
    "GET /code/contexts",
    "DELETE /code/contexts",
    "DELETE /code/contexts/:contextId",
    "GET /code/contexts/:contextId",
    "POST /session",
    "POST /session/:sessionId/run",
    "DELETE /session/:sessionId",
    "POST /command",
    "DELETE /command",
    "GET /command/status/:id",
    "GET /command/:id/logs",
    "GET /metrics",
    "GET /metrics/watch",
    "POST /pty",
    "GET /pty/:sessionId",
    "DELETE /pty/:sessionId",
    "GET /pty/:sessionId/ws",
)
# middleware that applies to every route (router.go r.Use): access token, /proxy/:port
MIDDLEWARE = ("* accessToken", "* /proxy/:port", "* unknown path")
