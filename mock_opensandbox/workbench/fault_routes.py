"""The /__mock__/faults routes on the lifecycle listener (mock only, docs/FAULTS.md): the workbench plugs
them into the lifecycle app's router, behind its API key, so the lifecycle routes never import the
workbench. One route each, added after the server's own, so that a 405's allow header names the methods of
the first matching route like every other route there. Standard library only."""

from __future__ import annotations

from typing import Any

from mock_opensandbox.workbench.admin import serve_faults
from mock_opensandbox.workbench.faults import FaultRegistry


def add_fault_routes(router: Any, registry: FaultRegistry) -> None:
    """Add GET/POST/DELETE /__mock__/faults and GET/DELETE /__mock__/faults/{fid} to ``router``
    (wire/http1.py Router) over ``registry``."""

    def rules(req: Any) -> None:
        serve_faults(req, registry)

    def rule(req: Any) -> None:
        serve_faults(req, registry, req.params["fid"])

    for method in ("GET", "POST", "DELETE"):
        router.add(method, "/__mock__/faults", rules)
    for method in ("GET", "DELETE"):
        router.add(method, "/__mock__/faults/{fid}", rule)
