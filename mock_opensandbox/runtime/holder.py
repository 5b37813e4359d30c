"""A sandbox's namespace holder (its PID 1) and the ways a later command joins its namespaces.

The holder is PID 1 itself, cloned by the view's zygote as a child of the mock (root: zygote.py), or
``unshare [--user --map-root-user] --mount --ipc --uts --pid --fork --kill-child python -I -S
scripts/view.py holder ...``: view.py builds the sandbox view, pivots into it, reports PID 1's host pid
through a FIFO and becomes PID 1 (an init running the entrypoint) with the sandbox's capability set
and no_new_privs. Joining:

* ``direct`` (root): the spawning thread switches its ``pid_for_children`` to the sandbox's PID
  namespace (``setns``) for the one ``fork`` and the child runs ``nsenter --target=PID1 --mount
  --ipc --uts --wdns=WD -- setpriv OPTIONS -- ARGV``: entering the mount namespace makes the
  sandbox root "/", setpriv drops to the capability set and sets no_new_privs, then the command
  runs - the Popen child itself, in its own session and process group like execd's Setpgid.
* ``helper`` (non-root; entering a user namespace needs a single-threaded process): scripts/nsexec.py
  started with ``python -I -S`` enters the user, mount, IPC, UTS and PID namespaces, forks the
  command, drops the capabilities in the child and passes its exit status or fatal signal on.

The holder dies with the mock: it is forked by the lifeline thread (``lifeline_call``) with
PR_SET_PDEATHSIG = SIGKILL (``setpriv --pdeathsig KILL --`` in front of ``unshare`` where it can, so
Popen may vfork; else a preexec_fn), so when the mock process ends in any way (SIGKILL, a crash, an exit
without cleanup) the kernel kills ``unshare``, ``--kill-child`` kills PID 1 and with it every process
of the namespace. The kernel sends that signal when the *thread* that forked exits: a request thread
of the mock ends with its request, the lifeline thread only with the process.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Literal, Mapping, Sequence, TypeVar

from mock_opensandbox.runtime import caps, zygote
from mock_opensandbox.runtime import stages as scripts
from mock_opensandbox.runtime._util import (
    CLONE_NEWPID,
    children,
    is_child_init,
    kill_and_reap,
    open_in_root,
    proc_state,
    read_cmdline,
    read_lines,
    start_time,
)
from mock_opensandbox.runtime.forkjoin import fork_join, namespace_fds

HOLDER_READY_TIMEOUT = 15.0
BOOTSTRAP_PATH = "/opt/opensandbox/bootstrap.sh"  # the server's container: /opt/opensandbox/bootstrap.sh
AGENT_FD_ENV = "OSB_MOCK_AGENT_FD"  # view.py: which inherited fd becomes PID 1's fd 3 (the agent's channel)
AGENT_PY_ENV = "OSB_MOCK_AGENT_PY"  # view.py: the Python interpreter it binds at /opt/opensandbox/execd
AGENT_IDLE = "idle"  # AGENT_FD_ENV's value for an idle execd placeholder (no channel): view.py IDLE
PR_SET_PDEATHSIG = 1

_setns_fn: Any = None
_own_pidns: int | None = None
_T = TypeVar("_T")
_lifeline_lock = threading.Lock()
_lifeline: tuple[int, "queue.SimpleQueue[Any]"] | None = None  # (owner pid, work queue)
_prctl: Any = None


def _lifeline_loop(work: "queue.SimpleQueue[Any]") -> None:
    while True:
        fn, box, done = work.get()
        try:
            box.append((True, fn()))
        except BaseException as exc:  # handed back to the caller
            box.append((False, exc))
        done.set()


def lifeline_call(fn: Callable[[], _T]) -> _T:
    """fn() run in the lifeline thread: a daemon thread that lives as long as this process (one per
    process; a forked child starts its own)."""
    global _lifeline
    with _lifeline_lock:
        if _lifeline is None or _lifeline[0] != os.getpid():
            work: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
            threading.Thread(target=_lifeline_loop, args=(work,), name="osb-sandbox-lifeline", daemon=True).start()
            _lifeline = (os.getpid(), work)
        work = _lifeline[1]
    box: list[tuple[Literal[True], _T] | tuple[Literal[False], BaseException]] = []
    done = threading.Event()
    work.put((fn, box, done))
    done.wait()
    answer = box[0]
    if not answer[0]:
        raise answer[1]
    return answer[1]


def _die_with_parent(parent: int, then: Callable[[], None] | None = None) -> Callable[[], None]:
    """preexec_fn: SIGKILL when the forking thread (the lifeline) ends; at once when the parent is
    already gone (it died between fork and prctl). then: more preexec work (joining the sandbox's
    cgroups, cgroups.py) before the exec, so PID 1 is inside before it forks anything."""
    global _prctl
    if _prctl is None:
        _prctl = ctypes.CDLL(None, use_errno=True).prctl

    def preexec() -> None:
        _prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)
        if then is not None:
            then()

    return preexec


def setns_function() -> Any:
    """setns(2): os.setns on Python >= 3.12, libc through ctypes before."""
    global _setns_fn
    if _setns_fn is None:
        fn = getattr(os, "setns", None)
        if fn is None:
            libc = ctypes.CDLL(None, use_errno=True)
            raw = libc.setns
            raw.argtypes = [ctypes.c_int, ctypes.c_int]
            raw.restype = ctypes.c_int

            def fn(fd: int, nstype: int) -> None:
                if raw(fd, nstype) != 0:
                    e = ctypes.get_errno()
                    raise OSError(e, os.strerror(e))

        _setns_fn = fn
    return _setns_fn


def own_pidns_fd() -> int:
    """The mock process's own (active) PID namespace, to switch a thread back to."""
    global _own_pidns
    if _own_pidns is None:
        _own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    return _own_pidns


def write_bootstrap(root: str) -> None:
    """The mock's bootstrap.sh at /opt/opensandbox/bootstrap.sh of the sandbox root (0755), never
    through a symlink a sandbox process planted."""
    data = scripts.resource("bootstrap.sh").encode("utf-8")
    fd = open_in_root(root, BOOTSTRAP_PATH.lstrip("/"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o755)
    try:
        os.write(fd, data)
        os.fchmod(fd, 0o755)
    finally:
        os.close(fd)


DOCKERENV = ".dockerenv"  # moby daemon/initlayer: an empty 0755 file in every container's init layer


def write_dockerenv(root: str) -> None:
    """Docker's ``/.dockerenv`` in the sandbox root: empty, 0755, made with the container (its init layer, under
    the writable one: code inside may remove it; a snapshot does not take it, images/commit.py). Never
    through a symlink; one that is there already stays. Raises OSError."""
    try:
        fd = open_in_root(root, DOCKERENV, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o755)
    except FileExistsError:
        return
    try:
        os.fchmod(fd, 0o755)
    finally:
        os.close(fd)


def await_children(pid: int, want: int, timeout: float) -> None:
    """Wait (bounded) until PID 1 runs bootstrap.sh (view.py's exec of it may still be under way when the
    ready line came) and has ``want`` children that have exec'd (a fork of bootstrap.sh still shows PID 1's
    own cmdline), or PID 1 is gone: like Go's cmd.Start, create returns once the entrypoint runs, so a
    `ps` right after lists it and not a copy of the shell."""
    marker = BOOTSTRAP_PATH.encode() + b"\0"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        own = read_cmdline(pid)
        if own is None or (not own and proc_state(pid) in (b"Z", b"X", None)):
            return  # gone, or a zombie (an exec under way shows no cmdline for a moment too)
        if marker in own:
            lines = [read_cmdline(k) for k in children(pid)]
            if len([c for c in lines if c and c != own]) >= want:
                return
        time.sleep(0.0005)


def holder_prefix(unshare: str, net: bool = False) -> list[str]:
    cmd = [unshare]
    if os.geteuid() != 0:
        cmd += ["--user", "--map-root-user"]
    if net:  # a network namespace of the sandbox's own (netns.py)
        cmd += ["--net"]
    return cmd + ["--mount", "--ipc", "--uts", "--propagation", "private", "--pid", "--fork", "--kill-child"]


def _exited(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


class Holder:
    """A sandbox's main process: PID 1 of its PID namespace, owner of its mount, IPC and UTS (+ user)
    namespaces."""

    def __init__(self, proc: subprocess.Popen[bytes], pid: int, mode: str, implicit: bool):
        self.proc = proc  # PID 1 (zygote.Adopted), or the outer `unshare --fork` whose exit status is PID 1's
        self.pid = pid  # host pid of PID 1
        self.mode = mode  # "direct" (root: setns + fork, nsenter) | "helper" (scripts/nsexec.py)
        self.implicit = implicit  # started on first use, not by start_entrypoint()
        self.pidns_fd: int | None = None
        self.pidns_id = ""
        self.net: Any = None  # netns.SandboxNet when the sandbox has a network namespace of its own
        # an image's view has none of the host's tools (setpriv, env): commands join through nsexec.py
        # (the host's Python, loaded before it enters) as the image's user ("UID GID G1,G2" or "-")
        self.via_helper = False
        self.user = "-"
        self.ns_fds: list[tuple[int, int]] | None = None  # root + image: forkjoin.py's namespace fds
        self.contained: Any = None  # the thread inside it that forks its commands (contained.py)
        self.contained_tried = False
        self.forker: Any = None  # else the process inside it that does (forker.py), made on first use
        self.forker_tried = False
        self.start_time = start_time(pid)  # tells PID 1 from a later process reusing its pid
        self._stat_fd: int | None = None  # /proc/<PID 1>/stat, opened by alive() (closed by close())
        self._stat_fd_closed = False
        self._stat_lock = threading.Lock()
        self.unsettled = 0  # children of PID 1 that settle() still waits for
        try:
            if mode == "direct":
                self.pidns_fd = os.open("/proc/%d/ns/pid" % pid, os.O_RDONLY | os.O_CLOEXEC)
            self.pidns_id = os.readlink("/proc/%d/ns/pid" % pid)
        except OSError:
            if not _exited(proc, 2.0):
                raise
            # the entrypoint already ended and PID 1 with it: a stopped container (alive() is False)

    @classmethod
    def start(
        cls,
        unshare: str,
        root: str,
        hostname: str,
        argv: list[str],
        env: Mapping[str, str],
        mode: str,
        *,
        implicit: bool,
        stdout: Any,
        stderr: Any,
        timeout: float = HOLDER_READY_TIMEOUT,
        net: bool = False,
        volumes: str = "",
        join: Callable[[], None] | None = None,
        view_env: Mapping[str, str] | None = None,
        agent_fd: int | None = None,
        agent_python: str | None = None,
        execd: bool = False,
        idle_execd: str | None = None,
        pdeathsig_argv: Sequence[str] | None = None,
        joining: Any = None,
        intend: Callable[[str, str], Any] | None = None,
    ) -> tuple["Holder | None", str]:
        """Start the holder and wait until its namespaces are set up and PID 1 (bootstrap.sh) has
        started execd (when ``execd``) and the entrypoint, both exec'd. join: a preexec step run
        before the exec (the sandbox's cgroups); view_env: variables only view.py reads (it removes
        them before PID 1 runs). ``agent_fd`` (the agent's end of its channel) becomes fd 3 of PID 1
        and ``agent_python`` is bound at /opt/opensandbox/execd (the agent says hello on its channel
        a moment later: AgentChannel waits for that on its first call). ``idle_execd``: instead, a host
        binary bound there that only blocks (root: nothing needs a resident agent). (holder, "") or
        (None, why). ``pdeathsig_argv`` (``setpriv --pdeathsig KILL --``) with ``joining`` (a context
        the forking thread sits in for the fork, or None) instead of ``join``: no preexec_fn, so Popen
        can vfork instead of copying the whole mock (~10-15 ms of a create). On cgroup v1 the runtime
        passes neither: PID 1 moves itself in (OSB_MOCK_CGROUP_JOIN in view_env, view.py CgroupJoin)."""
        try:
            write_bootstrap(root)
        except OSError as exc:
            return None, f"cannot write the sandbox's bootstrap.sh: {exc}"
        safe_env = scripts.protect_view_env(env)
        for k in scripts.VIEW_ONLY_ENV:  # set by the mock alone, never by a request's env
            safe_env.pop(k, None)
        safe_env.update(view_env or {})
        if agent_fd is not None and agent_python:
            safe_env[AGENT_FD_ENV] = str(agent_fd)
            safe_env[AGENT_PY_ENV] = agent_python
        elif idle_execd:
            safe_env[AGENT_FD_ENV] = AGENT_IDLE
            safe_env[AGENT_PY_ENV] = idle_execd
        # readiness: a FIFO (a pipe fd number above 9 cannot be named in POSIX sh); the read end is
        # open before the holder starts, so its open for writing never blocks
        tmp = tempfile.gettempdir()
        if os.path.realpath(tmp).startswith(root.rstrip("/") + "/") and os.access("/tmp", os.W_OK):
            tmp = "/tmp"  # a stand-alone execd whose TMPDIR is the sandbox's: keep the FIFO out of it
        release = None
        if intend is None:
            fifo_dir = tempfile.mkdtemp(prefix="osb-holder-", dir=tmp)
        else:  # named and recorded first (janitor.Janitor.intend), then made: a restart (or the
            # janitor process, without a --root) finds it
            fifo_dir = os.path.join(tmp, "osb-holder-" + secrets.token_hex(8))
            release = intend("holder-dir", fifo_dir)
            os.mkdir(fifo_dir, 0o700)
        fifo = os.path.join(fifo_dir, "ready")
        proc: Any = None  # a subprocess.Popen, or a zygote.Adopted
        try:
            os.mkfifo(fifo, 0o600)
            r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                cmd = scripts.holder_argv(holder_prefix(unshare, net), root, fifo, hostname, argv, volumes)
                pass_fds = (agent_fd,) if agent_fd is not None else ()
                if pdeathsig_argv and join is None and joining is None and zygote.wanted():
                    # no setpriv, unshare or interpreter start: PID 1 forked from the zygote (zygote.py)
                    at = cmd.index(scripts.VIEW_PY) + 1
                    proc = zygote.spawn(
                        lifeline_call,
                        cmd[at:],
                        safe_env,
                        cwd=root,
                        fifo=fifo,
                        net=net,
                        stdout=stdout,
                        stderr=stderr,
                        pass_fds=pass_fds,
                    )
                if proc is None and pdeathsig_argv and join is None:
                    cmd = list(pdeathsig_argv) + cmd  # setpriv sets PR_SET_PDEATHSIG, then execs unshare

                    def fork() -> subprocess.Popen[bytes]:
                        with joining if joining is not None else contextlib.nullcontext():
                            return subprocess.Popen(
                                cmd,
                                cwd=root,
                                env=safe_env,
                                close_fds=True,
                                start_new_session=True,
                                stdin=subprocess.DEVNULL,
                                stdout=stdout,
                                stderr=stderr,
                                pass_fds=pass_fds,
                            )

                    proc = lifeline_call(fork)
                elif proc is None:
                    preexec = _die_with_parent(os.getpid(), join)
                    proc = lifeline_call(
                        lambda: subprocess.Popen(
                            cmd,
                            cwd=root,
                            env=safe_env,
                            close_fds=True,
                            start_new_session=True,
                            stdin=subprocess.DEVNULL,
                            stdout=stdout,
                            stderr=stderr,
                            preexec_fn=preexec,
                            pass_fds=pass_fds,
                        )
                    )
                lines = read_lines(r, 1, timeout, proc)
            finally:
                os.close(r)
        except OSError as exc:
            if proc is not None:
                kill_and_reap(proc)
            return None, f"the sandbox's PID namespace could not be set up: {exc}"
        finally:
            shutil.rmtree(fifo_dir, ignore_errors=True)
            if release is not None:
                release()
        pid = 0
        if len(lines) == 1 and lines[0].startswith("pid "):
            try:
                pid = int(lines[0][4:])
            except ValueError:
                pid = 0
        outer = os.getpid() if isinstance(proc, zygote.Adopted) else proc.pid  # PID 1's parent
        if isinstance(proc, zygote.Adopted) and pid != proc.pid:
            pid = 0  # a zygote's PID 1 is the process itself
        if pid > 1 and not is_child_init(pid, outer) and _exited(proc, 2.0):
            # both lines came, then the entrypoint ended at once and PID 1 with it (`true`): the
            # sandbox started and stopped, like a container whose main process exits right away
            return cls(proc, pid, mode, implicit), ""
        if pid <= 1 or not is_child_init(pid, outer):
            why = "no ready signal"
            kill_and_reap(proc)
            if proc.stderr is not None:
                try:
                    tail = proc.stderr.read().decode("utf-8", "replace").strip().splitlines()
                    why = tail[-1] if tail else why
                except (OSError, ValueError):
                    pass
                proc.stderr.close()
            return None, "the sandbox's PID namespace did not come up (exit %s: %s)" % (proc.returncode, why[:160])
        try:
            holder = cls(proc, pid, mode, implicit)
        except OSError as exc:
            kill_and_reap(proc)
            return None, f"cannot open the sandbox's PID namespace: {exc}"
        holder.unsettled = 2 if execd else 1  # PID 1 runs bootstrap.sh: execd first, then the entrypoint
        return holder, ""

    def settle(self) -> None:
        """Wait (once, bounded) until PID 1 runs bootstrap.sh and its execd and entrypoint have exec'd
        (await_children): start() leaves that to its caller, so the mock's own part of a start (the
        network, execd's listener) overlaps the sandbox's; every command and the create wait for it."""
        want, self.unsettled = self.unsettled, 0
        if want:
            await_children(self.pid, want, timeout=2.0)

    def alive(self) -> bool:
        """PID 1 runs and is not exiting (an exiting init waits for the mock to reap the processes it
        forked into the namespace - kernel zap_pid_ns_processes - and no fork can join any more)."""
        if self.proc.poll() is not None:
            return False
        try:
            with self._stat_lock:  # one fd, read again at offset 0 (not reaped yet: the pid is still PID 1's)
                if self._stat_fd is None and not self._stat_fd_closed:
                    self._stat_fd = os.open("/proc/%d/stat" % self.pid, os.O_RDONLY | os.O_CLOEXEC)
                if self._stat_fd is not None:
                    data = os.pread(self._stat_fd, 4096, 0)
                else:  # after close(): read once, keep nothing open
                    with open("/proc/%d/stat" % self.pid, "rb") as fh:
                        data = fh.read()
            fields = data.rsplit(b")", 1)[1].split()
            return fields[0] not in (b"Z", b"X") and not int(fields[6]) & 0x4  # PF_EXITING
        except (OSError, IndexError, ValueError):
            return False

    def gone(self) -> bool:
        """PID 1 has finished exiting: the whole namespace is empty (the kernel lets an exiting init
        go only after every other process of its namespace is reaped)."""
        try:
            with open("/proc/%d/stat" % self.pid, "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            return fields[0] in (b"Z", b"X") or int(fields[19]) != self.start_time
        except (OSError, IndexError, ValueError):
            return True

    def exit_text(self) -> str:
        rc = self.proc.poll()
        if rc is None:
            return "its main process (PID 1) has exited"
        if rc < 0:
            return "its main process (PID 1) was killed by signal %d" % -rc
        return "its main process (PID 1) exited with status %d" % rc

    @contextlib.contextmanager
    def children_inside(self) -> Any:
        """Direct mode: processes forked by this thread inside the block are born in the sandbox's PID
        namespace (setns(CLONE_NEWPID) changes only the calling thread's pid_for_children)."""
        if self.pidns_fd is None or (self.via_helper and not self.fork_joins):
            yield
            return
        setns = setns_function()
        setns(self.pidns_fd, CLONE_NEWPID)
        try:
            yield
        finally:
            setns(own_pidns_fd(), CLONE_NEWPID)

    def command(
        self, nsenter: str, setpriv: str, wd: str, argv: Sequence[str], env: Mapping[str, str]
    ) -> tuple[list[str], dict[str, str]]:
        """(argv, environment) that enter the holder's namespaces, drop the capabilities and run argv
        in wd; the wrappers see only the sanitized environment."""
        if self.fork_joins:  # the Popen child joins (forkjoin.py): no wrapper sees the environment
            return list(argv), dict(env)
        if self.mode == "direct" and not self.via_helper:
            safe, unsafe = scripts.split_env(env)
            net = ["--net"] if self.net is not None else []
            return (
                [nsenter, "--target=%d" % self.pid, "--mount", "--ipc", "--uts"]
                + net
                + ["--wdns=" + wd, "--"]
                + scripts.seccomp_stage("LC_CTYPE" in env)
                + [setpriv]
                + caps.setpriv_options()
                + ["--"]
                + scripts.env_stage(unsafe)
                + list(argv)
            ), safe
        # Python may add LC_CTYPE to its own environment (PEP 538 locale coercion): the helper drops
        # it again when the command's environment did not have it
        keep_lc = "1" if "LC_CTYPE" in env else "0"
        safe = scripts.protect_env(env)  # the helper's child restores them right before exec
        return [
            sys.executable,
            "-I",
            "-S",
            "-c",
            scripts.NSEXEC_PY,
            str(self.pid),
            wd,
            keep_lc,
            "%x" % caps.SANDBOX_CAP_MASK,
            "1" if caps.NO_NEW_PRIVILEGES else "0",
            self.user,
        ] + list(argv), safe

    def stages(self, cmd: list[str]) -> tuple[bool, set[bytes]]:
        """What the spawned process looks like before it runs the command: (the command is a child
        of the spawned process, the /proc cmdlines of the wrapper stages)."""
        raw = [a.encode("utf-8", "surrogateescape") for a in cmd]
        if self.fork_joins:
            return False, set()
        if (
            self.mode == "direct" and not self.via_helper
        ):  # nsenter ... -- setpriv ... -- [env K=V...] ARGV: each execs in place
            out = {b"\0".join(raw) + b"\0"}
            cut = raw.index(b"--") + 1
            out.add(b"\0".join(raw[cut:]) + b"\0")  # the seccomp stage, then setpriv
            out.add(b"\0".join(raw[cut + len(scripts.seccomp_stage()) :]) + b"\0")
            cut2 = raw.index(b"--", cut) + 1
            if raw[cut2 : cut2 + 1] == [scripts.ENV_STAGE.encode()]:
                out.add(b"\0".join(raw[cut2:]) + b"\0")
            return False, out
        return True, {b"\0".join(raw) + b"\0"}  # the helper's forked child, until it execs

    @property
    def fork_joins(self) -> bool:
        """Root + an image's view: commands join in the forked child itself (forkjoin.py)."""
        return self.via_helper and self.mode == "direct"

    def fork_join(
        self, wd: str, cgroup: Any, controlling_tty: bool, user: str | None = None
    ) -> tuple[Callable[[], None], Any]:
        if self.ns_fds is None:
            self.ns_fds = namespace_fds(self.pid, self.net is not None)
        return fork_join(self.ns_fds, wd, user or self.user, cgroup, controlling_tty)

    def kill(self) -> None:
        kill_and_reap(self.proc)
        self.close()

    def drop_forker(self) -> None:
        """The forker failed: it ends, and the sandbox's commands take the stages from now on."""
        forker, self.forker = self.forker, None
        self.forker_tried = True
        if forker is not None:
            forker.close()

    def close(self) -> None:
        contained, self.contained = self.contained, None
        if contained is not None:
            contained.stop()  # out of the sandbox's cgroups before they are removed
        self.drop_forker()
        net, self.net = self.net, None
        if net is not None:
            net.close()
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
        for fd, _ in self.ns_fds or ():
            os.close(fd)
        self.ns_fds = None
        if self.pidns_fd is not None:
            try:
                os.close(self.pidns_fd)
            except OSError:
                pass
            self.pidns_fd = None
        with self._stat_lock:
            stat_fd, self._stat_fd, self._stat_fd_closed = self._stat_fd, None, True
        if stat_fd is not None:
            os.close(stat_fd)
