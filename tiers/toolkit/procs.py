"""/proc readers (Linux): what tests check about processes left behind or started; and ``close_and_wait``, the end
of a helper process that stops at EOF on its stdin."""

from __future__ import annotations

import os
import pathlib
import subprocess
from typing import Callable


def read_text(path: str) -> str:
    """A /proc (or /sys) file as text, "" when it cannot be read (the process is gone)."""
    try:
        return pathlib.Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def stat(pid: int | str) -> tuple[str, int] | None:
    """(state letter, parent pid) of a process, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            fields = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0].decode(), int(fields[1])


def alive(pid: int | str) -> bool:
    """The process exists and is not a zombie."""
    st = stat(pid)
    return st is not None and st[0] != "Z"


def live_pids(pids) -> list[int]:
    """Those of ``pids`` that still exist and are not zombies."""
    return [pid for pid in pids if alive(pid)]


def cmdline(pid: int | str) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().split(b"\0")[:-1]
    except OSError:
        return None


def environ(pid: int | str) -> dict[bytes, bytes] | None:
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            items = fh.read().split(b"\0")
    except OSError:
        return None
    return dict(item.partition(b"=")[::2] for item in items if item)


def pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def children(parent: int | None = None) -> set[int]:
    """Live (non-zombie) direct children of ``parent`` (default: this process)."""
    parent = os.getpid() if parent is None else parent
    out = set()
    for pid in pids():
        st = stat(pid)
        if st is not None and st[1] == parent and st[0] != "Z":
            out.add(pid)
    return out


def sandbox_holders(parent: int | None = None) -> set[int]:
    """The live sandbox PID 1s a mock process (default: this one) started: its children that are PID 1 of a PID
    namespace of their own (forked by the view's zygote, runtime/zygote.py), or ``unshare ... view.py holder``
    (the way without the zygote)."""
    out = set()
    for pid in children(parent):
        argv = cmdline(pid) or [b""]
        nspid = next(
            (line.split()[1:] for line in read_text(f"/proc/{pid}/status").splitlines() if line.startswith("NSpid:")),
            [],
        )
        if (argv[0].endswith(b"unshare") and b"holder" in argv) or nspid[-1:] == ["1"]:
            out.add(pid)
    return out


def descendants(pid: int) -> set[int]:
    """Every process whose parent chain leads to ``pid`` (new sessions included; zombies too)."""
    parents = {}
    for p in pids():
        st = stat(p)
        if st is not None:
            parents[p] = st[1]
    out: set[int] = set()
    todo = [pid]
    while todo:
        cur = todo.pop()
        for child, parent in parents.items():
            if parent == cur and child not in out:
                out.add(child)
                todo.append(child)
    return out


def refers_to(pid: int, root: str) -> bool:
    """The process lives in ``root`` (its root or cwd) or names it in its environment."""
    for link in ("root", "cwd"):
        try:
            if os.readlink(f"/proc/{pid}/{link}").startswith(root):
                return True
        except OSError:
            pass
    try:
        with open(f"/proc/{pid}/environ", "rb") as fh:
            return root.encode() in fh.read()
    except OSError:
        return False


def close_and_wait(proc: subprocess.Popen, timeout: float, kill: Callable[[], None] | None = None) -> None:
    """Close ``proc``'s stdin (its cue to exit) and wait up to ``timeout`` seconds; then ``kill()`` it (default: SIGKILL
    to ``proc`` alone) and reap it (5 s)."""
    try:
        proc.stdin.close()
    except OSError:
        pass
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        try:
            (kill or proc.kill)()
        except OSError:
            pass
        proc.wait(timeout=5)
