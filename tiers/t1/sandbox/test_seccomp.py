"""The system calls Docker's default seccomp profile closes fail inside a sandbox as in a container
with that profile (moby/profiles seccomp/default.json: SCMP_ACT_ERRNO, errno 1; QUIRKS.md "seccomp").
Each probe is one bounded call inside a mock sandbox; the probes and their checks live with the other
containment probes (containment_probes.py, seccomp_probes)."""

from __future__ import annotations

import os
import subprocess

import pytest

from mock_opensandbox.runtime import forkjoin, isolation_note
from tiers.flows.sandbox import kernel_probes as kp
from tiers.t1.sandbox import containment_probes as cp
from tiers.toolkit.marks import needs_isolation
from tiers.toolkit.waits import wait_until

pytestmark = needs_isolation

SECCOMP = {p.name: p for p in cp.seccomp_probes()}


@pytest.fixture(scope="module")
def rt(tmp_path_factory):
    with cp.isolated_runtime(str(tmp_path_factory.mktemp("seccomp") / "root")) as r:
        yield r


def _probe(rt, name: str) -> None:
    pr = SECCOMP[name]
    pr.check(*cp.run_probe(rt, pr))


def test_the_note_says_the_filter_is_installed():
    assert "seccomp profile closes answer EPERM" in isolation_note()


def test_unshare_user_namespace_is_refused(rt):
    _probe(rt, "unshare_user")


def test_keyring_bpf_perf_mount_answer_eperm(rt):
    _probe(rt, "keyring_bpf_perf_mount")


def test_the_kernel_probe_answers_as_a_docker_container(rt):
    """tiers/flows/sandbox/kernel_probes.py, the probe tiers/t4/sandbox/test_live_kernel.py runs in a real container: every
    answer (errno, exit status, stderr) is the container's."""
    rc, out = cp.run_probe(rt, cp.Probe("kernel", kp.COMMAND, lambda rc, out: None))
    assert rc == 0, out
    kp.check(out)


def test_ordinary_calls_still_work(rt):
    _probe(rt, "ordinary_calls")


def test_the_entrypoint_pid1_tree_has_the_filter(tmp_path):
    with cp.isolated_runtime(str(tmp_path / "root")) as r:
        r.start_entrypoint(["/bin/sh", "-c", "{ %s; } > /tmp/s 2>&1; exec sleep 30" % cp.SECCOMP_STATUS_CMD])
        s = tmp_path / "root" / "tmp" / "s"
        wait_until(lambda: s.exists() and s.read_text().count("\n") >= 2, 10.0, 0.02)
        assert s.read_text().splitlines() == cp.SECCOMP_STATUS_LINES


@pytest.mark.skipif(os.geteuid() != 0, reason="the fork-join path is root's (an image's view)")
def test_the_fork_join_preexec_installs_the_filter():
    """forkjoin.py (root + an image's view: the Popen child joins itself) installs it before the exec;
    here without namespaces to join, so the child stays on the host."""
    preexec, ctx = forkjoin.fork_join([], "/", "-", None, False)
    with ctx:
        p = subprocess.Popen(
            ["/bin/sh", "-c", cp.SECCOMP_STATUS_CMD],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            preexec_fn=preexec,
        )
    out, _ = p.communicate(timeout=60)
    assert (p.returncode, out.decode().splitlines()) == (1, cp.SECCOMP_STATUS_LINES)
