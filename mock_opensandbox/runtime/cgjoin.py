"""How a sandbox's processes get into its cgroups (cgroups.py) before they exec, for SandboxRuntime: a
command's (argv, preexec_fn, context for the Popen) and PID 1's way in (Holder.start's arguments).

cgroup v1: nothing moves on the path of a command or a create. A v1 move waits for an RCU grace period
(5-15 ms here) unless another came a moment before; so a command is forked by the sandbox's spawner
thread, which sits in the cgroups for good (spawner.py), and PID 1 moves itself in while it builds the
view (scripts/view.py CgroupJoin). cgroup v2: a /bin/sh stage in front of a command moves it in, a PTY
shell and PID 1 join in a preexec_fn. Standard library only.
"""

from __future__ import annotations

import contextlib
import subprocess
from typing import Any

from mock_opensandbox.runtime._util import take_ctty

_pdeathsig_ok: dict[str, bool] = {}


def setpriv_pdeathsig(setpriv: str) -> bool:
    """Does this setpriv have --pdeathsig (util-linux >= 2.33)? Asked once per binary."""
    ok = _pdeathsig_ok.get(setpriv)
    if ok is None:
        try:
            out = subprocess.run(
                [setpriv, "--help"],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                timeout=10,
            ).stdout
            ok = b"--pdeathsig" in out
        except (OSError, subprocess.SubprocessError):
            ok = False
        _pdeathsig_ok[setpriv] = ok
    return ok


def command_join(cg: Any, spawner: Any, cmd: list[str], controlling_tty: bool) -> tuple[list[str], Any, Any]:
    """How a new sandbox process joins the cgroup ``cg`` (a cgroups.Cgroup or None) before it execs:
    (argv, preexec_fn, context for the Popen). v1 with a ``spawner``: the Popen runs in the spawner
    thread, already in the cgroups (the child is born there, nothing moves; ``None`` as the context
    says so). Else a PTY shell forks with a preexec_fn anyway (take_ctty): it joins there too; v2: a
    /bin/sh stage in front moves itself in and execs the rest (cgroups.Cgroup)."""
    if cg is not None and cg.thread_join and spawner is not None:
        return cmd, take_ctty if controlling_tty else None, None
    if cg is None:
        return cmd, take_ctty if controlling_tty else None, contextlib.nullcontext()
    if controlling_tty:
        join = cg.join_preexec()

        def both() -> None:
            join()
            take_ctty()

        return cmd, both, contextlib.nullcontext()
    if cg.thread_join:
        return cmd, None, cg.thread_inside()
    prefix = cg.join_argv()
    if prefix is None:
        return cmd, cg.join_preexec(), contextlib.nullcontext()
    return prefix + cmd, None, contextlib.nullcontext()


def holder_join(cg: Any, setpriv: str) -> dict[str, Any]:
    """How PID 1 joins the cgroup and gets PR_SET_PDEATHSIG (Holder.start's keyword arguments, plus
    ``view_env`` for view.py): without a preexec_fn where setpriv can set the signal (util-linux >=
    2.33) and no preexec join is needed (v1, or no cgroup), so the fork is a vfork; else the preexec_fn
    (a full fork of the mock)."""
    pdeathsig = {"pdeathsig_argv": [setpriv, "--pdeathsig", "KILL", "--"], "joining": None}
    if cg is not None and cg.thread_join:
        # v1: view.py moves PID 1 in itself while it builds the view (the move's RCU grace period
        # overlaps that work), before anything of the sandbox runs (scripts/view.py CgroupJoin);
        # the outer `unshare` stays in the mock's cgroups, like a container's containerd-shim
        joins = {"view_env": {"OSB_MOCK_CGROUP_JOIN": "\n".join(cg.procs)}}
        return {**pdeathsig, **joins} if setpriv_pdeathsig(setpriv) else {"join": None, **joins}
    if cg is None and setpriv_pdeathsig(setpriv):
        return pdeathsig
    return {"join": cg.join_preexec() if cg is not None else None}
