# A sandbox's forker: one Python process per sandbox where no thread of the mock can enter it (cgroup v2, whose
# threads cannot leave their process's cgroup; a non-root mock, whose threads cannot enter a user namespace;
# OSB_MOCK_CONTAINED=0), started by runtime/forker.py on the sandbox's first command as `python -I -S
# osb_forker.py SOCKFD MOCKPID PID1 CAPMASK NNP PROCS IDLE`. It does once what each command's stages did: it joins the
# sandbox's cgroups (PROCS: the cgroup.procs files, "\n"-separated, "-" for none; a move costs an RCU grace period,
# paid here once), enters PID 1's user (when it is not ours), network (when it has its own), mount, IPC and UTS
# namespaces and makes the PID namespace its children's, installs the sandbox's seccomp filter (seccomp.py) and
# drops to the sandbox's capability set with no_new_privs. Then, per request (JSON plus the fds [stdin, stdout,
# stderr] over a SOCK_SEQPACKET socket), it starts the command: by posix_spawn (a vfork, in the command's directory,
# its own process group or, for a PTY shell, session with its terminal opened by its path inside) as its own child,
# answering {"pid": HOSTPID, "relay": 1} and later {"exit": HOSTPID, "status": CODE} when it reaps it, or
# {"errno": N, "start": 1} when the chdir or the exec failed; for another user (or a terminal to take with
# TIOCSCTTY) it clones it with CLONE_PARENT - the mock's own child, which waits for it - and the child sets its
# fds, session, identity and directory and execs it: {"pid": HOSTPID} once the exec succeeded, {"pid": HOSTPID,
# "errno": N} when it could not (it exits 127; the mock reaps it), {"errno": N, "clone": 1} when the clone failed
# (EAGAIN at the pids limit). {"errno": N, "error": TEXT}: the request was refused. The first message is
# {"ready": 1} or the setup's {"errno", "error"}.
# The forker ends at EOF, after IDLE seconds without a request and with no child of its own running (an idle
# sandbox costs no process; the mock's next send fails and it starts another), or with the mock
# (PR_SET_PDEATHSIG). The shell form's LookPath is lookpath.py's, the spawn spawn.py's (glibc's posix_spawn by
# ctypes: glibc's own two signals at their defaults), loaded like seccomp.py. Written by the OpenSandbox
# mock; standard library only.
import _frozen_importlib_external as _ext
import _signal as signal  # the C module: `signal` would import enum
import array  # noqa: F401 - socket.recv_fds/send_fds import it lazily: after setns the stdlib may be gone
import ctypes
import fcntl
import json
import os
import select
import socket
import sys
import termios
import warnings  # noqa: F401 - os.execvpe's PATH search imports it lazily: after setns the stdlib may be gone

TYPE_CHECKING = False  # (typing's is not imported; annotations are text)
if TYPE_CHECKING:
    from typing import Any, NoReturn

    from mock_opensandbox.runtime.scripts import lookpath, seccomp  # what the loaders below make of them
    from mock_opensandbox.runtime.scripts import spawn as spawnlib
else:
    seccomp = type(sys)("__osb_seccomp_lib__")
    seccomp.__file__ = __file__.rpartition("/")[0] + "/seccomp.py"
    _ext.SourceFileLoader(seccomp.__name__, seccomp.__file__).exec_module(seccomp)
    lookpath = type(sys)("__osb_lookpath_lib__")
    lookpath.__file__ = __file__.rpartition("/")[0] + "/lookpath.py"
    _ext.SourceFileLoader(lookpath.__name__, lookpath.__file__).exec_module(lookpath)
    spawnlib = type(sys)("__osb_spawn_lib__")
    spawnlib.__file__ = __file__.rpartition("/")[0] + "/spawn.py"
    _ext.SourceFileLoader(spawnlib.__name__, spawnlib.__file__).exec_module(spawnlib)

CLONE_PARENT, SIGCHLD, SIGKILL = 0x8000, 17, 9
PR_SET_PDEATHSIG, PR_CAPBSET_DROP, PR_CAP_AMBIENT, PR_SET_NO_NEW_PRIVS = 1, 24, 47, 38
# clone(2)'s number; its first argument is the flags everywhere but s390 (the rest are 0 here)
SYS_CLONE = {"x86_64": 56, "aarch64": 220, "riscv64": 220, "loongarch64": 220, "ppc64le": 120, "ppc64": 120}
SPACES = [("user", 0x10000000), ("net", 0x40000000), ("mnt", 0x00020000), ("ipc", 0x08000000), ("uts", 0x04000000)]
CLONE_NEWPID = 0x20000000
idle = 30.0  # seconds without a request before it ends (argv[7])
libc = ctypes.CDLL(None, use_errno=True)
_syscall = ctypes.PyDLL(None, use_errno=True).syscall  # the GIL stays held across the clone, as in os.fork()
_syscall.restype = ctypes.c_long
_py = ctypes.pythonapi


class CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _fail(what: str) -> "NoReturn":
    e = ctypes.get_errno() or 5
    raise OSError(e, "%s: %s" % (what, os.strerror(e)))


def enter(target: int, mask: int, nnp: bool, procs: "list[str]") -> None:
    """Everything a command of the sandbox is born with, done once to this (single-threaded) process."""
    with open("/proc/sys/kernel/cap_last_cap") as fh:
        last = int(fh.read())
    spawnlib.load()  # its libc lookups, before the mount namespace changes
    for path in procs:  # the host's cgroupfs: before the mount namespace changes
        fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
        try:
            os.write(fd, b"0")
        finally:
            os.close(fd)
    fds = []  # all opened first: once in the mount namespace, /proc is the sandbox's
    for name, flag in SPACES + [("pid", CLONE_NEWPID)]:
        theirs = "/proc/%d/ns/%s" % (target, name)
        if name in ("user", "net") and os.readlink(theirs) == os.readlink("/proc/self/ns/" + name):
            continue  # root: no user namespace of its own; a host-network sandbox shares ours
        fds.append((name, flag, os.open(theirs, os.O_RDONLY | os.O_CLOEXEC)))
    for name, flag, fd in fds:
        if libc.setns(fd, flag) != 0:
            _fail("setns(%s)" % name)
        os.close(fd)
    os.chdir("/")
    err = seccomp.seccomp_install(libc)
    if err not in (0, 22):  # 22: no filter support here (as the stages did)
        raise OSError(err, "seccomp: %s" % os.strerror(err))
    for cap in range(last + 1):
        if not mask >> cap & 1 and libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) != 0:
            _fail("PR_CAPBSET_DROP")
    libc.prctl(PR_CAP_AMBIENT, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
    hdr = CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (CapData * 2)()
    for i in (0, 1):
        data[i].effective = data[i].permitted = (mask >> (32 * i)) & 0xFFFFFFFF
    if libc.capset(ctypes.byref(hdr), data) != 0:
        _fail("capset")
    if nnp and libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        _fail("PR_SET_NO_NEW_PRIVS")


def child(req: "dict[str, Any]", fds: "list[int]", exe: "str | None", errpipe: int) -> "NoReturn":
    """The command's process between the clone and its exec; never returns. A failure writes its errno to
    ``errpipe`` (closed by a successful exec) and exits 127."""
    try:
        high = max([3, errpipe] + fds) + 1
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, high) for fd in fds]
        for target, fd in enumerate(moved):
            os.dup2(fd, target)  # inheritable
        os.closerange(3, errpipe)
        os.closerange(errpipe + 1, os.sysconf("SC_OPEN_MAX"))
        for s in (signal.SIGPIPE, signal.SIGXFSZ):  # Python ignores them; an exec keeps what is ignored
            signal.signal(s, signal.SIG_DFL)
        if req.get("ignore_sigint"):  # execd's ignored SIGINT, inherited (a PTY shell, a session's bash)
            signal.signal(signal.SIGINT, signal.SIG_IGN)
        if req["session"]:
            os.setsid()
        else:
            os.setpgid(0, 0)
        ctty = req.get("ctty")
        if ctty:  # the sandbox's /dev/pts/N by its path inside: a session leader's first terminal is its own
            fd = os.open(ctty, os.O_RDWR)
            os.dup2(fd, 0)
            os.close(fd)
        elif ctty is not None:  # a terminal from elsewhere: taken explicitly
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)
        user = req.get("user")
        if user is not None:
            os.setgroups(user[2])
            os.setgid(user[1])
            os.setuid(user[0])
        os.chdir(req["cwd"])
        if exe is not None:
            os.execve(exe, req["argv"], req["env"])
        os.execvpe(req["argv"][0], req["argv"], req["env"])  # the command's own PATH, as Popen searches it
    except OSError as e:
        code = e.errno or 5
    except BaseException:
        code = 5
    try:
        os.write(errpipe, b"%d" % code)
    finally:
        os._exit(127)


def check(req: "Any", fds: "list[int]") -> None:
    """The request's shape, before anything is cloned (ValueError: a bad request)."""

    def strs(xs: "Any") -> bool:
        return isinstance(xs, list) and all(isinstance(x, str) and "\0" not in x for x in xs)

    env = req.get("env") if isinstance(req, dict) else None
    user = req.get("user") if isinstance(req, dict) else None
    if not (
        isinstance(env, dict)
        and strs(list(env))
        and strs(list(env.values()))
        and strs(req.get("argv"))
        and req["argv"]
        and strs([req.get("cwd")])
        and (req.get("look") is None or strs([req["look"]]))
        and (req.get("ctty") is None or strs([req["ctty"]]))
        and isinstance(req.get("session"), bool)
        and isinstance(req.get("ignore_sigint", False), bool)
        and (user is None or isinstance(user, list) and len(user) == 3 and isinstance(user[2], list))
        and len(fds) == 3
    ):
        raise ValueError("argv, env, cwd, session and the fds [stdin, stdout, stderr] are required")


SIGDEF = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGCHLD)  # ignored or handled here
children: "set[int]" = set()  # the commands spawn_direct started: the forker's own, their exits go to the mock


def spawn_direct(req: "dict[str, Any]", fds: "list[int]", exe: "str | None") -> "dict[str, Any] | None":
    """The command by posix_spawn (a vfork: no copy of this process, ~0.1 ms), as this process's child, whose exit
    status is relayed to the mock ({"exit": PID, "status": CODE}); {"pid", "relay": 1}, {"errno", "start": 1} when
    it cannot start (its directory, its exec), or None where only the clone will do (another user; a terminal to
    take with TIOCSCTTY)."""
    ctty = req.get("ctty")
    if req.get("user") is not None or ctty == "":
        return None
    actions: "list[Any]" = [(os.POSIX_SPAWN_DUP2, fd, i) for i, fd in enumerate(fds)]
    if ctty:  # after setsid: a session leader's first terminal, opened by its path inside, is its own
        actions.append((os.POSIX_SPAWN_OPEN, 0, ctty, os.O_RDWR, 0))
    argv, env = req["argv"], req["env"]
    if exe is not None or "/" in argv[0]:
        paths = [exe or argv[0]]
    else:  # the command's own PATH, as Popen searches it
        paths = [os.path.join(d, argv[0]) for d in os.get_exec_path(env)]
    try:
        os.chdir(req["cwd"])  # (this process alone: the child starts there)
    except OSError as e:
        return {"errno": e.errno or 5, "start": 1}
    quiet = bool(req.get("ignore_sigint"))  # execd's ignored SIGINT, inherited: ignored here for the spawn
    sigdef = tuple(s for s in SIGDEF if not (quiet and s == signal.SIGINT))
    old_int = signal.signal(signal.SIGINT, signal.SIG_IGN) if quiet else None
    try:
        if spawnlib.load() is not None:  # glibc's own two signals at their defaults too (spawn.py)
            try:
                pid = spawnlib.spawn(
                    spawnlib.existing([os.fsencode(p) for p in paths]),
                    [os.fsencode(a) for a in argv],
                    [os.fsencode(k) + b"=" + os.fsencode(v) for k, v in env.items()],
                    fds,
                    session=bool(req["session"]),
                    ctty=os.fsencode(ctty) if ctty else None,
                    sigdef=tuple(int(s) for s in sigdef),
                    closefrom=spawnlib.has_closefrom,
                )
            except OSError as e:
                return {"errno": e.errno or 2, "start": 1}
            children.add(pid)
            return {"pid": pid, "relay": 1}
        first: "OSError | None" = None
        last: "OSError | None" = None
        for path in paths:  # no posix_spawn by ctypes here: os.posix_spawn's
            try:
                pid = os.posix_spawn(
                    path,
                    argv,
                    env,
                    file_actions=actions,
                    setsigdef=sigdef,
                    setsigmask=(),
                    **({"setsid": True} if req["session"] else {"setpgroup": 0}),
                )
            except (FileNotFoundError, NotADirectoryError) as e:
                last = e
                continue
            except OSError as e:
                last = e
                first = first or e
                continue
            children.add(pid)
            return {"pid": pid, "relay": 1}
        err = first or last
        return {"errno": (err.errno if err is not None else None) or 2, "start": 1}
    finally:
        os.chdir("/")
        if old_int is not None:
            signal.signal(signal.SIGINT, old_int)


def reap(sock: "socket.socket") -> None:
    """The exits of spawn_direct's commands, to the mock."""
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            children.clear()
            return
        if pid == 0:
            return
        if pid in children:
            children.discard(pid)
            sock.send(json.dumps({"exit": pid, "status": os.waitstatus_to_exitcode(status)}).encode())


def spawn(req: "Any", fds: "list[int]") -> "dict[str, Any]":
    check(req, fds)
    nr = SYS_CLONE.get(os.uname().machine)
    if nr is None:
        raise OSError(38, "clone: no system call number for %s here" % os.uname().machine)
    exe = None
    if req.get("look") is not None:  # the shell form: execd's getShell() and exec.Command's LookPath
        exe = lookpath.look_path("bash", req["look"])
        if exe is None:
            req["argv"][0], exe = "sh", lookpath.look_path("sh", req["look"]) or "sh"
    direct = spawn_direct(req, fds, exe)
    if direct is not None:
        return direct
    r, w = os.pipe2(os.O_CLOEXEC)
    try:
        _py.PyOS_BeforeFork()
        pid: int = _syscall(nr, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0)
        if pid == 0:
            _py.PyOS_AfterFork_Child()
            os.close(r)
            child(req, fds, exe, w)
        err = ctypes.get_errno()
        _py.PyOS_AfterFork_Parent()
        os.close(w)
        w = -1
        if pid < 0:
            return {"errno": err or 5, "clone": 1, "error": "clone: %s" % os.strerror(err)}
        data = b""
        while True:
            chunk = os.read(r, 64)
            if not chunk:
                break
            data += chunk
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    return {"pid": pid, "errno": int(data)} if data else {"pid": pid}


def main() -> None:
    sock_fd, mock, target = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    mask, nnp, procs = int(sys.argv[4], 16), sys.argv[5] == "1", [p for p in sys.argv[6].split("\n") if p != "-"]
    global idle
    idle = float(sys.argv[7])
    libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
    if os.getppid() != mock:
        os._exit(0)
    for name in os.listdir("/proc/self/fd"):  # a posix_spawn'd command inherits every fd without close-on-exec
        if int(name) > 2:
            try:
                os.set_inheritable(int(name), False)
            except OSError:
                pass
    sock = socket.socket(fileno=sock_fd)
    try:
        enter(target, mask, nnp, procs)
    except (OSError, ValueError) as e:
        sock.send(json.dumps({"errno": getattr(e, "errno", None) or 5, "error": str(e)}).encode())
        return
    sock.send(b'{"ready": 1}')
    wake_r, wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
    signal.set_wakeup_fd(wake_w, warn_on_full_buffer=False)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    poller = select.poll()
    poller.register(sock_fd, select.POLLIN)
    poller.register(wake_r, select.POLLIN)
    while True:
        ready = poller.poll(idle * 1000)  # (EINTR is retried: PEP 475)
        if not ready and not children:
            # idle: the mock's next send fails (EPIPE) and it starts another forker; a request sent before the
            # shutdown is still in the queue, and answered
            sock.shutdown(socket.SHUT_RD)
            sock.setblocking(False)
            try:
                msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 8)
            except OSError:
                return
            if msg:
                answer(sock, msg, fds)
            return
        for fd, _ in ready:
            if fd == wake_r:
                try:
                    while os.read(wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
                reap(sock)
                continue
            try:
                msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 8)
            except BlockingIOError:
                continue
            except OSError:
                return
            if not msg:
                return
            answer(sock, msg, fds)
        reap(sock)


def answer(sock: "socket.socket", msg: bytes, fds: "list[int]") -> None:
    try:
        for (
            fd
        ) in fds:  # never a posix_spawn'd command's (recv_fds drops its flags before Python 3.13: no MSG_CMSG_CLOEXEC)
            os.set_inheritable(fd, False)
        reply = spawn(json.loads(msg), fds)
    except OSError as e:
        reply = {"errno": e.errno or 5, "error": str(e)}
    except (ValueError, KeyError, TypeError, IndexError) as e:
        reply = {"errno": 22, "error": "bad request: %s" % e}
    finally:
        for fd in fds:
            os.close(fd)
    sock.setblocking(True)
    sock.send(json.dumps(reply).encode())


main()
