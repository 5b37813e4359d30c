# Non-root: enter a sandbox's user, (network,) mount, IPC, UTS and PID namespaces (a fresh, single-threaded
# process may; the multithreaded mock may not), fork the command into them and wait for it. The
# child chdirs (entering the mount namespace made the sandbox root its "/"), drops to the sandbox's
# capability set (bounding, permitted, effective; inheritable and ambient empty), sets
# no_new_privs and execs. The helper shares the command's process group, so it ignores the
# job-control and termination signals the mock sends to that group and lets the command decide;
# it then exits with the command's status or dies of the same signal (SIGKILL included), so Popen
# sees what it would see for the command itself. Run as `python -I -S -c SOURCE target-pid wd
# keep-LC_CTYPE-flag capability-mask-hex no_new_privs-flag user command...` (user: "UID GID G1,G2" after
# the drop, "-" to stay root; an image's User, ../rootfs.py). As root the user namespace is our own: not entered.
import _signal as signal  # the C module: `signal` would import enum (~5 ms per command)
import ctypes
import errno
import os
import sys
import warnings  # noqa: F401 - os.execvp imports it lazily: after setns the stdlib may be gone

TYPE_CHECKING = False  # (typing's is not imported: it costs every command; annotations are text)
if TYPE_CHECKING:
    from typing import NoReturn

    from mock_opensandbox.runtime.scripts.seccomp import seccomp_install  # prepended at run time (scripts.NSEXEC_PY)


def fail(msg: str, code: int) -> "NoReturn":
    try:
        os.write(2, msg.encode("utf-8", "replace") + b"\n")
    finally:
        os._exit(code)


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_caps(libc: "ctypes.CDLL", mask: int, last: int, nnp: bool) -> None:
    for cap in range(last + 1):
        if not mask >> cap & 1 and libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
            fail("setpriv: PR_CAPBSET_DROP failed: %s" % os.strerror(ctypes.get_errno()), 127)
    libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL
    hdr = CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (CapData * 2)()
    for i in (0, 1):
        data[i].effective = data[i].permitted = (mask >> (32 * i)) & 0xFFFFFFFF
    if libc.capset(ctypes.byref(hdr), data) != 0:
        fail("setpriv: capset failed: %s" % os.strerror(ctypes.get_errno()), 127)
    if nnp and libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
        fail("setpriv: PR_SET_NO_NEW_PRIVS failed: %s" % os.strerror(ctypes.get_errno()), 127)


def main() -> None:
    target, wd, keep_lc, mask = int(sys.argv[1]), sys.argv[2], sys.argv[3] == "1", int(sys.argv[4], 16)
    nnp, user, argv = sys.argv[5] == "1", sys.argv[6], sys.argv[7:]
    if not keep_lc:
        os.environ.pop("LC_CTYPE", None)
    with open("/proc/sys/kernel/cap_last_cap") as fh:
        last = int(fh.read())
    libc = ctypes.CDLL(None, use_errno=True)
    fds: list[tuple[str, int, int]] = []  # all opened first: once in the mount namespace, /proc is the sandbox's
    spaces = [("user", 0x10000000), ("mnt", 0x00020000), ("ipc", 0x08000000), ("uts", 0x04000000), ("pid", 0x20000000)]
    try:  # the sandbox's own network namespace, when it has one (a host-network sandbox shares ours)
        if os.readlink("/proc/%d/ns/net" % target) != os.readlink("/proc/self/ns/net"):
            spaces.insert(1, ("net", 0x40000000))
    except OSError as e:
        fail("nsenter: cannot open /proc/%d/ns/net: %s" % (target, e.strerror), 1)
    try:  # root: PID 1 has no user namespace of its own (a setns to our own fails)
        if os.readlink("/proc/%d/ns/user" % target) == os.readlink("/proc/self/ns/user"):
            spaces.pop(0)
    except OSError as e:
        fail("nsenter: cannot open /proc/%d/ns/user: %s" % (target, e.strerror), 1)
    for name, flag in spaces:
        try:
            fds.append((name, flag, os.open("/proc/%d/ns/%s" % (target, name), os.O_RDONLY | os.O_CLOEXEC)))
        except OSError as e:
            fail("nsenter: cannot open /proc/%d/ns/%s: %s" % (target, name, e.strerror), 1)
    for name, flag, fd in fds:
        if libc.setns(fd, flag) != 0:
            fail("nsenter: reassociate to namespace '%s' failed: %s" % (name, os.strerror(ctypes.get_errno())), 1)
        os.close(fd)
    sigs = [
        signal.SIGHUP,
        signal.SIGINT,
        signal.SIGQUIT,
        signal.SIGTERM,
        signal.SIGUSR1,
        signal.SIGUSR2,
        signal.SIGALRM,
    ]
    signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        pid = os.fork()
    except OSError as e:
        fail("unshare: fork failed: %s" % e.strerror, 1)
    if pid == 0:
        for s in sigs + [signal.SIGPIPE, signal.SIGXFSZ]:
            signal.signal(s, signal.SIG_DFL)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG, like unshare --kill-child
        signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs)
        try:
            os.chdir(wd)
        except OSError as e:
            fail("unshare: cannot change directory to %s: %s" % (wd, e.strerror), 1)
        err = seccomp_install(libc)  # seccomp.py, prepended (scripts.NSEXEC_PY)
        if err not in (0, 22):
            fail("setpriv: seccomp: %s" % os.strerror(err), 127)
        drop_caps(libc, mask, last, nnp)
        if user != "-":
            uid, gid, groups = user.split(" ")
            try:
                os.setgroups([int(g) for g in groups.split(",")] if groups != "-" else [])
                os.setgid(int(gid))
                os.setuid(int(uid))
            except OSError as e:
                fail("setpriv: cannot become %s: %s" % (uid, e.strerror), 127)
        for k in [k for k in os.environ if k.startswith("OSB_MOCK_UNSAFE_")]:  # scripts.HELPER_ENV_PREFIX
            os.environ[k[16:]] = os.environ.pop(k)
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            fail("unshare: failed to execute %s: %s" % (argv[0], e.strerror), 127 if e.errno == errno.ENOENT else 126)
    for s in sigs:
        signal.signal(s, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        s = os.WTERMSIG(status)
        if s not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(s, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [s])
        os.kill(os.getpid(), s)
        os._exit(128 + s)
    os._exit(os.waitstatus_to_exitcode(status))


main()
