"""Containment paid once per sandbox (runtime/contained.py): as root, a thread of the mock enters the sandbox once
and forks every command from there. What must hold: the command is the spawned process itself (no nsenter,
seccomp stage, setpriv or env in front of it) and it has exactly what the per-command stages gave it (the same
namespaces as PID 1, the seccomp filter, the capability sets, no_new_privs, the cgroups, the view); the thread
leaves with the sandbox; OSB_MOCK_CONTAINED=0 brings the stages back, with the same answers."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from mock_opensandbox.runtime import SandboxRuntime, _util, caps, cgroups
from mock_opensandbox.runtime.contained import group_kwargs
from mock_opensandbox.runtime.pspawn import SpawnedPopen
from tiers.toolkit.marks import needs_isolation
from tiers.toolkit.waits import wait_until

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
pytestmark = [needs_isolation, pytest.mark.skipif(os.geteuid() != 0, reason="the contained thread is root's way in")]


@pytest.fixture(autouse=True)
def _contained_on(monkeypatch):
    monkeypatch.setenv("OSB_MOCK_CONTAINED", "1")  # the path under test, whatever the run's environment says


PROBE = (
    "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|Seccomp|Uid|Gid|PPid):' /proc/self/status;"
    " for n in mnt pid net uts ipc; do readlink /proc/self/ns/$n; done; cat /proc/self/cgroup | sort;"
    " hostname; ls /; echo LC=$LC_CTYPE; pwd"
)


def _run(rt: SandboxRuntime, cmd: str, **kw) -> tuple[subprocess.Popen, str]:
    p = rt.spawn(["/bin/sh", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kw)
    return p, p.communicate(timeout=30)[0].decode()


def _probe(tmp_path, name: str, contained: bool, monkeypatch, forker: bool = False) -> tuple[list, str, str]:
    monkeypatch.setenv("OSB_MOCK_CONTAINED", "1" if contained else "0")
    monkeypatch.setenv("OSB_MOCK_FORKER", "1" if forker else "0")
    rt = SandboxRuntime(
        str(tmp_path / name), limits=cgroups.Limits(pids=64), cgroup_name="osb-mock-t1-%s-%d" % (name, os.getpid())
    )
    try:
        rt.start_entrypoint(["sleep", "60"])
        holder = rt.pid1.holder
        assert holder is not None
        p, out = _run(rt, PROBE, cwd="/tmp", env={"LC_CTYPE": "C"})
        pid1 = "".join(
            os.readlink("/proc/%d/ns/%s" % (holder.pid, n)) + "\n" for n in ("mnt", "pid", "net", "uts", "ipc")
        )
        assert pid1 in out, out  # PID 1's namespaces, every one
        thread = holder.contained
        if thread is not None and rt.cgroup is not None and rt.cgroup.thread_join:
            # cgroup v1: the spawner made with the cgroups (its move primes PID 1's) entered in place
            assert thread is rt._spawner
            assert rt._cg_spawner() is not thread  # an uncontained fork would get a thread of its own
        if forker:
            assert thread is None and holder.forker is not None and holder.forker.alive()
            return p.args, out.replace(rt.hostname, "HOST"), "forker"
        return p.args, out.replace(rt.hostname, "HOST"), "up" if thread is not None and thread.ok(0) else "none"
    finally:
        rt.cleanup()
        if contained:
            assert holder.contained is None  # stopped with the sandbox (before its cgroups went)
        if forker:
            assert holder.forker is None  # ended with the sandbox (before its cgroups went)


def test_commands_are_forked_inside_with_what_the_stages_gave_them(tmp_path, monkeypatch):
    args, out, thread = _probe(tmp_path, "fast", True, monkeypatch)
    assert thread == "up"
    assert args == ["/bin/sh", "-c", PROBE]  # the command itself: no wrapper stage
    mask = "%016x" % caps.SANDBOX_CAP_MASK
    for line in (
        "CapPrm:\t" + mask,
        "CapEff:\t" + mask,
        "CapBnd:\t" + mask,
        "CapInh:\t0000000000000000",
        "CapAmb:\t0000000000000000",
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
        "LC=C",
        "/tmp",
    ):
        assert line in out.splitlines(), (line, out)
    old_args, old_out, old_thread = _probe(tmp_path, "stages", False, monkeypatch)
    assert old_thread == "none" and old_args[0].endswith("nsenter")
    strip = lambda text: [  # noqa: E731 - ids of namespaces and cgroups differ between two sandboxes
        line.split(":[")[0].rsplit("osb-mock-t1-", 1)[0] for line in text.splitlines() if not line.startswith("LC=")
    ]
    assert strip(out) == strip(old_out)
    # no thread (cgroup v2, OSB_MOCK_CONTAINED=0): the sandbox's forker process clones the command itself, which
    # has the same (and LC_CTYPE as given, like the thread's)
    f_args, f_out, f_mode = _probe(tmp_path, "forker", False, monkeypatch, forker=True)
    assert f_mode == "forker" and f_args == ["/bin/sh", "-c", PROBE]
    assert strip(f_out) == strip(out) and "LC=C" in f_out.splitlines(), f_out


def test_a_seccomp_closed_call_and_a_dropped_capability_stay_closed(tmp_path):
    rt = SandboxRuntime(str(tmp_path / "sb"))
    try:
        rt.start_entrypoint(["sleep", "60"])
        _, out = _run(rt, "unshare -m true; echo rc=$?; mount -t tmpfs x /mnt; echo rc=$?; touch /usr/x; echo rc=$?")
        assert out.count("rc=1") == 2 and "rc=32" in out, out
        assert rt.pid1.holder is not None and rt.pid1.holder.contained is not None
    finally:
        rt.cleanup()


def test_a_non_root_command_user_is_set_by_the_fork(tmp_path):
    from mock_opensandbox.runtime.contained import creds

    assert creds("-") == {} and creds(None) == {}
    assert creds("0 0 0", (0, 0, [0])) == {} and creds("0 0 -", (0, 0, [])) == {}  # the thread's own: a vfork
    assert creds("0 0 0", (0, 0, [])) == {"user": 0, "group": 0, "extra_groups": [0]}
    assert creds("65534 65534 -") == {"user": 65534, "group": 65534, "extra_groups": []}
    assert creds("1000 100 100,27") == {"user": 1000, "group": 100, "extra_groups": [100, 27]}
    rt = SandboxRuntime(str(tmp_path / "sb"))
    try:
        rt.start_entrypoint(["sleep", "60"])
        _, out = _run(rt, "id -u; id -g; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status", user="65534 65534 -")
        assert out.split()[:2] == ["65534", "65534"] and "0000000000000000" in out and "NoNewPrivs:\t1" in out, out
    finally:
        rt.cleanup()


def _cmdline(pid: int) -> bytes:
    with open("/proc/%d/cmdline" % pid, "rb") as fh:
        return fh.read()


@pytest.mark.parametrize("path", ["thread", "thread-sh", "forker"])
def test_a_pty_shell_leads_its_session_with_its_terminal_opened_inside(tmp_path, monkeypatch, path):
    """Thread or forker (runtime/forker.py, where no thread can enter), a PTY shell leads its own session and group
    with the sandbox's /dev/pts/N, opened by that path inside, as its controlling terminal and stdin, contained like
    any command. The thread's posix_spawn (runtime/pspawn.py) and the forker exec the shell directly, its child
    opening the PTY after its setsid; without pspawn (thread-sh) the fork stays a vfork: the sandbox's /bin/sh
    opens the PTY by its path inside as the new session's first terminal, then execs the shell in place."""
    monkeypatch.setenv("OSB_MOCK_CONTAINED", "0" if path == "forker" else "1")
    monkeypatch.setenv("OSB_MOCK_FORKER", "1")
    monkeypatch.setenv("OSB_MOCK_PSPAWN", "0" if path == "thread-sh" else "1")
    rt = SandboxRuntime(str(tmp_path / "sb"))
    leak = os.open("/dev/null", os.O_RDONLY)
    os.set_inheritable(leak, True)  # another thread's, a moment before: the shell must not hold it
    try:
        rt.start_entrypoint(["sleep", "60"])
        master, slave = rt.openpty()
        p = rt.spawn(["/bin/sh", "-c", "sleep 30"], stdin=slave, stdout=slave, stderr=slave, controlling_tty=True)
        os.close(slave)
        if path == "forker":
            assert p.args == ["/bin/sh", "-c", "sleep 30"] and rt.pid1.holder.forker is not None, p.args
        elif path == "thread":
            assert p.args == ["/bin/sh", "-c", "sleep 30"] and isinstance(p, SpawnedPopen), p.args
        else:
            assert p.args[:2] == ["/bin/sh", "-c"] and p.args[2].startswith('exec "$@" 0<>/dev/pts/'), p.args
        with open("/proc/%d/stat" % p.pid) as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        assert int(fields[2]) == p.pid and int(fields[3]) == p.pid  # its own process group and session
        assert int(fields[4]) != 0  # tty_nr: the PTY is its controlling terminal
        assert os.readlink("/proc/%d/fd/0" % p.pid).startswith("/dev/pts/")  # the path inside the sandbox
        # nothing but 0-2 (a descriptor held for good would stay; the loader's, while the shell starts, goes)
        assert wait_until(lambda: sorted(os.listdir("/proc/%d/fd" % p.pid)) == ["0", "1", "2"], 5), os.listdir(
            "/proc/%d/fd" % p.pid
        )
        with open("/proc/%d/status" % p.pid) as fh:
            status = fh.read()
        assert "Seccomp:\t2" in status and "NoNewPrivs:\t1" in status
        # the spawn returns once the exec has begun: its arguments are in place a moment later (as after Go's
        # cmd.Start, whose close-on-exec pipe closes at the same step)
        wait_until(lambda: _cmdline(p.pid) != b"", 5)
        assert _cmdline(p.pid) == b"/bin/sh\0-c\0sleep 30\0"
        os.close(master)
    finally:
        os.close(leak)
        rt.cleanup()


@pytest.mark.parametrize("path", ["thread", "forker-spawn", "forker-clone"])
def test_a_command_holds_no_descriptor_but_its_own_three(tmp_path, monkeypatch, path):
    """Whoever forks it (the thread; the forker by posix_spawn, or by a clone for another user), a command starts
    with its stdin, stdout and stderr and nothing else of the mock's or the forker's, not even a descriptor
    another thread of the mock has made inheritable."""
    monkeypatch.setenv("OSB_MOCK_CONTAINED", "1" if path == "thread" else "0")
    monkeypatch.setenv("OSB_MOCK_FORKER", "1")
    rt = SandboxRuntime(str(tmp_path / "sb"))
    leak = os.open("/dev/null", os.O_RDONLY)
    os.set_inheritable(leak, True)
    try:
        rt.start_entrypoint(["sleep", "60"])
        user = "0 0 0,1" if path == "forker-clone" else None  # a user word the forker's clone sets
        p, out = _run(rt, "ls /proc/$$/fd; echo --; id -G", user=user)
        fds, _, groups = out.partition("--\n")
        assert fds.split() == ["0", "1", "2"] and groups.split() == (["0", "1"] if user else ["0"]), out
        if path != "thread":
            assert (p._relay is not None) is (path == "forker-spawn")
    finally:
        os.close(leak)
        rt.cleanup()


def test_the_view_runs_from_its_bytecode_cache(tmp_path):
    """scripts/osb_view.py runs view.py through the import system, so its compiled form is cached (a script run as
    __main__ is compiled on every sandbox start): after a start the cache is there and names view.py's source."""
    import importlib.util

    from mock_opensandbox.runtime import stages

    assert os.path.basename(stages.VIEW_PY) == "osb_view.py"
    source = os.path.join(stages.SCRIPTS_DIR, "view.py")
    cache = importlib.util.cache_from_source(source)
    if not os.access(stages.SCRIPTS_DIR, os.W_OK):
        pytest.skip("the scripts directory is read-only here: Python keeps no cache of view.py")
    rt = SandboxRuntime(str(tmp_path / "sb"))
    try:
        rt.start_entrypoint(["sleep", "60"])
        assert rt.pid1.holder is not None
        with open(cache, "rb") as fh:
            head = fh.read(16)
        st = os.stat(source)
        assert int.from_bytes(head[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF  # a timestamp pyc of it
        assert int.from_bytes(head[12:16], "little") == st.st_size & 0xFFFFFFFF
    finally:
        rt.cleanup()


_SESSION_CHILD = r"""
import os, subprocess, sys
from mock_opensandbox.runtime import SandboxRuntime
rt = SandboxRuntime(sys.argv[1])
try:
    rt.start_entrypoint(["sleep", "60"])
    cmd = ('read -r a b c d pgrp sid rest < /proc/$$/stat; echo "PID=$$ PGRP=$pgrp SID=$sid";'
           ' if (echo LEAK-FROM-SANDBOX > /dev/tty) 2>/dev/null; then echo OPENED; else echo REFUSED; fi')
    p = rt.spawn(["/bin/sh", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    print("OUT " + p.communicate(timeout=30)[0].decode().replace("\n", " "), flush=True)
finally:
    rt.cleanup()
"""


def _session_facts(out: str) -> dict:
    line = next(ln for ln in out.splitlines() if ln.startswith("OUT "))
    words = dict(w.split("=", 1) for w in line.split() if "=" in w)
    return {"pid": int(words["PID"]), "pgrp": int(words["PGRP"]), "sid": int(words["SID"]), "tty": line.split()[-1]}


def test_a_command_of_a_mock_without_a_terminal_takes_a_group_in_its_session(tmp_path):
    """execd's Setpgid: the command leads a process group of its own and stays in the forking process's session
    (the mock's: 0 inside the namespace, whose leader is outside); no controlling terminal to reach."""
    if "process_group" not in group_kwargs(False):
        pytest.skip("this process has a controlling terminal or Python < 3.11: the command leads a session")
    out = subprocess.run(
        [sys.executable, "-c", _SESSION_CHILD, str(tmp_path / "sb")],
        capture_output=True,
        text=True,
        timeout=60,
        start_new_session=True,
        cwd=_REPO,
    )
    facts = _session_facts(out.stdout)
    assert facts["pgrp"] == facts["pid"] and facts["sid"] == 0 and facts["tty"] == "REFUSED", out


def test_a_command_of_a_mock_with_a_terminal_cannot_reach_it(tmp_path):
    """A mock started from a terminal: a command leads a session of its own (no controlling terminal), so it
    cannot open /dev/tty and write to the user's terminal (a hostile probe, run inside the sandbox)."""
    import pty

    pid, master = pty.fork()
    if pid == 0:  # the child: a session leader whose controlling terminal is the pty
        try:
            os.chdir(_REPO)
            os.execv(sys.executable, [sys.executable, "-c", _SESSION_CHILD, str(tmp_path / "sb")])
        finally:
            os._exit(127)
    seen = b""
    try:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
            if not data:
                break
            seen += data
    finally:
        os.close(master)
        os.waitpid(pid, 0)
    text = seen.decode("utf-8", "replace")
    assert "LEAK-FROM-SANDBOX" not in text, text
    facts = _session_facts(text.replace("\r", ""))
    assert facts["sid"] == facts["pid"] == facts["pgrp"] and facts["tty"] == "REFUSED", text


def test_a_forker_that_fails_gives_way_to_the_stages_and_is_never_stopped(tmp_path, monkeypatch):
    """Without the thread, the sandbox's forker (runtime/forker.py) forks the commands; pausing the sandbox stops
    its processes but not the forker (its root is the sandbox's, so it would look like one of them: a stopped
    forker would hold every later spawn); a forker that died is started again on the next command, and one that
    cannot start gives way to the stages for good (the command asked of it still runs)."""
    monkeypatch.setenv("OSB_MOCK_CONTAINED", "0")
    monkeypatch.setenv("OSB_MOCK_FORKER", "1")
    rt = SandboxRuntime(str(tmp_path / "sb"))
    try:
        rt.start_entrypoint(["sleep", "60"])
        holder = rt.pid1.holder
        p, out = _run(rt, "echo one")
        assert out == "one\n" and p.args == ["/bin/sh", "-c", "echo one"] and holder.forker is not None
        forker_pid = holder.forker.proc.pid
        from mock_opensandbox.runtime import sandbox as sandbox_mod

        real = sandbox_mod.stray_pids  # where the forker's "/" is the sandbox's very directory, it is found as one
        monkeypatch.setattr(sandbox_mod, "stray_pids", lambda *a: real(*a) + [forker_pid])
        rt.pause()
        try:
            time.sleep(0.2)  # a SIGSTOP takes a moment to land on a process asleep in recvmsg
            with open("/proc/%d/stat" % forker_pid) as fh:
                assert fh.read().rsplit(")", 1)[1].split()[0] != "T"
        finally:
            rt.resume()
        forker = holder.forker
        os.kill(forker_pid, 9)  # ended before a request: the next one starts another
        forker.proc.wait(timeout=10)
        p, out = _run(rt, "echo two")
        assert out == "two\n" and p.args == ["/bin/sh", "-c", "echo two"] and forker.restarts == 1
        assert holder.forker is forker and forker.proc.pid != forker_pid
        from mock_opensandbox.runtime.forker import Forker, ForkerError

        def refused(self):
            raise ForkerError(1, "refused")

        monkeypatch.setattr(Forker, "_start", refused)
        os.kill(forker.proc.pid, 9)  # and one that cannot start again gives way to the stages for good
        forker.proc.wait(timeout=10)
        p, out = _run(rt, "echo three")
        assert out == "three\n" and p.args[0].endswith("nsenter"), p.args
        assert holder.forker is None and holder.forker_tried
    finally:
        rt.cleanup()


def test_an_idle_forker_ends_and_the_next_command_starts_another(tmp_path, monkeypatch):
    """An idle sandbox keeps no forker (~5 MiB): it ends after forker.IDLE seconds without a command."""
    from mock_opensandbox.runtime import forker as forker_mod

    monkeypatch.setenv("OSB_MOCK_CONTAINED", "0")
    monkeypatch.setenv("OSB_MOCK_FORKER", "1")
    monkeypatch.setattr(forker_mod, "IDLE", 0.3)
    rt = SandboxRuntime(str(tmp_path / "sb"))
    try:
        rt.start_entrypoint(["sleep", "60"])
        assert _run(rt, "echo one")[1] == "one\n"
        forker = rt.pid1.holder.forker
        first = forker.proc
        first.wait(timeout=10)  # it ends by itself
        assert _run(rt, "echo two")[1] == "two\n"
        assert forker.restarts == 1 and forker.proc is not first and forker.alive()
    finally:
        rt.cleanup()


@pytest.mark.parametrize(
    "path, pty",
    [
        ("thread", False),
        ("thread", True),
        ("thread-sh", True),
        ("forker-spawn", False),
        ("forker-spawn", True),
        ("forker-clone", False),
        ("stages", False),
    ],
)
def test_a_command_starts_ignoring_no_signal(tmp_path, monkeypatch, path, pty):
    """Whoever starts it (the thread by Popen or, for a PTY shell, by glibc's posix_spawn or through the sh stage;
    the forker by posix_spawn or by a clone; the per-command stages), a command ignores no signal, as a container's
    process (live: `SigIgn: 0000000000000000`, QUIRKS "Signal dispositions"): glibc's posix_spawn left its own two
    signals (32, 33) ignored in the child unless they are in the default set (scripts/spawn.py), and the stages'
    Python ignores SIGPIPE and SIGXFSZ before its exec."""
    monkeypatch.setenv("OSB_MOCK_CONTAINED", "1" if path.startswith("thread") else "0")
    monkeypatch.setenv("OSB_MOCK_FORKER", "0" if path == "stages" else "1")
    monkeypatch.setenv("OSB_MOCK_PSPAWN", "0" if path == "thread-sh" else "1")
    # a mock started as GNU make starts its recipes (glibc's posix_spawn): with glibc's own signals ignored, which
    # a mock's start puts back to their defaults (runtime/_util.py default_signals_for_children). As the first
    # mock of the process: another one this worker still runs (a session fixture) would make it a no-op
    monkeypatch.setattr(_util, "_SIG_USERS", 0)
    monkeypatch.setattr(_util, "_GLIBC_CHANGED", [])
    monkeypatch.setattr(_util, "_SIG_CHANGED", [])
    was = [_util._glibc_signal(sig, True) for sig in _util._GLIBC_SIGNALS]
    _util.default_signals_for_children()
    rt = SandboxRuntime(str(tmp_path / "sb"))
    try:
        rt.start_entrypoint(["sleep", "60"])
        user = "0 0 0,1" if path == "forker-clone" else None
        cmd = "grep ^SigIgn /proc/self/status"
        if not pty:
            _, out = _run(rt, cmd, user=user)
        else:
            master, slave = rt.openpty()
            p = rt.spawn(["/bin/sh", "-c", cmd], stdin=slave, stdout=slave, stderr=slave, controlling_tty=True)
            os.close(slave)
            assert p.wait(30) == 0
            out = os.read(master, 4096).decode()
            os.close(master)
        assert out.split() == ["SigIgn:", "0000000000000000"], (path, pty, out)
    finally:
        rt.cleanup()
        _util.inherited_signals_back()
        assert all(_util._glibc_signal(sig, None) for sig in _util._GLIBC_SIGNALS)  # as it came
        for sig, ignored in zip(_util._GLIBC_SIGNALS, was, strict=True):
            _util._glibc_signal(sig, ignored)
