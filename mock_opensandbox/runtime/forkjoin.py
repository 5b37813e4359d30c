"""How a command joins a sandbox that runs its image, as root (docs/IMAGES.md): the mock's own forked child does
what ``nsenter`` + ``setpriv`` do for the host-tools view, because an image's view has neither (nor the
host's libraries to run them): in the Popen child, before the exec, it joins the sandbox's cgroups,
``setns`` into PID 1's mount, IPC, UTS (and network) namespaces (the spawning thread already sends the
fork into its PID namespace: ``Holder.children_inside``), changes to the working directory inside, takes
its controlling terminal (PTY shells), drops to the sandbox's capability set with no_new_privs and becomes
the image's user. Then Popen execs the command, looked up in the sandbox's own PATH directories: nothing of
the host runs in the sandbox. ~4x cheaper than ``scripts/nsexec.py`` (a fresh Python per command), which
stays the way in as non-root (entering a user namespace needs a single-threaded process).
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import termios
from typing import Any, Callable

from mock_opensandbox.runtime import caps
from mock_opensandbox.runtime import stages as scripts

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUTS, CLONE_NEWNET = 0x00020000, 0x08000000, 0x04000000, 0x40000000
_libc: Any = None
_last_cap: int | None = None


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _setup() -> tuple[Any, int]:
    global _libc, _last_cap
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        with open("/proc/sys/kernel/cap_last_cap") as fh:
            _last_cap = int(fh.read())
    assert _last_cap is not None
    return _libc, _last_cap


def namespace_fds(pid: int, net: bool) -> list[tuple[int, int]]:
    """(fd, CLONE_NEW*) of PID 1's namespaces, opened once per sandbox (Holder.close closes them)."""
    out: list[tuple[int, int]] = []
    try:
        for name, flag in (("mnt", CLONE_NEWNS), ("ipc", CLONE_NEWIPC), ("uts", CLONE_NEWUTS)) + (
            (("net", CLONE_NEWNET),) if net else ()
        ):
            out.append((os.open("/proc/%d/ns/%s" % (pid, name), os.O_RDONLY | os.O_CLOEXEC), flag))
    except OSError:
        for fd, _ in out:
            os.close(fd)
        raise
    return out


def capset_args(mask: int) -> tuple[Any, Any]:
    """(header, data) of capset(2) for ``mask`` as the effective and permitted sets (inheritable empty)."""
    hdr = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3; pid 0: the calling thread
    data = (_CapData * 2)()
    for i in (0, 1):
        data[i].effective = data[i].permitted = (mask >> (32 * i)) & 0xFFFFFFFF
    return hdr, data


def seccomp_args() -> Any:
    """The sock_fprog of the sandbox's seccomp filter (scripts/seccomp.py; it holds its program buffer), None on
    a machine it has no program for."""
    prog = scripts.SECCOMP["seccomp_program"](os.uname().machine)
    if not prog:
        return None
    fbuf = ctypes.create_string_buffer(prog, len(prog))
    fprog = _SockFprog(len(prog) // 8, ctypes.cast(fbuf, ctypes.c_void_p))
    fprog.program = fbuf  # alive as long as the fprog that points into it
    return fprog


def confine(libc: Any, last: int, mask: int, nnp: bool, fprog: Any, hdr: Any, data: Any) -> str:
    """For the calling thread, in runc's order: the seccomp filter (EINVAL, no filter support, is let pass, as
    the stages do), the bounding set down to ``mask``, no ambient capabilities, the capability sets, and
    no_new_privs. "" on success, else the step that failed (ctypes' errno says why)."""
    if fprog is not None and libc.prctl(22, 2, ctypes.byref(fprog), 0, 0) != 0 and ctypes.get_errno() != 22:
        return "seccomp"  # PR_SET_SECCOMP, SECCOMP_MODE_FILTER
    for cap in range(last + 1):
        if not mask >> cap & 1 and libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            return "PR_CAPBSET_DROP"
    libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
    if libc.capset(ctypes.byref(hdr), data) != 0:
        return "capset"
    if nnp and libc.prctl(38, 1, 0, 0, 0) != 0:
        return "PR_SET_NO_NEW_PRIVS"
    return ""


def fork_join(
    fds: list[tuple[int, int]], wd: str, user: str, cgroup: Any, controlling_tty: bool
) -> tuple[Callable[[], None], Any]:
    """(preexec_fn, context the spawning thread forks in) for one command."""
    libc, last = _setup()
    mask, nnp = caps.SANDBOX_CAP_MASK, caps.NO_NEW_PRIVILEGES
    ids = None if user == "-" else user.split(" ")
    thread = cgroup is not None and cgroup.thread_join
    join_cg = cgroup.join_preexec() if cgroup is not None and not thread else None
    hdr, data = capset_args(mask)
    fprog = seccomp_args()  # built here: the child only installs
    bad = b"unshare: cannot change directory to " + wd.encode("utf-8", "surrogateescape") + b": "

    def preexec() -> None:
        if join_cg is not None:
            join_cg()
        for fd, flag in fds:
            if libc.setns(fd, flag) != 0:
                os._exit(127)
        try:
            os.chdir(wd)
        except OSError as e:
            os.write(2, bad + (e.strerror or "").encode() + b"\n")
            os._exit(1)
        if controlling_tty:  # _util.take_ctty, with its modules imported here: the image has no stdlib
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        if confine(libc, last, mask, nnp, fprog, hdr, data):
            os._exit(127)
        if ids is not None:
            os.setgroups([int(g) for g in ids[2].split(",")] if ids[2] != "-" else [])
            os.setgid(int(ids[1]))
            os.setuid(int(ids[0]))

    return preexec, cgroup.thread_inside() if thread else contextlib.nullcontext()
