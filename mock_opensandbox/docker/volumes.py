"""Volumes as the server's Docker runtime has them (server 1.1.1 services/docker/volumes.py,
services/docker/ossfs_mixin.py; QUIRKS.md "Volumes").

* ``pvc``: a named volume is a directory ``<volumes_dir>/<claimName>`` the mock manages (Docker's
  ``/var/lib/docker/volumes/<name>/_data``). A missing one is created (``createIfNotExists``, the
  default) and outlives the sandbox; every sandbox naming it shares it. ``deleteOnSandboxTermination``
  removes a volume this create made when the sandbox is deleted or expires (unless another sandbox
  still mounts it: Docker refuses to remove a volume in use). ``subPath`` is the local driver's:
  checked lexically and after symlink resolution (openat2 RESOLVE_BENEATH on the volume's fd, race-free);
  a missing one is created (Docker creates a missing bind source).
* ``host``: a bind of ``host.path`` (+ ``subPath``) under ``allowed_host_paths`` only, checked
  lexically and again after realpath; a missing directory is created.
* ``ossfs``: fails as on a server without ossfs installed (500 VOLUME::OSSFS_MOUNT_FAILED).

What is mounted is decided here, on the host; ``runtime/scripts/view.py`` ("mount the volumes")
binds each source into the sandbox's view before ``pivot_root``, reaching source and target one
component at a time without following any symlink, so a link planted between this check and the
mount fails the start instead of leading out. Standard library only.
"""

from __future__ import annotations

import errno
import os
import posixpath
import re
import shutil
import stat
import threading
from datetime import datetime, timezone
from typing import Any

from mock_opensandbox.lifecycle.quirks import MockError, Quirk
from mock_opensandbox.lifecycle.validation_checks import _host_path_errors  # the server's ensure_valid_host_path
from mock_opensandbox.runtime import openat2

O_PATH = getattr(os, "O_PATH", 0o10000000)
OSSFS_MOUNT_ROOT = "/mnt/ossfs"  # server config.py [storage] ossfs_mount_root default
SIZE_WALK_LIMIT = 100_000  # entries counted per volume for its size (the admin view stays fast)
START_FAILED = "DOCKER::SANDBOX_START_FAILED"  # server services/constants.py CONTAINER_START_FAILED
_BUCKET_RE = re.compile(r"^[a-z0-9]([a-z0-9-]{1,61}[a-z0-9])?$")


def _bad(code: str, message: str, status: int = 400) -> MockError:
    return MockError(Quirk(status, code, "{m}", "server services/docker/volumes.py"), m=message)


def start_failed(why: str) -> MockError:
    """server services/docker/container_ops.py: a container that Docker cannot create or start."""
    return _bad(START_FAILED, "Failed to create or start container: %s" % why, 500)


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix.rstrip("/") + "/")


def walk_beneath(top: str, rel: str, *, create: bool) -> int:
    """An O_PATH fd of top/rel reached one component at a time with O_NOFOLLOW (a symlink anywhere
    below top is refused with ELOOP); missing directories are created when ``create``. The caller
    closes the fd."""
    fd = os.open(top, O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for name in [p for p in rel.split("/") if p]:
            if name in (".", ".."):
                raise OSError(errno.EINVAL, "not a plain path", rel)
            try:
                nfd = os.open(name, O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(name, 0o755, dir_fd=fd)
                except FileExistsError:
                    pass
                nfd = os.open(name, O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            mode = os.fstat(nfd).st_mode
            os.close(fd)
            fd = nfd
            if stat.S_ISLNK(mode):
                raise OSError(errno.ELOOP, "a symbolic link", rel)
        return fd
    except BaseException:
        os.close(fd)
        raise


def _realpath(path: str) -> str:
    """os.path.realpath, again when a link it saw went away before its readlink (Python 3.11 raises
    EINVAL then: a sandbox swapping entries of a bound directory); OSError after a few tries."""
    for _ in range(7):
        try:
            return os.path.realpath(path)
        except OSError:
            continue
    return os.path.realpath(path)


def sub_path_beneath(top: str, rel: str) -> str:
    """The canonical ``rel`` of top/rel (symlinks inside resolved, as realpath would) with missing
    directories created, every prefix opened by openat2(RESOLVE_BENEATH) on an fd of ``top`` (a link
    out, absolute or by "..", fails with EXDEV whatever is swapped meanwhile); without openat2,
    realpath then walk_beneath (links refused). Raises OSError."""
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not openat2.AVAILABLE:
        canonical = os.path.realpath(os.path.join(top, *parts))
        if not _under(canonical, top):
            raise OSError(errno.EXDEV, "outside", rel)
        crel = os.path.relpath(canonical, top) if canonical != top else ""
        if not os.path.isfile(canonical):
            os.close(walk_beneath(top, crel, create=True))
        return crel
    tfd = os.open(top, O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    fd = -1
    try:
        for i in range(1, len(parts) + 1):
            try:
                fd = openat2.open_beneath(tfd, "/".join(parts[:i]), O_PATH)
            except FileNotFoundError:
                pfd = openat2.open_beneath(tfd, "/".join(parts[: i - 1]), O_PATH | os.O_DIRECTORY)
                try:
                    os.mkdir(parts[i - 1], 0o755, dir_fd=pfd)
                except FileExistsError:
                    pass
                finally:
                    os.close(pfd)
                fd = openat2.open_beneath(tfd, "/".join(parts[:i]), O_PATH)
            if i < len(parts):
                os.close(fd)
                fd = -1
        if fd < 0:
            return ""
        canonical = os.readlink("/proc/self/fd/%d" % fd)  # where the kernel's walk ended: no link left
        ctop = os.readlink("/proc/self/fd/%d" % tfd)
    finally:
        os.close(tfd)
        if fd >= 0:
            os.close(fd)
    if not _under(canonical, ctop):
        raise OSError(errno.EXDEV, "outside", rel)
    return os.path.relpath(canonical, ctop) if canonical != ctop else ""


def tree_size(path: str, limit: int = SIZE_WALK_LIMIT) -> tuple[int, int, bool]:
    """(bytes, entries, complete) of a directory tree, symlinks not followed, at most ``limit`` entries."""
    total = count = 0
    stack = [path]
    while stack:
        d = stack.pop()
        try:
            it = os.scandir(d)
        except OSError:
            continue
        with it:
            for e in it:
                count += 1
                if count > limit:
                    return total, count - 1, False
                try:
                    st = e.stat(follow_symlinks=False)
                except OSError:
                    continue
                if stat.S_ISDIR(st.st_mode):
                    stack.append(e.path)
                else:
                    total += st.st_size
    return total, count, True


class Mount:
    """One volume of one sandbox: what view.py binds (anchor + rel: the source, reached without
    following links; target: the sandbox path) and what the admin view shows."""

    def __init__(self, volume: dict[str, Any], kind: str, anchor: str, rel: str):
        self.name = volume["name"]
        self.kind = kind  # "pvc" | "host"
        self.claim = volume["pvc"]["claim_name"] if kind == "pvc" else None
        self.anchor = anchor
        self.rel = rel
        self.target = posixpath.normpath(volume["mount_path"])
        self.read_only = bool(volume.get("read_only"))
        self.sub_path = volume.get("sub_path")
        self.host_path = os.path.join(anchor, rel) if rel else anchor

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "backend": self.kind,
            "mountPath": self.target,
            "readOnly": self.read_only,
            "source": self.host_path,
        }
        if self.claim is not None:
            out["claimName"] = self.claim
        if self.sub_path:
            out["subPath"] = self.sub_path
        return out


class Prepared:
    """The volumes of one create request after the server's Docker checks."""

    def __init__(self) -> None:
        self.mounts: list[Mount] = []
        self.auto_created: list[str] = []  # claim names to remove when the sandbox goes (deleteOnSandboxTermination)
        self.ossfs: list[dict[str, Any]] = []
        self.released = False


class VolumeStore:
    """Named volumes (directories under ``volumes_dir``) and the host-bind allowlist of one mock."""

    def __init__(self, volumes_dir: str, allowed_host_paths: list[str] | None = None):
        self.dir = os.path.realpath(volumes_dir)  # made on first use
        self.allowed_host_paths = list(allowed_host_paths or [])
        self._lock = threading.RLock()
        self._users: dict[str, list[Mount]] = {}  # sandbox id -> its mounts

    # -- create ---------------------------------------------------------------------------------------
    def prepare(self, volumes: list[dict[str, Any]] | None) -> Prepared | None:
        """server _validate_volumes: host, pvc, ossfs checks in request order (after ensure_volumes_valid);
        named volumes are created here. On failure the volumes this call created for
        deleteOnSandboxTermination are removed again, like the server's."""
        if not volumes:
            return None
        p = Prepared()
        try:
            for v in volumes:
                if v.get("host") is not None:
                    p.mounts.append(self._host(v))
                elif v.get("pvc") is not None:
                    p.mounts.append(self._pvc(v, p))
                elif v.get("ossfs") is not None:
                    self._ossfs_paths(v)
                    p.ossfs.append(v)
        except BaseException:
            self.abandon(p)
            raise
        return p

    def _host(self, v: dict[str, Any]) -> Mount:
        allowed = self.allowed_host_paths
        path = v["host"]["path"]
        resolved = os.path.normpath(os.path.join(path, v["sub_path"])) if v.get("sub_path") else path
        if allowed and resolved != path:
            _host_path_errors(resolved, allowed)
        try:
            canonical = _realpath(resolved)
            cprefixes = [_realpath(a) for a in allowed]
        except OSError as e:
            raise _bad(
                "VOLUME::HOST_PATH_CREATE_FAILED",
                "Volume '%s': could not ensure host path directory "
                "exists at '%s': %s" % (v["name"], resolved, type(e).__name__),
                500,
            ) from None
        if canonical != resolved or cprefixes != allowed:
            _host_path_errors(canonical, cprefixes)
        anchors = [c for c in cprefixes if _under(canonical, c)]
        if not anchors:  # cannot pass the check above; never bind what no prefix holds
            _host_path_errors(canonical, [])
        anchor = max(anchors, key=len)
        rel = os.path.relpath(canonical, anchor) if canonical != anchor else ""
        if not os.path.isfile(canonical):
            try:  # server: os.makedirs(resolved_path); here one component at a time, never through a link
                os.close(walk_beneath(anchor, rel, create=True))
            except OSError as e:
                raise _bad(
                    "VOLUME::HOST_PATH_CREATE_FAILED",
                    "Volume '%s': could not ensure host path directory "
                    "exists at '%s': %s" % (v["name"], resolved, type(e).__name__),
                    500,
                ) from None
        return Mount(v, "host", anchor, rel)

    def _pvc(self, v: dict[str, Any], p: Prepared) -> Mount:
        name, claim = v["name"], v["pvc"]["claim_name"]
        mountpoint = os.path.join(self.dir, claim)
        with self._lock:
            os.makedirs(self.dir, mode=0o700, exist_ok=True)
            if not os.path.isdir(mountpoint):
                if not v["pvc"].get("create_if_not_exists", True):
                    raise _bad(
                        "VOLUME::PVC_NOT_FOUND",
                        "Volume '%s': Docker named volume '%s' does not exist. "
                        "Named volumes must be created before sandbox creation (e.g., 'docker volume "
                        "create <name>')." % (name, claim),
                    )
                try:
                    os.mkdir(mountpoint, 0o755)
                except FileExistsError:
                    pass
                except OSError as e:
                    raise _bad(
                        "VOLUME::PVC_INSPECT_FAILED",
                        "Volume '%s': failed to auto-create Docker named volume '%s': %s" % (name, claim, e.strerror),
                        500,
                    ) from None
                self._mark(claim)
                if v["pvc"].get("delete_on_sandbox_termination"):
                    p.auto_created.append(claim)
        sub = v.get("sub_path")
        if not sub:
            return Mount(v, "pvc", mountpoint, "")
        resolved = posixpath.normpath(posixpath.join(mountpoint, sub))
        if not _under(resolved, mountpoint):
            raise _bad(
                "VOLUME::INVALID_SUB_PATH", "Volume '%s': resolved subPath escapes the volume mountpoint." % name
            )
        # the server's realpath(strict=True) check, done by the kernel in one walk per prefix
        # (sub_path_beneath): code inside a sandbox swapping a directory of the volume for a link
        # meanwhile gets the same 400, never a readlink EINVAL 500; a missing tail is created
        # beneath the mountpoint (Docker creates a missing bind source: legacy Binds)
        try:
            rel = sub_path_beneath(mountpoint, os.path.relpath(resolved, mountpoint))
        except OSError:
            raise _bad(
                "VOLUME::INVALID_SUB_PATH",
                "Volume '%s': resolved subPath escapes the volume mountpoint after symlink resolution." % name,
            ) from None
        return Mount(v, "pvc", mountpoint, rel)

    @staticmethod
    def _ossfs_paths(v: dict[str, Any]) -> str:
        """server ossfs_mixin._resolve_ossfs_paths with the default ossfs_mount_root."""
        bucket_root = posixpath.normpath(posixpath.join(OSSFS_MOUNT_ROOT, v["ossfs"]["bucket"]))
        backend = posixpath.normpath(posixpath.join(bucket_root, (v.get("sub_path") or "").lstrip("/")))
        if not _under(backend, bucket_root):
            raise _bad(
                "VOLUME::INVALID_SUB_PATH", "Volume '%s': resolved OSSFS prefix escapes bucket root." % v["name"]
            )
        return backend

    def mount_ossfs(self, p: Prepared | None) -> None:
        """server _prepare_ossfs_mounts on a host without ossfs: the bucket check of the command builder,
        then the command that is not there (the mock never runs ossfs)."""
        for v in p.ossfs if p is not None else []:
            o = v["ossfs"]
            if not _BUCKET_RE.match(o["bucket"]):
                raise _bad(
                    "SANDBOX::INVALID_PARAMETER",
                    "Invalid bucket name '%s'. Bucket names must be 3-63 "
                    "characters, contain only lowercase letters, numbers, and hyphens, and start/end with "
                    "a letter or number." % o["bucket"],
                )
            prog = "ossfs" if o.get("version") == "1.0" else "ossfs2"
            raise _bad(
                "VOLUME::OSSFS_MOUNT_FAILED",
                "Volume '%s': failed to execute ossfs command: [Errno 2] No "
                "such file or directory: '%s'" % (v["name"], prog),
                500,
            )

    # -- sandbox lifetime -----------------------------------------------------------------------------
    def attach(self, sandbox_id: str, p: Prepared | None) -> None:
        if p is not None and p.mounts:
            with self._lock:
                self._users[sandbox_id] = list(p.mounts)

    def abandon(self, p: Prepared | None, sandbox_id: str | None = None) -> None:
        """The sandbox is gone (deleted, expired, failed to start): drop its mounts and remove the volumes
        its create made for deleteOnSandboxTermination unless another sandbox mounts them. Idempotent."""
        if p is None:
            return
        with self._lock:
            if sandbox_id is not None:
                self._users.pop(sandbox_id, None)
            if p.released:
                return
            p.released = True
            in_use = {m.claim for ms in self._users.values() for m in ms if m.claim}
            for claim in p.auto_created:
                if self.created_at(claim) is not None and claim not in in_use:
                    self._remove(claim)

    # a volume the mock made has a marker beside it, ".<claim>.created" holding the time (Docker's label
    # opensandbox.io/volume-managed-by=server): only those are ever removed, so a --volumes-dir with
    # directories of its own never loses them
    def _marker(self, claim: str) -> str:
        return os.path.join(self.dir, ".%s.created" % claim)

    def _mark(self, claim: str) -> None:
        with open(self._marker(claim), "w") as fh:
            fh.write(datetime.now(timezone.utc).isoformat())

    def created_at(self, claim: str) -> str | None:
        try:
            with open(self._marker(claim)) as fh:
                return fh.read().strip() or "?"
        except OSError:
            return None

    def _remove(self, claim: str) -> None:
        shutil.rmtree(os.path.join(self.dir, claim), ignore_errors=True)
        try:
            os.unlink(self._marker(claim))
        except OSError:
            pass

    def reset(self, keep: bool = False) -> int:
        """POST /__mock__/reset: every named volume the mock made goes unless ``keep`` (call after the
        sandboxes went); directories it did not make stay."""
        if keep:
            return 0
        with self._lock:
            names = [n for n in self.names() if self.created_at(n) is not None]
            for n in names:
                self._remove(n)
            return len(names)

    # -- admin view -----------------------------------------------------------------------------------
    def names(self) -> list[str]:
        try:
            return sorted(e.name for e in os.scandir(self.dir) if e.is_dir(follow_symlinks=False))
        except OSError:
            return []

    def of(self, sandbox_id: str) -> list[dict[str, Any]]:
        with self._lock:
            return [m.to_json() for m in self._users.get(sandbox_id, [])]

    def view(self, limit: int = SIZE_WALK_LIMIT) -> dict[str, Any]:
        with self._lock:
            users = {sid: list(ms) for sid, ms in self._users.items()}
        named = []
        for n in self.names():
            size, entries, complete = tree_size(os.path.join(self.dir, n), limit)
            named.append(
                {
                    "name": n,
                    "path": os.path.join(self.dir, n),
                    "sizeBytes": size,
                    "entries": entries,
                    "sizeComplete": complete,
                    "createdAt": self.created_at(n),
                    "managedByServer": self.created_at(n) is not None,
                    "mountedBy": sorted(sid for sid, ms in users.items() if any(m.claim == n for m in ms)),
                }
            )
        host = [dict(m.to_json(), sandbox=sid) for sid, ms in sorted(users.items()) for m in ms if m.kind == "host"]
        return {
            "volumesDir": self.dir,
            "allowedHostPaths": list(self.allowed_host_paths),
            "named": named,
            "hostBinds": host,
        }
