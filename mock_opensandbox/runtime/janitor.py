"""The janitor: removes what a mock leaves behind when it dies without cleaning up (SIGKILL, the OOM
killer, a crash).

One small process per mock, started on first use in a session of its own (a Ctrl-C to the terminal's
process group does not reach it) and without the parent-death signal: it outlives the mock. The mock
tells it every resource over a pipe, one line each (``+KIND VALUE`` when made, ``-KIND VALUE`` when
the mock removed it itself). When the pipe reads EOF the mock is gone (or stopped and closed it):
the janitor kills what still runs in the tracked cgroups and the tracked processes, removes the
cgroups (children first), unmounts tracked mount points and removes tracked directories, then exits.
Sandbox PID 1s die with the mock anyway (PR_SET_PDEATHSIG, holder.py); the janitor is what removes
their cgroups and the temp root afterwards.

Kinds: ``cgroup`` (a cgroup directory), ``pid`` (``PID:STARTTIME``, SIGKILL if still that process),
``umount`` (a mount point: lazy unmount), ``dir`` (a directory tree or a file to remove). Other parts of the
mock (network namespaces, relays) use the same kinds. Only the standard library.
"""

from __future__ import annotations

import inspect
import os
import shutil
import subprocess
import sys
import threading
from typing import Any, Callable

from mock_opensandbox.runtime import cgroups

KINDS = ("pid", "cgroup", "umount", "dir")
LEDGER = ".osb-ledger"  # in a --root: what this mock is about to make (Janitor.intend)
LEDGER_KINDS = ("cgroup-name", "holder-dir")
HOLDER_PREFIX = "osb-holder-"  # holder.py's readiness FIFO directories

# The janitor itself: `python -I -S -c "$(script())"`, reads its stdin until EOF. It imports nothing of
# the mock (it outlives it, and -I keeps the mock's tree off its path): script() puts the source of
# cgroups.rmdir_tree in front of SOURCE.
SOURCE = r"""
import os, signal, sys, time, errno, shutil, ctypes
held = {k: [] for k in ("pid", "cgroup", "umount", "dir")}
mock = os.getppid()  # never killed: a thread of a live mock may still sit in a sandbox's cgroup (runtime/spawner.py)
data = b""
while True:
    try:
        chunk = os.read(0, 65536)
    except InterruptedError:
        continue
    except OSError:
        chunk = b""
    if not chunk:
        break
    data += chunk
    *lines, data = data.split(b"\n")
    for line in lines:
        line = line.decode("utf-8", "surrogateescape")
        op, kind, value = line[:1], line[1:].partition(" ")[0], line[1:].partition(" ")[2]
        if kind not in held or not value:
            continue
        if op == "+":
            held[kind].append(value)
        elif op == "-" and value in held[kind]:
            held[kind].remove(value)
def starttime(pid):
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[19].decode()
    except (OSError, IndexError):
        return None
def members(d):
    out = []
    for dp, dn, fn in os.walk(d):
        try:
            with open(os.path.join(dp, "cgroup.procs")) as fh:
                out += [int(x) for x in fh.read().split() if x.isdigit() and int(x) != mock]
        except OSError:
            pass
    return out
for v in held["pid"]:
    pid, _, st = v.partition(":")
    if pid.isdigit() and starttime(int(pid)) == st:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
deadline = time.monotonic() + 3.0
left = list(reversed(held["cgroup"]))
while left and time.monotonic() < deadline:
    keep = []
    for d in left:
        for pid in members(d):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            rmdir_tree(d)
        except FileNotFoundError:
            pass
        except OSError:
            keep.append(d)
    left = keep
    if left:
        time.sleep(0.01)
if held["umount"]:
    libc = ctypes.CDLL(None, use_errno=True)
    for mp in reversed(held["umount"]):
        libc.umount2(mp.encode("utf-8", "surrogateescape"), 2)  # MNT_DETACH
for d in reversed(held["dir"]):
    if d in ("", "/"):
        continue
    if os.path.isdir(d) and not os.path.islink(d):
        shutil.rmtree(d, ignore_errors=True)
    else:
        try:
            os.unlink(d)
        except OSError:
            pass
"""


def script() -> str:
    """SOURCE with the one function it shares with the mock, cgroups.rmdir_tree, defined first."""
    return "import os\n" + inspect.getsource(cgroups.rmdir_tree) + SOURCE


class Janitor:
    """The mock's side of the pipe. Thread-safe; the process starts on the first track()."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._closed = False
        self._failed = False
        self.ledger: str | None = None  # <root>/LEDGER under a --root given (reap_root reads it)

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _ensure(self) -> Any:
        if self._proc is None and not self._failed and not self._closed:
            try:
                # no preexec_fn, no parent-death signal: it must outlive the mock; close_fds keeps
                # every other descriptor (sockets, other pipes) out of it
                self._proc = subprocess.Popen(
                    [sys.executable, "-I", "-S", "-c", script()],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    close_fds=True,
                    start_new_session=True,
                    cwd="/",
                    env={"PATH": "/usr/bin:/bin"},
                )
            except OSError:
                self._failed = True
        return self._proc

    def _send(self, line: str) -> None:
        with self._lock:
            proc = self._ensure()
            if proc is None or proc.stdin is None:
                return
            try:
                proc.stdin.write(line.encode("utf-8", "surrogateescape") + b"\n")
                proc.stdin.flush()
            except (OSError, ValueError):
                self._failed = True

    def track(self, kind: str, value: str) -> None:
        """Remove value (of kind, see KINDS) should the mock die before untrack()."""
        if kind not in KINDS or "\n" in value or not value:
            raise ValueError("bad janitor entry %r %r" % (kind, value))
        self._send("+%s %s" % (kind, value))

    def intend(self, kind: str, value: str) -> Callable[[], None] | None:
        """Write "+kind value" to the ledger BEFORE the resource is made: a SIGKILL at any point after
        leaves a record that a restart with the same --root reaps (reap_root). Kinds: LEDGER_KINDS.
        Without a --root (no ledger, no restart to reap it) a holder dir is tracked by the janitor
        process instead: the returned function (call it once the dir is gone) untracks it."""
        if kind not in LEDGER_KINDS or "\n" in value or not value:
            return None
        if self.ledger is None:
            if kind != "holder-dir":
                return None  # cgroups: tracked by name once made (SandboxRuntime), like any cgroup
            self.track("dir", value)
            return lambda: self.untrack("dir", value)
        try:
            fd = os.open(self.ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
            try:
                os.write(fd, ("+%s %s\n" % (kind, value)).encode("utf-8", "surrogateescape"))
            finally:
                os.close(fd)
        except OSError:
            pass
        return None

    def untrack(self, kind: str, value: str) -> None:
        if self._proc is None:
            return
        self._send("-%s %s" % (kind, value))

    def track_pid(self, pid: int) -> None:
        """SIGKILL pid at the end unless it is gone (the start time tells a reused pid)."""
        try:
            with open("/proc/%d/stat" % pid, "rb") as fh:
                st = fh.read().rsplit(b")", 1)[1].split()[19].decode()
        except (OSError, IndexError):
            return
        self.track("pid", "%d:%s" % (pid, st))

    def close(self, timeout: float = 5.0) -> None:
        """EOF to the janitor: it removes whatever is still tracked and exits; wait for that."""
        with self._lock:
            self._closed = True
            proc, self._proc = self._proc, None
        if proc is None:
            return
        try:
            if proc.stdin is not None:
                proc.stdin.close()
        except OSError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:  # pragma: no cover - it only rmdirs and rmtrees
            proc.kill()
            proc.wait()


# -- a dead mock's leftovers under a --root given again ------------------------------------------


def reap_root(root: str, is_sandbox_dir: Any) -> list[str]:
    """What a dead mock left in root, removed: its sandbox directories (is_sandbox_dir(name); a mock
    that stops removes its own, so any there now is a dead one's) and their cgroups
    (osb-mock-<mock id>-<sandbox id>, processes still in them killed). Returns what was removed.
    Needed when the dead mock's janitor died too (both killed at once, a reboot)."""
    host = cgroups.host()
    reaped: list[str] = []
    for kind, value in _ledger_entries(os.path.join(root, LEDGER)):
        if kind == "cgroup-name" and value.startswith(cgroups.NAME_PREFIX) and "/" not in value:
            for base in host.bases.values():
                d = os.path.join(base, value)
                if os.path.isdir(d) and not os.path.islink(d):
                    cgroups.kill_members(d)
                    if cgroups._rmdir(d, 2.0):
                        reaped.append(d)
        elif (
            kind == "holder-dir"
            and os.path.basename(value).startswith(HOLDER_PREFIX)
            and os.path.isdir(value)
            and not os.path.islink(value)
        ):
            shutil.rmtree(value, ignore_errors=True)
            reaped.append(value)
    snap = os.path.join(root, "snapshot-images")  # the mock's own snapshot store goes with it (server.stop)
    if os.path.isdir(snap) and not os.path.islink(snap):
        shutil.rmtree(snap, ignore_errors=True)
        reaped.append(snap)
    for name in sorted(os.listdir(root)):
        full = os.path.join(root, name)
        if not (is_sandbox_dir(name) and os.path.isdir(full) and not os.path.islink(full)):
            continue
        for d in cgroups.stale(host, "*", name):
            cgroups.kill_members(d)
            if cgroups._rmdir(d, 2.0):
                reaped.append(d)
        shutil.rmtree(full, ignore_errors=True)
        reaped.append(full)
    try:
        os.unlink(os.path.join(root, LEDGER))
    except FileNotFoundError:
        pass
    return reaped


def _ledger_entries(path: str) -> list[tuple[str, str]]:
    try:
        with open(path, "rb") as fh:
            lines = fh.read().decode("utf-8", "surrogateescape").split("\n")
    except OSError:
        return []
    out = []
    for line in lines:
        kind, _, value = line[1:].partition(" ")
        if line.startswith("+") and kind in LEDGER_KINDS and value:
            out.append((kind, value))
    return out
