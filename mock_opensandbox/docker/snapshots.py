"""Snapshots of the Docker runtime (QUIRKS.md, Snapshots; recording 25): the records, their states and the server's answers.
No HTTP (the routes are ``lifecycle/snapshots_routes.py``).

Server 1.1.1 (``services/snapshot_service.py`` ``PersistedSnapshotService`` with ``DockerSnapshotRuntime``):
a create checks the sandbox (404 ``DOCKER::SANDBOX_NOT_FOUND``) and that it is Running (409
``SNAPSHOT::INVALID_SOURCE_STATE``), stores a ``Creating`` / ``snapshot_accepted`` record, answers 202 and
commits in a worker (``docker commit``: the container is paused meanwhile, so the sandbox reads Paused and a
second create answers 409); the record becomes ``Ready`` / ``snapshot_runtime_ready`` or ``Failed`` /
``snapshot_runtime_failed`` with the exception's text. Listing filters by sandboxId, exact name and states
(OR), newest first, then pages. A delete of a ``Creating`` record is 409 ``SNAPSHOT::INVALID_STATE``;
otherwise the record turns ``Deleting`` first, then the image is removed: while a sandbox uses it, Docker
answers 409 and the record stays ``Deleting`` (409 ``SNAPSHOT::DELETE_CONFLICT``, again on every retry); a
restore from anything but ``Ready`` is 409 ``SNAPSHOT::NOT_READY``. Recording 25 shows all of it live.

The content is the image store's (``images/commit.py``): a commit is a new image = the sandbox's image
layers + one layer of what it wrote; ``committer`` does it and ``remover`` forgets it.
"""

from __future__ import annotations

import threading
import uuid
from datetime import datetime
from typing import Any, Callable, Dict, Iterable, List  # List: SnapshotStore.list shadows list

from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.lifecycle.model import SandboxStore, format_ts, paginate, utcnow
from mock_opensandbox.lifecycle.quirks import MockError


class Snapshot:
    def __init__(self, *, sandbox_id: str, name: str | None, created_at: datetime):
        self.id = str(uuid.uuid4())
        self.sandbox_id = sandbox_id
        self.name = name
        self.created_at = created_at
        self.state, self.reason, self.message = quirks.SNAPSHOT_ACCEPTED
        self.last_transition_at = created_at
        self.image: Any = None  # images.Image once Ready
        self.env: dict[str, str] = {}  # the source container's env (a commit keeps its Config.Env)
        self.metadata: dict[str, str] = {}  # its labels (a commit keeps them; a restored sandbox shows them)
        self.accepted: dict[str, Any] = {}

    def set_state(self, triple: tuple[str, str, str], at: datetime) -> None:
        self.state, self.reason, self.message = triple
        self.last_transition_at = at

    def rootfs_image(self) -> Any:
        """The image a restored sandbox runs on: the commit of an image-based sandbox; None for a commit of the
        host-tools view (its layer is copied into the new sandbox's root instead: images/commit.py)."""
        labels = (getattr(self.image, "config", None) or {}).get("Labels") or {}
        return None if labels.get("mock-opensandbox.view") == "host-tools" else self.image

    def to_json(self) -> dict[str, Any]:
        """Body of the create answer, GET and list items (key order as recorded; name omitted when None)."""
        out: dict[str, Any] = {"id": self.id, "sandboxId": self.sandbox_id}
        if self.name is not None:
            out["name"] = self.name
        out["status"] = {
            "state": self.state,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionAt": format_ts(self.last_transition_at),
        }
        out["createdAt"] = format_ts(self.created_at)
        return out


Committer = Callable[[Any, Snapshot], Any]  # (sandbox, snapshot) -> images.Image; raises with the Failed message


class SnapshotStore:
    def __init__(
        self, sandboxes: SandboxStore, committer: Committer | None = None, remover: Callable[[Any], None] | None = None
    ):
        self.sandboxes = sandboxes
        self.committer = committer
        self.remover = remover
        self._lock = threading.RLock()
        self._items: dict[str, Snapshot] = {}
        self._threads: list[threading.Thread] = []

    @property
    def clock(self) -> Callable[[], datetime]:
        return getattr(self.sandboxes, "clock", utcnow)

    # -- queries ------------------------------------------------------------------------------------------
    def get(self, snapshot_id: str) -> Snapshot:
        with self._lock:
            snap = self._items.get(snapshot_id)
        if snap is None:
            raise MockError(quirks.SNAPSHOT_NOT_FOUND, id=snapshot_id)
        return snap

    def all(self) -> list[Snapshot]:
        with self._lock:
            return list(self._items.values())

    def list(
        self,
        *,
        sandbox_id: str | None = None,
        name: str | None = None,
        states: Iterable[str] | None = None,
        page: int = 1,
        page_size: int = quirks.DEFAULT_PAGE_SIZE,
    ) -> tuple[list[Snapshot], dict[str, Any]]:
        """The repository's query (server repositories/snapshots/sqlite.py list): sandboxId (a blank one is no
        filter), exact name, states exactly as written (OR), newest first (created_at, then id), one page."""
        wanted = set(states) if states else None
        with self._lock:
            items = list(self._items.values())
        out = [
            s
            for s in items
            if (not sandbox_id or s.sandbox_id == sandbox_id)
            and (name is None or s.name == name)
            and (wanted is None or s.state in wanted)
        ]
        out.sort(key=lambda s: (s.created_at, s.id), reverse=True)
        return paginate(out, page, page_size)

    def users(self, snapshot_id: str) -> List[str]:
        """Ids of the sandboxes restored from it that still exist (Docker: containers using the image)."""
        return self._users().get(snapshot_id, [])

    def _users(self) -> Dict[str, List[str]]:
        """snapshot id -> the sorted ids of the existing sandboxes restored from it (one walk of the table)."""
        out: Dict[str, List[str]] = {}
        for sid, sb in self.sandboxes.snapshot().items():
            snap_id = getattr(sb, "snapshot_id", None)
            if snap_id is not None and not sb.deleted:
                out.setdefault(snap_id, []).append(sid)
        for ids in out.values():
            ids.sort()
        return out

    # -- commands -----------------------------------------------------------------------------------------
    def create(self, sandbox_id: str, name: str | None) -> Snapshot:
        sb = self.sandboxes.get(sandbox_id)
        if sb.state != "Running":
            raise MockError(quirks.SNAPSHOT_SOURCE_NOT_RUNNING)
        if self.committer is None:
            raise MockError(quirks.SNAPSHOTS_UNSUPPORTED)
        snap = Snapshot(sandbox_id=sandbox_id, name=name, created_at=self.clock())
        snap.env = {k: v for k, v in (sb.env or {}).items() if v is not None}
        # docker commit keeps the container's labels: its image's, then the create's metadata (not a PATCH's,
        # which the server keeps in its metadata store)
        snap.metadata = dict(getattr(sb, "inherited_metadata", None) or {}, **getattr(sb, "label_metadata", {}))
        with self._lock:
            self._items[snap.id] = snap
        # docker commit pauses the container while it copies (the sandbox reads Paused meanwhile); paused
        # here, before the answer, so that the commit sees what the sandbox had written until now
        paused = self._pause(sb)
        snap.accepted = snap.to_json()  # the 202 body: the record as stored, before the worker touches it
        t = threading.Thread(
            target=self._commit, args=(sb, snap, paused), name="mock-osb-snapshot-%s" % snap.id[:8], daemon=True
        )
        with self._lock:
            self._threads = [x for x in self._threads if x.is_alive()] + [t]
        t.start()
        return snap

    def _pause(self, sb: Any) -> bool:
        with sb.lock:
            if sb.deleted or sb.exited or sb.paused:
                return False
            try:
                self.sandboxes.provisioner.pause(sb)
            except Exception:  # pragma: no cover - a sandbox that cannot pause is committed running
                return False
            sb.paused = True
            return True

    def _resume(self, sb: Any) -> None:
        with sb.lock:
            if sb.deleted or sb.exited or not sb.paused:
                return
            try:
                self.sandboxes.provisioner.resume(sb)
            finally:
                sb.paused = False

    def _commit(self, sb: Any, snap: Snapshot, paused: bool) -> None:
        try:
            assert self.committer is not None
            image = self.committer(sb, snap)
            failure = None
        except Exception as exc:  # the runtime's failure becomes the record's message
            image, failure = None, str(exc) or type(exc).__name__
        finally:
            if paused:
                self._resume(sb)
        with self._lock:
            gone = self._items.get(snap.id) is not snap
            if not gone:
                snap.image = image
                if failure is None:
                    snap.set_state(quirks.SNAPSHOT_READY, self.clock())
                else:
                    snap.set_state(("Failed", quirks.SNAPSHOT_FAILED_REASON, failure), self.clock())
        if gone and image is not None and self.remover is not None:  # reset while it committed
            self.remover(image)

    def delete(self, snapshot_id: str) -> None:
        with self._lock:
            snap = self.get(snapshot_id)
            if snap.state == "Creating":
                raise MockError(quirks.SNAPSHOT_CREATING, id=snapshot_id)
            if snap.state != "Deleting":
                snap.set_state(quirks.SNAPSHOT_DELETING, self.clock())
            if snap.image is not None and self.users(snapshot_id):
                raise MockError(quirks.SNAPSHOT_DELETE_CONFLICT)
            self._items.pop(snapshot_id, None)
        if snap.image is not None and self.remover is not None:
            self.remover(snap.image)

    def for_restore(self, snapshot_id: str) -> Snapshot:
        """server services/snapshot_restore.py: 404 unknown, 409 not Ready."""
        snap = self.get(snapshot_id)
        if snap.state != "Ready":
            raise MockError(quirks.SNAPSHOT_NOT_READY, id=snapshot_id)
        return snap

    def wait(self, timeout: float | None = None) -> None:
        """Until every commit in flight has finished (tests, reset, close)."""
        with self._lock:
            threads = list(self._threads)
        for t in threads:
            t.join(timeout)

    def clear(self) -> int:
        """Forget every snapshot and remove its image (``/__mock__/reset``, the mock's stop); returns how many."""
        self.wait(30)
        with self._lock:
            items = list(self._items.values())
            self._items.clear()
        for snap in items:
            if snap.image is not None and self.remover is not None:
                try:
                    self.remover(snap.image)
                except Exception:  # pragma: no cover - keep clearing the others
                    pass
        return len(items)

    def view(self) -> List[Dict[str, Any]]:
        """For ``/__mock__/images``: each snapshot, its image and the sandboxes restored from it."""
        out = []
        users = self._users()
        for s in sorted(self.all(), key=lambda s: (s.created_at, s.id), reverse=True):
            img = s.image
            out.append(
                {
                    "id": s.id,
                    "sandboxId": s.sandbox_id,
                    "name": s.name,
                    "state": s.state,
                    "image": img.id if img is not None else None,
                    "ref": img.ref if img is not None else None,
                    "size": img.layers[-1].get("size", 0) if img is not None and img.layers else 0,
                    "sandboxes": users.get(s.id, []),
                }
            )
        return out
