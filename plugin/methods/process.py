"""Processes: process.list (ps, or /proc, inside the sandbox: execd has no process table),
process.signal / kill (an OS pid through ``kill``, an execd command id through execd's interrupt),
process.stdin (not offered by execd).
"""

from __future__ import annotations

from context import Context
from epp import Request
from errors import EppError, bad_input, unsupported
from params import sandbox_id

from .exec import run_internal

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


_PS_MARK = "__osb_ps__"
_PS_SCRIPT = r"""# __osb_ps__
echo "SELF $$"
if ps -eo pid=,ppid=,stat=,args= 2>/dev/null; then exit 0; fi
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  st=$(sed 's/.*) //' "$d/stat" 2>/dev/null | cut -d' ' -f1-2) || continue
  [ -n "$st" ] || continue
  set -- $st
  a=$(tr '\000' ' ' < "$d/cmdline" 2>/dev/null)
  [ -n "$a" ] || a="[$(cat "$d/comm" 2>/dev/null)]"
  echo "$p $2 $1 $a"
done
"""


def m_process_list(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    """Emulated with ps (or /proc) inside the sandbox: execd has no process table."""
    sid = sandbox_id(p)
    client = ctx.client()
    execd = ctx.guard(lambda: client.execd(sid), op="process")
    code, out, err = run_internal(ctx, execd, _PS_SCRIPT)
    lines = out.splitlines()
    me = None
    if lines and lines[0].startswith("SELF "):
        me = lines.pop(0)[5:].strip()
    procs = []
    for line in lines:
        fields = line.split(None, 3)
        if len(fields) < 3 or not fields[0].isdigit():
            continue
        pid, ppid, stat = fields[0], fields[1], fields[2]
        args = fields[3] if len(fields) > 3 else ""
        if pid == me or ppid == me or _PS_MARK in args:
            continue
        state = {"Z": "zombie", "T": "stopped", "t": "stopped", "X": "dead"}.get(stat[:1], "running")
        procs.append(
            {
                "pid": int(pid),
                "ppid": int(ppid) if ppid.isdigit() else None,
                "command": args.strip(),
                "status": state,
                "state": stat,
            }
        )
    if not procs and code != 0:
        raise EppError(
            -32000,
            f"Could not list processes in the sandbox (exit {code}): {err.strip()[:200]}",
            suggestion="The image needs ps or a readable /proc.",
        )
    return {"processes": procs}


def m_process_signal(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    """numeric pid -> `kill -SIG pid` in the sandbox; an execd command id -> execd's interrupt."""
    import re

    sid = sandbox_id(p)
    pid = p.get("pid")
    sig = p.get("signal", 15)
    if isinstance(sig, bool) or not isinstance(sig, int) or not 0 <= sig <= 64:
        raise bad_input("signal must be a signal number between 0 and 64.")
    client = ctx.client()
    if isinstance(pid, int) and not isinstance(pid, bool) or isinstance(pid, str) and pid.strip().isdigit():
        execd = ctx.guard(lambda: client.execd(sid), op="process")
        code, out, err = run_internal(ctx, execd, f"kill -{sig} {int(pid)}")
        if code != 0:
            text = (err or out).strip()[:300]
            if "no such process" in text.lower():
                raise EppError(-32002, f"No process {int(pid)} in sandbox {sid}.")
            raise EppError(-32000, f"kill -{sig} {int(pid)} failed (exit {code}): {text}")
        return {}
    if isinstance(pid, str) and re.fullmatch(r"[0-9a-fA-F]{8,64}", pid.strip()):
        if sig not in (9, 15):
            raise unsupported(
                "process.signal",
                f"execd can only stop a command it started (signal 9 or 15), not send signal {sig}.",
                "Use the numeric pid from process.list to send other signals.",
            )
        execd = ctx.guard(lambda: client.execd(sid), op="process")
        try:
            execd.interrupt(pid.strip())
        except Exception as exc:  # noqa: BLE001 - mapped below
            # rec 10: an unknown id is HTTP 500 "... no such session"
            from osb import HttpError

            if isinstance(exc, HttpError) and exc.status in (404, 500) and "no such" in exc.message.lower():
                raise EppError(-32002, f"No running command {pid.strip()} in sandbox {sid}.") from None
            raise ctx.error(exc, "process") from None
        return {}
    raise bad_input(
        f"Unknown process id {str(pid)[:70]!r}: pass an OS pid (a number) or the process_id returned by exec.start."
    )


def m_process_kill(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    return m_process_signal(ctx, req, {**p, "signal": 9})


def m_process_stdin(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    raise unsupported(
        "process.stdin",
        "OpenSandbox execd has no way to write to a running command's stdin.",
        "Pipe the input in the command itself (e.g. printf ... | cmd), or write a file first.",
    )
