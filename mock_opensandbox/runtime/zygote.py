"""The view's zygote (scripts/osb_zygote.py), the mock's side: a sandbox's PID 1 forked from a Python process
that already has view.py loaded, instead of ``setpriv --pdeathsig KILL -- unshare ... -- python view.py`` (an
interpreter start, ~10 ms here, and two more execs per sandbox start). Root only, for the holders that need no
preexec_fn (Holder.start's ``pdeathsig_argv`` path); ``OSB_MOCK_ZYGOTE=0`` turns it off (the A/B).

One zygote per mock process, started on first use by the lifeline thread (holder.lifeline_call), so it dies
with the mock (PR_SET_PDEATHSIG) and so does every PID 1 it makes: their parent is the mock itself
(CLONE_PARENT), and the kernel sends the signal when the thread that forked the zygote ends. The mock waits for
a PID 1 as for any child it started: ``Adopted`` is the part of ``subprocess.Popen`` the runtime uses. When
the zygote cannot start or answer, ``spawn`` returns None and the caller takes the old way. Standard library.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Sequence

from mock_opensandbox.runtime import stages as scripts

ZYGOTE_PY = os.path.join(scripts.SCRIPTS_DIR, "osb_zygote.py")
ZYGOTE_ENV = "OSB_MOCK_ZYGOTE"  # "0": every PID 1 through setpriv + unshare + python view.py
CLONE_NEWNS, CLONE_NEWUTS, CLONE_NEWIPC, CLONE_NEWNET = 0x20000, 0x4000000, 0x8000000, 0x40000000


def wanted() -> bool:
    """Root (the zygote makes namespaces without a user namespace) and not switched off."""
    return os.geteuid() == 0 and os.environ.get(ZYGOTE_ENV, "1") != "0"


class Adopted:
    """A PID 1 the zygote cloned as the mock's own child: what the runtime uses of a Popen (pid, poll,
    wait, returncode, send_signal, kill, the pipes)."""

    def __init__(self, pid: int, args: Sequence[str], stdout: Any = None):
        self.pid, self.args = pid, list(args)
        self.returncode: int | None = None
        self.stdin = self.stderr = None
        self.stdout = stdout  # the read end when stdout was subprocess.PIPE
        self._lock = threading.Lock()

    def _reap(self, flags: int) -> None:
        try:
            pid, status = os.waitpid(self.pid, flags)
        except ChildProcessError:  # reaped elsewhere: its status is lost
            pid, status = self.pid, 255 << 8
        if pid == self.pid:
            self.returncode = os.waitstatus_to_exitcode(status)

    def poll(self) -> int | None:
        if self.returncode is None and self._lock.acquire(False):
            try:
                if self.returncode is None:
                    self._reap(os.WNOHANG)
            finally:
                self._lock.release()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if timeout is None:
            with self._lock:
                while self.returncode is None:
                    self._reap(0)
            return self.returncode
        deadline, delay = time.monotonic() + timeout, 0.0005
        while self.poll() is None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(self.args, timeout)
            time.sleep(min(delay, left, 0.05))
            delay *= 2
        return self.returncode  # type: ignore[return-value]

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            try:
                os.kill(self.pid, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(15)

    def kill(self) -> None:
        self.send_signal(9)


def launch_helper(
    launch: Callable[[Callable[[], Any]], Any], script: str, args: Callable[[int], list[str]]
) -> tuple[socket.socket, subprocess.Popen[bytes]]:
    """``python -I -S SCRIPT ARGS`` started by ``launch`` (holder.lifeline_call: it dies with the mock) in a session
    of its own, holding one end of a SOCK_SEQPACKET pair (``args`` gets its number); the mock's end and the process.
    The zygote's and each sandbox's forker's way to start."""
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    try:
        proc: subprocess.Popen[bytes] = launch(
            lambda: subprocess.Popen(
                [sys.executable, "-I", "-S", script, *args(theirs.fileno())],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                close_fds=True,
                pass_fds=(theirs.fileno(),),
                start_new_session=True,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            )
        )
    except BaseException:
        mine.close()
        raise
    finally:
        theirs.close()
    return mine, proc


class _Zygote:
    def __init__(self, launch: Callable[[Callable[[], Any]], Any]):
        self.sock, self.proc = launch_helper(launch, ZYGOTE_PY, lambda fd: [str(fd), str(os.getpid())])

    def ask(self, req: dict[str, Any], fds: list[int]) -> dict[str, Any]:
        socket.send_fds(self.sock, [json.dumps(req).encode()], fds)
        data = self.sock.recv(1 << 16)
        if not data:
            raise OSError("the zygote ended")
        answer: dict[str, Any] = json.loads(data)  # scripts/osb_zygote.py's JSON object
        return answer

    def close(self) -> None:
        self.sock.close()  # EOF: it exits
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - it exits at EOF
            self.proc.kill()
            self.proc.wait()


_lock = threading.Lock()
_zygote: _Zygote | None = None
_owner = 0  # the pid that started it (a forked child of the mock starts its own)


def _fd(spec: Any, default: int, stdout_fd: int | None, opened: list[int]) -> int:
    if spec is None:
        return default
    if spec == subprocess.DEVNULL:
        fd = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
        opened.append(fd)
        return fd
    if spec == subprocess.STDOUT and stdout_fd is not None:
        return stdout_fd
    if isinstance(spec, int) and spec >= 0:
        return spec
    if hasattr(spec, "fileno"):
        fileno: int = spec.fileno()  # a file object Popen would take
        return fileno
    raise OSError(22, "not an fd the zygote takes: %r" % (spec,))  # spawn() answers None: the old way


def spawn(
    launch: Callable[[Callable[[], Any]], Any],
    args: Sequence[str],
    env: dict[str, str],
    *,
    cwd: str,
    fifo: str,
    net: bool,
    stdout: Any,
    stderr: Any,
    pass_fds: Sequence[int] = (),
) -> Adopted | None:
    """PID 1 running ``view.py ARGS`` (its arguments after the script) in new mount, IPC, UTS (+ network)
    and PID namespaces; None when the zygote cannot make it (the caller takes the old way)."""
    global _zygote, _owner
    opened: list[int] = []
    read_end = None
    try:
        if stdout == subprocess.PIPE:
            read_end, out = os.pipe2(os.O_CLOEXEC)
            opened.append(out)
        else:
            out = _fd(stdout, 1, None, opened)
        err = _fd(stderr, 2, out, opened)
        fds = [_fd(subprocess.DEVNULL, 0, None, opened), out, err, *pass_fds]
        req = {
            "args": list(args),
            "env": dict(env),
            "cwd": cwd,
            "fifo": fifo,
            "ns": CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | (CLONE_NEWNET if net else 0),
            "pass": list(pass_fds),
        }
        with _lock:
            if _zygote is None or _owner != os.getpid():
                _zygote, _owner = _Zygote(launch), os.getpid()
            try:
                answer = _zygote.ask(req, fds)
            except (OSError, ValueError):
                stop_locked()
                return None
        pid = answer.get("pid")
        if not isinstance(pid, int) or pid <= 1:
            return None
        proc = Adopted(pid, [ZYGOTE_PY, *args], io.open(read_end, "rb") if read_end is not None else None)
        read_end = None
        return proc
    except OSError:
        return None
    finally:
        for fd in opened:
            os.close(fd)
        if read_end is not None:
            os.close(read_end)


def stop_locked() -> None:
    global _zygote
    z, _zygote = _zygote, None
    if z is not None and _owner == os.getpid():
        z.close()


def stop() -> None:
    """The zygote ends (a new one starts on the next use)."""
    with _lock:
        stop_locked()


def pid() -> int | None:
    """The zygote's pid while it runs (one per process: it outlives each sandbox, like the janitor)."""
    z = _zygote
    return z.proc.pid if z is not None and _owner == os.getpid() and z.proc.poll() is None else None


_users = 0  # mocks of this process that are started (MockOpenSandbox.start/stop)


def hold() -> None:
    global _users
    with _lock:
        _users += 1


def release() -> None:
    """A mock stopped: the last one of this process ends the zygote (it would end with the process anyway)."""
    global _users
    with _lock:
        _users = max(0, _users - 1)
        if not _users:
            stop_locked()
