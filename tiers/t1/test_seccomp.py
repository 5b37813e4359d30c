"""The system calls Docker's default seccomp profile closes fail inside a sandbox as in a container
with that profile (moby/profiles seccomp/default.json: SCMP_ACT_ERRNO, errno 1; QUIRKS.md "seccomp").
Each probe is one bounded call inside a mock sandbox."""
from __future__ import annotations

import os
import subprocess

import pytest

from mock_opensandbox.runtime import SandboxRuntime, forkjoin, isolation_note
from tiers import kernel_probes as kp
from tiers.t1 import containment_probes as cp
from tiers.toolkit.marks import needs_isolation
from tiers.toolkit.waits import wait_until

pytestmark = needs_isolation

# add_key(2) of a "user" key into the session keyring (KEY_SPEC_SESSION_KEYRING = -3), keyctl(2)
# KEYCTL_GET_KEYRING_ID, bpf(2), perf_event_open(2) - each must answer EPERM (errno 1)
PROBE = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
nr = {"x86_64": (248, 250, 321, 298, 165), "aarch64": (217, 219, 280, 241, 40)}[os.uname().machine]
calls = [("add_key", nr[0], (b"user", b"osb-probe", b"v", 1, -3)), ("keyctl", nr[1], (0, -3, 0)),
         ("bpf", nr[2], (0, 0, 0)), ("perf_event_open", nr[3], (0, 0, -1, -1, 0)),
         ("mount", nr[4], (b"none", b"/tmp", b"tmpfs", 0, 0))]
for name, n, args in calls:
    r = libc.syscall(n, *args)
    print(name, r, ctypes.get_errno())
"""


@pytest.fixture(scope="module")
def rt(tmp_path_factory):
    r = SandboxRuntime(str(tmp_path_factory.mktemp("seccomp") / "root"), isolate=True)
    try:
        yield r
    finally:
        r.cleanup()
        cp.cleanup_host_leftovers()


def _run(rt: SandboxRuntime, argv: list[str]) -> tuple[int, str]:
    p = rt.spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd="/")
    out, _ = p.communicate(timeout=60)
    return p.returncode, out.decode("utf-8", "replace")


def test_the_note_says_the_filter_is_installed():
    assert "seccomp profile closes answer EPERM" in isolation_note()


def test_unshare_user_namespace_is_refused(rt):
    rc, out = _run(rt, ["unshare", "-U", "true"])
    assert (rc, out.strip()) == (1, "unshare: unshare failed: Operation not permitted")


def test_keyring_bpf_perf_mount_answer_eperm(rt):
    rc, out = _run(rt, ["python3", "-I", "-S", "-c", PROBE])
    assert rc == 0, out
    got = {line.split()[0]: line.split()[1:] for line in out.splitlines()}
    assert got == {n: ["-1", "1"] for n in ("add_key", "keyctl", "bpf", "perf_event_open", "mount")}


def test_the_kernel_probe_answers_as_a_docker_container(rt):
    """tiers/kernel_probes.py, the probe tiers/t4/test_live_kernel.py runs in a real container: every
    answer (errno, exit status, stderr) is the container's."""
    rc, out = _run(rt, ["bash", "-c", kp.COMMAND])
    assert rc == 0, out
    kp.check(out)


def test_ordinary_calls_still_work(rt):
    # threads (clone3 ENOSYS -> clone), fork, a plain socket: as in a container
    rc, out = _run(rt, ["python3", "-I", "-c",
                        "import socket, subprocess, threading; t = threading.Thread(target=print, args=('t',)); "
                        "t.start(); t.join(); socket.socket().close(); subprocess.run(['true'], check=True); print('ok')"])
    assert (rc, out.split()) == (0, ["t", "ok"])


def test_the_entrypoint_pid1_tree_has_the_filter(tmp_path):
    r = SandboxRuntime(str(tmp_path / "root"), isolate=True)
    try:
        r.start_entrypoint(["/bin/sh", "-c", "grep Seccomp: /proc/self/status > /tmp/s; "
                                             "unshare -U true 2>> /tmp/s; exec sleep 30"])
        s = tmp_path / "root" / "tmp" / "s"
        wait_until(lambda: s.exists() and s.read_text().count("\n") >= 2, 10.0, 0.02)
        assert s.read_text().splitlines() == ["Seccomp:\t2", "unshare: unshare failed: Operation not permitted"]
    finally:
        r.cleanup()
        cp.cleanup_host_leftovers()


@pytest.mark.skipif(os.geteuid() != 0, reason="the fork-join path is root's (an image's view)")
def test_the_fork_join_preexec_installs_the_filter():
    """forkjoin.py (root + an image's view: the Popen child joins itself) installs it before the exec;
    here without namespaces to join, so the child stays on the host."""
    preexec, ctx = forkjoin.fork_join([], "/", "-", None, False)
    with ctx:
        p = subprocess.Popen(["/bin/sh", "-c", "grep Seccomp: /proc/self/status; unshare -U true"],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=preexec)
    out, _ = p.communicate(timeout=60)
    assert (p.returncode, out.decode().splitlines()) == (
        1, ["Seccomp:\t2", "unshare: unshare failed: Operation not permitted"])
