"""What the lifecycle routes (the <Api>Routes of lifecycle/*_routes.py, wired by app.py LifecycleApp) are given by
the server's runtime service above them, as protocols: this layer never imports docker/, the facade (server.py)
passes docker/'s objects in. The objects they return (a volume plan, a snapshot) stay docker/'s own and are opaque
here. Standard library only."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Iterable, Protocol

from mock_opensandbox.lifecycle.model import Sandbox


class ContainerService(Protocol):
    """docker/provisioner.py MockProvisioner, as the routes ask it: where a sandbox's port is reached, the
    x-mock-isolation line of /health, and the egress settings create's checks need."""

    @property
    def egress_settings(self) -> tuple[str, str]:
        """([egress] mode, or "off" without an egress image; docker network_mode)."""
        ...

    def endpoint(self, sb: Sandbox, port: int) -> tuple[str, dict[str, str] | None]: ...

    def isolation(self) -> str: ...


class VolumeService(Protocol):
    """docker/volumes.py VolumeStore: a create's volumes checked and made (``prepare``), or given back."""

    def prepare(self, volumes: list[dict[str, Any]] | None) -> Any: ...

    def abandon(self, p: Any, sandbox_id: str | None = None) -> None: ...


class SnapshotService(Protocol):
    """docker/snapshots.py SnapshotStore: the snapshot routes' model and a create's ``snapshotId``."""

    def create(self, sandbox_id: str, name: str | None) -> Any: ...

    def list(
        self,
        *,
        sandbox_id: str | None = None,
        name: str | None = None,
        states: Iterable[str] | None = None,
        page: int = 1,
        page_size: int = ...,
    ) -> tuple[list[Any], dict[str, Any]]: ...

    def get(self, snapshot_id: str) -> Any: ...

    def delete(self, snapshot_id: str) -> None: ...

    def for_restore(self, snapshot_id: str) -> Any: ...


class DiagnosticsText(Protocol):
    """docker/diagnostics.py (the module): the diagnostics routes' text, as the Docker runtime writes it."""

    def inline(
        self, sid: str, kind: str, scope: str, content: str, truncated: bool, warning: str
    ) -> dict[str, Any]: ...

    def limit_lines(self, content: str, limit: int, keep_tail: bool) -> tuple[str, bool]: ...

    def logs_text(self, sb: Any, tail: int, since: str | None = None, *, now: datetime) -> str: ...

    def events_text(self, sb: Any) -> str: ...

    def inspect_text(self, sb: Any) -> str: ...

    def summary_text(self, sid: str, sb: Any, tail: int, *, now: datetime) -> str: ...
