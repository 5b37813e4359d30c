"""Foreground/background command registry for one mock execd: spawning, output capture, the
background log cursor, interrupt. No HTTP here (execd/server.py turns this into SSE / JSON).

Behaviour sources (see QUIRKS.md (part 2)): recordings 07-12 and 17; execd source
components/execd/pkg/runtime/{command.go,command_common.go,command_status.go,interrupt.go,command_argv.go}.
"""

from __future__ import annotations

import _thread
import codecs
import collections
import functools
import grp
import inspect
import json
import os
import pwd
import re
import signal
import stat
import subprocess
import threading
import time
from typing import Any, Callable, Generator, Iterator

from mock_opensandbox.execd.deadlines import DEADLINES, Deadline
from mock_opensandbox.execd.fileinfo import _map_id
from mock_opensandbox.execd.files import SandboxFS
from mock_opensandbox.execd.runfiles import RunFiles, RunFilesError, run_file
from mock_opensandbox.runtime import SandboxRuntime, SandboxTerminated
from mock_opensandbox.runtime.rootfs import lookup_uid, user_word
from mock_opensandbox.wire import pollio
from mock_opensandbox.wire.gojson import GO_REPLACE, go_time, path_error

__all__ = [
    "Command",
    "CommandRegistry",
    "LineSplitter",
    "ChunkDecoder",
    "LogFilesFailure",
    "signal_text",
    "StartFailure",
]

# Go's syscall.Signal.String() texts (what exec.ExitError prints as "signal: <text>").
_GO_SIGNALS = {
    signal.SIGHUP: "hangup",
    signal.SIGINT: "interrupt",
    signal.SIGQUIT: "quit",
    signal.SIGILL: "illegal instruction",
    signal.SIGTRAP: "trace/breakpoint trap",
    signal.SIGABRT: "aborted",
    signal.SIGBUS: "bus error",
    signal.SIGFPE: "floating point exception",
    signal.SIGKILL: "killed",
    signal.SIGUSR1: "user defined signal 1",
    signal.SIGSEGV: "segmentation fault",
    signal.SIGUSR2: "user defined signal 2",
    signal.SIGPIPE: "broken pipe",
    signal.SIGALRM: "alarm clock",
    signal.SIGTERM: "terminated",
    signal.SIGCHLD: "child exited",
    signal.SIGCONT: "continued",
    signal.SIGSTOP: "stopped (signal)",
    signal.SIGTSTP: "stopped",
    signal.SIGTTIN: "stopped (tty input)",
    signal.SIGTTOU: "stopped (tty output)",
    signal.SIGURG: "urgent I/O condition",
    signal.SIGXCPU: "CPU time limit exceeded",
    signal.SIGXFSZ: "file size limit exceeded",
    signal.SIGVTALRM: "virtual timer expired",
    signal.SIGPROF: "profiling timer expired",
    signal.SIGWINCH: "window changed",
    signal.SIGIO: "I/O possible",
    signal.SIGSYS: "bad system call",
}


def signal_text(signum: int) -> str:
    try:
        return _GO_SIGNALS[signal.Signals(signum)]
    except (KeyError, ValueError):
        return f"signal {signum}"


class LogFilesFailure(Exception):
    """execd could not make a run's files (runCommand / runBackgroundCommand return the error: RunCommand's
    500 "error running commands ..."); ``command``: a background command's, whose init event went out first."""

    def __init__(self, msg: str, command: "Command | None" = None):
        super().__init__(msg)
        self.command = command


class StartFailure(Exception):
    """The command could not be started (execd reports it as an error event with the Go message).
    ``command``: a background run whose cmd.Start failed - execd had sent its init event and keeps
    the command as finished with exit code 255 and the error (runtime/command.go runBackgroundCommand)."""

    def __init__(self, msg: str, command: "Command | None" = None):
        super().__init__(msg)
        self.command = command


_EOL = re.compile(rb"([\r\n])")
# an unfinished line read again at every tick up to this size, then taken as read (CommandRegistry._read)
REREAD_MAX = 1 << 20


class LineSplitter:
    """execd v1.x output framing (runtime/command_common.go commandOutputTail): "\\n" and "\\r"
    both end a line and are dropped, "\\r\\n" counts once, an empty line is emitted as "\\n", a
    trailing partial line is flushed when the command ends (recording 12)."""

    def __init__(self) -> None:
        self.pending = bytearray()
        self.last_cr = False

    def feed(self, data: bytes) -> list[str]:
        """The lines ``data`` completes. Byte by byte the rule is: CR or LF ends the pending line (emitted) or,
        with nothing pending, emits "\\n", except an LF right after a CR; any other byte is pending. Here the
        data is cut at its CRs and LFs once (re.split) and the rule runs per line, not per byte."""
        out: list[str] = []
        parts = _EOL.split(data)
        head = parts[0]
        if self.pending and len(parts) > 1:
            head = bytes(self.pending) + head
            self.pending.clear()
        last_cr = self.last_cr
        for i in range(1, len(parts), 2):
            eol = parts[i]
            if head:
                out.append(head.decode("utf-8", GO_REPLACE))
            elif not (last_cr and eol == b"\n"):
                out.append("\n")
            last_cr = eol == b"\r"
            head = parts[i + 1]
        if head:
            self.pending += head
            last_cr = False
        self.last_cr = last_cr
        return out

    def flush(self) -> list[str]:
        if not self.pending:
            return []
        text = self.pending.decode("utf-8", GO_REPLACE)
        self.pending.clear()
        return [text]


class ChunkDecoder:
    """ "latest" framing: every read is one event, bytes kept exactly (line endings included); a UTF-8
    sequence split across reads is held back until complete (invalid bytes become U+FFFD, as Go's
    encoding/json does with invalid UTF-8)."""

    def __init__(self) -> None:
        self._dec = codecs.getincrementaldecoder("utf-8")(GO_REPLACE)

    def feed(self, data: bytes) -> list[str]:
        text = self._dec.decode(data)
        return [text] if text else []

    def flush(self) -> list[str]:
        text = self._dec.decode(b"", final=True)
        return [text] if text else []


_FINISHED = threading.Event()  # every finished command's ``done`` (already set: a wait returns at once)
_FINISHED.set()
_NO_EVENTS: Iterator[tuple[str | None, Any]] = iter(())  # (exhausted: shared by every finished command)


class Command:
    """One /command execution."""

    def __init__(self, cid: str, content: str, background: bool):
        self.id = cid
        self.content = content
        self.background = background
        self.started_ns = time.time_ns()
        self.started_mono = time.monotonic()
        self.finished_ns: int | None = None
        self.exit_code: int | None = None
        self.error = ""
        self.running = True
        self.proc: subprocess.Popen[bytes] | None = None
        # foreground: the output, read from its files by the thread that streams it (CommandRegistry._tail):
        # ("stdout"|"stderr", bytes) ... ("exit", rc), and (None, None) while nothing came (about every 50 ms)
        self.events: Iterator[tuple[str | None, Any]] = iter(())
        self.done = threading.Event()
        self.lock = threading.Lock()
        self.killed_by_timeout = False
        self._timer: Deadline | None = None

    def path(self, stream: str) -> str:
        """The sandbox path of the run's file for ``stream`` ("stdout", "stderr", "output"), which execd reads."""
        return "/tmp/" + run_file(self.id, stream)

    # status JSON (model.CommandStatusResponse field order, omitempty as in recording 10)
    def status(self) -> dict[str, Any]:
        with self.lock:
            d: dict[str, Any] = {"id": self.id}
            if self.content:
                d["content"] = self.content
            d["running"] = self.running
            if self.exit_code is not None:
                d["exit_code"] = self.exit_code
            if self.error:
                d["error"] = self.error
            d["started_at"] = go_time(self.started_ns)
            if self.finished_ns is not None:
                d["finished_at"] = go_time(self.finished_ns)
            return d

    def execution_ms(self) -> int:
        return int((time.monotonic() - self.started_mono) * 1000)

    def finish(self, rc: int) -> tuple[int, str]:
        """Record the exit (once); returns (exit_code, error text) the way Go's exec.ExitError shows them."""
        with self.lock:
            if not self.running and self.exit_code is not None:
                return self.exit_code, self.error
        if rc >= 0:
            code, err = rc, ("" if rc == 0 else f"exit status {rc}")
        else:
            code, err = -1, f"signal: {signal_text(-rc)}"
        with self.lock:
            self.exit_code, self.error = code, err
            self.running = False
            self.finished_ns = time.time_ns()
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.done.set()
        # execd keeps every command for GET /command/status (as live's map does): what a finished one no longer
        # needs goes (its process, its output's reader, its Event): ~4 KiB of RSS a command down to 0.7 KiB
        # (bench/README.md); a reader or waiter that holds them already keeps them while it needs them
        self.done, self.events, self.proc = _FINISHED, _NO_EVENTS, None
        return code, err

    def kill(self, sig: int = signal.SIGKILL) -> None:
        p = self.proc
        if p is not None and p.poll() is None:
            try:
                os.killpg(p.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def command_id() -> str:
    """A command's id: 32 hex digits of a random (version 4) UUID, as ``uuid.uuid4().hex`` gives, without building
    the UUID object on the way to the fork."""
    b = bytearray(os.urandom(16))
    b[6] = b[6] & 0x0F | 0x40
    b[8] = b[8] & 0x3F | 0x80
    return b.hex()


def _exit_of(
    proc: subprocess.Popen[bytes], step: Callable[[], float] = lambda: 0.05
) -> Generator[tuple[None, None], None, int]:
    """proc's exit status; (None, None) after each wait of ``step()`` seconds (at most 50 ms) until then."""
    rc = proc.poll()
    if rc is not None:
        return rc
    try:
        pidfd = os.pidfd_open(proc.pid)
    except (AttributeError, OSError):  # no pidfd here (Linux < 5.3), or already reaped
        pidfd = None
    try:
        while True:
            if pidfd is None:
                try:
                    return proc.wait(timeout=step())
                except subprocess.TimeoutExpired:
                    yield None, None
                    continue
            if pollio.readable([pidfd], step()) or proc.poll() is not None:
                return proc.wait()
            yield None, None
    finally:
        if pidfd is not None:
            os.close(pidfd)


class Sigint:
    """execd's own SIGINT disposition, which a process it starts outside a command run inherits (a PTY shell, a
    session's bash: exec(2) keeps an ignored signal). bootstrap.sh starts execd with ``&`` in a shell without job
    control, so SIGINT comes in ignored, and Go leaves an inherited SIG_IGN of SIGINT as it is; each command run
    catches every signal while it lasts (``signal.Notify`` at the top of runCommand and runBackgroundCommand) and
    puts them back as they came when it returns (``defer signal.Reset()``: after a foreground command's exit, right
    after a background command's start). So a PTY shell or a session started while no foreground command runs
    starts with SIGINT ignored (live: ``trap -p`` prints ``trap -- '' SIGINT``, a child's SigIgn ``...0002``); a
    command itself never (QUIRKS "SIGINT of a PTY shell or a session"; components/execd/pkg/runtime/command.go at
    3bb6fad)."""

    def __init__(self) -> None:
        self.caught = False  # one bool, set and read whole (no lock: Go's Notify and Reset race the same way)

    def notify(self) -> None:
        self.caught = True

    def reset(self) -> None:
        self.caught = False

    @property
    def ignored(self) -> bool:
        return not self.caught


def sigint_kwargs(runtime: Any, sigint: Sigint) -> dict[str, Any]:
    """``runtime.spawn``'s ``ignore_sigint=True`` for a process execd starts outside a command run while its SIGINT
    is ignored (``Sigint``), where the runtime takes that keyword; else nothing."""
    return {"ignore_sigint": True} if sigint.ignored and "ignore_sigint" in spawn_params(runtime) else {}


def spawn_params(runtime: Any) -> frozenset[str]:
    """The keywords ``runtime.spawn`` takes (looked up once per spawn function)."""
    fn = getattr(type(runtime), "spawn", None) or getattr(runtime, "spawn", None)
    return _params_of(fn) if fn is not None else frozenset()


@functools.lru_cache(maxsize=32)
def _params_of(fn: Any) -> frozenset[str]:
    try:
        return frozenset(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return frozenset()


class CommandRegistry:
    """All commands of one execd. ``tail_interval``: seconds between two reads of a foreground command's files
    while it runs (execd's tailStdPipe ticker, 100 ms; the fast timing's is shorter: options.FAST_TIMING)."""

    def __init__(self, runtime: SandboxRuntime, mode: str = "v1.1.0", tail_interval: float = 0.1):
        self.runtime = runtime
        self.mode = mode
        self.tail_interval = max(0.001, float(tail_interval))
        self._cmds: dict[str, Command] = {}
        self._lock = threading.Lock()
        self.sigint = Sigint()
        self.files = RunFiles(runtime)  # execd's files of each run in the sandbox's /tmp

    def get(self, cid: str) -> Command | None:
        with self._lock:
            return self._cmds.get(cid)

    def framer(self) -> LineSplitter | ChunkDecoder:
        return ChunkDecoder() if self.mode == "latest" else LineSplitter()

    # -- start --------------------------------------------------------------------------------
    def build_argv(
        self, command: str | None, argv: list[str] | None, cwd: str | None, envs: dict[str, str] | None
    ) -> list[str]:
        """Shell form (bash -c when bash exists, else sh -c) or, in latest mode, native argv with the
        executable looked up like execd's resolveExecutable (runtime/command_argv.go)."""
        if argv is None:
            return self.runtime.paths.shell() + ["-c", command or ""]
        name = argv[0]
        if not name:
            raise StartFailure("argv requires a non-empty executable")
        if name.startswith("/"):
            return list(argv)
        if "/" in name:
            base = cwd or "/"
            return [os.path.normpath(os.path.join(base, name))] + list(argv[1:])
        env = self.runtime.base_env()
        env.update(envs or {})
        found = self.runtime.paths.which(name, env.get("PATH", ""))
        if found is None:
            raise StartFailure(f'exec: "{name}": executable file not found in $PATH')
        return [found] + list(argv[1:])

    def _fs(self) -> Any:
        """The sandbox's files by fds on its "/" (fsops.SandboxFS: openat2 RESOLVE_IN_ROOT), so a
        symlink swapped in by code inside never sends a lookup to the host's files."""
        return SandboxFS(self.runtime)

    def _stat(self, spath: str) -> os.stat_result:
        fd = self._fs().fd(spath, os.O_PATH)
        try:
            return os.fstat(fd)
        finally:
            os.close(fd)

    def _exec_path(self, name: str) -> str:
        """The file Go's exec names in a failed start: ``name`` when it has a slash, else what LookPath finds on
        execd's PATH (``name`` when nothing)."""
        return name if name.startswith("/") else (self.runtime.paths.which(name) or name)

    def _check_exec_target(self, full: list[str]) -> None:
        """Native argv with a path: Go's fork/exec fails before anything runs."""
        path = full[0]
        try:
            host = self.runtime.paths.view_path(path) if self.runtime.isolated else path
        except (OSError, ValueError) as exc:
            raise StartFailure(f"fork/exec {path}: {exc}") from exc
        if not os.path.exists(host):
            raise StartFailure(f"fork/exec {path}: no such file or directory")
        if os.path.isdir(host) or not os.access(host, os.X_OK):
            raise StartFailure(f"fork/exec {path}: permission denied")

    def _chdir_denied(self, cwd: str, uid: int | None, gid: int | None) -> bool:
        """Would the child's chdir(cwd) fail with EACCES after setuid (Go's forkExec order: credentials,
        then chdir, then exec)? Search permission on every directory of the path for a non-root
        uid, by the view's modes and owners (ids through the sandbox's user namespace map)."""
        if not uid or not cwd:
            return False

        rt = self.runtime
        groups = {gid if gid is not None else self._primary_gid(uid)}
        umap, gmap = rt.paths.id_map("uid"), rt.paths.id_map("gid")
        cur = ""
        for comp in [c for c in cwd.split("/") if c] + [""]:
            try:
                st = self._stat(cur or "/")
            except (OSError, ValueError):
                return False  # execd's own checks answer for a missing directory
            if not stat.S_ISDIR(st.st_mode):
                return False
            owner, group = _map_id(umap, st.st_uid, False), _map_id(gmap, st.st_gid, False)
            bit = stat.S_IXUSR if owner == uid else stat.S_IXGRP if group in groups else stat.S_IXOTH
            if not st.st_mode & bit:
                return True
            if comp:
                cur += "/" + comp
        return False

    def _primary_gid(self, uid: int) -> int:
        """buildCredential: the user's primary group from the sandbox's /etc/passwd, else 0."""
        try:
            with os.fdopen(self._fs().fd("/etc/passwd", os.O_RDONLY), "rb") as fh:
                for line in fh.read(1 << 20).decode("utf-8", "replace").splitlines():
                    f = line.split(":")
                    if len(f) >= 4 and f[2] == str(uid) and f[3].isdigit():
                        return int(f[3])
        except (OSError, ValueError):
            pass
        return 0

    def credential_prefix(self, uid: int | None, gid: int | None) -> list[str]:
        """buildCredential (runtime/command.go): uid -> that user's primary gid and groups when the
        user exists, else gid 0 and no groups; an explicit gid wins. The mock applies it with
        util-linux setpriv (tiers/diff command.uid_gid)."""
        if uid is None and gid is None:
            return []

        u = uid or 0
        g = 0
        groups: list[int] = []
        if uid is not None:
            try:
                pw = pwd.getpwuid(uid)
                g = pw.pw_gid
                groups = sorted({pw.pw_gid} | {x.gr_gid for x in grp.getgrall() if pw.pw_name in x.gr_mem})
            except KeyError:
                pass
        if gid is not None:
            g = gid
        setpriv = self.runtime.paths.which("setpriv") or "setpriv"
        return (
            [setpriv, f"--reuid={u}", f"--regid={g}"]
            + ([f"--groups={','.join(map(str, groups))}"] if groups else ["--clear-groups"])
            + ["--"]
        )

    def image_credentials(self, uid: int | None, gid: int | None) -> dict[str, str] | None:
        """buildCredential for a sandbox running its image as root: the user looked up in the sandbox's own
        /etc/passwd and /etc/group, set by the forked child (spawn's ``user``); None elsewhere."""
        holder = self.runtime.pid1.holder
        if (uid is None and gid is None) or holder is None or not getattr(holder, "fork_joins", False):
            return None

        def read(path: str) -> bytes | None:
            try:
                with os.fdopen(self._fs().fd(path, os.O_RDONLY), "rb") as fh:
                    return fh.read(1 << 20)
            except (OSError, ValueError):
                return None

        g, groups = lookup_uid(uid or 0, read("/etc/passwd"), read("/etc/group")) if uid is not None else (0, [])
        g = gid if gid is not None else g
        return {"user": user_word((uid or 0, g, groups))}

    def start(self, **kw: Any) -> Command:
        """Spawn a command (``_start``'s keywords). Raises StartFailure (message as execd reports it) or
        SandboxTerminated. execd's SIGINT is caught from here until the run returns (``Sigint``): a foreground
        command's at its exit (``_tail``), a background command's once it started or failed to."""
        self.sigint.notify()
        try:
            cmd = self._start(**kw)
        except BaseException:
            self.sigint.reset()
            raise
        if cmd.background:
            self.sigint.reset()
        return cmd

    def _start(
        self,
        *,
        command: str | None,
        argv: list[str] | None = None,
        cwd: str | None = None,
        envs: dict[str, str] | None = None,
        timeout_ms: int = 0,
        background: bool = False,
        uid: int | None = None,
        gid: int | None = None,
    ) -> Command:
        content = command if argv is None else json.dumps(argv, separators=(",", ":"), ensure_ascii=False)
        # mergeEnvs writes "K=V" strings: a name with "=" in it ("0=" -> "0==") is passed through
        # env(1), which yields the same environ string (tiers/diff gen.env); an empty name (execve
        # refuses it from Python; no program reads it back, diff command.env_empty_name) and NUL are dropped
        env = {k: v for k, v in (envs or {}).items() if k and "=" not in k and "\x00" not in k + v}
        odd = [f"{k}={v}" for k, v in (envs or {}).items() if k and "=" in k and "\x00" not in k + v]
        # the shell form run as itself (no env(1) or setpriv before it): spawn's ``shell_form`` puts the shell in
        # argv[0] where it forks; otherwise it is picked here
        shell_form = argv is None and uid is None and gid is None and not odd
        full = ["bash", "-c", command or ""] if shell_form else self.build_argv(command, argv, cwd, envs)
        if argv is not None and not any("\x00" in a for a in full):
            self._check_exec_target(full)
        cmd = Command(command_id(), content or "", background)
        # execd's files of the run are its fd 1 and fd 2 (background: one file for both), made before anything can
        # fail to start (live: a NUL or a denied directory leaves them); the child's only once it runs (closed
        # here), read back by their paths
        try:
            files = self.files.make(cmd.id, background)
        except RunFilesError as exc:
            what = "combined output" if background else "stdlog"
            raise LogFilesFailure(f"failed to get {what} descriptor: {exc.text}", cmd if background else None) from None
        if any("\x00" in a for a in full):
            full = self.build_argv(command, argv, cwd, envs)  # the shell's name for the message
            # Go's exec refuses a NUL in argv (syscall.ByteSliceFromString: EINVAL) before the fork
            # (QUIRKS, "NUL byte in a command")
            raise self._not_started(cmd, files, f"fork/exec {self._exec_path(full[0])}: invalid argument")
        if self._chdir_denied(cwd or "/", uid, gid):
            # Go reports the child's failed chdir as the exec of the program (runtime/command.go
            # cmd.Start; tiers/diff command.start_failure): "fork/exec /usr/bin/bash: permission denied"
            raise self._not_started(cmd, files, f"fork/exec {self._exec_path(full[0])}: permission denied")
        if odd:
            full = [self.runtime.paths.which("env") or "/usr/bin/env"] + odd + full
        # an image sandbox as root has no setpriv of the host: the fork sets the credentials (runtime/forkjoin.py)
        creds = self.image_credentials(uid, gid)
        full = (self.credential_prefix(uid, gid) if creds is None else []) + full
        user: dict[str, Any] = creds or {}  # spawn's ``user`` (absent: the runtime's default)
        out_w = files["output" if background else "stdout"]
        try:
            cmd.proc = self.runtime.spawn(
                full,
                cwd=cwd,
                env=env,
                stdout=out_w,
                stderr=subprocess.STDOUT if background else files["stderr"],
                shell_form=shell_form,
                **user,
            )
        except BaseException as exc:
            if isinstance(exc, SandboxTerminated) or not isinstance(exc, (OSError, ValueError)):
                for fd in files.values():
                    os.close(fd)
                raise
            name = self.runtime.paths.shell()[0] if shell_form else full[0]
            raise self._not_started(
                cmd,
                files,
                f"fork/exec {name}: {getattr(exc, 'strerror', None) or exc}".lower()
                if isinstance(exc, OSError)
                else str(exc),
            ) from exc
        for fd in files.values():
            os.close(fd)
        with self._lock:
            self._cmds[cmd.id] = cmd
        if timeout_ms and timeout_ms > 0:

            def on_timeout() -> None:
                cmd.killed_by_timeout = True
                cmd.kill(signal.SIGKILL)

            cmd._timer = DEADLINES.add(timeout_ms / 1000.0, on_timeout)  # (one thread for all: deadlines.py)
        if background:
            # a bare thread (daemon-like, not waited for: threading.Thread.start waits until it runs, ~60 us cold,
            # on the way to the POST's answer); its output is in its file, which ``logs`` reads
            _thread.start_new_thread(self._wait_background, (cmd,))
        else:
            cmd.events = self._tail(cmd)
        return cmd

    def _not_started(self, cmd: Command, files: dict[str, int], msg: str) -> StartFailure:
        """A run whose start failed after its files were made (they stay, closed): a background command is kept
        with exit code 255 and the error (runBackgroundCommand's markCommandFinished; its status answers)."""
        for fd in files.values():
            os.close(fd)
        if not cmd.background:
            return StartFailure(msg)
        with cmd.lock:
            cmd.running, cmd.exit_code, cmd.error = False, 255, msg
            cmd.finished_ns = time.time_ns()
        cmd.done.set()
        with self._lock:
            self._cmds[cmd.id] = cmd
        return StartFailure(msg, cmd)

    # -- output pumps --------------------------------------------------------------------------
    @staticmethod
    def drain(cmd: Command) -> None:
        """The rest of a foreground command's output, unread, in a thread of its own: its caller stopped
        reading before the exit (an error), and the command's bookkeeping does not depend on anyone reading."""
        threading.Thread(target=collections.deque, args=(cmd.events, 0), daemon=True, name=f"fg-{cmd.id[:8]}").start()

    def _read(self, cmd: Command, stream: str, pos: dict[str, int], final: bool = True) -> Iterator[tuple[str, bytes]]:
        """readFromPos: the run's file for ``stream`` from where the last read ended, opened by its path (one
        that cannot be opened now gives nothing, and the position stays). In execd's line framing (not
        ``latest``) a read before the exit (not ``final``) leaves an unfinished last line where it is: the
        position stays at its start and the next read takes it again from the file, as it is then (rewritten
        or cut by the command meanwhile); the read after the exit takes it as it is. An unfinished line over
        ``REREAD_MAX`` is taken as read (the framer holds it): execd reads it all again at every tick, a cost
        that grows with the line (QUIRKS)."""
        held: list[bytes] = []  # the unfinished line so far (its chunks), not yielded
        size = 0
        try:
            for data in self.files.read(cmd.path(stream), pos[stream]):
                if not final and self.mode != "latest":
                    cut = max(data.rfind(b"\n"), data.rfind(b"\r")) + 1
                    if cut:  # up to the last line's end; the rest is held
                        rest = data[cut:]
                        data = b"".join(held) + data[:cut] if held or rest else data  # (no copy of a whole chunk)
                        held, size = ([rest] if rest else []), len(rest)
                    else:
                        held.append(data)
                        size += len(data)
                        if size <= REREAD_MAX:
                            continue
                        data, held, size = b"".join(held), [], 0  # too long to read again: taken as it is
                pos[stream] += len(data)
                yield stream, data
        except OSError:
            return

    def _tail(self, cmd: Command) -> Iterator[tuple[str | None, Any]]:
        """A foreground command's output, run by the request thread that streams it: its two files read by their
        paths every ``tail_interval`` while it runs and once more when it has exited (execd's tailStdPipe and its
        final readFromPos after cmd.Wait; what a child left running writes later is not read). An interval under
        execd's 100 ms (the fast timing) doubles after each read that found no whole line, up to 100 ms, and starts again
        from the shortest once output comes: a silent command is not read 200 times a second."""
        proc = cmd.proc
        assert proc is not None
        pos = {"stdout": 0, "stderr": 0}
        shortest = interval = self.tail_interval
        longest = max(shortest, 0.1)
        next_read = time.monotonic() + interval
        exit_of = _exit_of(proc, lambda: min(0.05, max(0.0, next_read - time.monotonic())))
        try:
            while True:
                try:
                    next(exit_of)
                except StopIteration as stop:
                    rc: int = stop.value
                    break
                if time.monotonic() >= next_read:
                    got = False
                    for stream in ("stdout", "stderr"):
                        for item in self._read(cmd, stream, pos, final=False):
                            got = True
                            yield item
                    # (an unfinished line that grew is no news: read again at every short interval, a long one
                    # would cost its length each time)
                    interval = shortest if got else min(longest, interval * 2)
                    next_read = time.monotonic() + interval
                    if got:
                        continue
                yield None, None
        finally:
            exit_of.close()
        for stream in ("stdout", "stderr"):
            yield from self._read(cmd, stream, pos)
        cmd.finish(rc)
        self.sigint.reset()  # runCommand returns: signal.Reset()
        yield "exit", rc

    def _wait_background(self, cmd: Command) -> None:
        assert cmd.proc is not None
        cmd.finish(cmd.proc.wait())

    # -- queries / control --------------------------------------------------------------------
    def logs(self, cid: str, cursor: int) -> tuple[bytes, int]:
        """SeekBackgroundCommandOutput: a background command's file from byte offset ``cursor`` to its end, opened
        by its path now, and the offset after it. Raises LookupError / ValueError with execd's messages
        (runtime/command_status.go at 3bb6fad)."""
        cmd = self.get(cid)
        if cmd is None:
            raise LookupError(f"command not found: {cid}")
        if not cmd.background:
            raise ValueError(f"command {cid} is not running in background")
        path = cmd.path("output")
        out = bytearray()
        try:
            if cursor < 0:  # os.File.Seek(negative), once the file is open
                os.close(self.files.open_read(path))
                raise ValueError(f"error seek file: seek {path}: invalid argument")
            for data in self.files.read(path, cursor):
                out += data
        except OSError as exc:
            raise ValueError(
                f"error open combined output file for command {cid}: {path_error('open', path, exc)}"
            ) from None
        return bytes(out), cursor + len(out)

    def interrupt(self, cid: str) -> None:
        """SIGTERM the command's process group, SIGKILL after 3 s (runtime/interrupt.go).
        Raises LookupError with execd's message."""
        cmd = self.get(cid)
        if cmd is None:
            raise LookupError("no such session")
        proc = cmd.proc
        if not cmd.running or proc is None or proc.poll() is not None:
            raise LookupError(f"command session {cid} is not running")
        cmd.kill(signal.SIGTERM)
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            if cmd.done.wait(0.05) or proc.poll() is not None:
                break
        else:
            cmd.kill(signal.SIGKILL)
        # wait for the bookkeeping so a status call right after sees the final state
        if cmd.background:
            cmd.done.wait(1.0)

    def kill_all(self) -> None:
        with self._lock:
            cmds = list(self._cmds.values())
        for c in cmds:
            if c.running:
                c.kill(signal.SIGKILL)
