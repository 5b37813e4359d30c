"""The janitor (runtime/janitor.py) kills what still runs in the cgroups it was told about, but never the mock
that started it: with cgroup v1 a thread of a live mock sits in each sandbox's cgroups (runtime/spawner.py), so
the mock's pid is listed in their cgroup.procs. A janitor closed while such a cgroup was still tracked once
killed the test process that ran the mock (make test: "group 5 exited -9")."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

CPU = "/sys/fs/cgroup/cpu"
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

_MOCK = r"""
import os, sys, threading, time
from mock_opensandbox.runtime.janitor import Janitor
cg = sys.argv[1]
j = Janitor()
j.track("cgroup", cg)
inside, leave = threading.Event(), threading.Event()
def sit():
    with open(os.path.join(cg, "tasks"), "w") as fh:  # one thread of this process joins, as the spawner does
        fh.write(str(threading.get_native_id()))
    inside.set()
    leave.wait()
t = threading.Thread(target=sit, daemon=True)
t.start()
inside.wait(5)
j.close()  # EOF while the cgroup is still tracked: the janitor kills its members
print("ALIVE", flush=True)
leave.set()
"""


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.isdir(CPU), reason="needs root and the cgroup v1 cpu controller")
def test_a_closed_janitor_does_not_kill_the_mock(tmp_path):
    cg = os.path.join(CPU, "osb-mock-t1-janitor-%d" % os.getpid())
    os.mkdir(cg)
    try:
        out = subprocess.run([sys.executable, "-c", _MOCK, cg], cwd=_REPO, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0 and "ALIVE" in out.stdout, (out.returncode, out.stdout, out.stderr)
    finally:
        if os.path.isdir(cg):
            os.rmdir(cg)
