"""Commands: exec.run (the whole output in the answer) and exec.start (exec.output / exec.exit
notifications after the answer), foreground or detached (``sessions``: a background command that
outlives this process, followed by polling its logs). ``run_internal`` runs the helper scripts
other methods need (process list, kill, user lookup).

``rec NN`` = recording NN, fixtures/NN_*.json; the other facts are rows of mock_opensandbox/QUIRKS.md.
"""

from __future__ import annotations

import json
import os
import threading
import time

from context import Context
from epp import MAX_LINE_BYTES, Deferred, Request
from errors import EppError, bad_input
from params import check_envs, is_number, sandbox_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Callable

    from osb import CommandRun, Execd

OUTPUT_CHUNK_CHARS = 1_000_000  # exec.output notifications are split at this size
STOP_GRACE = 3.0  # seconds between an interrupt and giving up on the stream


class ExecSpec:
    """Validated exec.run / exec.start params."""

    def __init__(self, p: dict[str, Any]):
        self.sandbox_id = sandbox_id(p)
        cmd, args, command = p.get("cmd"), p.get("args"), p.get("command")
        self.argv: list[str] | None
        self.command: str | None
        if isinstance(command, str) and command.strip() and not cmd:
            self.argv, self.command = None, command  # our extension: a shell string
        else:
            if not isinstance(cmd, str) or not cmd:
                raise EppError(-32602, "Invalid params: cmd must be a non-empty string.")
            if args is None:
                args = []
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise EppError(-32602, "Invalid params: args must be a list of strings.")
            if any("\0" in a for a in [cmd, *args]):
                raise bad_input("A command argument contains a NUL byte.")
            self.argv, self.command = [cmd, *args], None
        self.env = check_envs(p.get("env"), "env")
        cwd = p.get("cwd")
        self.cwd = cwd if isinstance(cwd, str) else ""
        user = p.get("user")
        self.user = user.strip() if isinstance(user, str) else str(user) if isinstance(user, int) else ""
        timeout = p.get("timeout")
        if timeout is None:
            timeout = 60
        if not is_number(timeout) or timeout < 0:
            raise EppError(-32602, "Invalid params: timeout must be a number of seconds (0 = none).")
        self.timeout = float(timeout)
        self.detached = p.get("detached") is True or p.get("background") is True


def _user_ids(ctx: Context, execd: Execd, user: str) -> tuple[int | None, int | None]:
    """ "" -> default; "1000" / "1000:1000" -> ids; "root" -> 0; other names are looked up with id(1)."""
    if not user:
        return None, None
    uid_s, _, gid_s = user.partition(":")
    if uid_s.isdigit() and (not gid_s or gid_s.isdigit()):
        return int(uid_s), (int(gid_s) if gid_s else None)
    if user == "root":
        return 0, 0
    from osb import shell_join

    code, out, _ = run_internal(ctx, execd, f"id -u {shell_join([user])} && id -g {shell_join([user])}")
    ids = out.split()
    if code != 0 or len(ids) != 2 or not all(i.isdigit() for i in ids):
        raise bad_input(
            f"User {user[:40]!r} does not exist in the sandbox.",
            "Pass a user name that exists in the image, or a numeric uid.",
        )
    return int(ids[0]), int(ids[1])


def _start(ctx: Context, spec: ExecSpec, *, background: bool = False) -> CommandRun:
    client = ctx.client()
    execd = ctx.guard(lambda: client.execd(spec.sandbox_id), op="exec")
    uid, gid = _user_ids(ctx, execd, spec.user)
    # execd enforces the timeout too (rec 09); we enforce it ourselves as well (the host never does).
    timeout_ms = int(spec.timeout * 1000) if spec.timeout > 0 else 0
    return ctx.guard(
        lambda: execd.start(
            argv=spec.argv,
            command=spec.command,
            envs=spec.env,
            cwd=spec.cwd,
            uid=uid,
            gid=gid,
            timeout_ms=timeout_ms,
            background=background,
        ),
        op="exec",
    )


_END, _WAKE = object(), object()


class Pump:
    """Reads a CommandRun on the caller's own thread: ``get(timeout)`` waits for the next event
    with a deadline, and ``wake()`` (another thread: $/cancel) ends such a wait early. No reader
    thread: starting one, and handing every event over a queue, was most of what a short command
    cost on top of its HTTP round trip. A slow reader of our stdout still slows the SSE read, and
    so execd, down (nothing is read ahead)."""

    def __init__(self, run: CommandRun) -> None:
        self.run = run
        self._lock = threading.Lock()
        self._pipe: tuple[int, int] | None = None  # what wake() writes to; made by the first get()
        self._woken = self._unread = self._closed = False

    def get(self, timeout: float | None) -> object:
        """The next event dict, ``_END`` (the stream is over), the read's exception, ``_WAKE``, or
        None when nothing came within ``timeout`` seconds."""
        if self._take_wake():
            return _WAKE
        with self._lock:
            if self._pipe is None and not self._closed:
                self._pipe = os.pipe()
            wake = self._pipe[0] if self._pipe is not None else None
        try:
            ev = self.run.next(timeout, wake)
        except EOFError:
            return _END
        except Exception as exc:  # noqa: BLE001 - handed to the reader, which reports the lost stream
            return exc
        if ev is None and self._take_wake():
            return _WAKE
        return ev

    def _take_wake(self) -> bool:
        with self._lock:
            if not self._woken:
                return False
            self._woken = False
            if self._unread and self._pipe is not None:
                os.read(self._pipe[0], 1)
            self._unread = False
            return True

    def more_of(self, kind: str, text: str, limit: int = OUTPUT_CHUNK_CHARS) -> str:
        """Join output of the same stream that is already read (v1.1.0 sends one event per line)."""
        parts, size = [text], len(text)
        while size < limit:
            more = self.run.pending_output(kind)
            if more is None:
                break
            parts.append(more)
            size += len(more)
        return "".join(parts)

    def wake(self) -> None:
        with self._lock:
            if self._closed or self._woken:
                return
            self._woken = True
            if self._pipe is not None:
                try:
                    self._unread = os.write(self._pipe[1], b"w") == 1
                except OSError:
                    pass

    def close(self) -> None:
        """Release the wake pipe (a late wake() is then a no-op, never a write to a reused fd)."""
        with self._lock:
            self._closed = True
            pipe, self._pipe = self._pipe, None
        if pipe is not None:
            for fd in pipe:
                os.close(fd)


def drive(
    ctx: Context,
    req: Request,
    run: CommandRun,
    pump: Pump,
    spec: ExecSpec,
    started: float,
    on_output: Callable[[str, str], object],
    first: object = None,
) -> tuple[int, str | None]:
    """Forward output until the terminal event; returns (exit_code, problem or None).

    Timeout: at the deadline the command is interrupted (DELETE /command?id=); if execd has not
    ended the stream STOP_GRACE later we stop reading. A timed-out command exits 124. Closes ``pump``.
    """
    try:
        return _drive(req, run, pump, spec, started, on_output, first)
    finally:
        pump.close()


def _drive(
    req: Request,
    run: CommandRun,
    pump: Pump,
    spec: ExecSpec,
    started: float,
    on_output: Callable[[str, str], object],
    first: object,
) -> tuple[int, str | None]:
    from osb import StartFailure, terminal_exit_code

    deadline = started + spec.timeout if spec.timeout > 0 else None
    stop_at, timed_out = None, False
    req.on_cancel(pump.wake)
    item = first
    while True:
        now = time.monotonic()
        if item is None:
            if req.cancelled.is_set() and stop_at is None:
                threading.Thread(target=run.stop, daemon=True).start()
                stop_at = now + STOP_GRACE
            if deadline is not None and now >= deadline and stop_at is None:
                timed_out = True
                threading.Thread(target=run.stop, daemon=True).start()
                stop_at = now + STOP_GRACE
            if stop_at is not None and now >= stop_at:
                run.abort()
                return (124 if timed_out else 130), None
            waits = [t - now for t in (deadline if stop_at is None else None, stop_at) if t is not None]
            item = pump.get(max(0.01, min(waits)) if waits else None)
            if item is None or item is _WAKE:
                item = None
                continue
        current: Any = item  # an event dict, _END or the reader's exception
        item = None
        if current is _END:
            return _lost_stream(run, "the output stream ended before the command finished")
        if isinstance(current, Exception):
            return _lost_stream(run, f"reading the output failed ({type(current).__name__})")
        kind = current.get("type")
        if kind in ("stdout", "stderr"):
            on_output(kind, pump.more_of(kind, current["text"]))
            continue
        try:
            code = terminal_exit_code(current)
        except StartFailure as exc:
            on_output("stderr", f"{exc}\n")
            return 126, None
        if code is None:
            continue
        late = deadline is not None and time.monotonic() >= deadline - 0.25
        if code != 0 and (timed_out or (late and code in (-1, 137))):
            code = 124
        return code, None


def _lost_stream(run: CommandRun, why: str) -> tuple[int, str]:
    """No terminal event: the output may be incomplete, so this is always reported as a problem.
    execd still knows how the command ended (rec 07: foreground commands have a status too, but no
    logs): its exit code when it exited by itself; -1 when it was killed (execd kills a foreground
    command whose stream broke, so a signal here says nothing about the command) or is unknown."""
    if run.command_id:
        for _ in range(10):
            try:
                st = run.execd.status(run.command_id)
            except Exception:  # noqa: BLE001 - the status is a best-effort hint; -1 without it
                break
            if st.get("running") is False:
                code = st.get("exit_code")
                if isinstance(code, int) and not isinstance(code, bool) and code >= 0:
                    return code, why
                return -1, why
            time.sleep(0.2)
    return -1, why


def _await_start(ctx: Context, spec: ExecSpec, run: CommandRun, pump: Pump) -> object:
    """A command that cannot start ends with an error event right after init: answer that as an error
    instead of a process id. Returns the first event (or None) for drive()."""
    from osb import StartFailure, terminal_exit_code

    first = pump.get(0.25)
    if isinstance(first, dict) and first.get("type") == "error":
        try:
            terminal_exit_code(first)
        except StartFailure as exc:
            pump.close()
            raise EppError(
                -32000, f"The command could not be started: {exc}", suggestion="Check the command name, cwd and user."
            ) from None
    return None if first is _WAKE else first


def m_exec_start(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any] | Deferred:
    spec = ExecSpec(p)
    if spec.detached:
        return _start_detached(ctx, spec)
    started = time.monotonic()
    run = _start(ctx, spec)
    pump = Pump(run)
    first = _await_start(ctx, spec, run, pump)
    pid = run.command_id or f"cmd-{os.urandom(8).hex()}"

    def emit(kind: str, text: str) -> None:
        for i in range(0, len(text), OUTPUT_CHUNK_CHARS):
            ctx.notify("exec.output", {"process_id": pid, "stream": kind, "data": text[i : i + OUTPUT_CHUNK_CHARS]})

    def stream() -> None:
        ctx.runs.add(run)
        try:
            code, problem = drive(ctx, req, run, pump, spec, started, emit, first)
        finally:
            ctx.runs.discard(run)
        if problem:
            emit("stderr", f"[opensandbox provider] {problem}; the output may be incomplete\n")
        ctx.notify("exec.exit", {"process_id": pid, "exit_code": int(code)})

    # an event in hand (output or the end) is forwarded at once: the answer goes out with it
    return Deferred({"process_id": pid}, stream, prompt=isinstance(first, dict))


def m_exec_run(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    spec = ExecSpec(p)
    if spec.detached:
        raise bad_input("exec.run cannot run a detached command; use exec.start with detached: true.")
    started = time.monotonic()
    run = _start(ctx, spec)
    pump = Pump(run)  # $/cancel: drive() wakes and interrupts the command
    first = _await_start(ctx, spec, run, pump)
    out: dict[str, Any] = {"stdout": [], "stderr": []}
    ctx.runs.add(run)
    try:
        code, problem = drive(ctx, req, run, pump, spec, started, lambda k, t: out[k].append(t), first)
    finally:
        ctx.runs.discard(run)
    if problem:
        ended = f" The command exited with {code}, but its output may be incomplete." if code != -1 else ""
        raise EppError(
            -32000,
            f"Lost the command's output: {problem}.{ended}",
            sdk_code="E5001",
            suggestion="Check the connection to the sandbox; run the command again if it is safe to repeat.",
            exit_code=code if code != -1 else None,
        )
    return _fit_result("".join(out["stdout"]), "".join(out["stderr"]), code)


def _fit_result(stdout: str, stderr: str, code: int) -> dict[str, Any]:
    """Keep the exec.run answer under the 8 MiB line limit (the head of the output is kept)."""
    result: dict[str, Any] = {"stdout": stdout, "stderr": stderr, "exit_code": int(code)}
    budget = MAX_LINE_BYTES - 64 * 1024
    size = len(json.dumps(result, ensure_ascii=False).encode("utf-8", "replace"))
    while size > budget:
        ratio = budget / size * 0.95
        dropped = 0
        for key in ("stdout", "stderr"):
            keep = int(len(result[key]) * ratio)
            dropped += len(result[key]) - keep
            result[key] = result[key][:keep]
        result["stderr"] += f"\n[opensandbox provider: {dropped} characters of output dropped (EPP 8 MiB limit)]\n"
        result["truncated"] = True
        size = len(json.dumps(result, ensure_ascii=False).encode("utf-8", "replace"))
    return result


def run_internal(ctx: Context, execd: Execd, script: str, timeout: float = 30.0) -> tuple[int, str, str]:
    """Run a helper shell script in the sandbox (process list, kill, user lookup)."""
    run = ctx.guard(lambda: execd.start(argv=["sh", "-c", script], timeout_ms=int(timeout * 1000)), op="process")
    out: dict[str, Any] = {"stdout": [], "stderr": []}
    spec = type("Spec", (), {"timeout": timeout})()
    code, problem = drive(ctx, Request(None), run, Pump(run), spec, time.monotonic(), lambda k, t: out[k].append(t))
    if problem:
        raise EppError(-32000, f"A helper command in the sandbox failed: {problem}.", sdk_code="E5001")
    return code, "".join(out["stdout"]), "".join(out["stderr"])


def _start_detached(ctx: Context, spec: ExecSpec) -> Deferred:
    """`sessions`: a background command (it survives this process), followed by polling its merged
    logs and status (rec 10)."""
    run = _start(ctx, spec, background=True)
    for event in run.events():  # init, ping, execution_complete arrive at once (rec 10)
        if event.get("type") == "error":
            from osb import StartFailure, terminal_exit_code

            try:
                terminal_exit_code(event)
            except StartFailure as exc:
                raise EppError(-32000, f"The command could not be started: {exc}") from None
    run.stream.close()
    if not run.command_id:
        raise EppError(-32000, "execd started a background command but returned no command id.")
    pid, execd = run.command_id, run.execd

    def follow() -> None:
        cursor, delay, failing_since = None, 0.1, None
        while not ctx.closing.is_set():
            polled = time.monotonic()
            try:
                status = execd.status(pid)
                text, cursor = execd.logs(pid, cursor)
            except Exception as exc:  # noqa: BLE001 - retried below, then mapped and reported
                # the calls retry by themselves; keep polling through an outage of up to http_timeout
                now = time.monotonic()
                failing_since = failing_since or polled
                if now - failing_since < execd.client.http.timeout and not ctx.closing.is_set():
                    time.sleep(delay)
                    delay = min(delay * 1.5, 1.0)
                    continue
                err = ctx.error(exc, "process")
                note = f"[opensandbox provider] lost track of the command: {err.message}\n"
                ctx.notify("exec.output", {"process_id": pid, "stream": "stderr", "data": note})
                ctx.notify("exec.exit", {"process_id": pid, "exit_code": -1})
                return
            failing_since = None
            if text:
                ctx.notify("exec.output", {"process_id": pid, "stream": "stdout", "data": text})
                delay = 0.1
            if status.get("running") is False:
                code = status.get("exit_code")
                if not isinstance(code, int) or code == -1:
                    from osb import signal_exit_code

                    code = signal_exit_code(str(status.get("error") or "")) or (code if isinstance(code, int) else 0)
                ctx.notify("exec.exit", {"process_id": pid, "exit_code": int(code)})
                return
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)

    return Deferred({"process_id": pid, "detached": True}, follow)
