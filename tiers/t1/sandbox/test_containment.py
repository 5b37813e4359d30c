"""Containment (QUIRKS.md, Containment): a mock sandbox is contained like a container of the real server - probed
through the runtime directly, in every execution path (the sandbox's PID 1, joined commands as root, the per-command
fallback without PID namespace, the non-root user-namespace paths).

Expected values: fixtures/21_containment_probes.json (the real sandbox). See containment_probes.py.
"""

from __future__ import annotations

import json
import os
import pwd
import re
import shutil
import subprocess
import sys

import pytest

from mock_opensandbox.runtime import SANDBOX_CAP_MASK, SandboxRuntime, optional
from mock_opensandbox.runtime import caps as caps_data
from tiers.t1.sandbox import containment_probes as cp
from tiers.toolkit.marks import needs_isolation
from tiers.toolkit.waits import wait_until

pytestmark = needs_isolation
NOBODY = 65534


@pytest.fixture(scope="module")
def host_marker(tmp_path_factory):
    d = tmp_path_factory.mktemp("host-marker")
    os.chmod(d, 0o755)
    marker = d / ("osb-host-marker-" + cp.TOKEN)
    marker.write_text("host\n")
    os.chmod(marker, 0o644)
    yield str(marker)


@pytest.fixture(scope="module")
def rt(tmp_path_factory):
    r = SandboxRuntime(str(tmp_path_factory.mktemp("contain") / "root"), isolate=True)
    try:
        yield r
    finally:
        r.cleanup()
        cp.cleanup_host_leftovers()


def _run(rt: SandboxRuntime, cmd: str) -> tuple[int, str]:
    p = rt.spawn(["/bin/sh", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd="/")
    out, _ = p.communicate(timeout=60)
    return p.returncode, out.decode("utf-8", "replace")


def _skip_reason(pr: cp.Probe, pid_namespace: bool) -> str | None:
    if pr.pidns_only and not pid_namespace:
        return "PID 1 is the host's init without a PID namespace"
    if pr.python and not cp.host_python_in_view():
        return "no /usr/bin/python3 inside the sandbox view"
    return None


PROBE_NAMES = [p.name for p in cp.probes("/x")]


@pytest.mark.parametrize("name", PROBE_NAMES)
def test_probe_joined_command(rt, host_marker, name):
    """A command joining the sandbox (root: setns + nsenter + setpriv; non-root: the helper)."""
    pr = {p.name: p for p in cp.probes(host_marker)}[name]
    why = _skip_reason(pr, rt.pid_namespace)
    if why:
        pytest.skip(why)
    rc, out = _run(rt, pr.cmd)
    pr.check(rc, out)


def test_capability_set_is_the_recorded_one():
    """The single constant (Docker defaults minus the server's drop list) is what the real sandbox
    prints, and the QUIRKS.md row says the same."""
    rec = cp.recorded_caps()
    assert int(rec["CapEff"], 16) == int(rec["CapBnd"], 16) == int(rec["CapPrm"], 16) == SANDBOX_CAP_MASK
    assert int(rec["CapInh"], 16) == 0 == int(rec["CapAmb"], 16)
    with open(os.path.join(cp.REPO, "mock_opensandbox", "QUIRKS.md"), encoding="utf-8") as fh:
        quirks = fh.read()
    assert "%016x" % SANDBOX_CAP_MASK in quirks
    assert ", ".join(c.lower() for c in caps_data.SANDBOX_CAPS) in quirks


def test_entrypoint_and_its_children_are_contained(tmp_path):
    """PID 1's child (the entrypoint, started before any command) and a background process of it."""
    r = SandboxRuntime(str(tmp_path / "root"), isolate=True)
    try:
        r.start_entrypoint(
            [
                "/bin/sh",
                "-c",
                "grep -E '^(Cap|NoNewPrivs)' /proc/self/status > /tmp/ep; "
                "(grep -E '^(Cap|NoNewPrivs)' /proc/self/status > /tmp/bg) & "
                "exec sleep 30",
            ]
        )
        ep, bg = tmp_path / "root" / "tmp" / "ep", tmp_path / "root" / "tmp" / "bg"
        wait_until(lambda: ep.exists() and bg.exists() and bg.read_text().count("\n") >= 6, 10.0, 0.02)
        cp._check_caps(0, ep.read_text())
        cp._check_caps(0, bg.read_text())
        if r.pid_namespace:
            rc, out = _run(r, "grep -E '^(Cap|NoNewPrivs)' /proc/1/status")
            cp._check_caps(rc, out)
    finally:
        r.cleanup()


def test_entrypoint_that_exits_at_once_is_a_stopped_sandbox(tmp_path):
    """`true` as entrypoint: PID 1 may be gone before the mock has looked at it. The sandbox still had
    its namespaces (no fallback), its exit status is 0 and nothing can join it any more."""
    from mock_opensandbox.runtime import SandboxNotRunning

    for i in range(5):
        r = SandboxRuntime(str(tmp_path / ("root%d" % i)), isolate=True)
        try:
            assert r.start_entrypoint(["true"]).wait(timeout=30) == 0
            assert r.pid_namespace, r.isolation_note
            with pytest.raises(SandboxNotRunning):
                r.spawn(["true"]).wait(timeout=30)
        finally:
            r.cleanup()


def _on_pty(rt: SandboxRuntime, argv: list[str], master: int, slave: int) -> bytes:
    """``argv`` run with the pty's ``slave`` as its controlling terminal: all it wrote, read from ``master`` until
    the command ends (EOF or EIO). Both ends are closed on return."""
    try:
        p = rt.spawn(argv, stdin=slave, stdout=slave, stderr=slave, controlling_tty=True)
        os.close(slave)
        slave = -1
        buf = b""
        while True:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
        p.wait(timeout=30)
        return buf
    finally:
        os.close(master)
        if slave >= 0:
            os.close(slave)


def test_pty_shell_with_controlling_tty_is_contained(rt):
    """PTY sessions (controlling_tty=True) take the same path."""
    import pty as ptymod

    buf = _on_pty(
        rt,
        ["/bin/sh", "-c", "grep -E '^(Cap|NoNewPrivs)' /proc/self/status; test -t 0 && echo tty=yes"],
        *ptymod.openpty(),
    )
    out = buf.decode().replace("\r\n", "\n")
    cp._check_caps(0, out)
    assert "tty=yes" in out


def test_pty_comes_from_the_sandbox_devpts(rt):
    """A PTY session's terminal is the sandbox's own /dev/pts/N (execd opens /dev/ptmx inside the
    container), so `tty` names it; the host's pty would be "not a tty" inside the fresh devpts."""
    if not rt.pid_namespace:
        pytest.skip("the per-command fallback has no devpts to allocate from in advance")
    buf = _on_pty(rt, ["/bin/sh", "-c", "tty"], *rt.openpty())
    assert re.fullmatch(r"/dev/pts/\d+", buf.decode().strip()), buf


def test_privileged_wrappers_never_see_loader_variables(rt, tmp_path):
    """LD_PRELOAD & co. reach the command, not the privileged wrappers that run before the drop."""
    _rc, out = _run(rt, "true")
    p = rt.spawn(
        ["/bin/sh", "-c", 'echo "$LD_PRELOAD|$GCONV_PATH"'],
        env={"LD_PRELOAD": "/nonexistent/x.so", "GCONV_PATH": "/nonexistent"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = p.communicate(timeout=30)
    assert out.decode().strip() == "/nonexistent/x.so|/nonexistent"
    # ld.so would complain about the missing preload in every wrapper that saw it; the command itself does too
    assert err.decode().count("x.so") <= 1, err


# -- the other execution paths, each in a fresh process ----------------------------------------


def _interpreter(as_nobody: bool) -> str:
    """An interpreter the unprivileged user can execute (the test's may live under root's 0700 home)."""
    if as_nobody and os.path.isfile("/usr/bin/python3"):
        return "/usr/bin/python3"
    return os.path.realpath(sys.executable)


def _battery(host_marker: str, *, env: dict[str, str], as_nobody: bool, http: bool = False) -> dict:
    cmd = [
        _interpreter(as_nobody),
        os.path.join(cp.REPO, "tiers", "t1", "sandbox", "containment_probes.py"),
        host_marker,
    ]
    cmd += ["--http"] if http else []
    full_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", "TMPDIR": "/tmp", **_switches()}
    full_env.update(env)
    if as_nobody:
        setpriv = shutil.which("setpriv")
        cmd = [setpriv, "--reuid=%d" % NOBODY, "--regid=%d" % NOBODY, "--clear-groups", "--"] + cmd
    p = subprocess.run(cmd, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=240, cwd="/tmp")
    assert p.returncode == 0, p.stderr.decode("utf-8", "replace")[-2000:]
    return json.loads(p.stdout)


def _switches() -> dict[str, str]:
    """OSB_MOCK_NO reaches the mocks these tests start in clean environments."""
    return {optional.ENV: os.environ[optional.ENV]} if optional.ENV in os.environ else {}


def _nobody_probe(env: dict[str, str]) -> subprocess.CompletedProcess:
    """probe_isolation() of the mock run as uid 65534: its (isolated, note) on stdout, one per line."""
    return subprocess.run(
        [
            shutil.which("setpriv") or "setpriv",
            "--reuid=%d" % NOBODY,
            "--regid=%d" % NOBODY,
            "--clear-groups",
            "--",
            _interpreter(True),
            "-c",
            "import sys; sys.path.insert(0, %r); import mock_opensandbox.runtime as r; "
            "print(*r.probe_isolation()[:2], sep=chr(10))" % cp.REPO,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        timeout=60,
        cwd="/tmp",
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", **env},
    )


def _nobody_can_run() -> str | None:
    if os.geteuid() != 0:
        return "needs root to switch to an unprivileged user"
    if not shutil.which("setpriv"):
        return "no setpriv"
    try:
        pwd.getpwuid(NOBODY)
    except KeyError:
        return "no uid 65534"
    if optional.off("userns"):
        return "user namespaces switched off by " + optional.ENV
    if _nobody_probe({}).stdout.split(b"\n")[0] != b"True":
        return "an unprivileged user cannot isolate here (user namespaces off, or the repo/interpreter unreadable)"
    return None


def test_nonroot_without_user_namespaces_is_not_isolated():
    """OSB_MOCK_NO=userns: a non-root mock takes the path of a host without user namespaces: no isolation,
    and its note says why and what that means (commands on the host)."""
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv to run the mock as an unprivileged user")
    p = _nobody_probe({optional.ENV: "userns"})
    if p.returncode != 0:
        pytest.skip("uid 65534 cannot run the mock here (the repo or the interpreter is unreadable)")
    out = p.stdout.decode()
    assert out.startswith(
        "False\nsandbox isolation needs a user namespace (switched off by OSB_MOCK_NO): commands run ON THE HOST"
    ), out


PATHS = {
    "root-per-command": ({"OSB_MOCK_PIDNS": "0"}, False),
    "nonroot-helper": ({}, True),
    "nonroot-per-command": ({"OSB_MOCK_PIDNS": "0"}, True),
    "nonroot-http": ({}, True),  # MockOpenSandbox() + POST /command as an unprivileged user
}
_batteries: dict[str, dict] = {}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_probes_in_other_execution_paths(path, host_marker):
    env, nobody = PATHS[path]
    if nobody:
        why = _nobody_can_run()
        if why:
            pytest.skip(why)
    try:
        result = _battery(host_marker, env=env, as_nobody=nobody, http=path.endswith("-http"))
    finally:
        cp.cleanup_host_leftovers()
    assert result["pid_namespace"] is (env.get("OSB_MOCK_PIDNS") != "0")
    assert result.get("path_lookup", 0) == 0
    if path == "nonroot-helper":  # a non-root mock's commands come from the sandbox's forker (forker.py)
        assert result["forker"] is True
    failures = []
    for pr in cp.probes(host_marker):
        if _skip_reason(pr, result["pid_namespace"]) or pr.name not in result["probes"]:
            continue
        rc, out = result["probes"][pr.name]
        try:
            if pr.name == "mountinfo_ro" and nobody:
                # a user namespace cannot mount a fresh sysfs: the host's is bound, every submount read-only
                got = cp.ro_mounts(out.splitlines())
                assert cp.ro_mounts(cp.REC["cat /proc/self/mountinfo"]) <= got
            else:
                pr.check(rc, out)
        except AssertionError as exc:
            failures.append(f"{pr.name}: {exc}")
    assert not failures, "\n".join(failures)
