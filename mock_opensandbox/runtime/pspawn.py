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
and an empty signal mask (as Go's forked child has); glibc's own two signals, which its posix_spawn would leave
ignored, at their defaults too (scripts/spawn.py). A plain command stays with Popen: through this module it
took ~0.03 ms longer (``Popen``'s own vfork needs no stack of its own).

``SpawnedPopen`` is a ``subprocess.Popen`` whose ``_execute_child`` is that spawn (``scripts/spawn.py``, which the
forker loads too): Popen's own pipes, wait, signals and ``communicate``. ``available()`` is False where this libc
lacks any of it (musl, glibc < 2.34) or ``OSB_MOCK_PSPAWN=0``: the caller keeps the ``/bin/sh`` stage there.
Standard library only; every libc symbol is looked up on the first ``available()`` call, before the thread
enters the sandbox (whose "/" has no mock files).
"""

from __future__ import annotations

import os
import signal
import threading
from typing import Any

from mock_opensandbox.runtime._util import ChildPopen
from mock_opensandbox.runtime.scripts import spawn as _spawn

_lock = threading.Lock()
_ok: bool | None = None


def available() -> bool:
    """This libc has every function used here (looked up once), and ``OSB_MOCK_PSPAWN`` is not "0" (Popen
    then, as where it is missing: the A/B)."""
    global _ok
    if _ok is None:
        with _lock:
            if _ok is None:
                _ok = _spawn.load() is not None and _spawn.has_closefrom and os.uname().sysname == "Linux"
    return _ok and os.environ.get("OSB_MOCK_PSPAWN", "1") != "0"


def _dir_ok(cwd: bytes) -> bool:
    try:
        os.close(os.open(cwd, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        return os.access(cwd, os.X_OK)
    except OSError:
        return False


class SpawnedPopen(ChildPopen):
    """A Popen whose child leads its own session with ``ctty`` its terminal, started by glibc's posix_spawn.
    ``executable``: the file to run; without it argv[0] is searched on the command's own PATH, as Popen searches
    it. A failed start raises Popen's OSError (the directory's name as its filename when the chdir failed)."""

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
            paths = _spawn.existing([os.path.join(os.fsencode(d), argv[0]) for d in os.get_exec_path(env)])
        where = None if cwd is None else os.fsencode(cwd)
        try:
            self.pid = _spawn.spawn(
                paths,
                argv,
                [os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items()],
                fds,
                cwd=where,
                session=True,
                ctty=self._ctty,
                sigdef=(signal.SIGPIPE, signal.SIGXFSZ),
                closefrom=True,
            )
        except OSError as exc:
            if where is not None and exc.errno in (2, 13, 20) and not _dir_ok(where):
                raise OSError(exc.errno, exc.strerror, cwd) from None  # Popen's report of a failed chdir
            raise
        self._child_created = True
