"""A PTY shell started by glibc's ``posix_spawn`` from the contained thread (contained.py): a vfork of the thread
and an exec of the shell, whose child leads a session of its own and opens the sandbox's ``/dev/pts/N`` by its
path inside after the ``setsid`` (glibc's child does ``setsid`` before its file actions; the kernel gives a
session leader the first terminal it opens), the order the forker's child has too (scripts/osb_forker.py).

Why: ``subprocess.Popen`` can open a terminal after the ``setsid`` only with a ``preexec_fn`` (a full fork of the
mock), so the thread ran the sandbox's ``/bin/sh`` as a stage that opened it and exec'd the shell: an exec more,
~0.45 ms of a PTY start here (bench/README.md). What ``os.posix_spawn`` cannot give a thread of a process of many
threads, glibc has: every descriptor from 3 up closed in the child (``posix_spawn_file_actions_addclosefrom_np``,
glibc >= 2.34: nothing of the mock reaches the shell, whatever another thread made inheritable a moment before)
and the directory changed in the child (``..._addchdir_np``, glibc >= 2.29: the thread's own stays "/"). The
child is otherwise Popen's: its stdin, stdout and stderr, its directory, SIGPIPE and SIGXFSZ at their defaults,
and an empty signal mask (as Go's forked child has). A plain command stays with Popen: through this module it
took ~0.03 ms longer (``Popen``'s own vfork needs no stack of its own).

``SpawnedPopen`` is a ``subprocess.Popen`` whose ``_execute_child`` is that spawn: Popen's own pipes, wait,
signals and ``communicate``. ``available()`` is False where this libc lacks any of it (musl, glibc < 2.34) or
``OSB_MOCK_PSPAWN=0``: the caller keeps the ``/bin/sh`` stage there. Standard library only; every libc symbol
is looked up on the first ``available()`` call, before the thread enters the sandbox (whose "/" has no mock
files).
"""

from __future__ import annotations

import ctypes
import os
import signal
import threading
from typing import Any

from mock_opensandbox.runtime._util import ChildPopen

_SETSIGDEF, _SETSIGMASK, _SETSID = 0x04, 0x08, 0x80  # <spawn.h> (glibc)
_SIZE = 1024  # bytes for posix_spawn_file_actions_t / posix_spawnattr_t / sigset_t (80 / 336 / 128 on x86_64)

_lock = threading.Lock()
_libc: Any = None
_ok: bool | None = None


def available() -> bool:
    """This libc has every function used here (looked up once), and ``OSB_MOCK_PSPAWN`` is not "0" (Popen
    then, as where it is missing: the A/B)."""
    global _libc, _ok
    if _ok is not None:
        return _ok and os.environ.get("OSB_MOCK_PSPAWN", "1") != "0"
    with _lock:
        if _ok is None:
            try:
                libc = ctypes.CDLL(None, use_errno=True)
                for name in (
                    "posix_spawn",
                    "posix_spawn_file_actions_init",
                    "posix_spawn_file_actions_destroy",
                    "posix_spawn_file_actions_adddup2",
                    "posix_spawn_file_actions_addopen",
                    "posix_spawn_file_actions_addchdir_np",
                    "posix_spawn_file_actions_addclosefrom_np",
                    "posix_spawnattr_init",
                    "posix_spawnattr_destroy",
                    "posix_spawnattr_setflags",
                    "posix_spawnattr_setsigdefault",
                    "posix_spawnattr_setsigmask",
                    "sigemptyset",
                    "sigaddset",
                ):
                    getattr(libc, name)
                libc.posix_spawnattr_setflags.argtypes = [ctypes.c_void_p, ctypes.c_short]
                libc.posix_spawn_file_actions_addopen.argtypes = [
                    ctypes.c_void_p,
                    ctypes.c_int,
                    ctypes.c_char_p,
                    ctypes.c_int,
                    ctypes.c_uint,
                ]
                _libc, _ok = libc, os.uname().sysname == "Linux"
            except (OSError, AttributeError):
                _ok = False
    return available()


def _strings(items: list[bytes]) -> Any:
    """A NULL-terminated ``char *[]`` of items."""
    return (ctypes.c_char_p * (len(items) + 1))(*items)


def spawn(
    paths: list[bytes], argv: list[bytes], env: list[bytes], fds: list[int], cwd: bytes | None, ctty: bytes
) -> int:
    """The child's pid: ``argv`` exec'd from the first of ``paths`` that exists (each tried as execve tries a
    PATH entry: ENOENT and ENOTDIR go on to the next, the first other error is kept), stdin/stdout/stderr
    from ``fds``, in ``cwd``, leading its own session with the terminal ``ctty`` opened by that path as its
    stdin. Raises OSError (its filename the directory when the chdir failed)."""
    libc = _libc
    assert libc is not None, "pspawn.available() first"
    fa = ctypes.create_string_buffer(_SIZE)
    attr = ctypes.create_string_buffer(_SIZE)
    sigs = ctypes.create_string_buffer(_SIZE)
    empty = ctypes.create_string_buffer(_SIZE)
    libc.posix_spawn_file_actions_init(fa)
    libc.posix_spawnattr_init(attr)
    try:
        for i, fd in enumerate(fds):
            if libc.posix_spawn_file_actions_adddup2(fa, fd, i):
                raise OSError(ctypes.get_errno() or 22, "posix_spawn_file_actions_adddup2")
        # after the setsid: the session leader's first terminal is its controlling one
        libc.posix_spawn_file_actions_addopen(fa, 0, ctty, os.O_RDWR, 0)
        if cwd is not None:
            libc.posix_spawn_file_actions_addchdir_np(fa, cwd)
        libc.posix_spawn_file_actions_addclosefrom_np(fa, 3)
        libc.sigemptyset(sigs)
        for s in (signal.SIGPIPE, signal.SIGXFSZ):
            libc.sigaddset(sigs, int(s))
        libc.sigemptyset(empty)
        libc.posix_spawnattr_setsigdefault(attr, sigs)
        libc.posix_spawnattr_setsigmask(attr, empty)
        libc.posix_spawnattr_setflags(attr, _SETSIGDEF | _SETSIGMASK | _SETSID)
        c_argv, c_env = _strings(argv), _strings(env)
        pid = ctypes.c_int(0)
        first: int = 0
        rc = 2
        for path in _existing(paths):
            rc = libc.posix_spawn(ctypes.byref(pid), path, fa, attr, c_argv, c_env)
            if rc == 0:
                return pid.value
            if rc not in (2, 20) and not first:  # ENOENT, ENOTDIR: the next directory
                first = rc
        rc = first or rc
        if cwd is not None and rc in (2, 13, 20) and not _dir_ok(cwd):
            raise OSError(rc, os.strerror(rc), os.fsdecode(cwd))  # Popen's report of a failed chdir
        raise OSError(rc, os.strerror(rc))
    finally:
        libc.posix_spawnattr_destroy(attr)
        libc.posix_spawn_file_actions_destroy(fa)


def _existing(paths: list[bytes]) -> list[bytes]:
    """paths less the absolute ones that do not exist (their execve would fail with ENOENT or ENOTDIR: a vfork
    saved per PATH entry that has no such file), in the caller's "/" (the sandbox's, in the contained thread)."""
    if len(paths) == 1:
        return paths
    out = []
    for path in paths:
        if path.startswith(b"/"):
            try:
                os.stat(path)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError:
                pass
        out.append(path)
    return out


def _dir_ok(cwd: bytes) -> bool:
    try:
        os.close(os.open(cwd, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        return os.access(cwd, os.X_OK)
    except OSError:
        return False


class SpawnedPopen(ChildPopen):
    """A Popen whose child ``spawn`` starts, with ``ctty`` its terminal. ``executable``: the file to run; without
    it argv[0] is searched on the command's own PATH, as Popen searches it."""

    def __init__(self, args: list[str], *, ctty: str, **kw: Any):
        self._ctty = os.fsencode(ctty)
        super().__init__(args, close_fds=True, **kw)

    def _start(
        self, args: list[str], executable: str | None, cwd: str | None, env: dict[str, str], fds: list[int]
    ) -> None:
        argv = [os.fsencode(a) for a in args]
        if executable is not None or b"/" in argv[0]:
            paths = [os.fsencode(executable) if executable is not None else argv[0]]
        else:
            paths = [os.path.join(os.fsencode(d), argv[0]) for d in os.get_exec_path(env)]
        env_list = [os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items()]
        self.pid = spawn(paths, argv, env_list, fds, None if cwd is None else os.fsencode(cwd), self._ctty)
        self._child_created = True
