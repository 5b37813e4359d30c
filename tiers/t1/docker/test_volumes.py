"""Volumes on the mock (QUIRKS.md, Volumes): named volumes (pvc), host binds, readOnly, subPath, and every refusal with
the server's code and message. The same flows run live in tiers/t4/docker/test_live_volumes.py
(tiers/toolkit/volume_flows.py); a hostile subPath, symlink or `..` never reaches outside the volume or the
allowed prefix.
"""

from __future__ import annotations

import json
import os

import pytest

from mock_opensandbox.runtime import SandboxRuntime, SandboxTerminated, optional
from mock_opensandbox.runtime.mounts import encode
from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit import rest
from tiers.toolkit import volume_flows as vf
from tiers.toolkit.marks import needs_isolation

pytestmark = needs_isolation


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    base = tmp_path_factory.mktemp("vol")
    allowed = base / "allowed"
    allowed.mkdir()
    outside = base / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host secret\n")
    return {"base": base, "allowed": str(allowed), "outside": str(outside), "volumes": str(base / "named")}


@pytest.fixture(scope="module")
def osb(dirs):
    with MockOpenSandbox(
        execd_close_delay=0.05, volumes_dir=dirs["volumes"], allowed_host_paths=[dirs["allowed"]]
    ) as m:
        yield m


@pytest.fixture
def t(osb):
    target = vf.Target(osb.base_url, osb.api_key)
    yield target
    target.close()


def _admin(osb, method, path, body=None):
    r = rest.call(osb.base_url, method, path, body, {"OPEN-SANDBOX-API-KEY": osb.api_key})
    return r.status, json.loads(r.body or b"null")


# -- the flows (same as live) -----------------------------------------------------------------------------------


def test_a_named_volume_is_shared_between_sandboxes(t):
    seen = vf.shared_between_sandboxes(t)
    assert seen["write"] == (0, "written\n")
    assert seen["read"] == (0, "from-a\n")
    assert seen["read_back"] == (0, "from-a\nfrom-b\n")


def test_a_named_volume_outlives_its_sandbox(t, osb):
    seen = vf.outlives_the_sandbox(t)
    assert seen["read"] == (0, "kept\n")
    assert os.path.isfile(os.path.join(osb.volumes.dir, seen["claim"], "dir", "file"))


def test_read_only_volume_refuses_writes_as_the_kernel_says(t):
    seen = vf.read_only(t)
    assert seen["read"] == (0, "seed\n")
    rc, out = seen["write"]
    assert rc != 0 and vf.READ_ONLY in out, seen
    rc, out = seen["touch"]
    assert rc != 0 and vf.READ_ONLY in out, seen
    assert seen["rm"][1].startswith("still-there\n") and vf.READ_ONLY in seen["rm"][1], seen


def test_sub_path_mounts_only_that_directory_and_a_missing_one_is_made(t):
    seen = vf.sub_path(t)
    assert seen["seen"] == (0, "one\nreadme\nno-top\n")
    assert seen["back"] == (0, "f\nhello\n")


def test_links_planted_in_a_volume_never_lead_out(t):
    vf.check_symlinks_stay_inside(vf.symlink_inside_volume(t))


@pytest.mark.parametrize("case", vf.refusals("osbvt-refusals"), ids=lambda c: c[0])
def test_refusals_carry_the_servers_code_and_message(t, case):
    got_status, body = t.create(case[1])
    vf.check_refusal(case, got_status, body)
    if case[3] == "VOLUME::OSSFS_MOUNT_FAILED":
        assert (
            body["message"] == "Volume 'o': failed to execute ossfs command: [Errno 2] No such file or "
            "directory: 'ossfs2'"
        )
        assert "secret" not in json.dumps(body)


@pytest.mark.parametrize("case", vf.MOCK_ONLY_REFUSALS, ids=lambda c: c[0])
def test_the_mock_keeps_dev_and_its_runtime_directory(t, case):
    _name, volumes, status, code = case
    got_status, body = t.create(volumes("osbvt-runtime"))
    assert (got_status, body.get("code")) == (status, code), body


def test_runc_messages_for_proc_dev_and_slash(t):
    cases = {
        "/proc": "cannot be mounted because it is not of type proc",
        "/proc/x": "cannot be mounted because it is inside /proc",
        "/dev": "unable to setup user: stat /dev/null: no such file or directory",
        "/": "destination can't be '/'",
        "/sys/x": "read-only file system",
        "/a:b": "invalid volume specification: '",
    }
    for target, text in cases.items():
        status, body = t.create([vf.pvc("a", "osbvt-runc", target)])
        assert status == 500 and text in body["message"], (target, body)


def test_a_failed_create_leaves_no_sandbox_and_removes_what_it_made(t, osb):
    claim = vf.unique()
    status, body = t.create([vf.pvc("a", claim, "/a", deleteOnSandboxTermination=True), vf.pvc("b", claim, "/proc")])
    assert status == 500, body
    assert claim not in os.listdir(osb.volumes.dir)  # auto-created for this create, removed with it
    assert t.life("GET", "/v1/sandboxes")[1]["items"] == []


def test_delete_on_sandbox_termination_removes_what_the_create_made(t, osb):
    claim = vf.unique()
    a = t.sandbox([vf.pvc("a", claim, "/a", deleteOnSandboxTermination=True)])
    b = t.sandbox([vf.pvc("a", claim, "/a")])  # another user: the volume stays while it mounts it
    t.delete(a)
    assert claim in os.listdir(osb.volumes.dir)
    t.delete(b)
    assert claim in os.listdir(osb.volumes.dir)  # b's create did not make it: Docker keeps it
    keep = vf.unique()
    c = t.sandbox([vf.pvc("a", keep, "/a")])
    t.delete(c)
    assert keep in os.listdir(osb.volumes.dir)  # deleteOnSandboxTermination defaults to false


# -- host binds ---------------------------------------------------------------------------------------------------


def test_host_bind_under_the_allowed_prefix(t, dirs):
    path = os.path.join(dirs["allowed"], "proj")
    sid = t.sandbox([vf.host("h", path, "/h", subPath="sub")])
    assert t.run(sid, "echo via-bind > /h/f && echo ok") == (0, "ok\n")
    with open(os.path.join(path, "sub", "f")) as fh:  # made when missing, written through the bind
        assert fh.read() == "via-bind\n"
    ro = t.sandbox([vf.host("h", path, "/h", subPath="sub", readOnly=True)])
    rc, out = t.run(ro, "cat /h/f; echo x > /h/g")
    assert rc != 0 and out.startswith("via-bind\n") and vf.READ_ONLY in out


def test_host_bind_outside_the_prefix_is_refused(t, dirs):
    status, body = t.create([vf.host("h", dirs["outside"], "/h")])
    assert (status, body["code"], body["message"]) == vf.host_not_allowed(dirs["outside"], [dirs["allowed"]])


def test_host_bind_through_a_link_out_of_the_prefix_is_refused_after_realpath(t, dirs):
    link = os.path.join(dirs["allowed"], "escape")
    if not os.path.lexists(link):
        os.symlink(dirs["outside"], link)
    status, body = t.create([vf.host("h", link, "/h")])
    assert (status, body["code"], body["message"]) == vf.host_not_allowed(
        dirs["outside"], [os.path.realpath(dirs["allowed"])]
    )
    status, body = t.create([vf.host("h", dirs["allowed"], "/h", subPath="escape")])
    assert (status, body["code"]) == (400, "VOLUME::HOST_PATH_NOT_ALLOWED"), body
    status, body = t.create([vf.host("h", dirs["allowed"], "/h", subPath="escape/deeper")])
    assert (status, body["code"]) == (400, "VOLUME::HOST_PATH_NOT_ALLOWED"), body
    assert not os.path.exists(os.path.join(dirs["outside"], "deeper"))


def test_host_binds_are_refused_when_no_prefix_is_allowed(tmp_path):
    with MockOpenSandbox(volumes_dir=str(tmp_path / "v")) as m:
        t = vf.Target(m.base_url, m.api_key)
        status, body = t.create([vf.host("h", str(tmp_path), "/h")])
        assert (status, body["code"], body["message"]) == vf.host_not_allowed(str(tmp_path), [])


def test_without_isolation_volumes_cannot_be_mounted(tmp_path):
    with MockOpenSandbox(isolate=False, volumes_dir=str(tmp_path / "v")) as m:
        t = vf.Target(m.base_url, m.api_key)
        status, body = t.create([vf.pvc("a", "osbvt-noiso", "/a")])
        assert (status, body["code"]) == (500, "DOCKER::SANDBOX_START_FAILED"), body
        assert "without a mount namespace" in body["message"]
        assert t.life("GET", "/v1/sandboxes")[1]["items"] == []


# -- a link planted between the mock's check and the mount fails the start ----------------------------------------


def test_view_refuses_a_source_that_became_a_link(tmp_path):
    vol = tmp_path / "vol"
    vol.mkdir()
    (vol / "sub").symlink_to("/etc")  # planted after the mock's checks: view.py walks with O_NOFOLLOW
    rt = SandboxRuntime(str(tmp_path / "root"))
    try:
        rt.volumes = encode([(str(vol), "sub", "data", False)])
        with pytest.raises(SandboxTerminated, match="could not be mounted"):
            rt.start_entrypoint(["sleep", "30"])
    finally:
        rt.cleanup()


def test_view_refuses_a_target_through_a_link(tmp_path):
    vol = tmp_path / "vol"
    vol.mkdir()
    rt = SandboxRuntime(str(tmp_path / "root"))
    name = "osbvt-" + os.urandom(6).hex()
    try:
        os.symlink(str(tmp_path), os.path.join(rt.root, "tmp", "out"))  # a link out of the root, to the host
        rt.volumes = encode([(str(vol), "", "tmp/out/" + name, False)])
        with pytest.raises(SandboxTerminated):
            rt.start_entrypoint(["sleep", "30"])
        assert not os.path.exists(tmp_path / name)  # nothing made, nothing mounted outside the root
    finally:
        rt.cleanup()


def test_every_execution_path_sees_the_volume(t, osb):
    """Commands (above), the entrypoint and a PTY-less background command come from the holder's mount
    namespace: the entrypoint writes into the volume before anything else runs."""
    claim = vf.unique()
    status, body = t.create(
        [vf.pvc("d", claim, "/d")], entrypoint=["sh", "-c", "echo from-entrypoint > /d/ep; exec tail -f /dev/null"]
    )
    assert status == 202, body
    sid = body["id"]
    vf._poll(
        "entrypoint wrote",
        lambda: t.run(sid, "cat /d/ep 2>/dev/null || true")[1],
        lambda out: out == "from-entrypoint\n",
        30,
    )
    assert open(os.path.join(osb.volumes.dir, claim, "ep")).read() == "from-entrypoint\n"


# -- admin API -----------------------------------------------------------------------------------------------------


@pytest.mark.spec_exempt("the /__mock__/ workbench routes are mock-only (not in the OpenSandbox spec)")
def test_admin_shows_who_mounts_what_and_reset_removes_volumes_unless_kept(t, osb, dirs):
    claim = vf.unique()
    sid = t.sandbox([vf.pvc("d", claim, "/d"), vf.host("h", os.path.join(dirs["allowed"], "adm"), "/h", readOnly=True)])
    t.run(sid, "head -c 3000 /dev/zero > /d/blob")
    status, one = _admin(osb, "GET", "/__mock__/sandboxes/" + sid)
    assert status == 200
    assert [(v["name"], v["backend"], v["mountPath"], v["readOnly"]) for v in one["volumes"]] == [
        ("d", "pvc", "/d", False),
        ("h", "host", "/h", True),
    ]
    status, vols = _admin(osb, "GET", "/__mock__/volumes")
    named = {n["name"]: n for n in vols["named"]}
    assert named[claim]["sizeBytes"] == 3000 and named[claim]["mountedBy"] == [sid]
    assert [(h["sandbox"], h["mountPath"]) for h in vols["hostBinds"]] == [(sid, "/h")]
    status, out = _admin(osb, "POST", "/__mock__/reset", {"keep_volumes": True})
    assert status == 200 and out["volumes_removed"] == 0 and out["sandboxes_removed"] >= 1
    assert claim in os.listdir(osb.volumes.dir)
    status, vols = _admin(osb, "GET", "/__mock__/volumes")
    assert {n["name"]: n for n in vols["named"]}[claim]["mountedBy"] == [] and vols["hostBinds"] == []
    status, out = _admin(osb, "POST", "/__mock__/reset")
    assert status == 200 and out["volumes_removed"] >= 1
    assert os.listdir(osb.volumes.dir) == []
    status, out = _admin(osb, "POST", "/__mock__/reset", {"keep_volumes": "yes"})
    assert status == 400


REAL_EXECD = os.environ.get("OSB_EXECD_BIN") or os.path.realpath(
    os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "shared", "opensandbox", "execd")
)


def test_the_real_execd_inside_the_sandbox_sees_the_volume(tmp_path):
    """execd_bin: the real execd runs inside the sandbox (bootstrap.sh's place): its commands and its files API
    work in the view with the volume mounted."""
    if optional.off("execd") or not (os.path.isfile(REAL_EXECD) and os.access(REAL_EXECD, os.X_OK)):
        pytest.skip("the real execd binary (../shared/opensandbox/execd) is not here (or OSB_MOCK_NO=execd)")
    from tiers.flows.server.smoke_flow import request

    with MockOpenSandbox(execd_bin=REAL_EXECD, volumes_dir=str(tmp_path / "v")) as m:
        t = vf.Target(m.base_url, m.api_key)
        try:
            a = t.sandbox([vf.pvc("d", "real-execd", "/vol")])
            assert t.run(a, "echo by-real-execd > /vol/f && echo ok") == (0, "ok\n")
            b = t.sandbox([vf.pvc("d", "real-execd", "/mnt/v", readOnly=True)])
            url, headers = t._endpoint(b)
            r = request("GET", url, "/files/download?path=/mnt/v/f", headers=headers)
            assert (r.status, r.body) == (200, b"by-real-execd\n")
            rc, out = t.run(b, "echo x > /mnt/v/g")
            assert rc != 0 and vf.READ_ONLY in out
        finally:
            t.close()
    assert open(tmp_path / "v" / "real-execd" / "f").read() == "by-real-execd\n"


def test_the_files_api_sees_the_volume(t):
    """The in-process execd's files API works on the sandbox's view (PID 1's root; QUIRKS.md, Volumes)."""
    from tiers.flows.server.smoke_flow import request

    sid = t.sandbox([vf.pvc("d", vf.unique(), "/vol")])
    t.run(sid, "echo through-files > /vol/f")
    url, headers = t._endpoint(sid)
    r = request("GET", url, "/files/download?path=/vol/f", headers=headers)
    assert (r.status, r.body) == (200, b"through-files\n")


@pytest.mark.spec_exempt("the /__mock__/ admin routes are mock-only (not in the OpenSandbox spec)")
def test_reset_removes_only_the_volumes_the_mock_made(tmp_path):
    vols = tmp_path / "vols"
    (vols / "own").mkdir(parents=True)
    (vols / "own" / "keep.txt").write_text("mine\n")
    with MockOpenSandbox(execd_close_delay=0.05, volumes_dir=str(vols)) as m:
        t = vf.Target(m.base_url, m.api_key)
        try:
            sid = t.sandbox([vf.pvc("a", "own", "/own"), vf.pvc("b", "made", "/made")])
            assert t.run(sid, "cat /own/keep.txt; echo new > /made/f") == (0, "mine\n")
            named = {n["name"]: n for n in _admin(m, "GET", "/__mock__/volumes")[1]["named"]}
            assert named["own"]["managedByServer"] is False and named["made"]["managedByServer"] is True
            assert _admin(m, "POST", "/__mock__/reset")[1]["volumes_removed"] == 1
        finally:
            t.close()
    assert sorted(os.listdir(vols)) == ["own"] and (vols / "own" / "keep.txt").read_text() == "mine\n"
