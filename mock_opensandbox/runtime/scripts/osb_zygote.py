# The view's zygote: one Python process per mock (`python -I -S osb_zygote.py SOCKFD MOCKPID`, started by
# runtime/zygote.py) that has view.py loaded and forks each sandbox's PID 1 from there, so a sandbox start pays
# no interpreter start (~10 ms here) and no `setpriv` or `unshare` process. Per request (JSON plus the fds
# [stdin, stdout, stderr, *pass] over a SOCK_SEQPACKET socket) it makes a PID namespace (unshare(CLONE_NEWPID)
# changes only whom it forks next) and clones with CLONE_PARENT: the child is PID 1 of that namespace and a
# child of the mock itself, which waits for it and kills it like any process it started. The child does what
# `setpriv --pdeathsig KILL -- unshare --mount --ipc --uts [--net] --propagation private --pid --fork` did,
# then runs view.py's main(): the view, the FIFO's "pid" line, the exec of bootstrap.sh. It also becomes a
# session leader, as runc makes a container's init (live: PID 1's session and group are 1). The answer is
# {"pid": HOSTPID} or {"errno": N, "error": TEXT}. The zygote ends at EOF or with the mock (PR_SET_PDEATHSIG).
# Written by the OpenSandbox mock; standard library only.
import _frozen_importlib_external as _ext
import ctypes
import fcntl
import json
import os
import socket
import sys
import traceback

TYPE_CHECKING = False  # (typing's is not imported; annotations are text)
if TYPE_CHECKING:
    from typing import Any, NoReturn

    from mock_opensandbox.runtime.scripts import view  # what the loader below makes of view.py
else:
    view = type(sys)("__osb_view_lib__")  # view.py runs main() only when it is not this module
    view.__file__ = __file__.rpartition("/")[0] + "/view.py"
    _ext.SourceFileLoader(view.__name__, view.__file__).exec_module(view)


CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWNET, CLONE_NEWPID = (
    0x20000,
    0x4000000,
    0x8000000,
    0x40000000,
    0x20000000,
)
CLONE_PARENT, SIGCHLD, SIGKILL = 0x8000, 17, 9
NS_FLAGS = CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWNET  # what a request may ask for
PR_SET_PDEATHSIG = 1
MS_REC, MS_PRIVATE = 16384, 1 << 18
# clone(2)'s number; its first argument is the flags everywhere but s390 (the rest are 0 here)
SYS_CLONE = {"x86_64": 56, "aarch64": 220, "riscv64": 220, "loongarch64": 220, "ppc64le": 120, "ppc64": 120}
libc = view.libc
_syscall = ctypes.PyDLL(None, use_errno=True).syscall  # the GIL stays held across the clone, as in os.fork()
_syscall.restype = ctypes.c_long
_py = ctypes.pythonapi


def child(req: "dict[str, Any]", fds: "list[int]") -> "NoReturn":
    """PID 1 before view.py's main(); never returns."""
    try:
        targets = [0, 1, 2] + list(req["pass"])
        high = max(targets + fds) + 1
        moved = [fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, high) for fd in fds]
        for fd in fds:
            os.close(fd)
        for target, fd in zip(targets, moved, strict=True):
            os.dup2(fd, target)  # inheritable, like Popen's pass_fds
            os.close(fd)
        keep = sorted(set(targets))
        for lo, hi in zip([-1] + keep, keep + [os.sysconf("SC_OPEN_MAX")], strict=True):
            if lo + 1 < hi:  # closerange(n, n) would close from n on
                os.closerange(lo + 1, hi)
        join = [p for p in req["env"].get("OSB_MOCK_CGROUP_JOIN", "").split("\n") if p]
        view.JOINING = view.CgroupJoin(join) if join else None  # now: the move overlaps the rest
        os.setsid()
        libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
        # the mock's FIFO has a reader while the mock waits: none (ENXIO) = it died before the line above.
        # Held open until the exec (a close here would be an EOF the mock reads before the "pid" line)
        os.open(req["fifo"], os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # the exec closes it
        if libc.unshare(req["ns"] & NS_FLAGS) != 0:
            raise OSError(ctypes.get_errno(), "unshare")
        view.mount(None, "/", None, MS_REC | MS_PRIVATE)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        sys.argv = [view.__file__] + list(req["args"])
        view.main()  # execs bootstrap.sh, or exits with a message on fd 2
    except BaseException:
        try:
            os.write(2, ("osb-view: %s" % traceback.format_exc(limit=3)).encode("utf-8", "replace"))
        finally:
            os._exit(125)
    os._exit(125)


def check(req: "Any", fds: "list[int]") -> None:
    """The request's shape, before anything is cloned (ValueError: a bad request)."""

    def strs(xs: "Any") -> bool:
        return isinstance(xs, list) and all(isinstance(x, str) and "\0" not in x for x in xs)

    env = req.get("env") if isinstance(req, dict) else None
    if not (
        isinstance(env, dict)
        and strs(list(env))
        and strs(list(env.values()))
        and strs(req.get("args"))
        and len(req["args"]) >= 9  # view.py: MODE R FIFO H X E MASK NNP V, then the entrypoint
        and strs([req.get("cwd"), req.get("fifo")])
        and isinstance(req.get("ns"), int)
        and not req["ns"] & ~NS_FLAGS
        and isinstance(req.get("pass"), list)
        and all(isinstance(n, int) and 2 < n < 1024 for n in req["pass"])
        and len(fds) == 3 + len(req["pass"])
    ):
        raise ValueError("args, env, cwd, fifo, ns, pass and the fds [stdin, stdout, stderr, *pass] are required")


def spawn(req: "Any", fds: "list[int]", own_pidns: int) -> int:
    check(req, fds)
    nr = SYS_CLONE.get(os.uname().machine)
    if nr is None:
        raise OSError(38, "clone: no system call number for %s here" % os.uname().machine)
    if libc.unshare(CLONE_NEWPID) != 0:
        raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWPID)")
    try:
        _py.PyOS_BeforeFork()
        pid: int = _syscall(nr, CLONE_PARENT | SIGCHLD, 0, 0, 0, 0)
        if pid == 0:
            _py.PyOS_AfterFork_Child()
            child(req, fds)
        err = ctypes.get_errno()
        _py.PyOS_AfterFork_Parent()
    finally:
        if libc.setns(own_pidns, CLONE_NEWPID) != 0:  # the next fork would land in that namespace: stop
            os._exit(3)
    if pid < 0:
        raise OSError(err, "clone")
    return pid


def main() -> None:
    sock_fd, mock = int(sys.argv[1]), int(sys.argv[2])
    libc.prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0)
    if os.getppid() != mock:
        os._exit(0)
    sock = socket.socket(fileno=sock_fd)
    own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    while True:
        try:
            msg, fds, _, _ = socket.recv_fds(sock, 1 << 20, 16)
        except OSError:
            return
        if not msg:
            return
        try:
            answer: dict[str, int | str] = {"pid": spawn(json.loads(msg), fds, own_pidns)}
        except OSError as e:
            answer = {"errno": e.errno or 5, "error": str(e)}
        except (ValueError, KeyError, TypeError) as e:
            answer = {"errno": 22, "error": "bad request: %s" % e}
        finally:
            for fd in fds:
                os.close(fd)
        sock.send(json.dumps(answer).encode())


main()
