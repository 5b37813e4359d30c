"""execd's interactive PTY sessions, the model (standard library only, Python >= 3.10): ``PtySession``
(the shell on a real pseudo-terminal or on pipes, the replay buffer, attach/detach, stdin, signals,
resize, close) and ``PtyRegistry`` (the sessions of one execd). No HTTP: execd/pty_routes.py is the routes.

Behaviour follows execd's source (opensandbox-group/OpenSandbox, components/execd):
pkg/runtime/pty_session.go - bash (``--norc --noprofile``; none: START_FAILED), 80x24 start size, process group
signals, SIGKILL of the group on delete, exit code -1 after a signal; replay_buffer.go - 1 MiB ring
with a monotonic byte offset.

The shell is a real pseudo-terminal started through ``SandboxRuntime.spawn`` (so it runs in the
sandbox root, in its own session, and dies with the sandbox). ``spawn`` gives every child a new
session (``start_new_session=True``); a session leader acquires a controlling terminal by opening
one, so a two-line ``/bin/sh`` wrapper reopens the slave by path and then execs the shell. If the
runtime grows a ``controlling_tty=`` keyword (see docs/PTY.md) it is used instead.
"""

from __future__ import annotations

import errno
import fcntl
import os
import queue
import select
import signal
import struct
import subprocess
import termios
import threading
import time
import uuid
from typing import Any, Callable

from mock_opensandbox.execd.commands import Sigint, sigint_kwargs, spawn_params
from mock_opensandbox.runtime import SandboxRuntime
from mock_opensandbox.wire import websocket as wsproto

__all__ = ["PtySession", "PtyRegistry", "ReplayBuffer", "OutputPipe"]

# pkg/runtime/replay_buffer.go
REPLAY_BUFFER_SIZE = 1 << 20
# pkg/runtime/pty_session.go: 32 KiB reads, 80x24 initial size
READ_CHUNK = 32 * 1024
INITIAL_COLS, INITIAL_ROWS = 80, 24
# pkg/runtime/pty_session.go parseSignalName
SIGNALS = {
    "SIGINT": signal.SIGINT,
    "SIGTERM": signal.SIGTERM,
    "SIGKILL": signal.SIGKILL,
    "SIGQUIT": signal.SIGQUIT,
    "SIGHUP": signal.SIGHUP,
}

# Reopen the slave by path so the session leader gets it as controlling terminal, then run the shell.
_CTTY_WRAPPER = 'exec 0<>"$1" 1>&0 2>&0 || exit 126; shift; exec "$@"'


class ReplayBuffer:
    """Last 1 MiB of output plus the total number of bytes ever written (replay_buffer.go)."""

    def __init__(self, size: int = REPLAY_BUFFER_SIZE):
        self.size = size
        self._buf = bytearray()
        self.total = 0
        self._lock = threading.Lock()

    def write(self, data: bytes) -> None:
        if not data:
            return
        with self._lock:
            self.total += len(data)
            self._buf += data
            if len(self._buf) > self.size:
                del self._buf[: len(self._buf) - self.size]

    def read_from(self, offset: int) -> tuple[bytes, int]:
        """Bytes from absolute ``offset`` (clamped to the oldest byte kept) and the offset of the
        first returned byte; (b"", total) when the caller is caught up."""
        with self._lock:
            if offset >= self.total:
                return b"", self.total
            oldest = self.total - len(self._buf)
            if offset < oldest:
                offset = oldest
            return bytes(self._buf[offset - oldest :]), offset


class OutputPipe:
    """Per-connection hand-off between the session's reader thread and the connection's pump
    (execd uses an io.Pipe: the reader blocks while the client is slow; nothing is buffered
    without bound). ``put`` never blocks once the pipe is closed."""

    _CLOSE = object()

    def __init__(self) -> None:
        self._q: queue.Queue[Any] = queue.Queue(maxsize=64)  # output chunks, then _CLOSE
        self.closed = False

    def put(self, item: Any) -> bool:
        while not self.closed:
            try:
                self._q.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def get(self) -> Any:
        return self._q.get()

    def close(self) -> None:
        """No more puts; wakes the pump (after what is queued) with the end marker."""
        if self.closed:
            return
        self.closed = True
        while True:
            try:
                self._q.put_nowait(self._CLOSE)
                return
            except queue.Full:
                try:
                    self._q.get_nowait()  # the pump is gone or stuck; drop the oldest chunk
                except queue.Empty:
                    pass


class PtySession:
    """One execd PTY session: created by POST /pty, its shell started by the first WebSocket."""

    def __init__(self, registry: "PtyRegistry", sid: str, cwd: str, command: str):
        self.registry = registry
        self.id = sid
        self.cwd = cwd
        self.command = command
        self.lock = threading.RLock()
        self.closing = False
        self.start_attempted = False
        self.launch_failed = False
        self.pid = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.exit_code = -1
        self.done: threading.Event | None = None
        self.is_pty = False
        self._master: int | None = None
        self._stdin_fd: int | None = None
        self._fds: list[int] = []  # fds the waiter closes once the readers are finished
        self._readers: list[threading.Thread] = []
        self._waiter: threading.Thread | None = None
        self._stop_readers = threading.Event()
        self.replay = ReplayBuffer()
        self._out_lock = threading.Lock()
        self._sink_out: OutputPipe | None = None
        self._sink_err: OutputPipe | None = None
        self._io_lock = threading.Lock()
        self._ws_lock = threading.Lock()
        self._ws_held = False
        self._evict_lock = threading.Lock()
        self._evict: Callable[[], None] | None = None
        self._evict_gen = 0

    # -- exclusive WebSocket holder (pty_session.go LockWS / TakeoverWS) ------------------------
    def lock_ws(self) -> bool:
        with self._ws_lock:
            if self._ws_held:
                return False
            self._ws_held = True
            return True

    def unlock_ws(self) -> None:
        with self._ws_lock:
            self._ws_held = False

    def set_evict_handler(self, fn: Callable[[], None]) -> int:
        with self._evict_lock:
            self._evict_gen += 1
            self._evict = fn
            return self._evict_gen

    def clear_evict_handler(self, gen: int) -> None:
        with self._evict_lock:
            if self._evict_gen == gen:
                self._evict = None

    def takeover_ws(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while True:
            if self.lock_ws():
                return True
            with self._evict_lock:
                fn = self._evict
            if fn is not None:
                fn()
            if time.monotonic() > deadline:
                return self.lock_ws()
            time.sleep(0.01)

    # -- process ------------------------------------------------------------------------------
    def is_running(self) -> bool:
        with self.lock:
            return self.pid != 0

    def _shell_argv(self, pipe_mode: bool) -> list[str]:
        """``exec.Command("bash", "--norc", "--noprofile"[, "-c", command])`` (pty_session.go StartPTY/StartPipe at
        3bb6fad): bash, never sh; where LookPath finds none on execd's PATH the start fails with Go's words,
        prefixed as StartPTY/StartPipe wrap them (live, ``local/busybox:latest``: the WebSocket's START_FAILED)."""
        if os.path.basename(self.registry.runtime.paths.shell()[0]) != "bash":
            raise RuntimeError(
                '%s: exec: "bash": executable file not found in $PATH'
                % ("cmd.Start" if pipe_mode else "pty.StartWithSize")
            )
        argv = ["bash", "--norc", "--noprofile"]
        if self.command:
            argv += ["-c", self.command]
        return argv

    def start(self, pipe_mode: bool) -> None:
        with self.lock:
            if self.pid != 0:
                raise RuntimeError("pty session already started")
            if self.closing:
                raise RuntimeError("pty session is closing")
            self.start_attempted = True
            try:
                if pipe_mode:
                    self._start_pipe()
                else:
                    self._start_pty()
                self.launch_failed = False
            except BaseException:
                self.launch_failed = True
                raise

    def _begin(self, proc: subprocess.Popen[bytes], streams: list[tuple[int, bool]]) -> None:
        self.proc = proc
        self.pid = proc.pid
        self.exit_code = -1
        self.done = threading.Event()
        self._stop_readers = threading.Event()
        self._readers = []
        for fd, is_stdout in streams:
            t = threading.Thread(
                target=self._read_loop, args=(fd, is_stdout), daemon=True, name=f"pty-read-{self.id[:8]}"
            )
            self._readers.append(t)
            t.start()
        self._waiter = threading.Thread(
            target=self._wait_loop, args=(proc, self.done), daemon=True, name=f"pty-wait-{self.id[:8]}"
        )
        self._waiter.start()

    def _start_pty(self) -> None:
        rt = self.registry.runtime
        # the sandbox's own devpts when the runtime has one (`tty` inside then names the terminal)
        master, slave = rt.openpty() if hasattr(rt, "openpty") else os.openpty()
        try:
            fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", INITIAL_ROWS, INITIAL_COLS, 0, 0))
            argv = self._shell_argv(False)
            sig = sigint_kwargs(rt, self.registry.sigint)  # the shell inherits execd's SIGINT (commands.py)
            if "controlling_tty" in spawn_params(rt):
                proc = rt.spawn(
                    argv, cwd=self.cwd or None, stdin=slave, stdout=slave, stderr=slave, controlling_tty=True, **sig
                )
            else:
                tty_path = os.ttyname(slave)
                proc = rt.spawn(
                    ["/bin/sh", "-c", _CTTY_WRAPPER, "osb-pty", tty_path] + argv,
                    cwd=self.cwd or None,
                    stdin=slave,
                    stdout=slave,
                    stderr=slave,
                    **sig,
                )
        except BaseException:
            os.close(master)
            os.close(slave)
            raise
        os.close(slave)
        self.is_pty = True
        self._master = master
        self._stdin_fd = master
        self._fds = [master]
        self._begin(proc, [(master, True)])

    def _start_pipe(self) -> None:
        rt = self.registry.runtime
        proc = rt.spawn(
            self._shell_argv(True),
            cwd=self.cwd or None,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            **sigint_kwargs(rt, self.registry.sigint),
        )
        self.is_pty = False
        self._master = None
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        self._stdin_fd = proc.stdin.fileno()
        self._fds = []  # Popen owns them; runtime.terminate / _wait_loop close the files
        self._begin(proc, [(proc.stdout.fileno(), True), (proc.stderr.fileno(), False)])

    def _read_loop(self, fd: int, is_stdout: bool) -> None:
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
        grace_until: float | None = None
        while True:
            try:
                ready = poller.poll(100)
            except InterruptedError:  # pragma: no cover - PEP 475 retries
                continue
            if not ready:
                if self._stop_readers.is_set():
                    break
                continue
            if self._stop_readers.is_set():
                # the shell is gone; keep draining what is buffered, but not for ever (a
                # background job may still hold the terminal open)
                if grace_until is None:
                    grace_until = time.monotonic() + 0.5
                elif time.monotonic() > grace_until:
                    break
            try:
                chunk = os.read(fd, READ_CHUNK)
            except OSError as exc:
                if exc.errno in (errno.EAGAIN, errno.EINTR):
                    continue
                break  # EIO: every slave fd is closed (pty_session.go broadcastPTY)
            if not chunk:
                break
            self._fanout(chunk, is_stdout)

    def _fanout(self, chunk: bytes, is_stdout: bool) -> None:
        # replay write and sink lookup under one lock, as writeAndFanout (no loss, no duplicate)
        with self._out_lock:
            self.replay.write(chunk)
            sink = self._sink_out if is_stdout else self._sink_err
        if sink is not None:
            sink.put(chunk)

    def _wait_loop(self, proc: subprocess.Popen[bytes], done: threading.Event) -> None:
        rc = proc.wait()
        self._stop_readers.set()
        for t in self._readers:
            t.join(timeout=5)
        with self._io_lock:
            with self.lock:
                self._master = None
                self._stdin_fd = None
            for fd in self._fds:
                try:
                    os.close(fd)
                except OSError:
                    pass
            self._fds = []
            if not self.is_pty:
                for f in (proc.stdin, proc.stdout, proc.stderr):
                    try:
                        if f is not None:
                            f.close()
                    except OSError:
                        pass
        with self.lock:
            # managed_command_linux.go: exit status, or -1 when killed by a signal
            self.exit_code = rc if rc >= 0 else -1
            self.pid = 0
        done.set()

    def write_stdin(self, data: bytes) -> None:
        # _io_lock keeps the waiter from closing (and the OS from reusing) the fd mid-write; a
        # write only blocks while the shell is alive, and its exit turns the write into EIO/EPIPE
        with self._io_lock:
            fd = self._stdin_fd
            if fd is None:
                raise OSError(errno.EBADF, "session not started")
            view = memoryview(data)
            while view:
                n = os.write(fd, view)
                view = view[n:]

    def send_signal(self, name: str) -> None:
        with self.lock:
            pid = self.pid
        sig = SIGNALS.get(name)
        if pid == 0 or sig is None:
            return
        try:
            os.killpg(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def resize(self, cols: int, rows: int) -> None:
        with self._io_lock:
            fd = self._master
            if fd is None:
                return  # pipe mode or not started: no-op (pty_session.go ResizePTY)
            # Go: uint16(frame.Cols) truncates
            fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", rows & 0xFFFF, cols & 0xFFFF, 0, 0))

    def attach(self, since: int) -> tuple[OutputPipe, OutputPipe | None, bytes, int]:
        """Snapshot the replay buffer from ``since`` and attach fresh output pipes atomically."""
        out = OutputPipe()
        err = None if self.is_pty else OutputPipe()
        with self._out_lock:
            snap, off = self.replay.read_from(since)
            self._sink_out = out
            if err is not None:
                self._sink_err = err
        return out, err, snap, off

    def detach(self, out: OutputPipe, err: OutputPipe | None) -> None:
        with self._out_lock:
            if self._sink_out is out:
                self._sink_out = None
            if err is not None and self._sink_err is err:
                self._sink_err = None
        out.close()
        if err is not None:
            err.close()

    def close(self, wait: float = 0.0) -> None:
        """DELETE /pty/{id}: SIGKILL the process group, detach the client (pty_session.go close).
        ``wait`` > 0 also waits for the waiter thread (fds closed) - used at sandbox teardown."""
        with self.lock:
            if self.closing:
                pid = 0
            else:
                self.closing = True
                pid = self.pid
            waiter = self._waiter
        if pid:
            try:
                os.killpg(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        with self._out_lock:
            sinks = [s for s in (self._sink_out, self._sink_err) if s is not None]
            self._sink_out = self._sink_err = None
        for s in sinks:
            s.close()
        if wait and waiter is not None:
            waiter.join(timeout=wait)

    def status(self) -> dict[str, Any]:
        with self.lock:
            return {
                "session_id": self.id,
                "running": self.pid != 0,
                "output_offset": self.replay.total,
                "launch_attempted": self.start_attempted,
                "launch_failed": self.launch_failed,
            }


class PtyRegistry:
    """All PTY sessions of one execd (the ``ptySessionMap`` of runtime/ctrl.go)."""

    def __init__(self, runtime: SandboxRuntime, sigint: Sigint | None = None):
        self.runtime = runtime
        self.sigint = sigint if sigint is not None else Sigint()  # execd's (commands.py): a shell inherits it
        self._lock = threading.Lock()
        self.sessions: dict[str, PtySession] = {}
        self._sockets: set[wsproto.WebSocket] = set()

    def create(self, cwd: str, command: str) -> PtySession:
        sid = str(uuid.uuid4())  # runtime.NewPTYSessionID: uuid.New().String() (tiers/diff pty.lifecycle)
        s = PtySession(self, sid, cwd, command)
        with self._lock:
            self.sessions[sid] = s
        return s

    def get(self, sid: str) -> PtySession | None:
        with self._lock:
            return self.sessions.get(sid)

    def delete(self, sid: str) -> bool:
        with self._lock:
            s = self.sessions.pop(sid, None)
        if s is None:
            return False
        s.close()
        return True

    def _track(self, ws: wsproto.WebSocket) -> bool:
        with self._lock:
            self._sockets.add(ws)
            return True

    def _untrack(self, ws: wsproto.WebSocket) -> None:
        with self._lock:
            self._sockets.discard(ws)

    def close_all(self) -> None:
        """The sandbox is going away: kill every shell, drop every socket (a dying container sends
        no close frame), wait for the reader threads so no fd is left open. Idempotent; a session
        created afterwards cannot start once the runtime is terminated (spawn refuses)."""
        with self._lock:
            sessions = list(self.sessions.values())
            self.sessions.clear()
            sockets = list(self._sockets)
            self._sockets.clear()
        for ws in sockets:
            ws.abort()
        for s in sessions:
            s.close(wait=5.0)
