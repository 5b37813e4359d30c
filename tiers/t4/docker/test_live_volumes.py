"""Volumes on a live server (QUIRKS.md, Volumes): the flows tiers/t1/docker/test_volumes.py runs on the mock
(tiers/toolkit/volume_flows.py), with the same expectations. Host binds only when the live config allows them
(OPENSANDBOX_ALLOWED_HOST_PATHS, exported by `./local-up.sh env`). Named volumes this tier makes are called
osbvt-<random>; they are removed at the end with `docker volume rm` when the docker CLI is here.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tiers.t4.liveconfig import allowed_host_paths
from tiers.toolkit import volume_flows as vf

pytestmark = pytest.mark.live


@pytest.fixture
def t(live_server):
    target = vf.Target(live_server.base_url, live_server.api_key, live_server.image)
    claims: list = []
    target.claims = claims
    yield target
    target.close()
    docker = shutil.which("docker")
    if docker and claims:
        subprocess.run([docker, "volume", "rm", "-f"] + claims, capture_output=True, timeout=60)


def _keep(t, seen):
    t.claims.append(seen["claim"])
    return seen


def test_live_named_volume_is_shared_between_sandboxes(t):
    seen = _keep(t, vf.shared_between_sandboxes(t))
    assert seen["write"] == (0, "written\n")
    assert seen["read"] == (0, "from-a\n")
    assert seen["read_back"] == (0, "from-a\nfrom-b\n")


def test_live_named_volume_outlives_its_sandbox(t):
    seen = _keep(t, vf.outlives_the_sandbox(t))
    assert seen["read"] == (0, "kept\n")


def test_live_read_only(t):
    seen = _keep(t, vf.read_only(t))
    assert seen["read"] == (0, "seed\n")
    assert seen["write"][0] != 0 and vf.READ_ONLY in seen["write"][1], seen
    assert seen["touch"][0] != 0 and vf.READ_ONLY in seen["touch"][1], seen
    assert seen["rm"][1].startswith("still-there\n") and vf.READ_ONLY in seen["rm"][1], seen


def test_live_sub_path(t):
    seen = _keep(t, vf.sub_path(t))
    assert seen["seen"] == (0, "one\nreadme\nno-top\n")
    assert seen["back"] == (0, "f\nhello\n")


def test_live_links_planted_in_a_volume(t):
    # only links whose target exists: a link to a missing path would make the server (realpath strict) let it
    # through and Docker create it on the host (QUIRKS.md Volumes); the mock refuses that too, live is not asked
    vf.check_symlinks_stay_inside(_keep(t, vf.symlink_inside_volume(t)))


@pytest.mark.parametrize("case", vf.refusals("osbvt-refusals"), ids=lambda c: c[0])
def test_live_refusals(t, case):
    t.claims.append("osbvt-refusals")
    got_status, body = t.create(case[1])
    vf.check_refusal(case, got_status, body)


def _allowed():
    prefix = (allowed_host_paths() or [""])[0]
    if not prefix:
        pytest.skip("host binds: the live config allows none (OPENSANDBOX_ALLOWED_HOST_PATHS, tiers/t4/liveconfig.py)")
    if not os.path.isdir(prefix):
        pytest.skip("host binds: %s is not on this machine" % prefix)
    return prefix


def test_live_host_bind_under_the_prefix(t):
    prefix = _allowed()
    path = os.path.join(prefix, vf.unique())
    try:
        sid = t.sandbox([vf.host("h", path, "/h", subPath="sub")])
        assert t.run(sid, "echo via-bind > /h/f && echo ok") == (0, "ok\n")
        with open(os.path.join(path, "sub", "f")) as fh:
            assert fh.read() == "via-bind\n"
        ro = t.sandbox([vf.host("h", path, "/h", subPath="sub", readOnly=True)])
        rc, out = t.run(ro, "cat /h/f; echo x > /h/g")
        assert rc != 0 and out.startswith("via-bind\n") and vf.READ_ONLY in out
    finally:
        t.close()
        shutil.rmtree(path, ignore_errors=True)


def test_live_host_bind_refusals(t):
    prefix = _allowed()
    status, body = t.create([vf.host("h", "/etc", "/h")])
    assert (status, body["code"], body["message"]) == vf.host_not_allowed("/etc", [prefix])
    link = os.path.join(prefix, vf.unique())
    os.symlink("/etc", link)
    try:
        status, body = t.create([vf.host("h", link, "/h")])
        assert (status, body["code"], body["message"]) == vf.host_not_allowed("/etc", [os.path.realpath(prefix)])
    finally:
        os.unlink(link)


def test_live_host_binds_refused_when_none_allowed(t):
    if allowed_host_paths():
        pytest.skip("host binds: the live config allows some (test_live_host_bind_refusals covers it)")
    status, body = t.create([vf.host("h", "/tmp", "/h")])
    assert (status, body["code"], body["message"]) == vf.host_not_allowed("/tmp", [])
