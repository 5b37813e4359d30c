# The sandbox view, built inside the sandbox's fresh mount (+ IPC, UTS, PID; + user when not root)
# namespaces while still privileged, then the sandbox process. Run by the mock as
#   python -I -S view.py holder  R FIFO H X E MASK NNP V ENTRYPOINT...   (the sandbox's PID 1)
#   python -I -S view.py command R WD   H X E MASK NNP V ARGV...         (per-command fallback)
# R sandbox root (realpath) - FIFO the mock reads ("pid <host pid>" once the view is built, then
# EOF: PID 1 execs `/bin/sh /opt/opensandbox/bootstrap.sh ENTRYPOINT...`; with OSB_MOCK_AGENT_FD and
# OSB_MOCK_AGENT_PY in the environment the mock's agent gets its channel as fd 3, its program on fd 4
# and the Python bound at /opt/opensandbox/execd) - WD working directory inside - H hostname - X /etc entries to hide
# (newline separated, relative to /etc) - E directory with the sandbox's passwd, group, shadow,
# gshadow - MASK capability set (hex) - NNP "1": set no_new_privs - V the volumes to mount ("" for
# none; ../mounts.py writes it).
# It builds under R what a container of the real server shows (../../QUIRKS.md, "Containment"),
# pivot_roots into it (the host's tree is detached), drops to the capability set and execs.
# Every step fails closed: nothing of the sandbox runs after a failed step (exit 125).
# One process with mount(2) calls instead of a shell and ~50 mount(8) processes: ~10x faster.
import _thread
import posix  # os's own builtin, loaded with the interpreter: the cgroup move starts before any import
import sys

TYPE_CHECKING = False  # (typing's is not imported: it costs every sandbox start; annotations are text)
if TYPE_CHECKING:
    from typing import Any, NoReturn


class CgroupJoin:
    """PID 1 moves itself into the sandbox's cgroups (OSB_MOCK_CGROUP_JOIN: cgroup.procs paths, one a
    line; "0" moves the writer's whole process) from a second thread, started before the rest of this
    program is even imported, while the main thread goes on: a cgroup v1 move waits for an RCU grace
    period (~5-15 ms here) that so overlaps ~10 ms of imports and the view's build. wait() before
    anything of the sandbox runs; a failed write fails the start (closed). Only posix and _thread
    (loaded with the interpreter)."""

    def __init__(self, paths: "list[str]") -> None:
        self.fds: list[int] = []
        self.error: tuple[int | None, str] | None = None  # (errno, text)
        self.done = _thread.allocate_lock()
        self.done.acquire()
        try:
            for p in paths:
                if not p.startswith("/sys/fs/cgroup/") or not p.endswith("/cgroup.procs") or "/../" in p:
                    raise OSError(22, "not a cgroup.procs file: %r" % p)
                self.fds.append(posix.open(p, posix.O_WRONLY | posix.O_CLOEXEC | posix.O_NOFOLLOW))
        except OSError as e:
            for fd in self.fds:
                posix.close(fd)
            self.error = (e.errno, "cannot join the sandbox's cgroup %s: %s" % (p, e.strerror))
            self.done.release()
            return
        _thread.start_new_thread(self._run, ())

    def _run(self) -> None:
        try:
            for fd in self.fds:
                posix.write(fd, b"0")
        except OSError as e:
            self.error = (e.errno, "cannot join the sandbox's cgroup: %s" % e.strerror)
        finally:
            for fd in self.fds:
                posix.close(fd)
            self.done.release()

    def wait(self) -> None:
        self.done.acquire()
        if self.error:
            raise OSError(*self.error)


# holder only (the mock always sets it there: never a value from the sandbox's environment; main()
# drops it from the environment)
_JOIN = [p for p in posix.environ.get(b"OSB_MOCK_CGROUP_JOIN", b"").decode("utf-8", "surrogateescape").split("\n") if p]
JOINING = CgroupJoin(_JOIN) if _JOIN and sys.argv[1:2] == ["holder"] else None

import _signal as signal  # noqa: E402 - the C module: `signal` would import enum
import _socket  # noqa: E402 - after the cgroup move started
import ctypes  # noqa: E402 - after the cgroup move started (CgroupJoin), so these imports overlap it
import fcntl  # noqa: E402 - after the cgroup move started
import os  # noqa: E402 - after the cgroup move started
import stat  # noqa: E402 - after the cgroup move started
import warnings  # noqa: E402,F401 - os.execvp imports it lazily: after pivot_root the stdlib may be gone

libc = ctypes.CDLL(None, use_errno=True)
MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_REMOUNT = 1, 2, 4, 8, 32
MS_NOATIME, MS_NODIRATIME, MS_BIND, MS_REC, MS_RELATIME, MS_STRICTATIME = 1024, 2048, 4096, 16384, 1 << 21, 1 << 24
MNT_DETACH = 2
NOSUID_NODEV_NOEXEC = MS_NOSUID | MS_NODEV | MS_NOEXEC
# statvfs f_flag bit -> the mount flag a bind remount must keep (the kernel refuses to clear a
# locked one inside a user namespace)
KEEP = ((2, MS_NOSUID), (4, MS_NODEV), (8, MS_NOEXEC), (1024, MS_NOATIME), (2048, MS_NODIRATIME), (4096, MS_RELATIME))
HOST_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
DEVICES = (("null", 1, 3), ("zero", 1, 5), ("full", 1, 7), ("random", 1, 8), ("urandom", 1, 9), ("tty", 5, 0))
DEV_LINKS = (
    ("ptmx", "pts/ptmx"),
    ("fd", "/proc/self/fd"),
    ("stdin", "/proc/self/fd/0"),
    ("stdout", "/proc/self/fd/1"),
    ("stderr", "/proc/self/fd/2"),
)
# moby oci/defaults.go (Docker 20.10): ReadonlyPaths, MaskedPaths (files: /dev/null; dirs: ro tmpfs)
PROC_RO = ("bus", "fs", "irq", "sys", "sysrq-trigger")
PROC_MASK_FILES = ("kcore", "keys", "latency_stats", "timer_list", "timer_stats", "sched_debug")
PROC_MASK_DIRS = ("acpi", "asound", "scsi")
SYS_MASK_DIRS = ("firmware", "devices/virtual/powercap")
ETC_FROM_HOST = ("hosts", "resolv.conf", "nsswitch.conf", "ld.so.cache", "ssl/certs/ca-certificates.crt")
PIVOT_ROOT = {
    "x86_64": 155,
    "aarch64": 41,
    "riscv64": 41,
    "i686": 217,
    "i386": 217,
    "armv7l": 218,
    "armv6l": 218,
    "ppc64le": 203,
    "ppc64": 203,
    "s390x": 217,
    "loongarch64": 41,
}
UNSAFE_PREFIX = "OSB_MOCK_UNSAFE_"  # scripts.HELPER_ENV_PREFIX
# a sandbox with a network namespace of its own: its /etc/hosts and /etc/resolv.conf (netns.py)
NET_FILES = (("hosts", "OSB_MOCK_NET_HOSTS"), ("resolv.conf", "OSB_MOCK_NET_RESOLV"))


def fail(msg: str, code: int = 125) -> "NoReturn":
    try:
        os.write(2, ("%s\n" % msg).encode("utf-8", "replace"))
    finally:
        os._exit(code)


def _b(s: "str | None") -> "bytes | None":
    return None if s is None else s.encode("utf-8", "surrogateescape")


def mount(src: "str | None", target: str, fstype: "str | None", flags: int, data: "str | None" = None) -> None:
    if libc.mount(_b(src), _b(target), _b(fstype), flags, _b(data)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, "mount %s on %s: %s" % (src or fstype, target, os.strerror(e)))


def remount_ro(path: str, extra: int = 0) -> None:
    f = os.statvfs(path).f_flag
    keep = extra
    for st_bit, ms_bit in KEEP:
        if f & st_bit:
            keep |= ms_bit
    mount(None, path, None, MS_REMOUNT | MS_BIND | MS_RDONLY | keep)


def _unescape(s: str) -> str:
    return s.encode().decode("unicode_escape").encode("latin-1").decode("utf-8", "surrogateescape") if "\\" in s else s


def mounts() -> "list[tuple[str, str]]":
    """(mount point, fs type) of every mount, in mount order (parents first)."""
    out: list[tuple[str, str]] = []
    with open("/proc/self/mountinfo") as fh:
        for line in fh:
            left, _, right = line.partition(" - ")
            out.append((_unescape(left.split()[4]), right.split()[0]))
    return out


def ro_tree(path: str) -> None:
    for mp, _ in mounts():
        if mp == path or mp.startswith(path + "/"):
            remount_ro(mp)


def real_dir(path: str) -> str:
    """path (inside R) becomes a real directory: a planted symlink or file goes (a mount must never
    follow a link out of the root)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    if st is not None and not stat.S_ISDIR(st.st_mode):
        os.unlink(path)
        st = None
    if st is None:
        os.mkdir(path, 0o755)
    return path


def empty_file(path: str) -> None:
    if os.path.islink(path):
        os.unlink(path)
    if not os.path.isfile(path):
        os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o644))


def build_etc(R: str, H: str, X: str, E: str) -> None:
    p = real_dir(R + "/etc")
    mount("osb-etc", p, "tmpfs", 0, "mode=755")
    up, work = p + "/up", p + "/work"
    os.mkdir(up, 0o755)
    os.mkdir(work, 0o755)
    for name, mode in (("passwd", 0o644), ("group", 0o644), ("shadow", 0o640), ("gshadow", 0o640)):
        with open(os.path.join(E, name), "rb") as src:
            data = src.read()
        fd = os.open(up + "/" + name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        os.write(fd, data)
        os.fchmod(fd, mode)
        if mode == 0o640:
            try:
                os.fchown(fd, 0, 42)  # group shadow; unmapped inside a user namespace
            except OSError:
                pass
        os.close(fd)
    fd = os.open(up + "/hostname", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    os.write(fd, (H + "\n").encode())
    os.close(fd)
    for rel in X.split("\n"):
        if not rel or rel.startswith("/") or ".." in rel.split("/"):
            continue
        parent = os.path.dirname(rel)
        if parent:
            os.makedirs(up + "/" + parent, 0o755, exist_ok=True)
        if not os.path.lexists(up + "/" + rel):
            os.mknod(up + "/" + rel, stat.S_IFCHR, os.makedev(0, 0))  # an overlay whiteout
    own: dict[str, str] = {}
    for name, var in NET_FILES:
        text = os.environ.pop(var, None)
        if text is not None:
            own[name] = text
            fd = os.open(up + "/" + name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.write(fd, text.encode())
            os.fchmod(fd, 0o644)
            os.close(fd)
    mount("osb-etc", p, "overlay", 0, "lowerdir=/etc,upperdir=%s,workdir=%s" % (up, work))
    for f in ETC_FROM_HOST:
        if f not in own and os.path.isfile("/etc/" + f):
            t = p + "/" + f
            empty_file(t)
            mount("/etc/" + f, t, None, MS_BIND)
            remount_ro(t)


def build_dev(R: str) -> None:
    p = real_dir(R + "/dev")
    mount("tmpfs", p, "tmpfs", MS_NOSUID | MS_STRICTATIME, "mode=755,size=65536k")
    for name, major, minor in DEVICES:
        t = p + "/" + name
        try:
            os.mknod(t, stat.S_IFCHR | 0o666, os.makedev(major, minor))
            os.chmod(t, 0o666)
        except OSError:  # no CAP_MKNOD in the initial namespace (a user namespace): the host's node
            empty_file(t)
            mount("/dev/" + name, t, None, MS_BIND)
    for d in ("pts", "shm", "mqueue"):
        os.mkdir(p + "/" + d, 0o755)
    try:
        mount("devpts", p + "/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,gid=5,mode=620,ptmxmode=666")
    except OSError:  # gid 5 is not mapped inside a user namespace
        mount("devpts", p + "/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,mode=620,ptmxmode=666")
    for name, target in DEV_LINKS:
        os.symlink(target, p + "/" + name)
    mount("shm", p + "/shm", "tmpfs", NOSUID_NODEV_NOEXEC, "mode=1777,size=65536k")
    mount("mqueue", p + "/mqueue", "mqueue", NOSUID_NODEV_NOEXEC)


def build_proc(R: str, fresh: bool) -> None:
    p = real_dir(R + "/proc")
    if fresh:
        mount("proc", p, "proc", NOSUID_NODEV_NOEXEC)
    else:
        mount("/proc", p, None, MS_BIND | MS_REC)
    for name in PROC_RO:
        t = p + "/" + name
        if os.path.lexists(t):
            mount(t, t, None, MS_BIND | MS_REC)
            ro_tree(t)
    for name in PROC_MASK_FILES:
        if os.path.lexists(p + "/" + name):
            mount(R + "/dev/null", p + "/" + name, None, MS_BIND)
    for name in PROC_MASK_DIRS:
        if os.path.isdir(p + "/" + name):
            mount("tmpfs", p + "/" + name, "tmpfs", MS_RDONLY)


def cgroup_view() -> "dict[str, str]":
    """The sandbox's own cgroup directories (runtime/cgroups.py), "name=dir" lines from the mock:
    v1 mount dir name -> dir, "" -> the v2 dir. Docker binds a container's own cgroup the same way."""
    out: dict[str, str] = {}
    for line in os.environ.pop("OSB_MOCK_CGROUP_VIEW", "").split("\n"):
        name, sep, d = line.partition("=")
        if sep and d.startswith("/sys/fs/cgroup/") and "/../" not in d + "/":
            out[name] = d
    return out


def build_sys(R: str, own: "dict[str, str]") -> None:
    p = real_dir(R + "/sys")
    try:
        mount("sysfs", p, "sysfs", MS_RDONLY | NOSUID_NODEV_NOEXEC)
    except OSError:  # a user namespace may not mount sysfs: the host's, every submount read-only
        mount("/sys", p, None, MS_BIND | MS_REC)
        ro_tree(p)
    cg, t = "/sys/fs/cgroup", p + "/fs/cgroup"
    host = [m for m in mounts() if not m[0].startswith(R + "/")]
    kind = [fs for mp, fs in host if mp == cg]
    if kind and os.path.isdir(t):
        if kind[-1] == "tmpfs":  # cgroup v1 (Docker 20.10): own tmpfs, each v1 hierarchy read-only
            v1 = {mp for mp, fs in host if fs == "cgroup" and os.path.dirname(mp) == cg}
            mount("tmpfs", t, "tmpfs", NOSUID_NODEV_NOEXEC, "mode=755")
            for name in sorted(os.listdir(cg)):
                hp = cg + "/" + name
                if os.path.islink(hp):
                    os.symlink(os.readlink(hp), t + "/" + name)
                elif hp in v1:
                    os.mkdir(t + "/" + name, 0o755)
                    mount(own.get(name, hp), t + "/" + name, None, MS_BIND)
                    remount_ro(t + "/" + name, NOSUID_NODEV_NOEXEC)
        else:  # cgroup v2: the sandbox's own cgroup (else the hierarchy itself), read-only
            mount(own.get("", cg), t, None, MS_BIND | MS_REC)
            ro_tree(t)
    for name in SYS_MASK_DIRS:
        if os.path.isdir(p + "/" + name):
            mount("tmpfs", p + "/" + name, "tmpfs", MS_RDONLY)


def loopback_up(addr: str = "") -> None:
    """A fresh network namespace has lo down: bring it up (SIOCGIFFLAGS, SIOCSIFFLAGS | IFF_UP), no
    iproute2 needed, and IPv6 off (net.ipv6.conf.{all,default}.disable_ipv6, live: no address in
    /proc/net/if_inet6). In the host's namespace lo is up already and nothing changes. addr (../netns.py
    ENV_ADDR, set when no slirp4netns gives the namespace eth0): the sandbox's own address, bound as
    addr/32 on lo (label lo:0; SIOCSIFADDR, SIOCSIFNETMASK), so its hostname resolves to an address
    of its own, as in a container on Docker's bridge."""
    s = _socket.socket(_socket.AF_INET, _socket.SOCK_DGRAM)
    try:
        req = b"lo".ljust(16, b"\0") + bytes(16)
        flags = int.from_bytes(fcntl.ioctl(s.fileno(), 0x8913, req)[16:18], sys.byteorder)
        if not flags & 1:  # a fresh namespace: IPv6 off in it, as in a container on Docker's default bridge
            for conf in ("all", "default"):
                try:
                    with open("/proc/sys/net/ipv6/conf/%s/disable_ipv6" % conf, "w") as fh:
                        fh.write("1")
                except OSError:
                    pass
            fcntl.ioctl(s.fileno(), 0x8914, b"lo".ljust(16, b"\0") + (flags | 1).to_bytes(2, sys.byteorder) + bytes(14))
        if addr:
            name = b"lo:0".ljust(16, b"\0")
            for op, ip in ((0x8916, addr), (0x891C, "255.255.255.255")):  # sockaddr_in: family, port 0, addr
                fcntl.ioctl(
                    s.fileno(),
                    op,
                    name + _socket.AF_INET.to_bytes(2, sys.byteorder) + bytes(2) + _socket.inet_aton(ip) + bytes(8),
                )
    finally:
        s.close()


def image_etc(R: str, H: str, F: str) -> None:
    """An image's /etc stays the image's; Docker binds the container's own resolv.conf, hostname and
    hosts over it (in that order), written outside the sandbox's layer (F)."""
    for name, var in (("resolv.conf", "OSB_MOCK_NET_RESOLV"), ("hostname", None), ("hosts", "OSB_MOCK_NET_HOSTS")):
        text = H + "\n" if var is None else os.environ.pop(var, None)
        if text is None:
            try:
                with open("/etc/" + name) as fh:
                    text = fh.read()
            except OSError:
                text = ""
        src = F + "/" + name
        fd = os.open(src, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        os.write(fd, text.encode())
        os.fchmod(fd, 0o644)
        os.close(fd)
        t = real_dir(R + "/etc") + "/" + name
        if os.path.lexists(t) and (os.path.islink(t) or not os.path.isfile(t)):
            os.unlink(t)
        empty_file(t)
        mount(src, t, None, MS_BIND)


def build_view(R: str, H: str, X: str, E: str, fresh_proc: bool, image: "tuple[str, ...] | None" = None) -> None:
    if image is not None:  # the image's tree (../rootfs.py): its own /usr, /bin, /lib and /etc
        kind, lower, work, files = image
        if kind == "overlay":
            mount("overlay", R, "overlay", 0, "lowerdir=%s,upperdir=%s,workdir=%s" % (lower, R, work))
        else:
            mount(R, R, None, MS_BIND)
        image_etc(R, H, files)
        build_dev(R)
        build_proc(R, fresh_proc)
        build_sys(R, cgroup_view())
        return
    mount(R, R, None, MS_BIND)  # pivot_root wants the new root to be a mount point
    for d in HOST_DIRS:
        hp, t = "/" + d, R + "/" + d
        if os.path.islink(hp):
            if not os.path.lexists(t):
                os.symlink(os.readlink(hp), t)
        elif os.path.isdir(hp):
            real_dir(t)
            mount(hp, t, None, MS_BIND | MS_REC)
            ro_tree(t)
    build_etc(R, H, X, E)
    build_dev(R)
    build_proc(R, fresh_proc)
    build_sys(R, cgroup_view())


def pivot(R: str) -> None:
    """R becomes "/" and the host's tree is detached from this mount namespace (a chroot would
    leave it reachable to a process holding CAP_SYS_CHROOT)."""
    old = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    os.chdir(R)
    nr = PIVOT_ROOT.get(os.uname().machine)
    if nr is None:
        fail("osb-view: pivot_root: unknown system call number for %s" % os.uname().machine)
    if libc.syscall(nr, b".", b".") != 0:
        raise OSError(ctypes.get_errno(), "pivot_root")
    os.fchdir(old)
    os.close(old)
    if libc.umount2(b".", MNT_DETACH) != 0:
        raise OSError(ctypes.get_errno(), "umount the host's tree")
    os.chdir("/")


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_caps(mask: int, last: int, nnp: bool) -> None:
    """Bounding set, then permitted = effective = mask, inheritable and ambient empty, no_new_privs
    (what setpriv --bounding-set ... --inh-caps -all --no-new-privs does)."""
    for cap in range(last + 1):
        if not mask >> cap & 1 and libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            fail("osb-view: PR_CAPBSET_DROP: %s" % os.strerror(ctypes.get_errno()))
    libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
    hdr = CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (CapData * 2)()
    for i in (0, 1):
        data[i].effective = data[i].permitted = (mask >> (32 * i)) & 0xFFFFFFFF
    if libc.capset(ctypes.byref(hdr), data) != 0:
        fail("osb-view: capset: %s" % os.strerror(ctypes.get_errno()))
    if nnp and libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        fail("osb-view: PR_SET_NO_NEW_PRIVS: %s" % os.strerror(ctypes.get_errno()))


def drop_user(word: str) -> None:
    """The image's User (../rootfs.py): supplementary groups, gid, uid; setuid clears the permitted and
    effective capabilities of a non-root user, as for a container process (the bounding set stays)."""
    uid, gid, groups = word.split(" ")
    try:
        os.setgroups([int(g) for g in groups.split(",")] if groups != "-" else [])
        os.setgid(int(gid))
        os.setuid(int(uid))
    except OSError as e:
        fail("osb-view: cannot become user %s:%s: %s" % (uid, gid, e.strerror))


def restore_env() -> None:
    if os.environ.pop("OSB_MOCK_KEEP_LC", "1") == "0":  # scripts.KEEP_LC_ENV
        os.environ.pop("LC_CTYPE", None)  # added by this Python's locale coercion (PEP 538)
    for k in [k for k in os.environ if k.startswith(UNSAFE_PREFIX)]:
        os.environ[k[len(UNSAFE_PREFIX) :]] = os.environ.pop(k)


# PID 1 runs the mock's bootstrap.sh (written by holder.write_bootstrap): execd in the background, then
# the entrypoint (the server's container: `/bin/sh /opt/opensandbox/bootstrap.sh ENTRYPOINT...`)
BOOTSTRAP = "/opt/opensandbox/bootstrap.sh"
AGENT_FD_ENV = "OSB_MOCK_AGENT_FD"  # holder.AGENT_FD_ENV: this inherited fd becomes fd 3 (the agent's channel)
AGENT_PY_ENV = "OSB_MOCK_AGENT_PY"  # holder.AGENT_PY_ENV: the Python bound at /opt/opensandbox/execd
AGENT_AT = "/opt/opensandbox/execd"
IDLE = "idle"  # holder.AGENT_IDLE: AGENT_FD_ENV's value for an execd placeholder without a channel


def bind_agent(R: str, python: str) -> None:
    """The sandbox's execd when it is the mock's agent: the Python interpreter, bound read-only over
    the placeholder file the mock wrote (a regular file, never a planted link)."""
    t = R + AGENT_AT
    st = os.lstat(t)
    if not stat.S_ISREG(st.st_mode):
        raise OSError(22, "not a regular file: " + AGENT_AT)
    mount(python, t, None, MS_BIND)
    remount_ro(t)


def main() -> None:
    mode, R, arg, H, X, E, mask_hex, nnp_flag, V = sys.argv[1:10]
    # seccomp.py beside this file: Docker's default profile's closed calls (loaded before the pivot, from its
    # bytecode cache where there is one, like this file: osb_view.py)
    import _frozen_importlib_external as _ext

    mod = type(sys)("__osb_seccomp__")
    mod.__file__ = os.path.join(os.path.dirname(os.path.abspath(__file__)), "seccomp.py")
    _ext.SourceFileLoader(mod.__name__, mod.__file__).exec_module(mod)
    seccomp = vars(mod)
    argv = sys.argv[10:]
    mask, nnp = int(mask_hex, 16), nnp_flag == "1"
    with open("/proc/sys/kernel/cap_last_cap") as fh:
        last = int(fh.read())
    fifo: int  # holder only, as host_pid
    if mode == "holder":
        fifo = os.open(arg, os.O_WRONLY | os.O_CLOEXEC)
        with open("/proc/self/stat", "rb") as fh:  # still the host's /proc: the host pid
            host_pid = int(fh.read().split()[0])
    if mode == "holder":
        try:
            os.setsid()  # runc makes a container's init lead its session and group (1 and 1 inside)
        except OSError:
            pass  # it leads one already (the zygote's PID 1)
    try:
        _socket.sethostname(H)
    except OSError:
        pass
    agent_fd = os.environ.pop(AGENT_FD_ENV, "")
    agent_py = os.environ.pop(AGENT_PY_ENV, "")
    agent_src = None
    os.environ.pop("OSB_MOCK_CGROUP_JOIN", None)  # JOINING read it
    image_env = os.environ.pop("OSB_MOCK_IMAGE", "")  # ../rootfs.py VIEW_*_ENV
    image = tuple(image_env.split(" ")) if image_env else None
    user = os.environ.pop("OSB_MOCK_USER", "")
    workdir = os.environ.pop("OSB_MOCK_WORKDIR", "")
    try:
        if mode == "holder":
            loopback_up(os.environ.pop("OSB_MOCK_NET_ADDR", ""))
        build_view(R, H, X, E, fresh_proc=(mode == "holder"), image=image)
        if V:  # view_volumes.py beside this file (read before the pivot), only for a sandbox with volumes
            vol: dict[str, Any] = {}
            with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "view_volumes.py"), "rb") as fh:
                exec(compile(fh.read(), "view_volumes.py", "exec"), vol)
            vol["mount_volumes"](R, V, mount, ro_tree, MS_BIND, MS_REC)
        if mode == "holder" and agent_fd == IDLE and agent_py:
            bind_agent(R, agent_py)  # a small host binary that only blocks (no channel, no program)
        elif mode == "holder" and agent_fd.isdigit() and agent_py:
            with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "agent.py"), "rb") as fh:
                agent_src = fh.read()
            bind_agent(R, agent_py)
        pivot(R)
        if JOINING is not None:
            JOINING.wait()
        if mode == "holder" and workdir:  # runc makes a missing cwd, owned by root
            os.makedirs(workdir, 0o755, exist_ok=True)
            os.chdir(workdir)
    except OSError as e:
        fail("osb-view: %s" % e)
    if mode == "holder":
        os.write(fifo, b"pid %d\n" % host_pid)
        os.close(fifo)  # EOF for the mock: the view is built
        if agent_fd == IDLE and agent_py:
            # the idle execd (root: `cat`) reads fd 4 of bootstrap.sh as its stdin and keeps the
            # write end (fd 5) itself: its read blocks for as long as the sandbox lives
            pipe = os.pipe()
            high = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10) for fd in pipe]  # never dup2 one onto the other
            for fd in pipe:
                os.close(fd)
            for i, fd in enumerate(high):
                os.dup2(fd, 4 + i)  # fd 4 the read end, fd 5 the write end; inheritable
                os.close(fd)
        elif agent_src is not None:
            if int(agent_fd) != 3:
                os.dup2(int(agent_fd), 3)
                os.close(int(agent_fd))
            os.set_inheritable(3, True)  # bootstrap.sh hands it to execd only
            r, w = os.pipe()  # the agent's program, its stdin (fd 4 of bootstrap.sh)
            os.write(w, agent_src)
            os.close(w)
            if r != 4:
                os.dup2(r, 4)
                os.close(r)
            os.set_inheritable(4, True)
        argv = [
            BOOTSTRAP
        ] + argv  # its "#!/bin/sh" line: comm "bootstrap.sh", args "/bin/sh BOOTSTRAP ..." as Docker runs it
    else:
        try:
            os.chdir(arg)
        except OSError as e:
            fail("unshare: cannot change directory to %s: %s" % (arg, e.strerror), 1)
    err = seccomp["seccomp_install"](libc)  # before the drop: no_new_privs or CAP_SYS_ADMIN needed
    if err not in (0, 22):  # 22: no filter support here (probe.py says so)
        fail("osb-view: seccomp: %s" % os.strerror(err))
    drop_caps(mask, last, nnp)
    if user:
        pdeath = ctypes.c_int(0)
        libc.prctl(2, ctypes.byref(pdeath), 0, 0, 0)  # PR_GET_PDEATHSIG: a new uid clears it
        drop_user(user)
        if pdeath.value:
            libc.prctl(1, pdeath.value, 0, 0, 0)  # PR_SET_PDEATHSIG: PID 1 still dies with its parent
    restore_env()
    for s in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(s, signal.SIG_DFL)
    try:
        try:
            os.execvp(argv[0], argv)
        except PermissionError:
            if mode != "holder":
                raise
            os.execv("/bin/sh", ["/bin/sh"] + argv)  # a root on a noexec mount: the shell reads the script
    except OSError as e:
        if mode == "holder":  # runc's words in the container's log, exit 1 (live: an image without /bin/sh)
            fail("exec %s: %s" % (argv[0], (e.strerror or "").lower()), 1)
        fail("unshare: failed to execute %s: %s" % (argv[0], e.strerror), 127 if e.errno == 2 else 126)


if __name__ != "__osb_view_lib__":  # scripts/osb_zygote.py loads it as a library
    main()
