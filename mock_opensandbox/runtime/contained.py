"""Containment paid once per sandbox, not per command: a thread of the mock that enters a sandbox for good
and forks its commands (root only; ``SandboxRuntime.spawn`` uses it when ``contained_thread`` says it can).

Every attribute a container's process has from runc is a per-thread attribute in Linux: the cgroups (v1
lets one thread join: spawner.py), ``pid_for_children`` (``setns(CLONE_NEWPID)``), the mount namespace
with the root and working directory (``setns(CLONE_NEWNS)`` once the thread has a ``fs_struct`` of its
own: ``unshare(CLONE_FS)``), the IPC, UTS and network namespaces, the seccomp filter (``prctl
PR_SET_SECCOMP`` without TSYNC filters the calling thread only), the capability sets (``capset`` and
``PR_CAPBSET_DROP`` act on the calling thread's credentials) and ``no_new_privs``. A child inherits all of
them from the thread that forks it, and ``execve`` keeps them. So the thread takes them once, in the order
runc does (namespaces, then the filter while CAP_SYS_ADMIN still allows it, then the capability drop), and
every command after that is a plain ``vfork`` + ``execve`` of the command itself from that thread: no
``nsenter``, no Python stage for the filter, no ``setpriv``, no ``env`` (the ~9 ms per command they cost:
bench/README.md). What the command gets is what those stages gave it: the same filter program
(scripts/seccomp.py), the same capability set (caps.py), the same view, namespaces and cgroups.

The thread runs nothing but ``subprocess.Popen`` after that: every module it needs is imported before it
enters (its "/" is then the sandbox's, where the mock's files are not), and the caller passes sandbox paths
(cwd, argv). It ends with the sandbox (``stop``), which also takes it out of the cgroups. Standard library
only.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import sys
import threading
from typing import Any, Iterator

from mock_opensandbox.runtime import caps
from mock_opensandbox.runtime._util import take_ctty
from mock_opensandbox.runtime.forkjoin import _setup, capset_args, confine, namespace_fds, seccomp_args
from mock_opensandbox.runtime.spawner import Spawner

CLONE_FS, CLONE_NEWPID = 0x00000200, 0x20000000
# A process execd starts outside a command run (a PTY shell, a session's bash) inherits execd's ignored SIGINT
# (execd/commands.py Sigint). The mock's own SIGINT is Python's handler, which every exec resets (and a
# disposition is the whole process's, so no thread of the mock may ignore it for a child): the sandbox's sh
# ignores it and execs the process in place (spawn awaits the exec, so `ps` never shows the sh).
SIGINT_STAGE = ["/bin/sh", "-c", "trap '' INT; exec \"$@\"", "sh"]
# The contained thread does without that exec: it forks under SPAWN_LOCK (every fork of a contained thread takes
# it), and one that must leave SIGINT ignored sets the mock's SIGINT to SIG_IGN for the fork's duration
# (``sigint_ignored``: a vfork child copies the dispositions, and both Popen's child and glibc's posix_spawn's
# keep an ignored signal ignored) and puts the handler back after it, byte for byte. For those ~0.1 ms a Ctrl-C
# sent to the mock itself would be lost; no other contained fork can happen then (the lock).
SPAWN_LOCK = threading.Lock()
_SIGACTION = 256  # bytes for a struct sigaction (152 on x86_64 and aarch64, whose sa_handler is its first member)


def sigint_stage_forced() -> bool:
    """``OSB_MOCK_SIGINT_STAGE=1``: SIGINT left ignored by the sandbox's sh (``SIGINT_STAGE``) on every path, the
    contained thread's and the forker's too (the A/B)."""
    return os.environ.get("OSB_MOCK_SIGINT_STAGE", "0") == "1"


def sigint_native() -> bool:
    """The contained thread can fork with SIGINT ignored itself (``sigint_ignored``): glibc's struct sigaction is
    laid out as assumed here, and the stage is not forced."""
    return os.uname().machine in ("x86_64", "aarch64") and not sigint_stage_forced()


@contextlib.contextmanager
def sigint_ignored() -> Iterator[None]:
    """The mock's SIGINT disposition SIG_IGN for the block (hold SPAWN_LOCK), the one before it back after."""
    libc, _ = _setup()
    ign, old = ctypes.create_string_buffer(_SIGACTION), ctypes.create_string_buffer(_SIGACTION)
    ctypes.memmove(ign, ctypes.byref(ctypes.c_void_p(1)), ctypes.sizeof(ctypes.c_void_p))  # sa_handler = SIG_IGN
    if libc.sigaction(2, ign, old) != 0:
        raise OSError(ctypes.get_errno() or 22, "sigaction(SIGINT)")
    try:
        yield
    finally:
        libc.sigaction(2, old, None)


def _check(rc: int, what: str) -> None:
    if rc != 0:
        e = ctypes.get_errno() or 22
        raise OSError(e, "%s: %s" % (what, os.strerror(e)))


_SYS_SETGROUPS = {"x86_64": 116, "aarch64": 159}


def enter_sandbox(pidns_fd: int, ns_fds: list[tuple[int, int]], groups: list[int] | None = None) -> None:
    """Make the calling thread a process of the sandbox whose namespace fds these are, for good: its
    children are born in the PID namespace, see the sandbox's "/" and run filtered with its capability
    set; ``groups``: its supplementary groups (the image's root user's), set for this thread alone (the raw
    system call: glibc's setgroups would change every thread of the mock). Raises OSError (the thread is
    then unusable: the caller stops it)."""
    libc, last = _setup()
    if groups is not None:
        nr = _SYS_SETGROUPS.get(os.uname().machine)
        if nr is None:
            raise OSError(38, "setgroups: no system call number for this machine")
        arr = (ctypes.c_uint32 * max(1, len(groups)))(*groups)
        _check(libc.syscall(nr, len(groups), arr), "setgroups")
    fprog = seccomp_args()
    hdr, data = capset_args(caps.SANDBOX_CAP_MASK)
    _check(libc.setns(pidns_fd, CLONE_NEWPID), "setns(pid)")
    _check(libc.unshare(CLONE_FS), "unshare(CLONE_FS)")  # the thread's own root and cwd, so setns(mnt) may
    for fd, flag in ns_fds:
        _check(libc.setns(fd, flag), "setns(%#x)" % flag)
    os.chdir("/")
    # the filter while CAP_SYS_ADMIN is still held (no no_new_privs needed for it), then the drop
    step = confine(libc, last, caps.SANDBOX_CAP_MASK, caps.NO_NEW_PRIVILEGES, fprog, hdr, data)
    if step:
        _check(-1, step)


def contained_thread(holder: Any, cgroup: Any, name: str, reuse: Spawner | None = None) -> Spawner | None:
    """A Spawner whose thread has entered the sandbox of ``holder`` (a root ``direct`` holder), or None
    where it cannot: not root, the cgroups of a kind a thread cannot join (v2), no PID namespace fd.
    ``reuse``: the sandbox's cgroup v1 spawner, whose thread joined the cgroups when they were made (a v1
    move that soon after another skips the RCU grace period: PID 1's own move then comes cheap); it enters
    in place. Raises OSError when entering failed (``reuse`` is then unusable)."""
    if os.geteuid() != 0 or holder.mode != "direct" or holder.pidns_fd is None:
        return None
    if cgroup is not None and not cgroup.thread_join:
        return None
    if holder.ns_fds is None:
        holder.ns_fds = namespace_fds(holder.pid, holder.net is not None)
    # its own copies: the holder may close its fds (a sandbox ending) before the thread has entered
    fds = [os.dup(holder.pidns_fd)]
    try:
        for fd, _ in holder.ns_fds:
            fds.append(os.dup(fd))
    except OSError:
        for fd in fds:
            os.close(fd)
        raise
    flags = [flag for _, flag in holder.ns_fds]
    # an image's root user (rootfs.user_word "0 0 G1,G2"): the thread takes its groups, so its commands fork
    # without a switch; another user is switched per command (Popen user=, a full fork)
    user = _user(holder.user)
    groups = user[2] if user is not None and user[:2] == (0, 0) else None

    def enter() -> None:
        try:
            enter_sandbox(fds[0], list(zip(fds[1:], flags, strict=True)), groups)
        finally:
            for fd in fds:
                os.close(fd)

    if reuse is not None:
        reuse.call(enter)
        sp = reuse
    else:
        sp = Spawner(cgroup, name, enter=enter)
    sp.identity = (0, 0, sorted(set(groups if groups is not None else os.getgroups())))
    return sp


def _user(word: str | None) -> tuple[int, int, list[int]] | None:
    """(uid, gid, groups) of a "UID GID G1,G2" word (rootfs.user_word; groups "-" for none), None for "-"."""
    if not word or word == "-":
        return None
    ids = word.split(" ")
    return int(ids[0]), int(ids[1]), [int(g) for g in ids[2].split(",") if g] if ids[2] != "-" else []


def user_ids(word: str | None) -> tuple[int, int, list[int]] | None:
    """(uid, gid, groups) of a "UID GID G1,G2" word, None for "-" or None (the forker's children: forker.py)."""
    return _user(word)


def creds(user: str | None, identity: tuple[int, int, list[int]] | None = None) -> dict[str, Any]:
    """Popen's user/group/extra_groups for a "UID GID G1,G2" word (rootfs.user_word; "-" or None: the
    thread's own). ``identity``: the contained thread's (uid, gid, sorted groups); a word that names exactly
    that switches nothing (the fork stays a vfork). The sandbox's capability set keeps CAP_SETUID/CAP_SETGID
    for a switch."""
    ids = _user(user)
    if ids is None or (identity is not None and (ids[0], ids[1], sorted(set(ids[2]))) == identity):
        return {}
    return {"user": ids[0], "group": ids[1], "extra_groups": ids[2]}


@functools.cache
def _has_ctty() -> bool:
    """The mock has a controlling terminal (asked once: a process that is not a session leader gains none)."""
    try:
        os.close(os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY | os.O_CLOEXEC))
        return True
    except OSError:  # ENXIO: none
        return False


def group_kwargs(new_session: bool) -> dict[str, Any]:
    """Popen's process-group arguments for a command the contained thread forks. execd starts a command in a
    process group of its own inside execd's session (``Setpgid``: components/execd/pkg/runtime/command.go
    at 3bb6fad); the contained thread's session is the mock's, so a command gets a group of its own there
    (``process_group=0``, Python >= 3.11) where the mock has no controlling terminal that the command could
    reach through ``/dev/tty``. Where it has one (started from a terminal), on Python 3.10, and for a command
    that takes a terminal (PTY), the command leads a session of its own instead. The group is also the
    cheaper fork: a child's ``setsid`` in a cgroup with a ``cpu`` controller kept its vfork parent waiting
    ~0.6-1 ms longer here (bench/README.md). ``new_session``: a command that must lead one (a PTY; every
    command not forked by the contained thread)."""
    if new_session or sys.version_info < (3, 11) or _has_ctty():
        return {"start_new_session": True}
    return {"process_group": 0}


def contained_spawner(holder: Any, cgroup: Any, hostname: str, reuse: Spawner | None = None) -> Spawner | None:
    """holder's contained thread, made on its first use (OSB_MOCK_CONTAINED=0: never, for an A/B) from
    ``reuse`` when given; None where there is none (the wrapper stages then contain each command)."""
    if not holder.contained_tried and os.environ.get("OSB_MOCK_CONTAINED", "1") != "0":
        holder.contained_tried = True
        try:
            holder.contained = contained_thread(holder, cgroup, "osb-in-%s" % hostname, reuse)
        except OSError:
            holder.contained = None
            if reuse is not None:
                reuse.stop()  # half entered: it forks nothing more (the caller makes a new one)
    sp = holder.contained
    return sp if sp is not None and sp.ok() else None


def pts_inside(tty: Any, pid1: int) -> int | None:
    """N where ``tty`` (an fd or a file) is the sandbox's own ``/dev/pts/N`` (PID 1's view), else None."""
    try:
        st = os.fstat(tty if isinstance(tty, int) else tty.fileno())
        index = (os.major(st.st_rdev) - 136) * 256 + os.minor(st.st_rdev)  # Unix98 PTY slaves: majors 136-143
        inside = os.stat("/proc/%d/root/dev/pts/%d" % (pid1, index))
        same = 136 <= os.major(st.st_rdev) <= 143 and (inside.st_dev, inside.st_rdev) == (st.st_dev, st.st_rdev)
    except (OSError, ValueError, AttributeError):
        return None
    return index if same else None


def ctty_stage(argv: list[str], tty: Any, pid1: int, ignore_sigint: bool = False) -> tuple[list[str], Any, Any]:
    """(argv, await_exec stages, preexec_fn) for a PTY shell from the contained thread, whose stdin ``tty`` is
    a terminal of the sandbox's own devpts. The fork stays a vfork: the child leads a new session (Popen's
    start_new_session) and execs the sandbox's ``/bin/sh`` (every mock sandbox has one: PID 1 runs
    bootstrap.sh with it), which opens the terminal by its path inside the sandbox as the command's stdin:
    a session leader without a controlling terminal that opens one gets it (the kernel's tty_open, no
    O_NOCTTY in a shell's redirection), then execs the command in place. Where the terminal is not the
    sandbox's ``/dev/pts/N`` (a host PTY) a preexec_fn does TIOCSCTTY instead (a full fork of the mock).
    ``ignore_sigint``: the same sh ignores SIGINT first (``SIGINT_STAGE``'s ``trap``), one stage for both."""
    index = pts_inside(tty, pid1)
    if index is None:
        return (SIGINT_STAGE + argv if ignore_sigint else argv), None, take_ctty
    trap = "trap '' INT; " if ignore_sigint else ""
    cmd = ["/bin/sh", "-c", trap + 'exec "$@" 0<>/dev/pts/%d' % index, "sh"] + argv
    stage = b"\0".join(a.encode("utf-8", "surrogateescape") for a in cmd) + b"\0"
    return cmd, (False, {stage}), None
