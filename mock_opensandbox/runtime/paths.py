"""SandboxPaths, the component of SandboxRuntime (sandbox.py) that maps sandbox paths to host paths
without ever leaving the sandbox's view (resolve(), view_path(), which(), shell()) and reads its user
namespace's id maps; held as ``runtime.paths``. Also, for the runtime, its PTY pairs from its own devpts
(sandbox_pty) and the processes that left its process groups (stray_pids).
"""

from __future__ import annotations

import errno
import fcntl
import os
import stat
import struct
from typing import Callable

from mock_opensandbox.runtime._util import DEFAULT_PATH, MAX_SYMLINKS, SYSTEM_DIRS, readlink

_MARKER_ENV = "OPENSANDBOX_MOCK_SANDBOX"  # only used when not isolated, to find escaped processes (sandbox.py sets it)


class PathEscape(ValueError):
    """A sandbox path that would resolve outside the sandbox root (never returned, always raised)."""


class SandboxPaths:
    """Path mapping of one sandbox (held as SandboxRuntime.paths): its root directory, whether it is
    isolated, and what it asks of the runtime: ``view_root`` (Pid1.view_root: the host path of the
    sandbox's "/", starts PID 1), ``base_env`` (SandboxRuntime.base_env: the PATH of which() and
    shell()), ``pid1`` (Pid1.holder_pid: whose user namespace id_map() reads, None without one)."""

    def __init__(
        self,
        root: str,
        isolated: bool,
        *,
        view_root: Callable[[], str],
        base_env: Callable[[], dict[str, str]],
        pid1: Callable[[], int | None],
    ):
        self.root, self.isolated = root, isolated
        self._view_root, self._base_env, self._pid1 = view_root, base_env, pid1
        self._id_maps: dict[str, list[tuple[int, int, int]]] = {}
        self._bash_at: tuple[str, str] | None = None  # (PATH directory, path) where shell() last found bash

    def resolve_in_root(self, sandbox_path: str, *, follow_symlinks: bool = True) -> str:
        """resolve() against the root directory itself, never the view (what view.py mounts into before
        PID 1 starts: volume targets). Never starts PID 1."""
        return self.resolve(sandbox_path, follow_symlinks=follow_symlinks, _base=self.root)

    def resolve(self, sandbox_path: str, *, follow_symlinks: bool = True, _base: str | None = None) -> str:
        """Map a sandbox path to a host path inside the root, resolving symlinks the way a process
        chrooted into the root would (absolute targets are relative to the root, ".." stops at
        the root). The final component is left unresolved when follow_symlinks is False.
        Raises ValueError for NUL bytes / non-strings, OSError(ELOOP) for symlink loops."""
        if not isinstance(sandbox_path, str):
            raise ValueError("path must be a string")
        if "\x00" in sandbox_path:
            raise ValueError("path contains a NUL byte")
        root = _base or self._view_root()
        todo = [p for p in sandbox_path.split("/") if p not in ("", ".")]
        todo.reverse()  # a stack: next component at the end
        done: list[str] = []
        hops = 0
        while todo:
            name = todo.pop()
            if name == ".":
                continue
            if name == "..":
                if done:
                    done.pop()
                continue
            cand = os.path.join(root, *done, name)
            last = not todo
            if last and not follow_symlinks:
                done.append(name)
                break
            try:
                st = os.lstat(cand)
            except OSError:
                done.append(name)
                continue
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                if hops > MAX_SYMLINKS:
                    raise OSError(errno.ELOOP, "too many levels of symbolic links", "/" + "/".join(done + [name]))
                target = os.readlink(cand)
                if "\x00" in target:  # impossible on Linux, but never trust it
                    raise ValueError("symlink target contains a NUL byte")
                if target.startswith("/"):
                    done = []
                parts = [p for p in target.split("/") if p not in ("", ".")]
                todo.extend(reversed(parts))
                continue
            done.append(name)
        result = os.path.join(root, *done) if done else root
        if result != root and not result.startswith(root + os.sep):
            raise PathEscape(f"path escapes the sandbox: {sandbox_path!r}")
        return result

    def to_sandbox(self, host_path: str) -> str:
        """Inverse of resolve() for host paths inside the root."""
        hp = os.path.abspath(host_path)
        if hp == self.root:
            return "/"
        if not hp.startswith(self.root + os.sep):
            raise PathEscape(f"not inside the sandbox root: {host_path!r}")
        return hp[len(self.root) :]

    def id_map(self, kind: str = "uid") -> list[tuple[int, int, int]]:
        """PID 1's user namespace mapping ("uid" or "gid"): (id inside, id outside, count) rows; [] when
        the sandbox has no user namespace of its own (root) or no PID 1."""
        pid = self._pid1()
        if pid is None or os.geteuid() == 0:
            return []
        cached = self._id_maps.get(kind)
        if cached is None:
            try:
                with open("/proc/%d/%s_map" % (pid, kind)) as fh:
                    rows = [[int(x) for x in line.split()] for line in fh if len(line.split()) == 3]
            except (OSError, ValueError):
                return []
            cached = [(r[0], r[1], r[2]) for r in rows]
            self._id_maps[kind] = cached
        return list(cached)

    def view_path(self, sandbox_path: str) -> str:
        """Host path of what a *command* sees at sandbox_path: the sandbox's view (view_root()), else,
        isolated without one, the host's own system directories (they are bind-mounted) or the
        sandbox root's file (resolve())."""
        if self.isolated and self._view_root() != self.root:
            return self.resolve(sandbox_path)
        if self.isolated:
            norm = os.path.normpath("/" + sandbox_path.lstrip("/"))
            first = norm.split("/")[1] if norm != "/" else ""
            if first in SYSTEM_DIRS:
                return norm
        return self.resolve(sandbox_path)

    def which(self, name: str, path: str | None = None) -> str | None:
        """PATH lookup of an executable as a command inside the sandbox would do it."""
        for d in (path if path is not None else self._base_env().get("PATH", DEFAULT_PATH)).split(":"):
            if not d.startswith("/"):
                continue
            cand = d.rstrip("/") + "/" + name
            try:
                host = self.view_path(cand) if self.isolated else cand
            except (OSError, ValueError):
                continue
            if os.path.isfile(host) and os.access(host, os.X_OK):
                return cand
        return None

    def shell(self) -> list[str]:
        """The shell execd would use: "bash" when present in the sandbox view, else "sh" (execd
        runtime/command.go getShell; recording 11 stderr "bash: line 1: ...")."""
        # where bash was found last time, checked again alone (one path resolved through the view,
        # not every PATH directory: ~0.2 ms of each command); the full lookup when it is gone
        last = self._bash_at
        if last is not None and self.which("bash", path=last[0]) == last[1]:
            return ["bash"]
        found = self.which("bash", self._base_env().get("PATH", DEFAULT_PATH))
        self._bash_at = (found.rsplit("/", 1)[0], found) if found else None
        return ["bash"] if found else ["sh"]

    def host_cwd(self, cwd: str | None) -> str:
        """Host directory a non-isolated process starts in for a sandbox cwd."""
        if not cwd:
            return self.root
        return self.resolve(cwd)


def sandbox_pty(pid1: int) -> tuple[int, int]:

    tiocsptlck, tiocgptpeer = 0x40045431, 0x5441  # asm-generic/ioctls.h
    master = os.open("/proc/%d/root/dev/pts/ptmx" % pid1, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        fcntl.ioctl(master, tiocsptlck, struct.pack("i", 0))  # unlockpt
        slave = fcntl.ioctl(master, tiocgptpeer, os.O_RDWR | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError:
        os.close(master)
        raise
    return master, slave


def stray_pids(root: str, isolated: bool, token: str, pidns: str, root_id: tuple[int, int] | None) -> list[int]:
    """Processes of a sandbox that left its process groups (setsid daemons, `cmd &` + setsid).
    Isolated: their root is the sandbox's root (root_id: its (st_dev, st_ino)) or they are in its PID
    namespace (pidns: PID 1's /proc/PID/ns/pid link, "" without one). Not isolated: they carry its
    marker variable (token) or are chrooted into its root."""
    out: list[int] = []
    if isolated and root == "/":
        return out  # every process has "/" as its root: nothing identifies ours
    try:
        names = os.listdir("/proc")
    except OSError:
        return out
    me = os.getpid()
    marker = f"{_MARKER_ENV}={token}".encode()
    for name in names:
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == me:
            continue
        try:
            if isolated:
                # its root is our root (pivot_root: readlink says "/", the inode tells) or it
                # is anywhere in our PID namespace
                if not (pidns and readlink(f"/proc/{pid}/ns/pid") == pidns):
                    st = os.stat(f"/proc/{pid}/root")
                    if (st.st_dev, st.st_ino) != root_id:
                        continue
            elif readlink(f"/proc/{pid}/root") != root:
                # not chrooted into the root (what an execd *process* started here runs its
                # commands in, PID 1 of its own namespace included): it must carry our marker
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    if marker not in fh.read().split(b"\x00"):
                        continue
            with open(f"/proc/{pid}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
            if state == b"Z":
                continue
        except OSError:
            continue
        out.append(pid)
    return out
