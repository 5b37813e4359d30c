"""Sandbox costs without weakening the resource limits (QUIRKS.md, Resource limits): on cgroup v1 a sandbox's processes
are forked by a thread of the mock that stays in the sandbox's cgroups (runtime/spawner.py), and PID 1 moves itself in
while it builds the view (scripts/view.py CgroupJoin), so no command and no create waits for a cgroup move. What must
hold: PID 1, the entrypoint and every command are in the sandbox's cgroups; the spawner thread is in them while the
sandbox lives and gone before they are removed; the forking caller never moves; the join variable of view.py is the
mock's alone."""

from __future__ import annotations

import os
import subprocess
import threading

import pytest

from mock_opensandbox.runtime import SandboxRuntime, cgroups
from tiers.toolkit.marks import needs_isolation
from tiers.toolkit.waits import wait_until

HOST = cgroups.host()
pytestmark = [
    needs_isolation,
    pytest.mark.skipif(HOST.version != 1 or not HOST.bases, reason="cgroup v1 limits unavailable here: " + HOST.note()),
]


def _cgroup_names(path: str) -> set[str]:
    """The last component of every hierarchy's cgroup of /proc/.../cgroup (v1 lines only)."""
    with open(path) as fh:
        return {line.rstrip("\n").split(":", 2)[2].rsplit("/", 1)[-1] for line in fh if not line.startswith("0::")}


def _children(pid: int) -> list[int]:
    with open("/proc/%d/task/%d/children" % (pid, pid)) as fh:
        return [int(x) for x in fh.read().split()]


def test_pid1_entrypoint_commands_and_the_spawner_are_in_the_sandbox_cgroups(tmp_path):
    name = "osb-mock-t1-spawner-%d" % os.getpid()
    rt = SandboxRuntime(str(tmp_path / "sb"), limits=cgroups.Limits(pids=64), cgroup_name=name)
    dirs = list(rt.cgroup.dirs) if rt.cgroup is not None else []
    try:
        assert dirs, rt.limits_note
        rt.start_entrypoint(["sleep", "60"])
        holder = rt.pid1.holder
        assert holder is not None
        assert _cgroup_names("/proc/%d/cgroup" % holder.pid) == {name}  # PID 1 (view.py joined)
        assert wait_until(lambda: len(_children(holder.pid)) >= 1, 10.0)
        for pid in _children(holder.pid):  # execd placeholder / entrypoint: born inside
            assert _cgroup_names("/proc/%d/cgroup" % pid) == {name}, pid
        p = rt.spawn(["cat", "/proc/self/cgroup"], stdout=subprocess.PIPE)
        out = p.communicate(timeout=30)[0].decode()
        assert {
            line.split(":", 2)[2].rsplit("/", 1)[-1] for line in out.splitlines() if not line.startswith("0::")
        } == {name}, out
        # the spawner: one thread of the mock in every hierarchy of the sandbox; this (forking) thread never
        spawners = [t for t in os.listdir("/proc/self/task") if name in open("/proc/self/task/%s/cgroup" % t).read()]
        assert len(spawners) == 1, spawners
        assert _cgroup_names("/proc/self/task/%s/cgroup" % spawners[0]) == {name}
        assert name not in open("/proc/thread-self/cgroup").read()
    finally:
        rt.cleanup()
    # removed with the sandbox, the spawner thread gone first (rmdir needs an empty cgroup)
    assert not [d for d in dirs if os.path.exists(d)]
    assert not [t for t in threading.enumerate() if t.name.startswith("osb-spawner-") and t.name.endswith(name[-12:])]


def test_the_cgroup_join_variable_of_the_view_is_never_the_sandbox_environment(tmp_path):
    """A sandbox's environment naming a file as OSB_MOCK_CGROUP_JOIN: PID 1 (view.py, still privileged
    and on the host's tree) never writes it, with or without limits."""
    bait = tmp_path / "cgroup.procs"
    bait.write_text("")
    for limits in (None, cgroups.Limits(pids=64)):
        rt = SandboxRuntime(
            str(tmp_path / ("sb-%s" % bool(limits))),
            env={"OSB_MOCK_CGROUP_JOIN": str(bait)},
            limits=limits,
            cgroup_name="osb-mock-t1-bait-%d" % os.getpid(),
        )
        try:
            p = rt.spawn(["true"])
            assert p.wait(timeout=30) == 0
            assert rt.pid1.holder is not None and rt.pid1.holder.alive()
        finally:
            rt.cleanup()
        assert bait.read_text() == ""
