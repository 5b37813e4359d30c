"""t1: snapshots on the mock (QUIRKS.md, Snapshots). The shared flow of tiers/flows/docker/snapshot_flow.py (recorder scenario 25's
requests and recorded answers; tiers/t4/docker/test_live_snapshots.py runs it live), the model's own states
(docker/snapshots.py: a failed commit, a delete while it commits, reset), and the content side (images/commit.py): an
overlayfs upper dir, a whole copied root and a host-tools root turned into a layer of the image store, whiteouts
kept across layers, nothing written through a symlink of the sandbox root on restore."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import threading
import types

import pytest

from mock_opensandbox.docker.snapshots import SnapshotStore
from mock_opensandbox.images import ImageStore
from mock_opensandbox.images import commit as C
from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.lifecycle.model import SandboxStore
from mock_opensandbox.lifecycle.quirks import MockError
from mock_opensandbox.server import MockOpenSandbox
from tiers.flows.docker import snapshot_flow
from tiers.flows.sandbox import sandbox_inside as si
from tiers.toolkit import rest
from tiers.toolkit.images import BuiltImage, docker_has, layer, write_oci_layout
from tiers.toolkit.marks import needs_isolation
from tiers.toolkit.waits import wait_until

ROOT = os.geteuid() == 0
CREATE = {
    "image": {"uri": "python:3"},
    "entrypoint": ["tail", "-f", "/dev/null"],
    "timeout": 600,
    "resourceLimits": {"cpu": "250m", "memory": "128Mi"},
}


# -- the flow of recording 25 ----------------------------------------------------------------------------------
@needs_isolation
def test_snapshot_flow_mock():
    with MockOpenSandbox(execd_close_delay=0.05) as osb:
        # the host-tools view (no --image-dir): its /etc is the view's, not the sandbox's
        snapshot_flow.run(
            si.Target(osb.base_url, osb.api_key or "", "python:3", execd_token=osb.execd_token), etc_kept=False
        )
        assert osb.snapshots.all() == []


@pytest.mark.spec_exempt("/__mock__/ admin routes are the mock's own")
def test_reset_and_stop_remove_snapshots_and_their_images(opensandbox_mock_factory):
    osb = opensandbox_mock_factory(execd_close_delay=0)
    hp = osb.base_url.split("://", 1)[1]
    key = {"OPEN-SANDBOX-API-KEY": osb.api_key}
    sid = rest.call(hp, "POST", "/v1/sandboxes", CREATE, key).json()["id"]
    snap = rest.call(hp, "POST", "/v1/sandboxes/%s/snapshots" % sid, {"name": "n"}, key).json()["id"]
    osb.snapshots.wait(30)
    view = rest.call(hp, "GET", "/__mock__/images", None, key).json()
    assert view["available"] is False and view["images"] == []
    (row,) = view["snapshots"]
    assert (row["id"], row["sandboxId"], row["name"], row["state"], row["ref"], row["sandboxes"]) == (
        snap,
        sid,
        "n",
        "Ready",
        "opensandbox-snapshots:" + snap,
        [],
    )
    store_dir = os.path.join(osb.root, "snapshot-images")
    assert os.path.isfile(os.path.join(store_dir, "images", row["image"].split(":")[1] + ".json"))
    out = rest.call(hp, "POST", "/__mock__/reset", {}, key).json()
    assert (out["sandboxes_removed"], out["snapshots_removed"]) == (1, 1)
    assert rest.call(hp, "GET", "/v1/snapshots/%s" % snap, None, key).status == 404
    assert os.listdir(os.path.join(store_dir, "images")) == []
    assert os.listdir(os.path.join(store_dir, "layers", "sha256")) == []
    sid = rest.call(hp, "POST", "/v1/sandboxes", CREATE, key).json()["id"]
    rest.call(hp, "POST", "/v1/sandboxes/%s/snapshots" % sid, None, key)
    osb.snapshots.wait(30)
    osb.stop()
    assert not os.path.exists(store_dir)


def test_snapshot_of_an_exited_sandbox_is_refused(opensandbox_mock_factory):
    osb = opensandbox_mock_factory(execd_close_delay=0)
    hp = osb.base_url.split("://", 1)[1]
    key = {"OPEN-SANDBOX-API-KEY": osb.api_key}
    sid = rest.call(hp, "POST", "/v1/sandboxes", dict(CREATE, entrypoint=["true"]), key).json()["id"]
    osb.sandboxes[sid].entry_proc.wait(10)
    assert wait_until(lambda: osb.sandboxes[sid].exited, 5.0)
    r = rest.call(hp, "POST", "/v1/sandboxes/%s/snapshots" % sid, None, key)
    assert (r.status, r.json()["code"]) == (409, "SNAPSHOT::INVALID_SOURCE_STATE")


# -- the model (docker/snapshots.py) over a model-only sandbox store ----------------------------------------------------
@pytest.fixture
def model():
    sandboxes = SandboxStore(start_reaper=False)
    yield sandboxes
    sandboxes.close()


def _sb(sandboxes):
    return sandboxes.create(image={"uri": "x"}, entrypoint=["tail"], env={"A": "1"}, metadata={"m": "v"})


def test_a_failed_commit_is_failed_with_the_runtime_message_and_resumes_the_sandbox(model):
    def boom(sb, snap):
        assert sb.paused  # a commit pauses the container
        raise RuntimeError("DOCKER::SANDBOX_NOT_FOUND: Sandbox x not found.")

    store = SnapshotStore(model, boom)
    sb = _sb(model)
    snap = store.create(sb.id, None)
    assert snap.accepted["status"]["state"] == "Creating" and "name" not in snap.accepted
    store.wait(10)
    assert (snap.state, snap.reason, snap.message) == (
        "Failed",
        "snapshot_runtime_failed",
        "DOCKER::SANDBOX_NOT_FOUND: Sandbox x not found.",
    )
    assert sb.state == "Running"
    with pytest.raises(MockError) as e:  # a Failed snapshot is no restore source
        store.for_restore(snap.id)
    assert e.value.quirk is quirks.SNAPSHOT_NOT_READY
    store.delete(snap.id)  # Failed: deleted at once
    assert store.all() == []


def test_delete_while_creating_and_a_second_create_while_paused(model):
    gate = threading.Event()
    store = SnapshotStore(model, lambda sb, snap: gate.wait(10) and object(), lambda img: None)
    sb = _sb(model)
    sb.metadata = {"patched": "x"}  # a PATCH: the server's metadata store, not the container's labels
    snap = store.create(sb.id, "one")
    assert sb.state == "Paused"  # recording: GET shows Paused while docker commit runs
    with pytest.raises(MockError) as e:
        store.delete(snap.id)
    assert e.value.body() == {
        "code": "SNAPSHOT::INVALID_STATE",
        "message": "Snapshot %s is still being created and cannot be deleted" % snap.id,
    }
    with pytest.raises(MockError) as e:
        store.create(sb.id, "two")
    assert e.value.quirk is quirks.SNAPSHOT_SOURCE_NOT_RUNNING
    gate.set()
    store.wait(10)
    assert (snap.state, sb.state) == ("Ready", "Running")
    assert snap.env == {"A": "1"} and snap.metadata == {"m": "v"}


def test_list_filters_states_exactly_newest_first(model):
    store = SnapshotStore(model, lambda sb, snap: object(), lambda img: None)
    sb = _sb(model)
    ids = []
    for name in ("a", "b", "a"):
        ids.append(store.create(sb.id, name).id)
        store.wait(10)
    items, pag = store.list(name="a")
    assert [s.id for s in items] == [ids[2], ids[0]] and pag["totalItems"] == 2
    assert store.list(states=["ready"])[0] == []  # the repository's IN (...) is exact
    assert [s.id for s in store.list(sandbox_id="", page=2, page_size=2)[0]] == [ids[0]]
    assert store.clear() == 3 and store.list()[0] == []


@pytest.mark.spec_exempt("server 1.1.1 snapshot routes (the June spec has none)")
def test_a_lifecycle_app_alone_knows_no_snapshot_and_cannot_commit(model):
    """A SnapshotStore without a committer: the sandbox checks, then 501; no id is known."""
    from mock_opensandbox.docker.snapshots import SnapshotStore
    from mock_opensandbox.lifecycle.app import LifecycleApp, LifecycleHandler
    from mock_opensandbox.wire.http1 import Server

    app = LifecycleApp(model, None, api_key=None, snapshots=SnapshotStore(model))
    srv = Server(("127.0.0.1", 0), LifecycleHandler, app)
    srv.start(name="t-lifecycle-alone")
    try:
        sb = _sb(model)
        hp = "127.0.0.1:%d" % srv.port

        def answer(method, path, body=None):
            r = rest.call(hp, method, path, body)
            return r.status, r.json()

        assert answer("POST", "/v1/sandboxes/nope/snapshots")[1]["code"] == "DOCKER::SANDBOX_NOT_FOUND"
        assert answer("POST", "/v1/sandboxes/%s/snapshots" % sb.id, {"name": "n"}) == (
            501,
            {
                "code": "SNAPSHOT::NOT_IMPLEMENTED",
                "message": "Snapshot creation is not implemented by the mock OpenSandbox.",
            },
        )
        model.pause(sb.id)
        assert answer("POST", "/v1/sandboxes/%s/snapshots" % sb.id)[:2] == (
            409,
            {
                "code": "SNAPSHOT::INVALID_SOURCE_STATE",
                "message": "Snapshot can only be created from a Running sandbox.",
            },
        )
        assert answer("GET", "/v1/snapshots?page=3&pageSize=7") == (
            200,
            {
                "items": [],
                "pagination": {"page": 3, "pageSize": 7, "totalItems": 0, "totalPages": 0, "hasNextPage": False},
            },
        )
        assert answer("GET", "/v1/snapshots?page=0")[0] == 422
        for method in ("GET", "DELETE"):
            assert answer(method, "/v1/snapshots/s-1") == (
                404,
                {"code": "SNAPSHOT::NOT_FOUND", "message": "Snapshot s-1 not found"},
            )
    finally:
        srv.stop()


def test_view_lists_each_snapshots_live_users(model):
    store = SnapshotStore(model, lambda sb, snap: None, lambda img: None)
    src = _sb(model)
    a = store.create(src.id, "a")
    store.wait(10)
    b = store.create(src.id, "b")
    store.wait(10)
    users = [_sb(model) for _ in range(3)]
    for sb, snap in zip(users, (a, a, b), strict=True):
        sb.snapshot_id = snap.id
    model.delete(users[1].id)
    assert [(row["name"], row["sandboxes"]) for row in store.view()] == [("b", [users[2].id]), ("a", [users[0].id])]
    assert store.users(a.id) == [users[0].id] and store.users("none") == []


# -- the content side (images/commit.py) ------------------------------------------------------------------------
@pytest.fixture
def base(tmp_path):
    img = BuiltImage(
        [
            layer(
                [
                    ("dir", "etc"),
                    ("file", "etc/os-release", "ID=demo\n"),
                    ("dir", "srv"),
                    ("dir", "tmp", 0o1777),
                    ("file", "tmp/old.txt", "old"),
                    ("dir", "opt"),
                    ("dir", "opt/x"),
                    ("file", "opt/x/y", "y"),
                    ("file", "keep", "k"),
                ],
                gz=False,
            )
        ]
    )
    write_oci_layout(str(tmp_path / "images" / "demo"), {"local/demo:1": img})
    store = ImageStore(str(tmp_path / "cache"), str(tmp_path / "images"), local_daemon=False, registry=False)
    yield store, store.resolve("local/demo:1")
    store.close()


def _rt(path, kind):
    return types.SimpleNamespace(root=path, changes_dir=lambda: (path, kind))


def _tree(top):
    out = {}
    for dp, dns, fns in os.walk(top):
        for n in dns + fns:
            p = os.path.join(dp, n)
            rel = os.path.relpath(p, top)
            st = os.lstat(p)
            out[rel] = (
                "dir"
                if stat.S_ISDIR(st.st_mode)
                else ("-> " + os.readlink(p))
                if stat.S_ISLNK(st.st_mode)
                else open(p, "rb").read().decode()
            )
    return out


@pytest.mark.skipif(not ROOT, reason="overlayfs whiteouts (0/0 character devices, trusted.* xattrs) need root")
def test_commit_an_overlay_upper_dir(base, tmp_path):
    store, img = base
    up = tmp_path / "upper"
    (up / "tmp").mkdir(parents=True)
    (up / "tmp" / "new.txt").write_text("new")
    os.mknod(str(up / "tmp" / "old.txt"), 0o600 | stat.S_IFCHR, os.makedev(0, 0))  # a whiteout
    (up / "opt" / "x").mkdir(parents=True)
    os.setxattr(str(up / "opt" / "x"), "trusted.overlay.opaque", b"y")
    (up / "opt" / "x" / "z").write_text("z")
    (up / "opt" / "opensandbox").mkdir()
    (up / "opt" / "opensandbox" / "execd").write_text("never in a layer")
    (up / "etc").mkdir()
    (up / "etc" / "hostname").write_text("never in a layer")
    (up / "link").symlink_to("/")
    (up / "proc").mkdir()  # an empty mount point the runtime made: not committed
    new = C.commit(store, _rt(str(up), "overlay"), "s1", base=img, env={"E": "1"}, labels={"m": "v"})
    assert [x["diff_id"] for x in new.layers[:-1]] == [x["diff_id"] for x in img.layers]
    assert (
        new.config["Env"] == ["PATH=/usr/bin:/bin", "HELLO=world", "E=1"]
        and new.config["Labels"]["m"] == "v"
        and new.config["Labels"]["a"] == "b"
    )
    top = new.layers[-1]
    assert top["whiteouts"] == ["tmp/old.txt"] and top["opaque"] == ["opt/x"]
    tree = _tree(new.rootfs())
    assert tree["tmp/new.txt"] == "new" and "tmp/old.txt" not in tree
    assert tree["opt/x/z"] == "z" and "opt/x/y" not in tree and tree["keep"] == "k"
    assert tree["link"] == "-> /" and "opt/opensandbox" not in tree and "etc/hostname" not in tree
    assert "proc" not in tree
    assert new.ref == "opensandbox-snapshots:s1" and json.load(open(store._image_path(new.id)))["source"] == "snapshot"
    C.remove(new)
    assert not os.path.exists(store._image_path(new.id)) and not os.path.isdir(os.path.dirname(top["path"]))
    assert all(os.path.isdir(x["path"]) for x in img.layers)  # the base's layers stay


def test_commit_a_full_copy_and_snapshot_it_again(base, tmp_path):
    store, img = base
    full = tmp_path / "full"
    subprocess.run(["cp", "-a", img.rootfs(), str(full)], check=True)
    os.unlink(full / "tmp" / "old.txt")
    os.rmdir(full / "srv")
    (full / "keep").write_text("changed!")
    (full / "root").mkdir()
    (full / "root" / "r.txt").write_text("r")
    s1 = C.commit(store, _rt(str(full), "full"), "s1", base=img, env={}, labels={})
    assert sorted(s1.layers[-1]["whiteouts"]) == ["srv", "tmp/old.txt"]
    tree = _tree(s1.rootfs())
    assert tree == _tree(str(full))
    # a sandbox of s1 removes a file s1 added: the next snapshot keeps it removed (a whiteout over s1's layer)
    full2 = tmp_path / "full2"
    subprocess.run(["cp", "-a", s1.rootfs(), str(full2)], check=True)
    os.unlink(full2 / "root" / "r.txt")
    s2 = C.commit(store, _rt(str(full2), "full"), "s2", base=s1, env={}, labels={})
    assert len(s2.layers) == 3 and s2.layers[-1]["whiteouts"] == ["root/r.txt"]
    assert "root/r.txt" not in _tree(s2.rootfs()) and _tree(s2.rootfs())["keep"] == "changed!"
    C.remove(s1)  # s2 is built on s1's layer: it stays (Docker keeps a parent image's layers)
    assert os.path.isdir(s2.layers[1]["path"])


def test_host_tools_commit_and_restore_never_write_through_a_symlink(tmp_path):
    from mock_opensandbox.runtime._util import make_image_root

    store = ImageStore(str(tmp_path / "cache"), local_daemon=False, registry=False)
    try:
        src = tmp_path / "src"
        src.mkdir()
        make_image_root(str(src))
        os.unlink(src / "var" / "run")  # the sandbox made /var/run a real directory
        (src / "var" / "run").mkdir()
        (src / "var" / "run" / "x").write_text("x")
        os.rmdir(src / "srv")
        (src / "usr").mkdir()  # a view directory (the host's /usr): never in a layer
        (src / "usr" / "host-file").write_text("h")
        runtime = types.SimpleNamespace(root=str(src), changes_dir=lambda: (str(src), "host-tools"))
        img = C.commit(store, runtime, "h1", base=None, env={}, labels={})
        lay = C.restore_layer(img)
        assert lay is not None and lay["whiteouts"] == ["srv"] and len(img.layers) == 1
        outside = tmp_path / "outside"
        outside.mkdir()
        dest = tmp_path / "dest"
        dest.mkdir()
        make_image_root(str(dest))
        os.unlink(dest / "var" / "run")
        os.symlink(str(outside), dest / "var" / "run")  # a symlink where the layer has a directory
        C.apply_layer(lay["path"], lay, str(dest), copy=True)  # what restore_into does
        assert os.listdir(outside) == []
        assert not os.path.islink(dest / "var" / "run") and (dest / "var" / "run" / "x").read_text() == "x"
        assert not os.path.exists(dest / "srv") and not os.path.exists(dest / "usr" / "host-file")
    finally:
        store.close()


BUSYBOX = "local/busybox:latest"  # what OSB_LOCAL_IMAGES=1 ./local-up.sh up builds


@needs_isolation
@pytest.mark.skipif(not docker_has(BUSYBOX), reason="no local Docker with %s (./local-up.sh up)" % BUSYBOX)
def test_snapshot_flow_mock_with_an_image_store(tmp_path):
    """The same flow with an image store (the local Docker's busybox): a sandbox that runs its image commits its
    writable layer over the image's layers (changes_dir "overlay"/"full") and a restore runs that image."""
    (tmp_path / "images").mkdir()
    with MockOpenSandbox(
        execd_close_delay=0.05, image_dir=str(tmp_path / "images"), image_cache=str(tmp_path / "cache")
    ) as osb:
        t = si.Target(osb.base_url, osb.api_key or "", BUSYBOX, execd_token=osb.execd_token)
        probe = t.create()
        kind = C.changes_of(osb.sandboxes[probe].runtime)[1]
        t.delete(probe)
        snapshot_flow.run(t, etc_kept=kind != "host-tools")
        snaps = [
            d
            for d in os.listdir(tmp_path / "cache" / "images")
            if json.load(open(tmp_path / "cache" / "images" / d)).get("source") == "snapshot"
        ]
        assert snaps == []  # every snapshot image went with its snapshot; the busybox image stays
