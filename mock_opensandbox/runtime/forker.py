"""A sandbox's forker (scripts/osb_forker.py), the mock's side: containment paid once per sandbox where no thread
of the mock can enter the sandbox (contained.py needs root and cgroup v1: a cgroup v2 thread cannot leave its
process's cgroup, and only a single-threaded process may enter a user namespace, so a non-root mock cannot).

Each command there went through a chain of stages - ``nsenter ... -- python3 -I -S -c SECCOMP_STAGE setpriv ...``
as root, a cgroup v2 join stage, or ``python3 -I -S -c NSEXEC_PY`` as non-root - an interpreter start and a cgroup
move (an RCU grace period) per command, 14-24 ms here. The forker makes them once: it joins the cgroups, enters
the namespaces, installs the seccomp filter and drops the capabilities, and then starts each command by
posix_spawn (a vfork; the command is the forker's child, whose exit status the forker sends back: ``_Relay``), or,
for another user, clones it with CLONE_PARENT (the mock's own child); either way a Popen waits for it and signals it
(``ForkedPopen``), and it runs with the same filter, capability set, no_new_privs, namespaces, cgroups, view and
identity as the stages gave it.

One forker per sandbox, started on its first command by the lifeline thread (holder.lifeline_call: it dies with
the mock, PR_SET_PDEATHSIG) and ended with the sandbox (``close``: EOF), or by itself after ``IDLE`` seconds
without a command (~5.4 MiB PSS, 11.6 MiB RSS here: an idle sandbox keeps none; the next command starts another,
~20 ms). It is a task of the sandbox's cgroups (``pids.current`` counts it, like the contained thread and runc's
exec init; what it allocates after joining is charged to the sandbox's memory, as execd's is live) and invisible
inside (it is outside the PID namespace, whose processes it only forks). When it cannot start or answer, ``spawn``
raises ForkerError and the caller takes the stages, for that sandbox from then on (``OSB_MOCK_FORKER=0``: always,
the A/B). Standard library only.
"""

from __future__ import annotations

import _thread
import errno
import json
import os
import queue
import socket
import subprocess
import threading
from typing import Any, Callable, Sequence

from mock_opensandbox.runtime import caps
from mock_opensandbox.runtime import stages as scripts
from mock_opensandbox.runtime._util import ChildPopen
from mock_opensandbox.runtime.zygote import launch_helper

FORKER_PY = os.path.join(scripts.SCRIPTS_DIR, "osb_forker.py")
FORKER_ENV = "OSB_MOCK_FORKER"  # "0": every command through its stages
IDLE = 30.0  # seconds without a command before a forker ends (an idle sandbox then costs no process)


def wanted() -> bool:
    return os.environ.get(FORKER_ENV, "1") != "0"


class ForkerError(OSError):
    """The forker could not start or answer (the caller takes the stages)."""


class Forker:
    """One sandbox's forker process and the socket to it; ``spawn`` is serialized."""

    def __init__(
        self, launch: Callable[[Callable[[], Any]], Any], pid1: int, procs: Sequence[str], idle: float | None = None
    ):
        self._how = (launch, pid1, list(procs), IDLE if idle is None else idle)
        self._lock = threading.Lock()
        self.restarts = 0
        self.sock, self.proc = self._start()

    def _start(self) -> tuple[socket.socket, subprocess.Popen[bytes]]:
        """A forker process, and its reader (``_Relay``: answers to this object, exits to their Popens)."""
        sock, proc = self._launch()
        self._gen = _Relay()
        _thread.start_new_thread(self._gen.read, (sock,))
        return sock, proc

    def _launch(self) -> tuple[socket.socket, subprocess.Popen[bytes]]:
        launch, pid1, procs, idle = self._how
        mine, proc = launch_helper(
            launch,
            FORKER_PY,
            lambda fd: [
                str(fd),
                str(os.getpid()),
                str(pid1),
                "%x" % caps.SANDBOX_CAP_MASK,
                "1" if caps.NO_NEW_PRIVILEGES else "0",
                "\n".join(procs) or "-",
                repr(float(idle)),
            ],
        )
        try:
            mine.settimeout(30.0)  # a first start on a loaded machine; it answers in ~20 ms here
            hello = json.loads(mine.recv(1 << 16) or b"{}")
            mine.settimeout(None)
        except (OSError, ValueError) as exc:
            _end(mine, proc)
            raise ForkerError(5, "the forker did not start: %s" % exc) from exc
        if hello.get("ready") != 1:
            _end(mine, proc)
            raise ForkerError(int(hello.get("errno") or 5), "the forker could not enter: %s" % hello.get("error"))
        return mine, proc

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str],
        cwd: str,
        stdin: Any,
        stdout: Any,
        stderr: Any,
        user: tuple[int, int, list[int]] | None = None,
        look: str | None = None,
        ctty: str | None = None,
        ignore_sigint: bool = False,
    ) -> subprocess.Popen[bytes]:
        """The command, started in the sandbox in a process group of its own (``look``: the shell form's LookPath
        on that PATH, as the contained thread does; ``ignore_sigint``: it starts with SIGINT ignored, as a process
        execd starts outside a command run), as a Popen whose child the forker made. Raises OSError as
        Popen would for a command that cannot run (the child's errno), and ForkerError when the forker failed
        (the caller takes the stages)."""
        return ForkedPopen(
            self,
            (look, user, ctty, ignore_sigint),
            list(argv),
            cwd=cwd,
            env=env,
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
        )

    def request(
        self, argv: list[str], env: dict[str, str], cwd: str, fds: list[int], extra: tuple[Any, ...]
    ) -> tuple[int, _Relay | None]:
        """One command started by the forker with ``fds`` as its stdin, stdout and stderr: its pid, and the relay
        of its exit when it is the forker's child (posix_spawn), None when it is the mock's (the clone). ``extra``:
        (look, user, ctty, ignore_sigint) of ``spawn``."""
        look, user, ctty, ignore_sigint = extra
        req = {
            "argv": argv,
            "look": look,
            "env": env,
            "cwd": cwd,
            # the forker leads a session of its own, with no terminal to reach: a group; a PTY shell leads its own
            "session": ctty is not None,
            "ctty": ctty,
            "ignore_sigint": ignore_sigint,
            "user": [user[0], user[1], list(user[2])] if user is not None else None,
        }
        msg = json.dumps(req).encode()
        with self._lock:
            try:
                socket.send_fds(self.sock, [msg], fds)
            except OSError as exc:
                if exc.errno not in (errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.ECONNREFUSED):
                    raise ForkerError(exc.errno or 5, "the forker did not take a request: %s" % exc) from exc
                # it ended (idle, or killed) before it took the request: another one, once
                _end(self.sock, self.proc)
                self.sock, self.proc = self._start()
                self.restarts += 1
                try:
                    socket.send_fds(self.sock, [msg], fds)
                except OSError as exc2:
                    raise ForkerError(exc2.errno or 5, "the forker did not take a request: %s" % exc2) from exc2
            gen = self._gen
            answer = gen.answers.get()
        if answer is None:  # it took the request and died without an answer: the command failed to start, as far
            # as anyone knows (not run again through the stages); the next request starts another forker
            raise OSError(errno.EIO, "the sandbox's forker ended")
        pid = answer.get("pid")
        if "errno" in answer:
            if isinstance(pid, int) and pid > 1:  # the child could not exec; it exited 127
                try:
                    os.waitpid(pid, 0)
                except ChildProcessError:
                    pass
                err = int(answer["errno"])
                raise OSError(err, os.strerror(err))
            if answer.get("clone") or answer.get("start"):  # the fork failed (EAGAIN at the pids limit, ENOMEM once
                # PID 1 is gone), or the exec or the chdir did (posix_spawn): the command's start failure
                err = int(answer["errno"])
                raise OSError(err, os.strerror(err))
            raise ForkerError(int(answer["errno"]), str(answer.get("error")))
        if not isinstance(pid, int) or pid <= 1:
            raise ForkerError(5, "the forker answered %r" % (answer,))
        return pid, (gen if answer.get("relay") else None)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        with self._lock:
            _end(self.sock, self.proc)


class _Relay:
    """What one forker process sends: answers, in order, to ``answers`` (None once it has ended), and the exit
    status of each command it started as its own child to that command's Popen (an exit may come before the
    Popen is registered: kept until it is). When the forker ends, its children's statuses are lost: their Popens
    get 255, as Popen reports a child reaped elsewhere."""

    def __init__(self) -> None:
        self.answers: queue.SimpleQueue[dict[str, Any] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._procs: dict[int, ForkedPopen] = {}
        self._early: dict[int, int] = {}
        self._ended = False

    def read(self, sock: socket.socket) -> None:
        try:
            while True:
                try:
                    data = sock.recv(1 << 16)
                except OSError:
                    data = b""
                if not data:
                    return
                msg = json.loads(data)
                if "exit" in msg:
                    self._exited(int(msg["exit"]), int(msg["status"]))
                else:
                    self.answers.put(msg)
        finally:
            self.answers.put(None)
            with self._lock:
                self._ended = True
                lost, self._procs = list(self._procs.values()), {}
            for proc in lost:
                proc._relayed(255)

    def register(self, pid: int, proc: ForkedPopen) -> None:
        with self._lock:
            rc = self._early.pop(pid, None)
            if rc is None and not self._ended:
                self._procs[pid] = proc
                return
        proc._relayed(255 if rc is None else rc)

    def _exited(self, pid: int, rc: int) -> None:
        with self._lock:
            proc = self._procs.pop(pid, None)
            if proc is None:
                self._early[pid] = rc
                return
        proc._relayed(rc)


def _end(sock: socket.socket, proc: subprocess.Popen[bytes]) -> None:
    try:  # EOF both ways: it exits, and the reader's recv returns (a close alone would wait for that recv)
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:  # pragma: no cover - it exits at EOF
        proc.kill()
        proc.wait()


class ForkedPopen(ChildPopen):
    """A Popen whose child the forker starts: Popen's own handling of the pipes, the wait, the signals and
    ``communicate``; only the fork and exec (``_start``) are the forker's."""

    def __init__(self, forker: Forker, extra: tuple[Any, ...], args: list[str], **kw: Any):
        self._forker_call = (forker, extra)
        self._relay: threading.Event | None = None  # set: the forker's child, whose exit the forker relays
        super().__init__(args, close_fds=True, **kw)

    def _relayed(self, rc: int) -> None:
        if self.returncode is None:
            self.returncode = rc
        assert self._relay is not None
        self._relay.set()

    def _internal_poll(self, *args: Any, **kw: Any) -> int | None:
        if self._relay is None:
            rc: int | None = super()._internal_poll(*args, **kw)  # type: ignore[misc]
            return rc
        return self.returncode

    def _wait(self, timeout: float | None) -> int:
        if self._relay is None:
            rc: int = super()._wait(timeout)  # type: ignore[misc]
            return rc
        if not self._relay.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def _start(
        self, args: list[str], executable: str | None, cwd: str | None, env: dict[str, str], fds: list[int]
    ) -> None:
        forker, extra = self._forker_call
        assert cwd is not None  # (Forker.spawn always gives one)
        self.pid, relay = forker.request(args, env, cwd, fds, extra)
        self._child_created = True
        if relay is not None:
            self._relay = threading.Event()
            relay.register(self.pid, self)
