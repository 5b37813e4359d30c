# The volume mounts of view.py (../mounts.py plans them; ../../volumes.py checks their sources): read
# and run by view.py, beside it, only for a sandbox with volumes, before it pivots into the root.
import os
import stat

TYPE_CHECKING = False  # (typing's is not imported: view.py runs this before every sandbox start)
if TYPE_CHECKING:
    from typing import Callable

O_PATH = getattr(os, "O_PATH", 0o10000000)


def beneath(top: str, rel: str, create: bool) -> int:
    """O_PATH fd of top/rel, one component at a time, never through a symlink (a link planted after
    the mock's checks fails the start instead of leading anywhere); missing directories are made
    when create."""
    fd = os.open(top, O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        for name in [p for p in rel.split("/") if p]:
            if name in (".", ".."):
                raise OSError(22, "%s: not a plain path" % rel)
            try:
                nfd = os.open(name, O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                os.mkdir(name, 0o755, dir_fd=fd)
                nfd = os.open(name, O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nfd
            if stat.S_ISLNK(os.fstat(fd).st_mode):
                raise OSError(40, "%s: a symbolic link" % rel)
        return fd
    except BaseException:
        os.close(fd)
        raise


def mount_volumes(
    R: str,
    V: str,
    mount: "Callable[[str | None, str, str | None, int], None]",
    ro_tree: "Callable[[str], None]",
    MS_BIND: int,
    MS_REC: int,
) -> None:
    """Mount the volumes V (../mounts.py's plan) under the root R; view.py hands in its mount(2) helpers
    and flags (this file is run by it and imports nothing of it). Raises OSError."""
    for entry in V.split(",") if V else ():
        anchor, rel, target, ro = entry.split(":")
        anchor, rel, target = (bytes.fromhex(x).decode("utf-8", "surrogateescape") for x in (anchor, rel, target))
        top = target.split("/")[0]
        if not target or target == "." or top == "proc" or target == "dev" or ".." in target.split("/"):
            raise OSError(1, "volume target /%s refused" % target)
        src = beneath(anchor, rel, False)
        try:
            is_dir = stat.S_ISDIR(os.fstat(src).st_mode)
            if not is_dir and not stat.S_ISREG(os.fstat(src).st_mode):
                raise OSError(22, "volume source %s/%s is neither a directory nor a file" % (anchor, rel))
            parent, _, last = target.rpartition("/")
            if is_dir:
                dst = beneath(R, target, True)
            else:  # a file bind needs a file to mount on
                pfd = beneath(R, parent, True)
                try:
                    try:
                        os.close(
                            os.open(last, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644, dir_fd=pfd)
                        )
                    except IsADirectoryError:
                        pass
                    dst = os.open(last, O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=pfd)
                finally:
                    os.close(pfd)
            try:
                if stat.S_ISDIR(os.fstat(dst).st_mode) != is_dir:
                    raise OSError(20, "volume target /%s: not the same kind as its source" % target)
                mount("/proc/self/fd/%d" % src, "/proc/self/fd/%d" % dst, None, MS_BIND | MS_REC)
            finally:
                os.close(dst)
        finally:
            os.close(src)
        if ro == "1":
            ro_tree(R + "/" + target)
