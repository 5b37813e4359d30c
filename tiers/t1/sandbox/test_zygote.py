"""The view's zygote (runtime/zygote.py, runtime/scripts/osb_zygote.py): as root, a sandbox's PID 1 is cloned from
one Python process that has view.py loaded, as a child of the mock itself, instead of `setpriv -- unshare -- python
view.py`. What must hold: PID 1 is the mock's own child and PID 1 of a namespace of its own, with no process
between; what runs inside is what the old way gave (capabilities, no_new_privs, seccomp, cgroups, the view, the
namespaces); a zygote that cannot answer leaves the old way working; a bad request gets a typed answer; the zygote
ends at EOF and with the mock."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest

from mock_opensandbox.runtime import SandboxRuntime, cgroups, zygote
from tiers.toolkit.marks import needs_isolation
from tiers.toolkit.procs import alive, children, sandbox_holders

pytestmark = [needs_isolation, pytest.mark.skipif(os.geteuid() != 0, reason="the zygote is root's way")]

PROBE = (
    "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp):' /proc/1/status /proc/self/status;"
    " cat /proc/1/cgroup | sort; hostname; ls /; ls /dev; cut -d' ' -f3-8 /proc/1/stat; cat /proc/1/cmdline | tr '\\0' ' '"
)


def _start(tmp_path, name: str, on: bool, monkeypatch) -> SandboxRuntime:
    monkeypatch.setenv(zygote.ZYGOTE_ENV, "1" if on else "0")
    rt = SandboxRuntime(
        str(tmp_path / name), limits=cgroups.Limits(pids=64), cgroup_name="osb-mock-t1z-%s-%d" % (name, os.getpid())
    )
    rt.start_entrypoint(["sleep", "60"])
    return rt


def _inside(rt: SandboxRuntime) -> str:
    p = rt.spawn(["/bin/sh", "-c", PROBE], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return p.communicate(timeout=30)[0].decode().replace(rt.hostname, "HOST")


def test_pid1_is_the_mocks_child_and_inside_is_as_before(tmp_path, monkeypatch):
    answers = {}
    for on in (True, False):
        rt = _start(tmp_path, "z%d" % on, on, monkeypatch)
        try:
            holder = rt.pid1.holder
            assert holder is not None
            if on:  # no process between the mock and PID 1
                assert isinstance(holder.proc, zygote.Adopted) and holder.proc.pid == holder.pid
                assert holder.pid in sandbox_holders() and holder.pid in children()
            else:
                assert isinstance(holder.proc, subprocess.Popen) and holder.proc.pid != holder.pid
            answers[on] = _inside(rt).replace("osb-mock-t1z-z%d-" % on, "osb-mock-t1z-")
        finally:
            rt.cleanup()
        assert not alive(holder.pid)
    assert answers[True] == answers[False]
    assert "NoNewPrivs:\t1" in answers[True] and "S 0 1 1" in answers[True], answers[True]


def test_the_old_way_when_the_zygote_cannot_answer(tmp_path, monkeypatch):
    zygote.stop()
    monkeypatch.setattr(zygote, "ZYGOTE_PY", str(tmp_path / "no-such-zygote.py"))  # python exits at once
    rt = _start(tmp_path, "fallback", True, monkeypatch)
    try:
        holder = rt.pid1.holder
        assert holder is not None and isinstance(holder.proc, subprocess.Popen)  # unshare, then PID 1
        assert "S 0 1 1" in _inside(rt)
    finally:
        rt.cleanup()
        zygote.stop()


def _zygote() -> tuple[socket.socket, subprocess.Popen]:
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    proc = subprocess.Popen(
        [sys.executable, "-I", "-S", zygote.ZYGOTE_PY, str(theirs.fileno()), str(os.getpid())],
        pass_fds=(theirs.fileno(),),
    )
    theirs.close()
    return mine, proc


GOOD = {"args": ["holder"] + ["x"] * 8, "env": {}, "cwd": "/", "fifo": "/nonexistent", "ns": 0, "pass": []}


@pytest.mark.parametrize(
    "msg",
    [
        b"not json",
        b"[]",
        b'{"args": []}',
        json.dumps(dict(GOOD, ns=1)).encode(),
        json.dumps(dict(GOOD, pass_=[5])).encode(),
    ]
    + [json.dumps(dict(GOOD, **{k: v})).encode() for k, v in (("args", "x"), ("env", {"A": 1}), ("pass", [1]))],
)
def test_a_bad_request_gets_a_typed_answer_and_the_zygote_goes_on(msg):
    sock, proc = _zygote()
    try:
        sock.send(msg)
        answer = json.loads(sock.recv(4096))
        assert answer.get("errno") == 22 and answer["error"].startswith("bad request"), answer
        sock.send(b"[]")  # still there
        assert json.loads(sock.recv(4096)).get("errno") == 22
        assert not [p for p in children() if p != proc.pid and alive(p) and p in sandbox_holders()]
    finally:
        sock.close()
    assert proc.wait(timeout=10) == 0  # EOF ends it


def test_the_zygote_ends_with_the_mock():
    code = (
        "import os, socket, subprocess, sys, time\n"
        "from mock_opensandbox.runtime import zygote\n"
        "s, t = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)\n"
        "p = subprocess.Popen([sys.executable, '-I', '-S', zygote.ZYGOTE_PY, str(t.fileno()), str(os.getpid())],"
        " pass_fds=(t.fileno(),))\n"
        "time.sleep(0.5); print(p.pid, flush=True); os.kill(os.getpid(), 9)\n"
    )
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    out = subprocess.run([sys.executable, "-c", code], cwd=repo, stdout=subprocess.PIPE, timeout=30).stdout.split()
    pid = int(out[0])
    deadline = time.monotonic() + 10
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not alive(pid)


def test_adopted_waits_like_popen():
    p = subprocess.Popen(["sleep", "0.3"])
    a = zygote.Adopted(p.pid, ["sleep"])
    with pytest.raises(subprocess.TimeoutExpired):
        a.wait(timeout=0.05)
    assert a.poll() is None
    assert a.wait(timeout=10) == 0 and a.returncode == 0
    p.returncode = 0  # reaped through the adopted handle: Popen must not wait again
    q = subprocess.Popen(["sleep", "30"])
    b = zygote.Adopted(q.pid, ["sleep"])
    b.kill()
    assert b.wait() == -9
    q.returncode = -9
