"""The /__mock__/faults routes on the lifecycle listener (mock only, docs/FAULTS.md): the workbench plugs
them into the lifecycle app's router, behind its API key, so the lifecycle routes never import the
workbench. One route each, added after the server's own, so that a 405's allow header names the methods of
the first matching route like every other route there. Standard library only."""

from __future__ import annotations

import json
from typing import Any

from mock_opensandbox.wire.http1 import Request
from mock_opensandbox.workbench.faults import FaultError, FaultRegistry


def _error(req: Request, status: int, code: str, message: str) -> None:
    req.send_json(status, {"code": code, "message": message})


def serve_faults(req: Request, registry: FaultRegistry, fid: str | None = None) -> bool:
    """``/__mock__/faults`` (GET lists, POST adds a rule or a list, DELETE clears) and ``/__mock__/faults/{fid}``
    (GET, DELETE), for the admin layer and the lifecycle app alike (docs/FAULTS.md). False: a method not
    served here (the caller answers 405 its own way)."""
    m = req.method
    if fid is None:
        if m == "GET":
            req.send_json(200, {"rules": registry.to_json()})
        elif m == "POST":
            try:
                payload = json.loads(req.body.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                _error(req, 400, "MOCK::INVALID_FAULT", "The body must be a JSON fault rule or a list of them.")
                return True
            try:
                added = registry.add_json(payload)
            except FaultError as e:
                _error(req, 400, "MOCK::INVALID_FAULT", str(e))
                return True
            req.send_json(201, {"rules": [r.to_json() for r in added]})
        elif m == "DELETE":
            registry.clear()
            req.send(204)
        else:
            return False
        return True
    if m not in ("GET", "DELETE"):
        return False
    rule = registry.get(fid)
    if rule is None:
        _error(req, 404, "MOCK::FAULT_NOT_FOUND", "No fault rule %s." % fid[:64])
    elif m == "GET":
        req.send_json(200, rule.to_json())
    else:
        registry.remove(fid)
        req.send(204)
    return True


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
