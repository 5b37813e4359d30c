"""The fd-based halves of execd's file operations (execd/files.py): every call works on an fd that
openat2 (mock_opensandbox/runtime/openat2.py) found inside the sandbox's root, or by a single name in such a
directory fd, never by a host path that code inside the sandbox could redirect mid-walk."""

from __future__ import annotations

import errno
import os
import stat
from typing import Any

MKDIR_MODE = 0o755  # fsops.MKDIR_MODE (0777 &^ the container's 022 umask)


def proc_fd(fd: int) -> str:
    """/proc/self/fd/N of an O_PATH fd: chmod/chown through it reach the very inode openat2 found
    (fchmod/fchown refuse O_PATH fds); the magic link is the mock's own, never the sandbox's."""
    return "/proc/self/fd/%d" % fd


def read_fd(fd: int) -> bytes:
    if stat.S_ISDIR(os.fstat(fd).st_mode):
        raise IsADirectoryError(errno.EISDIR, "is a directory")
    chunks: list[bytes] = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def write_fd(fd: int, data: bytes, mode: int) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    os.fchmod(fd, mode)


def mkdir_at(pfd: int, name: str) -> None:
    """mkdir + chmod 0755 of the new directory, by name in its parent's fd (never a path)."""
    os.mkdir(name, MKDIR_MODE, dir_fd=pfd)
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
    try:
        os.fchmod(fd, MKDIR_MODE)
    finally:
        os.close(fd)


def unlink_at(pfd: int, name: str) -> None:
    os.unlink(name, dir_fd=pfd)


def remove_all_at(pfd: int, name: str) -> None:
    """os.RemoveAll by fds: missing is fine, symlinks removed (never followed), "" (the sandbox's "/")
    emptied, never removed; a directory's write bit restored when it refuses an unlink."""
    if not name:
        dfd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=pfd)
        try:
            empty_dir(dfd)
        finally:
            os.close(dfd)
        return
    try:
        st = os.stat(name, dir_fd=pfd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        try:
            os.unlink(name, dir_fd=pfd)
        except FileNotFoundError:
            pass
        return
    try:
        dfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
    except FileNotFoundError:
        return
    try:
        try:
            os.fchmod(dfd, stat.S_IMODE(st.st_mode) | 0o700)
        except OSError:
            pass
        empty_dir(dfd)
    finally:
        os.close(dfd)
    try:
        os.rmdir(name, dir_fd=pfd)
    except FileNotFoundError:
        pass


def empty_dir(dfd: int) -> None:
    for child in os.listdir(dfd):
        remove_all_at(dfd, child)


class _DirHandle:
    """os.Open of a directory: Stat works, Seek(0, end) gives a huge size, Read fails."""

    def __init__(self, fd: int):
        self._fd = fd

    def fileno(self) -> int:  # pragma: no cover - not used
        raise OSError(errno.EISDIR, "is a directory")

    def stat(self) -> os.stat_result:
        return os.fstat(self._fd)

    def read(self, n: int = -1) -> bytes:
        raise IsADirectoryError(errno.EISDIR, "is a directory")

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "_DirHandle":
        return self

    def __exit__(self, *a: Any) -> None:
        self.close()
