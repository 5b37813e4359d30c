# glibc's posix_spawn by ctypes, for the two places that start a sandbox's process by it: the contained thread's PTY
# shells (runtime/pspawn.py) and the forker (scripts/osb_forker.py, which loads this file like lookpath.py). What
# os.posix_spawn cannot give:
# - glibc's child sets the two signals glibc keeps for itself (32 and 33: SIGCANCEL, SIGSETXID) to SIG_IGN unless
#   they are in the spawn's default set, and sigaddset refuses them; so every process started by os.posix_spawn
#   showed them ignored (/proc/PID/status `SigIgn: 0000000180000000`) where a container's process ignores
#   nothing. Their bits are set in the default set here directly (the sigset_t is a bit array of unsigned longs).
# - every descriptor from 3 up closed in the child (posix_spawn_file_actions_addclosefrom_np, glibc >= 2.34), for
#   a caller of many threads (the mock: another thread may have made a descriptor inheritable a moment before);
# - the directory changed in the child (..._addchdir_np, glibc >= 2.29), the caller's own left as it is.
# load() is None where this libc lacks posix_spawn; has_closefrom says whether the closefrom and chdir actions
# exist. Written by the OpenSandbox mock; standard library only.
import ctypes
import os

SETSIGDEF, SETSIGMASK, SETPGROUP, SETSID = 0x04, 0x08, 0x02, 0x80  # <spawn.h> (glibc)
INTERNAL_SIGNALS = (32, 33)  # glibc's SIGCANCEL and SIGSETXID
SIZE = 1024  # bytes for posix_spawn_file_actions_t / posix_spawnattr_t / sigset_t (80 / 336 / 128 on x86_64)
WORD = ctypes.sizeof(ctypes.c_ulong) * 8

_libc = None
has_closefrom = False


def load() -> "object | None":
    """This libc's functions, looked up once (before the caller's "/" changes); None without posix_spawn."""
    global _libc, has_closefrom
    if _libc is None:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            for name in (
                "posix_spawn",
                "posix_spawn_file_actions_init",
                "posix_spawn_file_actions_destroy",
                "posix_spawn_file_actions_adddup2",
                "posix_spawn_file_actions_addopen",
                "posix_spawnattr_init",
                "posix_spawnattr_destroy",
                "posix_spawnattr_setflags",
                "posix_spawnattr_setpgroup",
                "posix_spawnattr_setsigdefault",
                "posix_spawnattr_setsigmask",
            ):
                getattr(libc, name)
        except (OSError, AttributeError):
            return None
        libc.posix_spawnattr_setflags.argtypes = [ctypes.c_void_p, ctypes.c_short]
        libc.posix_spawn_file_actions_addopen.argtypes = [
            ctypes.c_void_p,
            ctypes.c_int,
            ctypes.c_char_p,
            ctypes.c_int,
            ctypes.c_uint,
        ]
        has_closefrom = all(
            hasattr(libc, n)
            for n in ("posix_spawn_file_actions_addclosefrom_np", "posix_spawn_file_actions_addchdir_np")
        )
        _libc = libc
    return _libc


def sigset(signals: "tuple[int, ...]") -> "ctypes.Array[ctypes.c_ulong]":
    """A sigset_t holding signals (any number from 1 up, glibc's own included)."""
    words = (ctypes.c_ulong * (SIZE * 8 // WORD))()
    for s in signals:
        words[(s - 1) // WORD] |= 1 << ((s - 1) % WORD)
    return words


def spawn(
    paths: "list[bytes]",
    argv: "list[bytes]",
    env: "list[bytes]",
    fds: "list[int]",
    *,
    cwd: "bytes | None" = None,
    session: bool = False,
    ctty: "bytes | None" = None,
    sigdef: "tuple[int, ...]" = (),
    closefrom: bool = False,
) -> int:
    """The child's pid: argv exec'd from the first of paths whose execve does not fail with ENOENT or ENOTDIR (the
    first other error is kept), stdin/stdout/stderr dup'd from fds, in its own process group (session: its own
    session, then ctty opened by that path as its stdin: a session leader's first terminal is its controlling
    one), sigdef and glibc's own signals at their defaults, an empty signal mask; cwd and closefrom need
    has_closefrom. Raises OSError(errno) when no path could be exec'd (or a file action failed)."""
    libc = _libc
    assert libc is not None, "load() first"
    fa = ctypes.create_string_buffer(SIZE)
    attr = ctypes.create_string_buffer(SIZE)
    libc.posix_spawn_file_actions_init(fa)
    libc.posix_spawnattr_init(attr)
    try:
        for i, fd in enumerate(fds):
            libc.posix_spawn_file_actions_adddup2(fa, fd, i)
        if ctty is not None:  # after the setsid (glibc's child does it before the file actions)
            libc.posix_spawn_file_actions_addopen(fa, 0, ctty, os.O_RDWR, 0)
        if cwd is not None:
            libc.posix_spawn_file_actions_addchdir_np(fa, cwd)
        if closefrom:
            libc.posix_spawn_file_actions_addclosefrom_np(fa, 3)
        default, empty = sigset(tuple(sigdef) + INTERNAL_SIGNALS), sigset(())
        libc.posix_spawnattr_setsigdefault(attr, default)
        libc.posix_spawnattr_setsigmask(attr, empty)
        libc.posix_spawnattr_setpgroup(attr, 0)
        libc.posix_spawnattr_setflags(attr, SETSIGDEF | SETSIGMASK | (SETSID if session else SETPGROUP))
        c_argv = (ctypes.c_char_p * (len(argv) + 1))(*argv)
        c_env = (ctypes.c_char_p * (len(env) + 1))(*env)
        pid = ctypes.c_int(0)
        first = 0
        rc = 2
        for path in paths:
            rc = libc.posix_spawn(ctypes.byref(pid), path, fa, attr, c_argv, c_env)
            if rc == 0:
                return pid.value
            if rc not in (2, 20) and not first:  # ENOENT, ENOTDIR: the next directory
                first = rc
        rc = first or rc
        raise OSError(rc, os.strerror(rc))
    finally:
        libc.posix_spawnattr_destroy(attr)
        libc.posix_spawn_file_actions_destroy(fa)


def existing(paths: "list[bytes]") -> "list[bytes]":
    """paths less the absolute ones that do not exist (their execve would fail with ENOENT or ENOTDIR: a vfork
    saved per PATH entry without the file), in the caller's "/"."""
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
