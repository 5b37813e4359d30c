"""Containment (QUIRKS.md, Containment) through the mock's HTTP API: `POST /command` on a sandbox of `MockOpenSandbox()`
(the in-process execd, as a new user would try it) and on a sandbox whose execd is the real binary (`execd_bin`), which
now runs inside the sandbox at /opt/opensandbox/execd.

Expected values: fixtures/21_containment_probes.json (see containment_probes.py).
"""

from __future__ import annotations

import http.client
import os
import urllib.parse

import pytest

from mock_opensandbox.runtime import optional
from mock_opensandbox.server import MockOpenSandbox
from tiers.t1.sandbox import containment_probes as cp
from tiers.toolkit.marks import needs_isolation

pytestmark = needs_isolation
REAL_EXECD = os.path.join(cp.REPO, "..", "shared", "opensandbox", "execd")
Api = cp.Api
API_PROBES = cp.API_PROBES


@pytest.fixture(scope="module")
def host_marker(tmp_path_factory):
    d = tmp_path_factory.mktemp("host-marker")
    marker = d / ("osb-host-marker-" + cp.TOKEN)
    marker.write_text("host\n")
    yield str(marker)


def _one_sandbox(osb: MockOpenSandbox):
    """(Api, sandbox id) of one sandbox on the started ``osb``; stops it and cleans the host after."""
    try:
        api = Api(osb)
        yield api, api.create()
    finally:
        osb.stop()
        cp.cleanup_host_leftovers()


@pytest.fixture(scope="module")
def mock_sandbox():
    yield from _one_sandbox(MockOpenSandbox(execd_close_delay=0.05).start())  # streams end right after the last event


@pytest.mark.parametrize("name", API_PROBES)
def test_post_command_is_contained(mock_sandbox, host_marker, name):
    api, sid = mock_sandbox
    pr = {p.name: p for p in cp.probes(host_marker)}[name]
    if pr.python and not cp.host_python_in_view():
        pytest.skip("no /usr/bin/python3 inside the sandbox view")
    rc, out = api.run(sid, pr.cmd)
    pr.check(rc, out)


def test_health_says_isolated(mock_sandbox):
    api, _ = mock_sandbox
    c = http.client.HTTPConnection(api.hostport, timeout=30)
    try:
        c.request("GET", "/health")
        r = c.getresponse()
        r.read()
        iso = r.getheader("x-mock-isolation")
        # what is not contained follows "; " (no slirp4netns, no cgroups: here or OSB_MOCK_NO)
        assert iso.split("; ")[0] == "isolated", iso
    finally:
        c.close()


# -- the real execd inside the sandbox -----------------------------------------------------------


@pytest.fixture(scope="module")
def real_execd_sandbox():
    if optional.off("execd") or not (os.path.isfile(REAL_EXECD) and os.access(REAL_EXECD, os.X_OK)):
        pytest.skip("the real execd binary (../shared/opensandbox/execd) is not here (or OSB_MOCK_NO=execd)")
    yield from _one_sandbox(MockOpenSandbox(execd_bin=os.path.realpath(REAL_EXECD), execd_token="contain-t1").start())


def test_real_execd_runs_inside_the_sandbox(real_execd_sandbox):
    api, sid = real_execd_sandbox
    _rc, out = api.run(sid, "ps -e -o pid=,ppid=,args=; true")
    execd = [line.split(None, 2) for line in out.splitlines() if "/opt/opensandbox/execd" in line]
    assert execd and execd[0][2].startswith("/opt/opensandbox/execd --port "), out
    rt = api.osb.sandboxes[sid].runtime
    assert rt.isolated and rt.pid_namespace
    # seen from the host: the execd process has the sandbox's capability set and root
    pid = api.osb.sandboxes[sid].execd.proc.pid
    with open(f"/proc/{pid}/status") as fh:
        cp._check_caps(0, fh.read())
    st, root = os.stat(f"/proc/{pid}/root"), os.stat(rt.root)
    assert (st.st_dev, st.st_ino) == (root.st_dev, root.st_ino)


@pytest.mark.parametrize("name", ("caps", "dev", "remount_usr_rw", "host_secrets", "privileged_ops"))
def test_real_execd_commands_are_contained(real_execd_sandbox, host_marker, name):
    api, sid = real_execd_sandbox
    pr = {p.name: p for p in cp.probes(host_marker)}[name]
    rc, out = api.run(sid, pr.cmd)
    pr.check(rc, out)


def test_real_execd_files_api_cannot_reach_host_paths(real_execd_sandbox, tmp_path):
    """DELETE /directories and GET /files/download on a host path only ever see the sandbox's view."""
    api, sid = real_execd_sandbox
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("host file\n")
    hostport, prefix, headers = api.execd(sid)
    headers = dict(headers, **{"X-EXECD-ACCESS-TOKEN": api.osb.execd_token})
    q = urllib.parse.quote(str(victim))
    api.call("DELETE", f"{prefix}/directories?path={q}", hostport=hostport, headers=headers)
    assert (victim / "keep").read_text() == "host file\n"
    status, body = api.call(
        "GET",
        prefix + "/files/download?path=" + urllib.parse.quote(str(victim / "keep")),
        hostport=hostport,
        headers=headers,
    )
    assert b"host file" not in body
    status, body = api.call("GET", prefix + "/files/download?path=/etc/shadow", hostport=hostport, headers=headers)
    try:
        with open("/etc/shadow", "rb") as fh:
            host_shadow = fh.read()
    except OSError:
        host_shadow = b""
    assert status != 200 or body != host_shadow
