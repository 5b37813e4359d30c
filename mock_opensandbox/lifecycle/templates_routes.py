"""The template routes (server api/templates.py): Kubernetes only, so the body or query first, then 501.
Routes only: nothing kept."""

from __future__ import annotations

from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.lifecycle import validation as V
from mock_opensandbox.lifecycle.quirks import MockError
from mock_opensandbox.wire.http1 import Request


class TemplatesRoutes:
    def create(self, req: Request) -> None:
        V.body(req, V.CreateFsbTemplateRequest)
        raise MockError(quirks.TEMPLATES_UNSUPPORTED)

    def list(self, req: Request) -> None:
        V.q_page(req)
        raise MockError(quirks.TEMPLATES_UNSUPPORTED)

    def unsupported(self, req: Request) -> None:
        raise MockError(quirks.TEMPLATES_UNSUPPORTED)
