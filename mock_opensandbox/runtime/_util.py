"""Small process and file helpers shared by the runtime modules (standard library only)."""

from __future__ import annotations

import errno
import fcntl
import os
import secrets
import shutil
import signal
import stat
import struct
import subprocess
import termios
import threading
import time

from mock_opensandbox.wire.pollio import readable

TYPE_CHECKING = False  # (typing's: this module imports no typing at run time)
if TYPE_CHECKING:
    from typing import Any, Callable

# Host directories bound read-only into every isolated sandbox view, and the directories the
# view builds itself (container /dev, procfs, read-only /sys, the per-sandbox /etc overlay).
HOST_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
VIEW_DIRS = ("etc", "dev", "proc", "sys")
SYSTEM_DIRS = HOST_DIRS + VIEW_DIRS
# What every sandbox root starts with: the top-level directories of a Debian slim image (python:3.12-slim,
# `ls /` in fixtures/22_sandbox_inside.json: bin boot dev etc home lib lib64 media mnt opt proc root run sbin srv sys
# tmp usr var; bin/lib*/sbin/usr, dev/etc/proc/sys come from the view, SYSTEM_DIRS) with /var's usual
# subdirectories, and /opt/opensandbox (bootstrap.sh + execd, like the server's container). The sandbox's
# own directories: the host's /var, /opt, /srv, /run ... are never seen. (path, mode)
BASE_DIRS = ("boot", "home", "media", "mnt", "opt", "root", "run", "srv", "tmp", "var")
IMAGE_DIRS = (
    ("boot", 0o755),
    ("home", 0o755),
    ("media", 0o755),
    ("mnt", 0o755),
    ("opt", 0o755),
    ("opt/opensandbox", 0o755),
    ("root", 0o700),
    ("run", 0o755),
    ("run/lock", 0o1777),
    ("srv", 0o755),
    ("tmp", 0o1777),
    ("var", 0o755),
    ("var/backups", 0o755),
    ("var/cache", 0o755),
    ("var/lib", 0o755),
    ("var/lib/misc", 0o755),
    ("var/local", 0o2775),
    ("var/log", 0o755),
    ("var/mail", 0o2775),
    ("var/opt", 0o755),
    ("var/spool", 0o755),
    ("var/tmp", 0o1777),
)
# symlinks of a Debian image (base-files): /var/run -> /run, /var/lock -> /run/lock, /var/spool/mail
IMAGE_LINKS = (("var/run", "/run"), ("var/lock", "/run/lock"), ("var/spool/mail", "../mail"))
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MAX_SYMLINKS = 40  # Linux's own limit (ELOOP)
CLONE_NEWPID = 0x20000000


def readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def take_ctty() -> None:  # runs in the child after setsid(), before exec

    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def kill_and_reap(proc: subprocess.Popen[bytes], timeout: float = 5.0) -> None:
    """SIGKILL proc's process group when it still runs, then reap proc (bounded)."""
    if proc.poll() is None:
        killpg(proc.pid, signal.SIGKILL)
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
        pass


def kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def rmtree(path: str) -> None:
    """Remove a tree, fixing permissions on the way, never following symlinks or crossing mounts."""
    if not os.path.lexists(path):
        return

    def onerror(func: Callable[[str], object], p: str, exc_info: object) -> None:
        parent = os.path.dirname(p)
        try:
            os.chmod(parent, 0o700)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    if os.path.islink(path):
        os.unlink(path)
        return
    for dirpath, dirnames, _ in os.walk(path):
        for d in list(dirnames):
            full = os.path.join(dirpath, d)
            if os.path.ismount(full):  # never descend into a (leaked) bind mount
                dirnames.remove(d)
                raise RuntimeError(f"refusing to remove a mount point inside the sandbox root: {full}")
    shutil.rmtree(path, onerror=onerror)


def container_id() -> str:
    """A Docker container's id: 64 random hex digits, the first 12 of which (the short id, the container's
    hostname) are never all decimal ones (moby pkg/stringid GenerateRandomID draws again: glibc takes such a
    hostname for a number, and gethostbyname of it then fails "Name or service not known"; QUIRKS.md, "Hostname")."""
    while True:
        cid = secrets.token_hex(32)
        if not cid[:12].isdigit():
            return cid


# ext2/3/4's inode flags (linux/fs.h): FS_IOC_GETFLAGS = _IOR('f', 1, long), FS_IOC_SETFLAGS = _IOW('f', 2, long)
_LONG = struct.calcsize("l")
_FS_IOC_GETFLAGS = (2 << 30) | (_LONG << 16) | (ord("f") << 8) | 1
_FS_IOC_SETFLAGS = (1 << 30) | (_LONG << 16) | (ord("f") << 8) | 2
_FS_TOPDIR_FL = 0x00020000


def spread_subdirs(path: str) -> bool:
    """Mark the directory ``path`` a top of a directory hierarchy for ext2/3/4 (``chattr +T``, FS_TOPDIR_FL): the
    Orlov allocator then places each new subdirectory (a sandbox's tree) in a block group of its own choosing
    instead of next to ``path``, and the files made in that tree follow it. Without it every sandbox of a mock
    shares one group, and on an ext4 without a journal each inode made there skips every inode freed in that
    group lately (``find_inode_bit`` / ``recently_deleted``): 0.47-0.80 ms a file once earlier sandboxes' trees
    were removed, 12 us with the flag (bench/README.md). Invisible inside a sandbox. False where the file
    system has no such flag (tmpfs, xfs, btrfs, overlay) or the caller may not set it."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        buf = fcntl.ioctl(fd, _FS_IOC_GETFLAGS, struct.pack("i", 0))
        flags = struct.unpack("i", buf)[0]
        if not flags & _FS_TOPDIR_FL:
            fcntl.ioctl(fd, _FS_IOC_SETFLAGS, struct.pack("i", flags | _FS_TOPDIR_FL))
            flags = struct.unpack("i", fcntl.ioctl(fd, _FS_IOC_GETFLAGS, struct.pack("i", 0)))[0]
        return bool(flags & _FS_TOPDIR_FL)
    except OSError:
        return False
    finally:
        os.close(fd)


def process_umask() -> int | None:
    """This process's umask, read without changing it (os.umask would race other threads); None
    when /proc does not say (Linux < 4.7)."""
    try:
        with open("/proc/self/status", "rb") as fh:
            for line in fh:
                if line.startswith(b"Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return None


def make_image_root(root: str) -> None:
    """The image-like tree (IMAGE_DIRS, IMAGE_LINKS) under a fresh sandbox root; entries that exist stay."""
    umask = process_umask()
    for d, mode in IMAGE_DIRS:
        p = os.path.join(root, d)
        if os.path.lexists(p):
            continue
        try:
            os.mkdir(p, mode)
            # the umask would clear the sticky/group bits: chmod only then (a chmod costs ~0.2 ms
            # here, 22 of them were most of a create's tree)
            if umask is None or mode & 0o7000 or mode & ~umask != mode:
                os.chmod(p, mode)
        except OSError:
            pass
    for link, target in IMAGE_LINKS:
        p = os.path.join(root, link)
        if not os.path.lexists(p):
            try:
                os.symlink(target, p)
            except OSError:
                pass


def make_mountpoint(root: str, d: str) -> None:
    """<root>/<d> for a view directory: the host's symlink (merged /usr) or an empty directory."""
    host, mine = "/" + d, os.path.join(root, d)
    if os.path.lexists(mine):
        return
    try:
        if d in HOST_DIRS and os.path.islink(host):
            os.symlink(os.readlink(host), mine)
        elif d not in HOST_DIRS or os.path.isdir(host):
            os.mkdir(mine, 0o755)
    except OSError:
        pass


def read_lines(fd: int, n: int, timeout: float, proc: subprocess.Popen[bytes]) -> list[str]:
    """Up to n lines from a non-blocking pipe/FIFO within timeout; fewer on EOF, timeout or when proc
    exits (a FIFO without a writer yet shows no EOF, hence the poll of proc)."""
    buf = b""
    deadline = time.monotonic() + timeout
    while buf.count(b"\n") < n:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready = readable([fd], min(left, 0.2))
        if not ready:
            if proc.poll() is not None:
                break
            continue
        try:
            chunk = os.read(fd, 256)
        except BlockingIOError:
            continue
        if not chunk:
            if proc.poll() is not None:
                break
            time.sleep(0.01)  # EOF between two writers (the prelude's and PID 1's fd 9 are one open file)
            continue
        buf += chunk
    return [x.decode("ascii", "replace") for x in buf.split(b"\n")[:-1][:n]]


def read_cmdline(pid: int) -> bytes | None:
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def children(pid: int) -> list[int]:
    """The children of pid (its main thread's; [] when gone)."""
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as fh:
            return [int(x) for x in fh.read().split()]
    except (OSError, ValueError):
        pass
    out = []
    for name in os.listdir("/proc"):  # kernels without CONFIG_PROC_CHILDREN
        if name.isdigit():
            try:
                with open("/proc/%s/stat" % name, "rb") as fh:
                    if int(fh.read().rsplit(b")", 1)[1].split()[1]) == pid:
                        out.append(int(name))
            except (OSError, IndexError, ValueError):
                continue
    return out


def open_in_root(root: str, rel: str, flags: int, mode: int = 0o644) -> int:
    """Open <root>/<rel> without following any symlink (a sandbox process may have planted one:
    the mock must never write outside the root); missing directories are created (0755)."""
    parts = [p for p in rel.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise ValueError(f"bad path inside the sandbox: {rel!r}")
    dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parts[:-1]:
            try:
                nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            except FileNotFoundError:
                os.mkdir(name, 0o755, dir_fd=dfd)
                nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            os.close(dfd)
            dfd = nfd
        fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode, dir_fd=dfd)
        want = stat.S_ISDIR if flags & os.O_DIRECTORY else stat.S_ISREG
        if not want(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EEXIST, "not a regular file or directory", rel)
        if not flags & os.O_DIRECTORY:
            os.set_blocking(fd, True)
        return fd
    finally:
        os.close(dfd)


def first_child(pid: int) -> int | None:
    kids = children(pid)
    return kids[0] if kids else None


def await_exec(
    proc: subprocess.Popen[bytes],
    stages: tuple[bool, set[bytes | None]],
    *,
    pid: int | None = None,
    timeout: float = 5.0,
) -> None:
    """Wait (bounded) until the process running the command - proc itself, or its first child when
    stages[0] - no longer shows one of the wrapper cmdlines stages[1]: it has exec'd the command,
    exited, or been reaped. The bound is for a machine so loaded that a shell does not run for seconds."""
    child, stale = stages
    parent = pid if pid is not None else proc.pid
    target = None if child else proc.pid
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pid is None and proc.poll() is not None:
            return
        if target is None:
            target = first_child(parent)
            if target is None:
                if _gone(parent):
                    return
                time.sleep(0.0005)
                continue
        line = read_cmdline(target)
        if line == b"" and not _gone(target):
            # mid-execve: the new image's mm has no arguments until its stack is built (the kernel's
            # get_mm_cmdline reads nothing while mm->env_end is 0)
            time.sleep(0.0005)
            continue
        if line is None or line == b"" or line not in stale:
            return
        time.sleep(0.0005)


def proc_state(pid: int) -> bytes | None:
    """The state letter of /proc/PID/stat (b"R", b"S", b"Z", ...); None when pid is gone."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _gone(pid: int) -> bool:
    """pid has exited (reaped, or a zombie)."""
    return proc_state(pid) in (b"Z", b"X", None)


def start_time(pid: int) -> int:
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return -1


def is_child_init(pid: int, parent: int) -> bool:
    """pid is a child of parent and PID 1 of its own PID namespace (guards the pid read from the pipe)."""
    try:
        with open("/proc/%d/status" % pid) as fh:
            fields = dict(line.split(":", 1) for line in fh if ":" in line)
    except OSError:
        return False
    ppid = fields.get("PPid", "").strip()
    nspid = fields.get("NSpid", "").split()
    return ppid == str(parent) and (not nspid or nspid[-1] == "1")


# -- signal dispositions -----------------------------------------------------------------------------
# A container's processes start with every signal at its default action, whatever the API caller's were:
# containerd and runc start them, not the process that asked the server. exec(2) keeps a signal that is
# ignored (SIG_IGN) but resets one that has a handler. A mock started with signals ignored (`nohup`, `cmd &`
# in a script without job control: SIGHUP, SIGINT, SIGQUIT) would hand that on to every sandbox process, and
# Ctrl-C in a sandbox's terminal would not stop a command. So while a mock runs, each signal the process
# inherited as ignored gets a handler that does nothing: the mock still ignores it, its children do not.
_SIG_LOCK = threading.Lock()
_SIG_USERS = 0
_SIG_CHANGED: list[int] = []
# Python's own choice (SIGPIPE, SIGXFSZ ignored), which subprocess resets in children (restore_signals)
_SIG_KEEP = {getattr(signal, n) for n in ("SIGKILL", "SIGSTOP", "SIGPIPE", "SIGXFSZ", "SIGXFZ") if hasattr(signal, n)}


def _nothing(signum: int, frame: object) -> None:
    return None


_GLIBC_SIGNALS = (32, 33)  # SIGCANCEL, SIGSETXID: glibc's own, which signal.signal and sigaction refuse
_RT_SIGACTION = {"x86_64": 13, "aarch64": 134}
_GLIBC_CHANGED: list[int] = []


def _glibc_signal(sig: int, ignore: bool | None) -> bool:
    """Whether glibc's own signal ``sig`` is SIG_IGN (the raw rt_sigaction: glibc's wrapper refuses it), after
    setting it to SIG_IGN or SIG_DFL when ``ignore`` is given. A caller started by glibc's posix_spawn (GNU make
    4.3 runs its recipes so) comes in with both ignored, and every child would inherit that (live: none)."""
    nr = _RT_SIGACTION.get(os.uname().machine)
    if nr is None:
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    old = ctypes.create_string_buffer(64)  # struct kernel_sigaction: sa_handler first on both machines
    new = None
    if ignore is not None:
        new = ctypes.create_string_buffer(64)
        ctypes.memmove(new, ctypes.byref(ctypes.c_void_p(1 if ignore else 0)), ctypes.sizeof(ctypes.c_void_p))
    if libc.syscall(nr, sig, new, old, 8) != 0:
        return False
    return ctypes.c_void_p.from_buffer(old).value == 1


def default_signals_for_children() -> None:
    """Call when a mock starts (main thread only; elsewhere nothing changes: signal.signal refuses)."""
    global _SIG_USERS
    with _SIG_LOCK:
        _SIG_USERS += 1
        if _SIG_USERS > 1 or threading.current_thread() is not threading.main_thread():
            return
        for sig in _GLIBC_SIGNALS:  # inherited ignored: glibc installs its handler itself when it needs one
            if _glibc_signal(sig, None):
                _glibc_signal(sig, False)
                _GLIBC_CHANGED.append(sig)
        for sig in signal.valid_signals():
            if sig in _SIG_KEEP:
                continue
            try:
                if signal.getsignal(sig) == signal.SIG_IGN:
                    signal.signal(sig, _nothing)
                    _SIG_CHANGED.append(sig)
            except (OSError, ValueError, RuntimeError):
                pass


def inherited_signals_back() -> None:
    """Call when a mock stops: the last one puts back the ignored signals it found."""
    global _SIG_USERS
    with _SIG_LOCK:
        _SIG_USERS = max(0, _SIG_USERS - 1)
        if _SIG_USERS or threading.current_thread() is not threading.main_thread():
            return
        while _GLIBC_CHANGED:
            _glibc_signal(_GLIBC_CHANGED.pop(), True)
        while _SIG_CHANGED:
            sig = _SIG_CHANGED.pop()
            try:
                if signal.getsignal(sig) is _nothing:
                    signal.signal(sig, signal.SIG_IGN)
            except (OSError, ValueError, RuntimeError):
                pass


class ChildPopen(subprocess.Popen[bytes]):
    """A Popen whose fork and exec are ``_start``'s (the forker's request: forker.py; glibc's posix_spawn:
    pspawn.py): Popen's own pipes, wait, signals and ``communicate`` around them. ``_start`` sets ``self.pid``
    (and ``self._child_created``) or raises; the child's ends of the pipes are closed after it either way, as
    Popen's own ``_execute_child`` closes them (Popen's positional layout of it, 3.10 to 3.13)."""

    def _start(
        self, args: list[str], executable: str | None, cwd: str | None, env: dict[str, str], fds: list[int]
    ) -> None:
        raise NotImplementedError

    def _execute_child(
        self,
        args: Any,
        executable: Any,
        preexec_fn: Any,
        close_fds: Any,
        pass_fds: Any,
        cwd: Any,
        env: Any,
        startupinfo: Any,
        creationflags: Any,
        shell: Any,
        p2cread: int,
        p2cwrite: int,
        c2pread: int,
        c2pwrite: int,
        errread: int,
        errwrite: int,
        *rest: Any,
    ) -> None:
        fds = [p2cread if p2cread != -1 else 0, c2pwrite if c2pwrite != -1 else 1, errwrite if errwrite != -1 else 2]
        try:
            self._start(list(args), executable, cwd, dict(env), fds)
        finally:
            self._close_pipe_fds(p2cread, p2cwrite, c2pread, c2pwrite, errread, errwrite)  # type: ignore[attr-defined]
