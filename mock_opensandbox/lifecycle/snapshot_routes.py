"""The snapshot routes of the lifecycle listener (server api/lifecycle.py "Snapshot Operations"), over the
model in ``docker/snapshots.py``. ``LifecycleApp`` routes here; ``app.snapshots`` is the ``SnapshotStore`` the facade gives it (one
without a committer answers a create with 501 ``SNAPSHOT::NOT_IMPLEMENTED`` after the sandbox checks, as a
runtime without snapshots does, and never knows a snapshot)."""

from __future__ import annotations

from typing import Any

from mock_opensandbox.lifecycle import validation as V
from mock_opensandbox.wire.http1 import Request


def create(app: Any, req: Request) -> None:
    """POST /sandboxes/{id}/snapshots: the body (optional, {"name"}), the sandbox, Running; 202 + Location."""
    r = V.body(req, V.CreateSnapshotRequest, required=False)
    name = r["name"] if isinstance(r, dict) else None
    snap = app.snapshots.create(req.params["sid"], name)
    req.send_json(202, snap.accepted, headers={"location": "/v1/snapshots/%s" % snap.id})


def list_(app: Any, req: Request) -> None:
    """GET /snapshots?sandboxId&name&state*&page&pageSize (FastAPI Query: the last of a repeated scalar)."""
    page, size = V.q_page(req)
    states = req.query.get("state") or None
    items, pagination = app.snapshots.list(
        sandbox_id=V.q_last(req, "sandboxId"),
        name=V.q_last(req, "name"),
        states=states,
        page=page,
        page_size=size,
    )
    req.send_json(200, {"items": [s.to_json() for s in items], "pagination": pagination})


def get(app: Any, req: Request) -> None:
    req.send_json(200, app.snapshots.get(req.params["snap"]).to_json())


def delete(app: Any, req: Request) -> None:
    app.snapshots.delete(req.params["snap"])
    req.send(204)
