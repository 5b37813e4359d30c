"""The snapshot routes of the lifecycle listener (server api/lifecycle.py "Snapshot Operations"). Routes only: the
state is behind ``services.SnapshotService``, served by docker/ (``docker/snapshots.py`` ``SnapshotStore``, which
the facade gives; one without a committer answers a create with 501 ``SNAPSHOT::NOT_IMPLEMENTED`` after the
sandbox checks, as a runtime without snapshots does, and never knows a snapshot)."""

from __future__ import annotations

from mock_opensandbox.lifecycle import validation as V
from mock_opensandbox.lifecycle.services import SnapshotService
from mock_opensandbox.wire.http1 import Request


class SnapshotsRoutes:
    """The snapshot routes over ``snapshots`` (None: a lifecycle app without a runtime, every route a 500)."""

    def __init__(self, snapshots: SnapshotService | None):
        self.snapshots = snapshots

    def _store(self) -> SnapshotService:
        if self.snapshots is None:
            raise RuntimeError("this lifecycle app has no snapshot store")
        return self.snapshots

    def create(self, req: Request) -> None:
        """POST /sandboxes/{id}/snapshots: the body (optional, {"name"}), the sandbox, Running; 202 + Location."""
        r = V.body(req, V.CreateSnapshotRequest, required=False)
        name = r["name"] if isinstance(r, dict) else None
        snap = self._store().create(req.params["sid"], name)
        req.send_json(202, snap.accepted, headers={"location": "/v1/snapshots/%s" % snap.id})

    def list(self, req: Request) -> None:
        """GET /snapshots?sandboxId&name&state*&page&pageSize (FastAPI Query: the last of a repeated scalar)."""
        page, size = V.q_page(req)
        states = req.query.get("state") or None
        items, pagination = self._store().list(
            sandbox_id=V.q_last(req, "sandboxId"),
            name=V.q_last(req, "name"),
            states=states,
            page=page,
            page_size=size,
        )
        req.send_json(200, {"items": [s.to_json() for s in items], "pagination": pagination})

    def get(self, req: Request) -> None:
        req.send_json(200, self._store().get(req.params["snap"]).to_json())

    def delete(self, req: Request) -> None:
        self._store().delete(req.params["snap"])
        req.send(204)
