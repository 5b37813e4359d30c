"""The inside of a sandbox on the mock (fixtures/22_sandbox_inside.json): the probe list of tiers/flows/sandbox/sandbox_inside.py (the
same assertions t4 runs on the live server, tiers/t4/sandbox/test_live_inside.py) against a `MockOpenSandbox()` sandbox created
with resourceLimits cpu 500m / memory 512Mi. The rows the mock does not pass yet are strict xfails naming what is
missing (NOT_YET); the lead removes a mark when that branch lands (a row that starts passing fails the run)."""

from __future__ import annotations

import os
import socket

import pytest

from mock_opensandbox.runtime import nethub
from mock_opensandbox.runtime.cgroups import host as cgroup_host
from mock_opensandbox.runtime.contained import group_kwargs
from mock_opensandbox.server import MockOpenSandbox
from tiers.flows.sandbox import sandbox_inside as si
from tiers.toolkit.marks import needs_isolation

# the probes allocate 1 GiB and spin for 2 s: only inside an isolated sandbox
pytestmark = needs_isolation

NOT_YET: dict = {}
# the probes that need the sandbox's memory/cpu limits applied (cgroups, an optional tool: README)
LIMIT_PROBES = ("cgroup_limits", "oom_1g", "cpu_share")


def _mark(name: str):
    if name in NOT_YET:
        return pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=NOT_YET[name]))
    return name


@pytest.fixture(scope="module")
def target():
    osb = MockOpenSandbox(execd_close_delay=0.05).start()  # streams end right after the last event
    t = si.Target(osb.base_url, osb.api_key or "", "python:3", execd_token=osb.execd_token)
    t.osb = osb
    try:
        yield t
    finally:
        t.delete_all()
        osb.stop()


@pytest.fixture(scope="module")
def inside(target):
    return si.Inside(target, target.create())


@pytest.mark.parametrize("name", [_mark(n) for n in si.NAMES])
def test_inside_mock(inside, name):
    if name in LIMIT_PROBES and cgroup_host().missing:  # no cgroups here, or OSB_MOCK_NO=cgroups
        pytest.skip("resource limits: %s" % cgroup_host().note())
    probe = si.PROBES[name]
    probe.check(probe.run(inside), inside)


def test_pid1_leads_its_session_mock(inside):
    command = si.pid1_session(inside)
    # the known difference (QUIRKS, "Joining, as root"): the mock's session (0 inside: its leader is outside the
    # namespace), or one of its own where the mock has a controlling terminal, where live's is PID 1's (1)
    contained = os.geteuid() == 0 and os.environ.get("OSB_MOCK_CONTAINED", "1") != "0"
    # without the thread, the sandbox's forker clones it into a group of the forker's session (forker.py)
    forker = not contained and os.environ.get("OSB_MOCK_FORKER", "1") != "0"
    mocks = contained and "process_group" in group_kwargs(False) or forker
    assert [row[2] for row in command.values()] == [0 if mocks else pid for pid in command], command


@pytest.mark.parametrize("name", [_mark("same_port_two_sandboxes")])
def test_same_port_two_sandboxes_mock(target, name):
    with socket.socket() as s:  # today's mock serves on the host's loopback: a free ephemeral port, not 9000
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    si.same_port_two_sandboxes(target, port)


def test_directory_download_mock(inside):
    for path in ("/tmp", "/", "/etc"):  # live: the first of the three shapes for some, the last for / and /etc
        got = si.directory_download(inside, path)
        assert (got[":status"], got["content-length"]) == ("200", "9223372036854775807"), got


@pytest.mark.skipif(not nethub.wanted(), reason="the sandboxes' bridge needs root and slirp4netns (runtime/nethub.py)")
def test_bridge_peers_mock(target):
    si.bridge_peers(target)


# a command inside asks execd at 127.0.0.1:44772 (the real one listens on :44772 in the container; fixture 22
# connect_host): GET /ping, then POST /command with SSE, then a faulted GET /files/info
_FROM_INSIDE = r"""python3 - <<'EOF'
import json, os, urllib.error, urllib.request
h = {"X-EXECD-ACCESS-TOKEN": os.environ.get("TOK", "")}
def call(path, body=None):
    req = urllib.request.Request("http://127.0.0.1:44772" + path, headers=dict(h, **({"Content-Type":
          "application/json", "Accept": "text/event-stream"} if body else {})), data=body and json.dumps(body).encode())
    try:
        with urllib.request.urlopen(req, timeout=20) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
print("ping=%d" % call("/ping")[0])
st, body = call("/command", {"command": "echo from-$((6*7))"})
evs = [json.loads(b) for b in body.split("\n\n") if b.strip()]
print("command=%d %s" % (st, ",".join(e["type"] + ("=" + e["text"] if e["type"] == "stdout" else "") for e in evs)))
print("faulted=%d" % call("/files/info?path=/etc/hostname")[0])
EOF"""


def test_execd_answers_on_127_0_0_1_44772_inside(target, inside):
    """Same answers from inside as from outside, through the same journal and fault rules."""
    sid = inside.sid
    osb_faults = target.osb.faults
    rule = osb_faults.add(kind="status", status=503, method="GET", path=r"^/files/info$", sandbox=sid, count=1)
    try:
        cmd = "TOK=%s " % (target.execd_token or "") + _FROM_INSIDE
        res = target.command(sid, cmd)
    finally:
        osb_faults.remove(rule.id)
    assert res.rc == 0 and res.status == 200, res
    lines = res.out.split("\n")
    assert "ping=200" in lines, res
    assert "command=200 init,ping,stdout=from-42,execution_complete" in lines, res
    assert "faulted=503" in lines, res  # the fault rule of this sandbox's execd reached the inside listener
    got = [
        (e["method"], e["path"].split("?")[0], e["status"])
        for e in target.osb.journal.entries(sandbox=sid)
        if e.get("listener") == "execd"
    ]
    assert ("GET", "/ping", 200) in got and ("POST", "/command", 200) in got, got


_AS_NOBODY = r"""
import http.client, json, sys, threading
sys.path.insert(0, sys.argv[1])
from mock_opensandbox import MockOpenSandbox
def call(hp, method, path, body=None, headers=None):
    c = http.client.HTTPConnection(hp, timeout=60)
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=headers or {})
    r = c.getresponse()
    return r.status, r.read()
with MockOpenSandbox(execd_close_delay=0.05) as osb:
    hp, key = osb.base_url.split("://")[1], {"OPEN-SANDBOX-API-KEY": osb.api_key or ""}
    sid = json.loads(call(hp, "POST", "/v1/sandboxes", {"image": {"uri": "python:3"}, "entrypoint": ["sleep", "300"],
                                                        "resourceLimits": {}, "timeout": 600}, key)[1])["id"]
    ep = json.loads(call(hp, "GET", "/v1/sandboxes/%s/endpoints/44772" % sid, None, key)[1])
    ehp, _, prefix = ep["endpoint"].partition("/")
    tok = osb.execd_token or ""
    st, body = call(ehp, "POST", "/" + prefix + "/command", {"command": "TOK=%s " % tok + sys.stdin.read()},
                    dict(ep.get("headers") or {}, **{"X-EXECD-ACCESS-TOKEN": tok}))
    print(json.dumps([st, body.decode(), osb.sandboxes[sid].runtime.pid1.holder.mode]))
    call(hp, "DELETE", "/v1/sandboxes/" + sid, None, key)
    print(json.dumps([t.name for t in threading.enumerate() if t.name.startswith("execd-inside")]))
"""


def test_execd_answers_inside_as_non_root_through_the_agent():
    """As non-root the listening socket comes from the in-sandbox agent (its 'listen' op, SCM_RIGHTS)."""
    import json
    import shutil
    import subprocess

    from tiers.t1.sandbox.test_containment import NOBODY, _interpreter, _nobody_can_run
    from tiers.toolkit.mockcli import REPO

    why = _nobody_can_run()
    if why:
        pytest.skip(why)
    out = subprocess.run(
        [
            shutil.which("setpriv"),
            "--reuid=%d" % NOBODY,
            "--regid=%d" % NOBODY,
            "--clear-groups",
            "--",
            _interpreter(True),
            "-c",
            _AS_NOBODY,
            REPO,
        ],
        input=_FROM_INSIDE,
        cwd="/",
        capture_output=True,
        text=True,
        timeout=120,
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"},
    )
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and len(lines) == 2, (out.stdout, out.stderr[-2000:])
    status, body, mode = json.loads(lines[0])
    assert status == 200 and mode == "helper", lines[0]
    assert '"text":"ping=200"' in body and "stdout=from-42" in body, body
    assert json.loads(lines[1]) == [], lines[1]  # no accept thread after the delete


@pytest.mark.parametrize("stage", ["0", "1"])
def test_sigint_of_sessions_mock(inside, monkeypatch, stage):
    """As tiers/t4/sandbox/test_live_inside.py::test_sigint_of_sessions_live (execd's SIGINT: execd/commands.py
    Sigint): a session's bash starts with SIGINT ignored unless a foreground command runs; a command never. The
    contained thread forks with the mock's SIGINT ignored for the fork (contained.sigint_ignored), or, with
    OSB_MOCK_SIGINT_STAGE=1 (and on every other path), through the sandbox's sh (contained.SIGINT_STAGE)."""
    monkeypatch.setenv("OSB_MOCK_SIGINT_STAGE", stage)
    assert si.sigint_dispositions(inside) == si.SIGINT_DISPOSITIONS


def test_the_mocks_sigint_is_its_own_again_after_a_fork_that_ignored_it(inside):
    """contained.sigint_ignored puts the mock's SIGINT disposition back: Python's handler, caught, not ignored."""
    import signal

    si.sigint_dispositions(inside)
    with open("/proc/self/status") as fh:
        status = dict(line.split(":\t", 1) for line in fh.read().splitlines() if ":\t" in line)
    assert not int(status["SigIgn"], 16) & 0x2 and int(status["SigCgt"], 16) & 0x2, status
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_stdin_and_session_env_mock(inside):
    """As tiers/t4/sandbox/test_live_inside.py::test_stdin_and_session_env_live: /dev/null read-only as stdin
    (runtime/sandbox.py _devnull), PWD in execd's environment (base_env)."""
    assert si.stdin_and_session_env(inside) == si.STDIN_AND_SESSION_ENV


def test_dockerenv_mock(inside):
    """As tiers/t4/sandbox/test_live_inside.py::test_dockerenv_live (runtime/holder.py write_dockerenv)."""
    assert si.dockerenv(inside) == si.DOCKERENV


def test_execd_files_mock(inside):
    """As tiers/t4/sandbox/test_live_inside.py::test_execd_files_live (execd/runfiles.py)."""
    assert si.execd_files(inside) == si.EXECD_FILES


def test_execd_failed_starts_mock(inside):
    """As tiers/t4/sandbox/test_live_inside.py::test_execd_failed_starts_live (execd/commands.py
    CommandRegistry._not_started)."""
    assert si.execd_failed_starts(inside) == si.EXECD_FAILED_STARTS


def test_execd_fds_mock(inside):
    """As tiers/t4/sandbox/test_live_inside.py::test_execd_fds_live (execd/commands.py CommandRegistry._tail,
    ``logs``)."""
    assert si.execd_fds(inside) == si.EXECD_FDS
