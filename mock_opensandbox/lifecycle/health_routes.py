"""/health and /version of the lifecycle listener (server main.py). Routes only: fixed answers, nothing kept."""

from __future__ import annotations

from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.lifecycle.services import ContainerService
from mock_opensandbox.wire.http1 import Request


class HealthRoutes:
    """The health check and version; ``provisioner`` (None: a lifecycle app alone) names the isolation."""

    def __init__(self, provisioner: ContainerService | None):
        self.provisioner = provisioner

    def health(self, req: Request) -> None:
        # body exactly as recorded (rec 01); the mock-only isolation detail rides in a header [choice]
        req.send_json(200, quirks.HEALTH_BODY, headers={"x-mock-isolation": self.isolation()})

    def isolation(self) -> str:
        note = getattr(self.provisioner, "isolation", None)
        try:
            return note() if callable(note) else "unknown"
        except Exception:  # pragma: no cover
            return "unknown"

    def version(self, req: Request) -> None:
        req.send_json(200, quirks.VERSION_BODY)
