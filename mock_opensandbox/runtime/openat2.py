"""openat2(2) with RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS through ctypes (Linux >= 5.6, syscall 437
on x86_64 and aarch64): a sandbox path opened on a directory fd of the sandbox's "/", resolved by the
kernel as a process chrooted there would, in one walk, so code inside the sandbox swapping a directory
for a symlink to "/" (renameat2 RENAME_EXCHANGE) cannot make the walk leave the root. The file
operations of execd (execd/files.py) then work on the fds it returns (*at calls). AVAILABLE is False
where the kernel or the architecture lacks it (the caller falls back to a checked path and says so)."""

from __future__ import annotations

import ctypes
import errno
import os
import platform
from typing import Any

__all__ = ["AVAILABLE", "NOTE", "link_fd", "open_beneath", "open_in", "parent_in"]

RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_BENEATH = 0x08
RESOLVE_IN_ROOT = 0x10
_NR = {"x86_64": 437, "aarch64": 437, "amd64": 437, "arm64": 437}.get(platform.machine().lower())
_RETRIES = 64  # EAGAIN: a rename raced with the walk (RESOLVE_IN_ROOT refuses to guess)


class _How(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_syscall: Any = None
_linkat: Any = None
try:
    _libc = ctypes.CDLL(None, use_errno=True)
    _syscall = _libc.syscall
    _syscall.restype = ctypes.c_long
    _linkat = _libc.linkat
    _linkat.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
except (OSError, AttributeError):  # pragma: no cover - no libc
    _syscall = None
AT_EMPTY_PATH = 0x1000
_empty_path_links = True  # until the kernel refuses linkat(AT_EMPTY_PATH) to this process


def link_fd(fd: int, dirfd: int, name: str) -> None:
    """Name the file open at ``fd`` (an ``O_TMPFILE`` file) ``name`` in the directory ``dirfd``:
    ``linkat(fd, "", dirfd, name, AT_EMPTY_PATH)`` (allowed to CAP_DAC_READ_SEARCH, and since Linux 6.10 to the
    file's opener), else through ``/proc/self/fd/N``, a walk of procfs more (~25 us here: bench/README.md).
    Raises OSError as link(2) (FileExistsError when the name is taken)."""
    global _empty_path_links
    if _linkat is not None and _empty_path_links:
        raw = name.encode("utf-8", "surrogateescape")
        if _linkat(fd, b"", dirfd, raw, AT_EMPTY_PATH) == 0:
            return
        err = ctypes.get_errno()
        if err not in (errno.ENOENT, errno.EPERM, errno.EINVAL, errno.ENOSYS):
            raise OSError(err, os.strerror(err), name)
        _empty_path_links = False  # (an old kernel without the capability answers ENOENT)
    os.link("/proc/self/fd/%d" % fd, name, dst_dir_fd=dirfd, follow_symlinks=True)


_TMPFILE = getattr(os, "O_TMPFILE", 0)


def _openat2(dirfd: int, path: str, flags: int, mode: int = 0, resolve: int = RESOLVE_IN_ROOT) -> int:
    if _syscall is None or _NR is None:
        raise OSError(errno.ENOSYS, os.strerror(errno.ENOSYS))
    made = flags & os.O_CREAT or (_TMPFILE and flags & _TMPFILE == _TMPFILE)  # the kernel takes a mode only then
    how = _How(flags | os.O_CLOEXEC, mode if made else 0, resolve | RESOLVE_NO_MAGICLINKS)
    raw = path.encode("utf-8", "surrogateescape")
    if b"\x00" in raw:
        raise ValueError("path contains a NUL byte")
    for _ in range(_RETRIES):
        fd = _syscall(
            ctypes.c_long(_NR),
            ctypes.c_int(dirfd),
            ctypes.c_char_p(raw),
            ctypes.byref(how),
            ctypes.c_size_t(ctypes.sizeof(how)),
        )
        if fd >= 0:
            return int(fd)
        err = ctypes.get_errno()
        if err not in (errno.EINTR, errno.EAGAIN):
            raise OSError(err, os.strerror(err), path)
    raise OSError(errno.EAGAIN, os.strerror(errno.EAGAIN), path)


def _probe() -> tuple[bool, str]:
    try:
        os.close(_openat2(-100, "/", os.O_PATH | os.O_DIRECTORY))  # AT_FDCWD
    except OSError as exc:
        return False, (
            "files API: openat2(RESOLVE_IN_ROOT) unavailable (%s): file operations check paths "
            "component by component, racy against code inside the sandbox" % os.strerror(exc.errno or 0)
        )
    return True, ""


AVAILABLE, NOTE = _probe()


def open_at_root(rfd: int, spath: str, flags: int, mode: int = 0) -> int:
    """open_in on an fd of the sandbox's "/" the caller holds (one system call). Raises as open_in."""
    return _openat2(rfd, spath.lstrip("/") or ".", flags, mode)


def open_in(root: str, spath: str, flags: int, mode: int = 0) -> int:
    """An fd of sandbox path ``spath`` (absolute or relative to "/") opened in ``root`` (a host path of
    the sandbox's "/"), never outside it. Raises OSError like open(2), ValueError for a NUL byte."""
    rfd = os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return _openat2(rfd, spath.lstrip("/") or ".", flags, mode)
    finally:
        os.close(rfd)


def parent_in(root: str, spath: str) -> tuple[int, str]:
    """(O_PATH fd of the parent directory, last name) of a clean absolute sandbox path; the name is ""
    for "/" itself."""
    head, _, name = spath.rstrip("/").rpartition("/")
    if name in ("", ".", ".."):
        return open_in(root, "/", os.O_PATH | os.O_DIRECTORY), ""
    return open_in(root, head or "/", os.O_PATH | os.O_DIRECTORY), name


def open_beneath(dirfd: int, rel: str, flags: int) -> int:
    """An fd of ``rel`` beneath the directory fd ``dirfd`` (RESOLVE_BENEATH: a walk that would leave it,
    by "..", an absolute symlink or one pointing out, fails with EXDEV). Raises OSError."""
    return _openat2(dirfd, rel.lstrip("/") or ".", flags, 0, RESOLVE_BENEATH)
