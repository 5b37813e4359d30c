"""execd's files of each run in the sandbox's /tmp (stdLogDescriptor / combinedOutputDescriptor,
components/execd/pkg/runtime/command_common.go at 3bb6fad): a foreground command's ``<id>.stdout`` and
``<id>.stderr``, a background command's ``<id>.output``, mode 0755, made before the command starts and never
removed. They are the command's fd 1 and fd 2 themselves (read-write, as os.OpenFile opens them), and what execd
streams or answers is read back from them by their path (``read``; QUIRKS.md, "A command's fd 1 and fd 2").

A run's files are made at its start, as execd makes them. ``OSB_MOCK_SPARE_FILES=1`` makes the next run's files
ahead instead, once a run's answer is out, unnamed (``O_TMPFILE`` in the sandbox's /tmp), and a run's start only
names them (a session's run takes one for its script: sessions.py): for a file system where making an inode is
dear. On an ext4 without a journal it cost 0.1-0.8 ms apiece in a block group where many inodes were just freed;
the mock's root now spreads the sandboxes' trees over the groups (runtime/_util.py ``spread_subdirs``), and there
a file made at the start (54 us) costs less than naming one made ahead (68 us: a link, its times, an open by its
name) (bench/README.md).
"""

from __future__ import annotations

import errno
import os
import threading
from typing import Iterable, Iterator

from mock_opensandbox.execd.errors import GoError
from mock_opensandbox.execd.files import SandboxFS
from mock_opensandbox.execd.fsat import write_fd
from mock_opensandbox.runtime import SandboxRuntime, openat2
from mock_opensandbox.runtime._util import process_umask
from mock_opensandbox.wire.gojson import path_error

__all__ = ["RunFiles", "RunFilesError", "SPARE_FILES", "run_file"]

SPARE_FILES = 2  # files made ahead per execd: a foreground run's two
# os.OpenFile(name, O_RDWR|O_CREATE|O_TRUNC, 0777) under execd's umask 022
_MAKE = os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
# a file made ahead, named, opened again by its name: the command's fd shows that name (/proc/self/fd/1 ->
# /tmp/<id>.stdout; the fd of its making stays "/tmp/#<ino> (deleted)" after the link)
_NAMED = os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC
_READ = os.O_RDONLY | os.O_CLOEXEC  # os.Open (a symlink put there is followed, inside the sandbox)
_CHUNK = 1 << 20


def run_file(cid: str, stream: str) -> str:
    """The name of run ``cid``'s file for ``stream`` ("stdout", "stderr", "output") in /tmp."""
    return "%s.%s" % (cid, stream)


class RunFilesError(Exception):
    """A run's file could not be made; ``text`` is Go's error ("open /tmp/<id>.stdout: read-only file system",
    "mkdir /tmp: not a directory")."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text


_UMASK = process_umask()


def _mode_0755(fd: int) -> None:
    if _UMASK is None or _UMASK & 0o755:
        try:
            os.fchmod(fd, 0o755)  # (execd's umask is 022; the mock's is another)
        except OSError:
            pass


def _now(fd: int) -> None:
    """A file made ahead, named: its times set to now (they were those of its making)."""
    try:
        os.utime(fd)
    except OSError:
        pass


class RunFiles:
    """The files of one execd's runs, by fds on the sandbox's "/" (a /tmp swapped for a link by code inside
    stays inside), and, with ``OSB_MOCK_SPARE_FILES=1``, the files made ahead for the next run."""

    def __init__(self, runtime: SandboxRuntime):
        self.runtime = runtime
        self._lock = threading.Lock()
        self._spares: list[int] = []
        self._gen = 0  # one more at each close: a refill under way then keeps nothing
        self._shut = False  # closed, and no run started since (the execd stopped)
        self._off = not hasattr(os, "O_TMPFILE") or os.environ.get("OSB_MOCK_SPARE_FILES", "0") != "1"

    def _root(self) -> int | None:
        """PID 1's "/", held (one openat2 a file); None without one or without openat2."""
        rfd = getattr(getattr(self.runtime, "pid1", None), "root_fd", None)
        return rfd if isinstance(rfd, int) and openat2.AVAILABLE else None

    def make(self, cid: str, background: bool) -> dict[str, int]:
        """The run's files ({"stdout": fd, "stderr": fd} or {"output": fd}, read-write, the command's own fd 1 and
        fd 2): a file made ahead is named by a link, its times set to now, and opened again by its name; else the
        file is made here (execd's MkdirAll of /tmp first). Raises RunFilesError (none left open)."""
        self._shut = False
        streams = ("output",) if background else ("stdout", "stderr")
        rfd = self._root()
        out = self._named(rfd, cid, streams) if rfd is not None and self._spares else {}
        try:
            for stream in streams:
                if stream not in out:
                    out[stream] = self._create(rfd, "/tmp/" + run_file(cid, stream))
        except RunFilesError:
            for fd in out.values():
                os.close(fd)
            raise
        return out

    def _open(self, rfd: int | None, path: str, flags: int, mode: int = 0) -> int:
        try:
            return openat2.open_at_root(rfd, path, flags, mode) if rfd is not None else self._fs(path, flags, mode)
        except ValueError as exc:
            raise OSError(errno.EINVAL, str(exc)) from None

    def _create(self, rfd: int | None, path: str) -> int:
        """execd's os.MkdirAll(os.TempDir(), 0o755), then os.OpenFile: the open is tried first here, and the
        MkdirAll's error, when there is one, is the one reported ("failed to create temp dir /tmp: mkdir /tmp: not
        a directory", live 2026-12-07)."""
        try:
            fd = self._open(rfd, path, _MAKE, 0o755)
        except OSError:
            try:
                SandboxFS(self.runtime).mkdir_all("/tmp")
            except GoError as exc:
                raise RunFilesError("failed to create temp dir /tmp: " + exc.text) from None
            try:
                fd = self._open(rfd, path, _MAKE, 0o755)
            except OSError as exc:
                raise RunFilesError(path_error("open", path, exc)) from None
        _mode_0755(fd)
        return fd

    def open_at(self, path: str, flags: int, mode: int = 0) -> int:
        """The sandbox path ``path`` opened with ``flags`` (``mode`` for a file made) by openat2 on the sandbox's
        "/" held here (no open of the root per call). Raises OSError."""
        return self._open(self._root(), path, flags, mode)

    def open_read(self, path: str) -> int:
        """The file at sandbox path ``path`` opened for reading by its path now (os.Open). Raises OSError."""
        return self.open_at(path, _READ)

    def read(self, path: str, pos: int) -> Iterator[bytes]:
        """What the file at sandbox path ``path`` holds from byte ``pos`` to its end, opened by its path now (a
        file removed or replaced meanwhile: nothing, or the new one's bytes, as execd's readFromPos), in chunks of
        at most 1 MiB. Raises OSError when it cannot be opened."""
        fd = self.open_read(path)
        try:
            while True:
                data = os.pread(fd, _CHUNK, pos)
                if not data:
                    return
                pos += len(data)
                yield data
        finally:
            os.close(fd)

    def _fs(self, path: str, flags: int, mode: int) -> int:
        return SandboxFS(self.runtime).fd(path, flags, mode)

    def _take(self, n: int) -> list[int]:
        """Up to n files made ahead, now the caller's."""
        with self._lock:
            return [self._spares.pop() for _ in range(n) if self._spares]

    @staticmethod
    def _tmp(rfd: int) -> int:
        """An O_PATH fd of the sandbox's /tmp, the one its path resolves to now; -1 where there is none."""
        try:
            return openat2.open_at_root(rfd, "/tmp", os.O_PATH | os.O_DIRECTORY, 0)
        except (OSError, ValueError):
            return -1

    @staticmethod
    def _link(tmp: int, fd: int, names: Iterable[str]) -> str | None:
        """The file made ahead at ``fd`` linked into ``tmp`` under the first of ``names`` not taken, its times set
        to now: that name; None when every name is taken or the link fails (/tmp on another file system)."""
        for name in names:
            try:
                openat2.link_fd(fd, tmp, name)
            except FileExistsError:
                continue
            except OSError:
                return None
            _now(fd)
            return name
        return None

    def _named(self, rfd: int, cid: str, streams: tuple[str, ...]) -> dict[str, int]:
        """Files made ahead, named ``<cid>.<stream>`` and opened again by that name; a stream whose link or open
        fails (its name taken, no /tmp, /tmp elsewhere) is left to ``make``."""
        out: dict[str, int] = {}
        taken = self._take(len(streams))
        tmp = self._tmp(rfd)
        for stream, fd in zip(streams, taken, strict=False):
            name = run_file(cid, stream)
            try:
                if tmp >= 0 and self._link(tmp, fd, (name,)) is not None:
                    out[stream] = openat2.open_beneath(tmp, name, _NAMED)
            except (OSError, ValueError):
                pass
            finally:
                os.close(fd)
        if tmp >= 0:
            os.close(tmp)
        return out

    def named(self, names: Iterable[str], data: bytes, mode: int) -> str | None:
        """A file made ahead, holding ``data``, mode ``mode``, linked into the sandbox's /tmp under the first of
        ``names`` not taken (os.CreateTemp's O_EXCL): its sandbox path; None when none is made ahead or it
        fails (the caller makes the file itself)."""
        rfd = self._root()
        taken = self._take(1) if rfd is not None else []
        if rfd is None or not taken:
            return None
        fd, tmp, name = taken[0], -1, None
        try:
            write_fd(fd, data, mode)
            tmp = self._tmp(rfd)
            name = self._link(tmp, fd, names) if tmp >= 0 else None
        except OSError:
            pass
        finally:
            os.close(fd)
            if tmp >= 0:
                os.close(tmp)
        return None if name is None else "/tmp/" + name

    def refill(self) -> None:
        """Make the next run's files ahead, unnamed, in the sandbox's /tmp: called once a run's answer is
        written. Nothing where the file system has no O_TMPFILE."""
        rfd = self._root()
        if self._off or self._shut or rfd is None:
            return
        with self._lock:
            need, gen = SPARE_FILES - len(self._spares), self._gen
        made = []
        for _ in range(need):
            try:
                fd = openat2.open_at_root(rfd, "/tmp", os.O_TMPFILE | os.O_WRONLY, 0o755)
            except OSError as exc:
                if exc.errno in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):
                    self._off = True  # this file system makes none
                break
            except ValueError:
                break
            _mode_0755(fd)
            made.append(fd)
        with self._lock:
            keep = 0 if gen != self._gen else max(0, SPARE_FILES - len(self._spares))
            self._spares += made[:keep]
            made = made[keep:]
        for fd in made:
            os.close(fd)

    def close(self) -> None:
        """The files made ahead, closed (their inodes go with them): at the execd's stop."""
        with self._lock:
            spares, self._spares = self._spares, []
            self._gen += 1
            self._shut = True
        for fd in spares:
            try:
                os.close(fd)
            except OSError:
                pass
