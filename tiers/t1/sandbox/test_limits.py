"""QUIRKS.md, Resource limits: resourceLimits and the server's pids_limit applied with cgroups, and hostile
code held by them. Each hostile probe is bounded by itself (a count and a deadline) and uses small
limits, so that a broken limit fails the test and never the machine.

Expected values: opensandbox-server 1.1.1 passes Docker mem_limit / nano_cpus / pids_limit
(services/docker/container_ops.py, config.py pids_limit = 4096); the real sandbox shows 536870912,
4096 and 50000 of 100000 in its /sys/fs/cgroup (fixtures/22_sandbox_inside.json, recorded live).
"""

from __future__ import annotations

import json
import os

import pytest

from mock_opensandbox.runtime import cgroups
from mock_opensandbox.server import MockOpenSandbox
from tiers.t1.sandbox import containment_probes as cp
from tiers.toolkit.marks import needs_isolation

HOST = cgroups.host()
pytestmark = [
    needs_isolation,
    pytest.mark.skipif(HOST.missing != {}, reason="cgroup limits unavailable here: " + HOST.note()),
]
LIMITS = {"cpu": "500m", "memory": "512Mi"}


class Api(cp.Api):
    def create(self, limits: dict | None = None) -> str:  # type: ignore[override]
        body = dict(cp.BODY, resourceLimits=limits if limits is not None else LIMITS)
        status, raw = self.call("POST", "/v1/sandboxes", body)
        assert status == 202, raw
        return json.loads(raw)["id"]


@pytest.fixture(scope="module")
def api():
    osb = MockOpenSandbox(execd_close_delay=0.05, pids_limit=64).start()
    try:
        yield Api(osb)
    finally:
        osb.stop()


@pytest.fixture(scope="module")
def sid(api):
    """Overrides the toolkit's ``sid`` (tiers/toolkit/fixtures.py): one sandbox per module, made over HTTP."""
    return api.create()


def _cgfile(v1: str, v2: str) -> str:
    return "/sys/fs/cgroup/" + (v1 if HOST.version == 1 else v2)


def test_cgroup_files_inside_show_the_sandbox_limits():
    osb = MockOpenSandbox(execd_close_delay=0.05).start()  # the default pids limit, 4096
    try:
        api = Api(osb)
        sid = api.create()
        if HOST.version == 1:
            cmd = (
                "cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/pids/pids.max "
                "/sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us"
            )
            want = "536870912\n4096\n50000\n100000\n"
        else:
            cmd = "cat /sys/fs/cgroup/memory.max /sys/fs/cgroup/pids.max /sys/fs/cgroup/cpu.max"
            want = "536870912\n4096\n50000 100000\n"
        assert api.run(sid, cmd) == (0, want)
        # read-only, like a container's
        rc, out = api.run(sid, "echo 1 > %s" % _cgfile("pids/pids.max", "pids.max"))
        assert rc != 0, out
    finally:
        osb.stop()


def test_memory_hog_is_oom_killed_with_137_and_the_sandbox_lives_on(api):
    sid = api.create({"memory": "64Mi"})
    # bounded by itself: 256 MiB at most, touched page by page
    hog = 'python3 -c \'b = b"x" * (256 << 20); print("allocated", len(b))\''
    # in a shell that waits for it, the shell reports the OOM kill as 137 (the live probe's answer)
    rc, out = api.run(sid, hog + "; exit $?")
    assert rc == 137, out
    assert "allocated 268435456" not in out and "Killed" in out, out
    # the hog as the command itself: execd's answer for a process killed by a signal (evalue -1)
    rc, out = api.run(sid, hog)
    assert rc == -1 and "allocated 268435456" not in out, out
    assert api.run(sid, "echo alive") == (0, "alive\n")


def test_busy_loop_gets_half_a_core(api, sid):
    # 2 s of wall time spinning; the CPU time it got (its own and the cgroup's counters) against the wall
    prog = (
        "import time\n"
        "def cg(p):\n"
        "    try:\n"
        "        return open(p).read()\n"
        "    except OSError:\n"
        "        return ''\n"
        "w0, c0 = time.monotonic(), time.process_time()\n"
        "while time.monotonic() - w0 < 2.0:\n"
        "    pass\n"
        "print(round((time.process_time() - c0) / (time.monotonic() - w0), 3))\n"
        "st = dict(l.split() for l in cg(%r).splitlines() if l.strip())\n"
        "print(st.get('nr_periods', 0), st.get('nr_throttled', 0))\n" % _cgfile("cpu/cpu.stat", "cpu.stat")
    )
    rc, out = api.run(sid, 'python3 -c "%s"' % prog)
    assert rc == 0, out
    share, periods, throttled = out.split()
    # generous band: on a busy machine less is possible; more than ~0.5 is not
    assert 0.02 < float(share) <= 0.62, out
    # the CFS bandwidth of the sandbox's own cgroup ran the loop (the host's root cgroup has none) and,
    # when the loop got its whole quota, throttled it
    assert int(periods) >= 10, out
    assert int(throttled) > 0 or float(share) < 0.45, out


def test_fork_loop_stops_at_the_pids_limit_and_the_host_is_unharmed(api):
    sid = api.create()
    # at most 200 children, each gone after 5 s at the latest; counts the forks the kernel allowed
    prog = (
        "import os, time, signal\n"
        "kids, refused, end = [], 0, time.monotonic() + 5\n"
        "for i in range(200):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        refused += 1\n"
        "        continue\n"
        "    if pid == 0:\n"
        "        time.sleep(max(0.0, end - time.monotonic()))\n"
        "        os._exit(0)\n"
        "    kids.append(pid)\n"
        "print(len(kids), refused)\n"
        "for k in kids:\n"
        "    os.kill(k, signal.SIGKILL)\n"
        "    os.waitpid(k, 0)\n"
    )
    rc, out = api.run(sid, "python3 -c '%s'" % prog)
    assert rc == 0, out
    forked, refused = (int(x) for x in out.split())
    assert forked < 64 and refused >= 136, out
    # the sandbox and the host go on: a new command here, a new sandbox next to it
    assert api.run(sid, "echo ok") == (0, "ok\n")
    other = api.create()
    assert api.run(other, "echo ok") == (0, "ok\n")


def test_cgroups_are_removed_with_the_sandbox(api):
    sid = api.create()
    sb = api.osb.sandboxes[sid]
    dirs = list(sb.runtime.cgroup.dirs)
    assert dirs and all(
        os.path.isdir(d) and os.path.basename(d) == "osb-mock-%s-%s" % (api.osb.mock_id, sid) for d in dirs
    )
    status, _ = api.call("DELETE", "/v1/sandboxes/" + sid)
    assert status == 204
    assert not [d for d in dirs if os.path.exists(d)]


@pytest.mark.parametrize("how", ["thread", "sh-stage", "pty"])
def test_every_way_of_joining_puts_the_process_in_the_sandbox_cgroup(tmp_path, how):
    """v1 spawns move the spawning thread in for the fork; v2 spawns go through a /bin/sh stage
    (forced here on v1: writing "0" to cgroup.procs works on both); PTY shells join in their
    preexec_fn. In each case the command's own cgroup is the sandbox's and `ps` never sees the stage."""
    import subprocess

    from mock_opensandbox.runtime import SandboxRuntime

    rt = SandboxRuntime(str(tmp_path / "sb"), limits=cgroups.Limits(pids=64), cgroup_name="osb-mock-t1-" + how)
    try:
        assert rt.cgroup is not None
        if how == "sh-stage":
            rt.cgroup._tasks_in = []
        want = sorted(os.path.basename(d) for d in rt.cgroup.dirs)
        cmd = ["sh", "-c", "cut -d: -f3 /proc/self/cgroup | sed 's|.*/||' | grep . | sort; ps -eo args"]
        if how == "pty":
            master, slave = rt.openpty()
            p = rt.spawn(cmd, stdin=slave, stdout=slave, stderr=slave, controlling_tty=True)
            os.close(slave)
            out = b""
            while True:
                try:
                    chunk = os.read(master, 65536)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
            os.close(master)
            p.wait(timeout=30)
            text = out.decode().replace("\r", "")
        else:
            p = rt.spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            text = p.communicate(timeout=30)[0].decode()
        assert p.returncode == 0, text
        names = [line for line in text.splitlines() if line.startswith("osb-mock-")]
        assert names and set(names) == {"osb-mock-t1-" + how} and len(names) == len(want), text
        assert "osb-cgroup-join" not in text and "nsenter" not in text, text
        # the mock's own thread went back home
        with open("/proc/thread-self/cgroup") as fh:
            assert "osb-mock-" not in fh.read()
    finally:
        rt.cleanup()
    assert not [d for d in rt.cgroup.dirs if os.path.exists(d)]
