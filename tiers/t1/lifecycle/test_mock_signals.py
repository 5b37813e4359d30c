"""QUIRKS.md, MockOpenSandbox / CLI (the janitor): after SIGINT, SIGTERM or SIGKILL of ``python -m mock_opensandbox``
nothing of its sandboxes is left - no process, cgroup, mount or temp dir (at most a --root the user gave) - and a mock
started again with the same --root reaps what a dead one (and its janitor) left.

The leftovers are counted before and after; "net" counts network namespaces and relays in its own
tests. Each sandbox runs background processes (a setsid daemon among them) under resourceLimits.
"""

from __future__ import annotations

import glob
import json
import os
import signal
import time

import pytest

from mock_opensandbox.runtime import cgroups
from mock_opensandbox.runtime.janitor import script as janitor_script
from tiers.toolkit import rest
from tiers.toolkit.marks import needs_isolation
from tiers.toolkit.mockcli import Cli
from tiers.toolkit.procs import alive, cmdline, descendants
from tiers.toolkit.waits import poll, wait_until

HOST = cgroups.host()
BODY = {
    "image": {"uri": "python:3"},
    "entrypoint": ["sleep", "300"],
    "resourceLimits": {"cpu": "500m", "memory": "256Mi"},
}


@pytest.fixture
def clis(cli_factory):
    """t1's ``cli_factory`` with no key and no execd delays."""
    return lambda *args: cli_factory("--insecure", "--execd-start-delay", "0", "--execd-close-delay", "0", *args)


def _sandbox_with_processes(cli: Cli) -> str:
    status, body = cli.call("POST", "/v1/sandboxes", BODY)
    assert status == 202, body
    sid = json.loads(body)["id"]
    status, body = cli.call(
        "POST",
        "/v1/sandboxes/%s/proxy/44772/command" % sid,
        {"command": "sleep 300 & setsid sleep 300 & echo started", "background": True},
    )
    assert status == 200, body
    return sid


def _cgroups_of(sids: list[str]) -> list[str]:
    return [
        d for base in HOST.bases.values() for sid in sids for d in glob.glob(os.path.join(base, "osb-mock-*-" + sid))
    ]


def _members(dirs: list[str]) -> set[int]:
    out: set[int] = set()
    for d in dirs:
        try:
            with open(os.path.join(d, "cgroup.procs")) as fh:
                out.update(int(x) for x in fh.read().split())
        except OSError:
            pass
    return out


def _mounts_under(root: str) -> list[str]:
    with open("/proc/self/mountinfo") as fh:
        return [line for line in fh if " %s/" % root in line or " %s " % root in line]


def _running(pid: int) -> bool:
    """Alive and not exiting. An exiting sandbox PID 1 whose memory, files, namespaces and cgroups are
    already released can linger until the host's init reaps the zombies of its namespace that were
    the dead mock's children (kernel zap_pid_ns_processes): that depends on the host's init (about
    1.5 s on this machine's, at once with systemd or tini) and is not something left running."""
    if not alive(pid):
        return False
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            return not int(fh.read().rsplit(b")", 1)[1].split()[6]) & 0x4  # PF_EXITING
    except (OSError, IndexError, ValueError):
        return False


def _leftovers(pids: set[int], cgs: list[str], root: str, keep_root: bool) -> dict[str, int]:
    root_left = os.path.isdir(root) and (not keep_root or bool([n for n in os.listdir(root)]))
    return {
        "processes": len([p for p in pids if _running(p)]),
        "cgroups": len([d for d in cgs if os.path.exists(d)]),
        "mounts": len(_mounts_under(root)),
        "temp dirs": int(root_left),
    }


def _wait_clean(pids, cgs, root, keep_root, timeout=10.0) -> tuple[dict[str, int], float]:
    t0 = time.monotonic()
    left = poll(lambda: _leftovers(pids, cgs, root, keep_root), lambda got: not any(got.values()), timeout, 0.02)
    return left, time.monotonic() - t0


@needs_isolation
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL], ids=["INT", "TERM", "KILL"])
def test_nothing_is_left_after_a_signal(clis, sig):
    cli = clis()
    if not HOST.missing:
        assert "Resource limits: memory, cpu and pids through cgroup v%d" % HOST.version in cli.lines
    sids = [_sandbox_with_processes(cli), _sandbox_with_processes(cli)]
    cgs = _cgroups_of(sids)
    if HOST.bases:
        assert len(cgs) == 2 * len(HOST.bases), cgs
    pids = descendants(cli.proc.pid) | _members(cgs)
    before = _leftovers(pids, cgs, cli.root, False)
    assert before["processes"] >= 8 and before["temp dirs"] == 1, before  # 2 x (unshare, sh, sleep, 2 sleeps)
    cli.proc.send_signal(sig)
    cli.proc.communicate(timeout=30)
    after, took = _wait_clean(pids, cgs, cli.root, False)
    print("leftovers before %s after %s (%s, %.3f s)" % (before, after, signal.Signals(sig).name, took))
    assert after == {"processes": 0, "cgroups": 0, "mounts": 0, "temp dirs": 0}, after


def _rooted(clis, tmp_path) -> tuple[str, Cli, str, list[str]]:
    """A mock with a --root of the test's and one sandbox with processes: (root, cli, sandbox id, its cgroups)."""
    root = str(tmp_path / "roots")
    cli = clis("--root", root)
    sid = _sandbox_with_processes(cli)
    return root, cli, sid, _cgroups_of([sid])


@needs_isolation
def test_sigkill_with_a_given_root_leaves_only_the_root(clis, tmp_path):
    root, cli, _, cgs = _rooted(clis, tmp_path)
    pids = descendants(cli.proc.pid) | _members(cgs)
    cli.proc.send_signal(signal.SIGKILL)
    cli.proc.communicate(timeout=30)
    after, _ = _wait_clean(pids, cgs, root, True)
    assert after == {"processes": 0, "cgroups": 0, "mounts": 0, "temp dirs": 0}, after
    assert os.listdir(root) == []


def _janitor(mock_pid: int) -> int:
    """The janitor by its exact script: other `python -I -S -c` children (the seccomp stage of every
    command, scripts.SECCOMP_STAGE) come and go, and one of them once stood in for it."""
    source = janitor_script().encode()
    found = [pid for pid in descendants(mock_pid) if (cmdline(pid) or [])[1:5] == [b"-I", b"-S", b"-c", source]]
    assert len(found) == 1, "janitor processes: %r" % found
    return found[0]


@needs_isolation
def test_a_restart_with_the_same_root_reaps_what_a_dead_mock_left(clis, tmp_path):
    root, cli, sid, cgs = _rooted(clis, tmp_path)
    janitor = _janitor(cli.proc.pid)
    pids = descendants(cli.proc.pid) | _members(cgs)
    # the janitor dies first (an OOM kill of both, a killed process group): the dead mock's
    # sandbox dir and cgroups stay behind until the next mock with this root
    cli.proc.send_signal(signal.SIGSTOP)  # both die at once: the mock cannot see its janitor go first
    os.kill(janitor, signal.SIGKILL)
    cli.proc.send_signal(signal.SIGKILL)
    cli.proc.communicate(timeout=30)
    wait_until(lambda: not [p for p in pids if alive(p)], 10)
    assert os.path.isdir(os.path.join(root, sid))
    assert len([d for d in cgs if os.path.exists(d)]) == len(cgs)
    again = clis("--root", root)
    assert not os.path.exists(os.path.join(root, sid))
    assert [d for d in cgs if os.path.exists(d)] == []
    assert again.call("GET", "/health")[0] == 200
    assert again.stop(signal.SIGTERM)[0] == 0
    assert os.listdir(root) == []


@needs_isolation
def test_sigkill_as_an_unprivileged_user_leaves_nothing():
    """As non-root (a user namespace per sandbox; no cgroups on v1) the janitor still removes the temp
    root after a SIGKILL, and the sandboxes' processes die with the mock."""
    import shutil

    from tiers.t1.sandbox.test_containment import NOBODY, _interpreter, _nobody_can_run

    why = _nobody_can_run()
    if why:
        pytest.skip(why)
    cli = Cli(
        "--insecure",
        "--execd-start-delay",
        "0",
        "--execd-close-delay",
        "0",
        launcher=[
            shutil.which("setpriv") or "setpriv",
            "--reuid=%d" % NOBODY,
            "--regid=%d" % NOBODY,
            "--clear-groups",
            "--",
            _interpreter(True),
        ],
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"},
    )
    proc = cli.proc
    try:
        sids = [_sandbox_with_processes(cli), _sandbox_with_processes(cli)]
        cgs = _cgroups_of(sids)
        pids = descendants(proc.pid) | _members(cgs)
        before = _leftovers(pids, cgs, cli.root, False)
        assert before["processes"] >= 8 and before["temp dirs"] == 1, before
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        after, took = _wait_clean(pids, cgs, cli.root, False)
        print("non-root leftovers before %s after %s (SIGKILL, %.3f s)" % (before, after, took))
        assert after == {"processes": 0, "cgroups": 0, "mounts": 0, "temp dirs": 0}, after
    finally:
        cli.kill()


def _owned_by(mock_id: str, root: str) -> set[str]:
    """The dead mock's osb-mock-<mock_id>-* cgroups and the /tmp/osb-holder-* dirs its ledger names
    (other mocks on this host - parallel runs - are not counted)."""
    cgs = {
        d
        for base in HOST.bases.values()
        for d in glob.glob(os.path.join(base, "%s%s-*" % (cgroups.NAME_PREFIX, mock_id)))
    }
    try:
        with open(os.path.join(root, ".osb-ledger")) as fh:
            holders = {line.split(" ", 1)[1].strip() for line in fh if line.startswith("+holder-dir ")}
    except OSError:
        holders = set()
    return cgs | {d for d in holders if os.path.isdir(d)}


@needs_isolation
def test_a_restart_reaps_what_a_sigkill_in_mid_burst_left(clis, tmp_path):
    """SIGKILL of the mock and its janitor while 16 creates (4 threads) are under way: the restart with
    the same --root reaps every cgroup, holder dir and <root>/snapshot-images the dead mock left."""
    import threading

    root, cli, sid, cgs = _rooted(clis, tmp_path)
    if not cgs:
        pytest.skip("no cgroups here")
    mock_id = os.path.basename(cgs[0])[len(cgroups.NAME_PREFIX) :].split("-")[0]
    status, body = cli.call("POST", "/v1/sandboxes/%s/snapshots" % sid, {"name": "burst"})
    assert status in (200, 202), body
    wait_until(lambda: os.path.isdir(os.path.join(root, "snapshot-images")), 30)
    janitor = _janitor(cli.proc.pid)
    answered: list[int] = []

    def burst() -> None:
        for _ in range(4):
            try:
                answered.append(cli.call("POST", "/v1/sandboxes", BODY)[0])
            except OSError:
                return

    threads = [threading.Thread(target=burst, daemon=True) for _ in range(4)]
    for t in threads:
        t.start()
    wait_until(lambda: len(answered) >= 3, 60)  # mid-burst: some answered, others being created
    pids = descendants(cli.proc.pid)
    cli.proc.send_signal(signal.SIGSTOP)  # both die at once: the mock cannot see its janitor go first
    os.kill(janitor, signal.SIGKILL)
    cli.proc.send_signal(signal.SIGKILL)
    cli.proc.communicate(timeout=30)
    for t in threads:
        t.join(30)
    wait_until(lambda: not [p for p in pids if _running(p)], 10)
    left = _owned_by(mock_id, root)
    assert len(left) > len(cgs), "the kill left only the first sandbox's cgroups: the test proves nothing"
    print(
        "left by the dead mock: %d cgroups/holder dirs, snapshot-images: %s"
        % (len(left), os.path.isdir(os.path.join(root, "snapshot-images")))
    )
    again = clis("--root", root)
    assert again.call("GET", "/health")[0] == 200
    assert sorted(d for d in left if os.path.exists(d)) == []
    assert not os.path.exists(os.path.join(root, "snapshot-images"))
    assert again.stop(signal.SIGTERM)[0] == 0
    assert os.listdir(root) == []


@needs_isolation
def test_banner_names_the_install_command_of_a_missing_tool(clis):
    """--no slirp4netns (mock_opensandbox/runtime/optional.py): the banner says what is missing, what it adds
    and how to install it."""
    cli = clis("--no", "slirp4netns")
    lines = [line for line in cli.lines if line.startswith("Optional tool slirp4netns: ")]
    assert lines == [
        "Optional tool slirp4netns: switched off by OSB_MOCK_NO; it adds outbound traffic from a "
        "sandbox (eth0 and a default route)"
    ], cli.lines
    assert any(
        "no outbound network (slirp4netns switched off by OSB_MOCK_NO; apt-get install slirp4netns)" in line
        for line in cli.lines
    ), cli.lines


@needs_isolation
def test_no_cgroups_runs_sandboxes_without_limits(clis):
    """--no cgroups: the path of a host without cgroup delegation, where it has one. The banner names what
    is missing and how to get it; a create with resourceLimits still runs, and /health says "no limits"."""
    cli = clis("--no", "cgroups")
    assert "Resource limits: resource limits memory/cpu/pids (switched off by OSB_MOCK_NO)" in cli.lines, cli.lines
    assert any(
        line.startswith("Optional: cgroup delegation (run as root, or in a delegated cgroup v2 subtree")
        for line in cli.lines
    ), cli.lines
    status, body = cli.call(
        "POST",
        "/v1/sandboxes",
        {
            "image": {"uri": "python:3"},
            "entrypoint": ["tail", "-f", "/dev/null"],
            "resourceLimits": {"cpu": "500m", "memory": "512Mi"},
        },
    )
    assert status == 202, body
    sid = json.loads(body)["id"]
    iso = rest.call(cli.url, "GET", "/health").headers.get("x-mock-isolation", "")
    assert "not contained: resource limits memory/cpu/pids (switched off by OSB_MOCK_NO)" in iso, iso
    assert not cgroups.stale(cgroups.host(), "*", sid)  # no cgroup was made for it
    assert cli.call("DELETE", "/v1/sandboxes/" + sid)[0] == 204


def test_without_a_root_the_janitor_process_holds_the_holder_dirs(tmp_path):
    """No --root, so no ledger and no restart to reap: a holder dir is tracked by the janitor process from
    before it is made until it is removed (Janitor.intend's release), so a SIGKILL of the mock in the
    meantime leaves none (the janitor removes what it still tracks when its pipe closes)."""
    from mock_opensandbox.runtime.janitor import Janitor

    j = Janitor()
    kept, done = str(tmp_path / "osb-holder-kept"), str(tmp_path / "osb-holder-done")
    release = j.intend("holder-dir", kept)
    os.mkdir(kept)
    release2 = j.intend("holder-dir", done)
    assert release is not None and release2 is not None
    os.mkdir(done)
    os.rmdir(done)
    release2()
    os.mkdir(done)  # made again after its release: no longer the janitor's
    assert j.intend("cgroup-name", "x") is None  # cgroups are tracked once made
    janitor_pid = j.pid
    j.close()  # the pipe closes, as when the mock dies
    assert not alive(janitor_pid)
    assert not os.path.exists(kept)
    assert os.path.isdir(done)
