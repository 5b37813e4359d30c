"""Bash sessions (POST /session, /session/:id/run, DELETE /session/:id): execd's
pkg/runtime/bash_session.go as model code, no HTTP. A session keeps an environment snapshot and a
working directory; every run writes a wrapper script (exports, cd, the command, then an env dump,
the pwd and the exit code between markers) to $TMPDIR/execd_bash_<n>.sh and runs
``bash --noprofile --norc <script>`` with stderr merged into stdout, one event per line.
Behaviour checked against the real binary by tiers/diff (session.* cases)."""

from __future__ import annotations

import errno
import os
import random
import re
import signal
import subprocess
import threading
import time
import uuid
from typing import Callable

from mock_opensandbox.execd.commands import Sigint, sigint_kwargs, signal_text
from mock_opensandbox.execd.deadlines import DEADLINES
from mock_opensandbox.execd.errors import CONTEXT_NOT_FOUND, MSG, RUNTIME_ERROR, ExecdError, GoError
from mock_opensandbox.execd.files import SandboxFS
from mock_opensandbox.execd.fsat import write_fd
from mock_opensandbox.execd.paths import PathExpandError, expand_path, go_duration
from mock_opensandbox.execd.runfiles import RunFiles
from mock_opensandbox.runtime import SandboxRuntime
from mock_opensandbox.wire.gojson import GO_REPLACE

_RANDOM = random.SystemRandom()  # names apart from the seeded global random (hypothesis seeds it)

__all__ = ["BashSession", "SessionRegistry", "RunHooks", "SessionTimeout"]

ENV_START, ENV_END = "__ENV_DUMP_START__", "__ENV_DUMP_END__"
EXIT_PREFIX, PWD_PREFIX = "__EXIT_CODE__:", "__PWD__:"
NOT_PERSISTED = {"PS1", "PS2", "PS3", "PS4", "PROMPT_COMMAND"}
MAX_ENV_VALUE = 8 * 1024
MAX_LINE = 16 * 1024 * 1024  # bufio.Scanner buffer limit
_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
DEFAULT_WAIT_MS = 24 * 3600 * 1000


class SessionTimeout(Exception):
    """The run outlived its timeout (execd answers it after the stream started)."""


class RunHooks:
    """What a run tells its stream. ``on_lines``: the output lines of one read of the pipe at once (one event each,
    written together); without it each goes to ``on_stdout``."""

    def __init__(
        self,
        on_init: Callable[[str], None],
        on_stdout: Callable[[str], None],
        on_error: Callable[[str, list[str]], None],
        on_complete: Callable[[int], None],
        on_lines: Callable[[list[str]], None] | None = None,
    ):
        self.on_init, self.on_stdout, self.on_error, self.on_complete = on_init, on_stdout, on_error, on_complete
        self.on_lines = on_lines

    def lines(self, texts: list[str]) -> None:
        if self.on_lines is not None:
            self.on_lines(texts)
            return
        for t in texts:
            self.on_stdout(t)


def _shell_escape(v: str) -> str:
    return "'" + v.replace("'", "'\"'\"'") + "'"


def _go_unquote(raw: str) -> str | None:
    """strconv.Unquote of a double-quoted bash `declare -x` value (enough for bash's quoting)."""
    if len(raw) < 2 or raw[0] != '"' or raw[-1] != '"':
        return None
    body, out, i = raw[1:-1], [], 0
    while i < len(body):
        c = body[i]
        if c == '"':
            return None
        if c == "\\" and i + 1 < len(body):
            e = body[i + 1]
            simple = {
                "n": "\n",
                "t": "\t",
                "r": "\r",
                "\\": "\\",
                '"': '"',
                "a": "\a",
                "b": "\b",
                "f": "\f",
                "v": "\v",
                "'": None,
            }
            rep = simple.get(e)  # None: not an escape, or one Unquote refuses here
            if rep is not None:
                out.append(rep)
                i += 2
                continue
            return None
        out.append(c)
        i += 1
    return "".join(out)


def parse_export_line(line: str) -> tuple[str, str] | None:
    prefix = "declare -x "
    if not line.startswith(prefix):
        return None
    rest = line[len(prefix) :].strip()
    if not rest:
        return None
    name, value = rest, ""
    if "=" in rest:
        name, raw = rest.split("=", 1)
        un = _go_unquote(raw)
        value = un if un is not None else raw.strip('"')
    if not _KEY.match(name):
        return None
    return name, value


class BashSession:
    def __init__(self, sid: str, env: dict[str, str], cwd: str):
        self.id = sid
        self.env = env
        self.cwd = cwd
        self.started = True
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None

    def script(self, command: str, env: dict[str, str], cwd: str) -> str:
        lines = []
        for k in sorted(env):
            v = env[k]
            if _KEY.match(k) and k not in NOT_PERSISTED and len(v.encode()) <= MAX_ENV_VALUE:
                lines.append(f"export {k}={_shell_escape(v)}\n")
        if cwd:
            lines.append(f"cd {_shell_escape(cwd)}\n")
        lines.append(command if command.endswith("\n") else command + "\n")
        lines.append("__USER_EXIT_CODE__=$?\n")
        lines.append(f'printf "\\n%s\\n" "{ENV_START}"\n')
        lines.append("export -p\n")
        lines.append(f'printf "%s\\n" "{ENV_END}"\n')
        lines.append(f'printf "{PWD_PREFIX}%s\\n" "$(pwd)"\n')
        lines.append(f'printf "{EXIT_PREFIX}%s\\n" "$__USER_EXIT_CODE__"\n')
        lines.append('exit "$__USER_EXIT_CODE__"\n')
        return "".join(lines)


class SessionRegistry:
    def __init__(self, runtime: SandboxRuntime, sigint: Sigint | None = None, files: RunFiles | None = None):
        self.runtime = runtime
        self.files = files  # execd's files made ahead in the sandbox's /tmp (runfiles.py): a run's script takes one
        self.sigint = sigint if sigint is not None else Sigint()  # execd's (commands.py): a session's bash inherits it
        self._sessions: dict[str, BashSession] = {}
        self._lock = threading.Lock()

    def _env(self) -> dict[str, str]:
        return {k: v for k, v in self.runtime.base_env().items() if _KEY.match(k)}

    def home(self) -> str:
        return self._env().get("HOME", "/root") if self.runtime.isolated else "/root"

    def create(self, cwd: str) -> str:
        """createBashSession; raises ExecdError(500) with execd's message."""
        try:
            resolved = expand_path(cwd, self._env(), self.home())
        except PathExpandError as exc:
            raise ExecdError(
                500, RUNTIME_ERROR, MSG["create_session"].format(f"resolve request cwd {cwd}: {exc}")
            ) from exc
        if resolved:
            err = self._mkdir_all(resolved)
            if err:
                raise ExecdError(500, RUNTIME_ERROR, MSG["create_session"].format(err))
        s = BashSession(str(uuid.uuid4()), self._env(), resolved)
        with self._lock:
            self._sessions[s.id] = s
        return s.id

    def _mkdir_all(self, spath: str) -> str | None:
        """os.MkdirAll(path, 0777) with a 022 umask, by fds on the sandbox's "/" (fsops.mkdir_all:
        openat2 RESOLVE_IN_ROOT, never a host path code inside could redirect); Go's error text or None."""
        try:
            SandboxFS(self.runtime).mkdir_all(spath if spath.startswith("/") else "/" + spath)
        except GoError as e:
            return e.text
        return None

    def get(self, sid: str) -> BashSession | None:
        with self._lock:
            return self._sessions.get(sid)

    def delete(self, sid: str) -> None:
        with self._lock:
            s = self._sessions.pop(sid, None)
        if s is None:
            raise ExecdError(404, CONTEXT_NOT_FOUND, MSG["session_not_found"].format(sid))
        with s.lock:
            proc, s.proc = s.proc, None
            s.started, s.env, s.cwd = False, {}, ""
        if proc is not None and proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def close_all(self) -> None:
        with self._lock:
            ids = list(self._sessions)
        for sid in ids:
            try:
                self.delete(sid)
            except ExecdError:
                pass

    def _script_file(self, text: str) -> str:
        """os.CreateTemp("", "execd_bash_*.sh") holding ``text``: O_EXCL, a new random name on EEXIST (Go tries
        10000). Created by an fd openat2 found in the sandbox's /tmp (a /tmp swapped for a symlink to "/" by code
        inside stays inside); never an existing file or link. Its sandbox path."""
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        data = text.encode("utf-8", "surrogateescape")
        for _ in range(10000):
            path = "/tmp/execd_bash_%d.sh" % _RANDOM.randrange(1 << 32)
            try:
                fd = (
                    self.files.open_at(path, flags, 0o600)
                    if self.files
                    else SandboxFS(self.runtime).fd(path, flags, 0o600)
                )
            except FileExistsError:
                continue
            try:
                write_fd(fd, data, 0o600)
            finally:
                os.close(fd)
            return path
        raise FileExistsError(errno.EEXIST, "create script file: too many temp names taken")

    def run(
        self,
        sid: str,
        command: str,
        cwd: str,
        timeout_ms: int,
        hooks: RunHooks,
        gone: Callable[[], bool] = lambda: False,
    ) -> None:
        """session.run: raises ExecdError "context not found" before the stream, SessionTimeout after it."""
        s = self.get(sid)
        if s is None:
            raise LookupError("context not found")
        with s.lock:
            if not s.started:
                raise LookupError("session not started")
            env = dict(s.env)
            wd = s.cwd
            if cwd:
                try:
                    wd = expand_path(cwd, self._env(), self.home())
                except PathExpandError as exc:
                    raise RuntimeError(f"resolve cwd: {exc}") from exc
        t0 = time.monotonic()
        hooks.on_init(s.id)
        wait_ms = timeout_ms if timeout_ms > 0 else DEFAULT_WAIT_MS
        rt = self.runtime
        cd = wd if (rt.isolated or not wd) else rt.resolve(wd)
        # os.CreateTemp("", "execd_bash_*.sh") (pkg/runtime/bash_session.go at 3bb6fad), the script written: a file
        # made ahead (runfiles.py) linked under such a name, else made here (_script_file)
        text = s.script(command, env, cd)
        names = ("execd_bash_%d.sh" % _RANDOM.randrange(1 << 32) for _ in range(10000))
        made = self.files.named(names, text.encode("utf-8", "surrogateescape"), 0o600) if self.files else None
        script_sandbox = made or self._script_file(text)
        host_script = script_sandbox if rt.isolated else rt.resolve(script_sandbox)
        proc = rt.spawn(
            ["bash", "--noprofile", "--norc", script_sandbox if rt.isolated else host_script],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            **sigint_kwargs(rt, self.sigint),
        )
        with s.lock:
            s.proc = proc
        timed_out = threading.Event()

        def on_timeout() -> None:
            timed_out.set()
            try:
                proc.kill()  # exec.CommandContext kills the process only (children keep the pipe open)
            except OSError:
                pass

        timer = DEADLINES.add(wait_ms / 1000.0, on_timeout)  # one thread for all, not a thread per run
        env_lines: list[str] = []
        pwd_line, exit_code, in_env, too_long = "", None, False, False
        buf = b""
        try:
            assert proc.stdout is not None
            while True:
                chunk = proc.stdout.read1(65536) if hasattr(proc.stdout, "read1") else proc.stdout.read(65536)
                if not chunk:
                    break
                buf += chunk
                # the complete lines of the buffer at once (bufio.Scanner's ScanLines: LF ends a line, a CR before
                # it is dropped); the output ones go to the stream together, after the read
                raws = buf.split(b"\n")
                buf = raws.pop()
                out: list[str] = []
                for raw in raws:
                    if raw.endswith(b"\r"):
                        raw = raw[:-1]
                    line = raw.decode("utf-8", GO_REPLACE)
                    if line == ENV_START:
                        in_env = True
                    elif line == ENV_END:
                        in_env = False
                    elif line.startswith(EXIT_PREFIX):
                        try:
                            exit_code = int(line[len(EXIT_PREFIX) :])
                        except ValueError:
                            pass
                    elif line.startswith(PWD_PREFIX):
                        pwd_line = line[len(PWD_PREFIX) :]
                    elif in_env:
                        env_lines.append(line)
                    elif line:
                        out.append(line)
                if out and not gone():
                    hooks.lines(out)
                if len(buf) > MAX_LINE:
                    too_long = True
                    break
            if buf and not too_long:
                line = (buf[:-1] if buf.endswith(b"\r") else buf).decode("utf-8", GO_REPLACE)
                if (
                    line
                    and not in_env
                    and not line.startswith((EXIT_PREFIX, PWD_PREFIX))
                    and line not in (ENV_START, ENV_END)
                ):
                    hooks.on_stdout(line)
            rc = proc.wait()
        finally:
            timer.cancel()
            with s.lock:
                if s.proc is proc:
                    s.proc = None
            if proc.stdout is not None:
                proc.stdout.close()
        if too_long:
            raise RuntimeError("read stdout: bufio.Scanner: token too long")
        if timed_out.is_set():
            raise SessionTimeout(f"timeout after {go_duration(wait_ms)}")
        if exit_code is None:
            exit_code = rc if rc >= 0 else -1
        updated = {}
        for ln in env_lines:
            kv = parse_export_line(ln)
            if kv and kv[0] not in NOT_PERSISTED and len(kv[1].encode()) <= MAX_ENV_VALUE:
                updated[kv[0]] = kv[1]
        with s.lock:
            if updated:
                s.env = updated
            if pwd_line:
                s.cwd = (
                    pwd_line
                    if rt.isolated
                    else rt.paths.to_sandbox(pwd_line)
                    if pwd_line.startswith(rt.root)
                    else pwd_line
                )
        if exit_code != 0:
            if rc > 0:
                msg = f"exit status {rc}"
            elif rc < 0:
                msg = f"signal: {signal_text(-rc)}"
            else:
                msg = f"command exited with code {exit_code}"
            hooks.on_error(str(exit_code), [msg])
            return
        hooks.on_complete(int((time.monotonic() - t0) * 1000))
