"""Live: the kernel interfaces Docker's default seccomp profile and capability set close, probed inside a
real sandbox (tiers/flows/sandbox/kernel_probes.py: add_key, keyctl, request_key, mount, umount2, bpf, perf_event_open,
unshare(CLONE_NEWUSER), ptrace of PID 1, kexec_load, `unshare -U true`, `unshare -m true`). The same probe
and the same expected answers run on the mock in tiers/t1/sandbox/test_seccomp.py."""

from __future__ import annotations

import pytest

from tiers.flows.sandbox import kernel_probes as kp
from tiers.flows.sandbox import sandbox_inside as si


@pytest.fixture(scope="module")
def target(live_server):
    t = si.Target(live_server.root, live_server.api_key, live_server.image)
    yield t
    t.delete_all()


def test_kernel_interfaces_answer_as_the_default_profile_live(target):
    sid = target.create()
    res = target.command(sid, kp.COMMAND)
    print("live kernel probe (%s):\n%s%s" % (target.image, res.out, res.err))
    assert res.status == 200 and res.rc == 0, res
    kp.check(res.out)
