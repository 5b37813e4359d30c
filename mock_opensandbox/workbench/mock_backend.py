"""The admin view of a MockOpenSandbox (``MockBackend``): its sandboxes' internal state (root, processes
from /proc, execd), image cache and volumes, for the /__mock__/ routes of workbench/admin.py."""

from __future__ import annotations

import os
from datetime import datetime, timezone
from typing import Any, Protocol

from mock_opensandbox.docker.images import ImagePuller
from mock_opensandbox.docker.provisioner import MockProvisioner
from mock_opensandbox.docker.snapshots import SnapshotStore
from mock_opensandbox.docker.volumes import VolumeStore
from mock_opensandbox.lifecycle.model import Sandbox, SandboxStore
from mock_opensandbox.lifecycle.pools import PoolStore
from mock_opensandbox.options import MockOptions


def _iso(dt: datetime | None) -> str | None:
    return None if dt is None else dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def view_of(runtime: Any, sb: Any) -> dict[str, Any]:
    """Which root the sandbox got (QUIRKS.md, Image store): "image" (its image's tree: "overlay" or "copy", the image id)
    or "host-tools" (the host's /usr, /bin, /lib read-only under an image-like tree: no image store, or
    none could be applied)."""
    ir = getattr(runtime, "image_root", None)
    img = getattr(sb, "rootfs_image", None)
    if ir is not None:
        return {
            "kind": "image",
            "rootfs": ir.mode,
            "image_id": ir.image.id,
            "user": ir.image.user or "root",
            "working_dir": ir.working_dir(),
        }
    why = "no image store (--image-dir)" if img is None else getattr(runtime, "isolation_note", "")
    return {"kind": "host-tools", "rootfs": None, "image_id": getattr(img, "id", None), "why": why}


def processes_of(pgids: list[int]) -> list[dict[str, Any]]:
    """Every live process in these process groups and their descendants, from /proc (pid, ppid, pgid,
    state, command line cut to 300 characters)."""
    wanted = set(pgids)
    if not wanted:
        return []
    try:
        names = [n for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []
    table: dict[int, tuple[int, int, str]] = {}
    for name in names:
        try:
            with open("/proc/%s/stat" % name, "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            table[int(name)] = (int(fields[1]), int(fields[2]), fields[0].decode())
        except (OSError, IndexError, ValueError):
            continue
    keep = {pid for pid, (_, pgid, _) in table.items() if pgid in wanted}
    grew = True
    while grew:
        grew = False
        for pid, (ppid, _, _) in table.items():
            if ppid in keep and pid not in keep:
                keep.add(pid)
                grew = True
    out = []
    for pid in sorted(keep):
        ppid, pgid, state = table[pid]
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as fh:
                cmd = " ".join(a.decode("utf-8", "replace") for a in fh.read().split(b"\0") if a)
        except OSError:
            continue
        cmd = " ".join(cmd.split())
        out.append(
            {
                "pid": pid,
                "ppid": ppid,
                "pgid": pgid,
                "state": state,
                "cmdline": cmd if len(cmd) <= 300 else cmd[:297] + "...",
            }
        )
    return out


# =====================================================================================================
# the backend: what the sandboxes are
# =====================================================================================================
class MockParts(Protocol):
    """What the admin view reads of the mock (server.py MockOpenSandbox), live: its parts are None while it is
    stopped. ``execd_mode`` is the default for new sandboxes (reset to ``initial_execd_mode``)."""

    options: MockOptions
    execd_mode: str

    @property
    def initial_execd_mode(self) -> str: ...
    @property
    def running_url(self) -> str | None: ...
    @property
    def api_key(self) -> str | None: ...
    @property
    def sandboxes(self) -> dict[str, Sandbox]: ...
    @property
    def store(self) -> SandboxStore | None: ...
    @property
    def provisioner(self) -> MockProvisioner | None: ...
    @property
    def volumes(self) -> VolumeStore | None: ...
    @property
    def images(self) -> ImagePuller | None: ...
    @property
    def snapshots(self) -> SnapshotStore | None: ...
    @property
    def pools(self) -> PoolStore | None: ...


class MockBackend:
    """The admin view of a MockOpenSandbox."""

    kind = "mock"

    def __init__(self, mock: MockParts):
        self.mock = mock

    def info(self) -> dict[str, Any]:
        m, o = self.mock, self.mock.options
        prov = m.provisioner
        return {
            "kind": "mock",
            "base_url": m.running_url,
            "execd_mode": m.execd_mode,
            "execd": "process %s" % o.execd_bin if o.execd_bin else "in-process",
            "isolation": prov.isolation() if prov is not None else "unknown",
            "gateway": bool(o.gateway),
            "execd_token": o.execd_token is not None,
            "auth": m.api_key is not None,
        }

    def sandbox_ids(self) -> list[str]:
        return list(self.mock.sandboxes)

    def sandbox(self, sid: str, *, processes: bool = True) -> dict[str, Any] | None:
        sb = self.mock.sandboxes.get(sid)
        if sb is None:
            return None
        m, o = self.mock, self.mock.options
        now = m.store.clock() if m.store is not None else datetime.now(timezone.utc)
        with sb.lock:
            state = sb.state
            ttl = None if sb.expires_at is None else round((sb.expires_at - now).total_seconds(), 1)
            runtime, execd = sb.runtime, sb.execd
            out: dict[str, Any] = {
                "id": sb.id,
                "state": state,
                "image": sb.image.get("uri"),
                "entrypoint": list(sb.entrypoint),
                "metadata": dict(sb.metadata or {}),
                "created_at": _iso(sb.started_at),
                "expires_at": _iso(sb.expires_at),
                "ttl_left_s": ttl,
                "paused": sb.paused,
                "exit_code": sb.exit_code,
                "root": getattr(runtime, "root", None),
            }
        out["view"] = view_of(runtime, sb)
        out["volumes"] = m.volumes.of(sid) if m.volumes is not None else []
        headers = m.provisioner.required_headers(sb) if m.provisioner is not None else None
        out["execd"] = {
            "mode": sb.execd_mode,
            "port": sb.execd_port,
            "kind": "process" if o.execd_bin else "in-process",
            "access_token": "<set>" if o.execd_token else None,
            "gateway": bool(o.gateway),
            "required_headers": headers or {},
        }
        cmds = getattr(getattr(execd, "commands", None), "_cmds", None)
        if isinstance(cmds, dict):
            out["commands"] = [
                {"id": c.id, "content": c.content[:200], "background": c.background, "running": c.running}
                for c in list(cmds.values())[-50:]
            ]
        if processes:
            try:
                pgids = runtime.process_groups() if runtime is not None else []
            except Exception:
                pgids = []
            if execd is not None and hasattr(execd, "proc"):
                pgids = list(pgids) + [execd.proc.pid]
            out["processes"] = processes_of(pgids)
        return out

    def images(self) -> dict[str, Any]:
        """The image store: whether the mock has one, its sources and cache, every cached image (id, refs,
        digest, size, layers, config) with the sandboxes using it."""
        p = self.mock.images
        snaps = self.mock.snapshots
        snapshots = snaps.view() if snaps is not None else []  # docker/snapshots.py: each one's image and users
        if p is None:
            return {"available": False, "sources": [], "cache": None, "images": [], "snapshots": snapshots}
        return {
            "available": True,
            "sources": p.store.sources(),
            "cache": p.store.cache_dir,
            "images": p.images(self.mock.sandboxes),
            "snapshots": snapshots,
        }

    def clear_images(self) -> None:
        images, snaps = self.mock.images, self.mock.snapshots
        if images is not None:
            if snaps is not None:  # their images are in this cache
                snaps.clear()
            images.store.clear()

    def kill(self, sid: str) -> bool:
        store = self.mock.store
        if store is None:
            return False
        try:
            store.delete(sid)
        except Exception:
            return False
        return True

    def reset(self, sid: str | None) -> dict[str, Any]:
        m = self.mock
        removed = 0
        ids = [sid] if sid is not None else self.sandbox_ids()
        for one in ids:
            if self.kill(one):
                removed += 1
        out = {"sandboxes_removed": removed}
        if sid is None:
            m.execd_mode = m.initial_execd_mode
            snaps = m.snapshots  # after the sandboxes: none uses a snapshot any more
            out["snapshots_removed"] = snaps.clear() if snaps is not None else 0
            pools = m.pools  # runtime kubernetes only (lifecycle/pools.py)
            if pools is not None:
                out["pools_removed"] = pools.clear()
        return out

    def volumes(self, limit: int | None = None) -> dict[str, Any]:
        vs = self.mock.volumes
        if vs is None:
            return {"named": [], "hostBinds": []}
        return vs.view() if limit is None else vs.view(limit)

    def reset_volumes(self, keep: bool) -> int:
        vs = self.mock.volumes
        return vs.reset(keep) if vs is not None else 0
