"""The image store (mock_opensandbox/images; QUIRKS.md, Image store) on images the tests write themselves: OCI layouts
and docker-save tarballs, whiteouts, hard links, hostile layers, digest checks, platforms, the cache."""

from __future__ import annotations

import gzip
import io
import json
import os
import tarfile

import pytest

from mock_opensandbox.images import (
    CorruptImage,
    DigestMismatch,
    ImageNotFound,
    ImageStore,
    UnsafeLayer,
    UnsupportedImage,
    parse,
)
from mock_opensandbox.images.unpack import unpack_layer
from tiers.toolkit.images import BuiltImage, layer, sha, write_docker_save, write_oci_layout

BASE = [
    ("dir", "bin"),
    ("file", "bin/sh", "#!/bin/true\n", 0o755),
    ("dir", "etc"),
    ("file", "etc/os-release", "ID=test\n"),
    ("file", "etc/gone", "x"),
    ("dir", "opt"),
    ("file", "opt/old", "old"),
    ("dir", "opt/sub"),
    ("file", "opt/sub/deep", "d"),
    ("hardlink", "bin/sh-link", "bin/sh"),
    ("chr", "dev-null"),
    ("fifo", "pipe"),
    ("dir", "ro", 0o555),
    ("file", "ro/f", "r"),
]
TOP = [
    ("file", "etc/.wh.gone", ""),
    ("file", "opt/.wh..wh..opq", ""),
    ("file", "opt/new", "new"),
    ("symlink", "bin/busybox", "/bin/sh"),
]


def store(tmp_path, **kw) -> ImageStore:
    kw.setdefault("local_daemon", False)
    kw.setdefault("registry", False)
    return ImageStore(str(tmp_path / "cache"), str(tmp_path / "images"), **kw)


def tree(root: str) -> dict[str, str]:
    out = {}
    for dp, dn, fn in os.walk(root):
        for n in dn + fn:
            p = os.path.join(dp, n)
            rel = os.path.relpath(p, root)
            if os.path.islink(p):
                out[rel] = "-> " + os.readlink(p)
            elif os.path.isdir(p):
                out[rel] = "dir"
            else:
                out[rel] = open(p, "rb").read().decode(errors="replace") if os.path.isfile(p) else "special"
    return out


def cache_clean(tmp_path) -> None:
    """Nothing half-written stays: no temp layer, no layer dir of the refused image."""
    for d in os.listdir(tmp_path / "cache" / "tmp"):
        assert os.listdir(tmp_path / "cache" / "tmp" / d) == []


# -- references -------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "uri,want",
    [
        ("busybox", "docker.io/library/busybox:latest"),
        ("local/busybox:latest", "docker.io/local/busybox:latest"),
        ("127.0.0.1:5000/a/b:1", "127.0.0.1:5000/a/b:1"),
        ("localhost/x", "localhost/x:latest"),
        ("ghcr.io/o/r@sha256:" + "a" * 64, "ghcr.io/o/r@sha256:" + "a" * 64),
        ("python:3.12-slim", "docker.io/library/python:3.12-slim"),
    ],
)
def test_reference_normalised_like_docker(uri, want):
    assert str(parse(uri)) == want


@pytest.mark.parametrize("uri", ["", "UPPER/case", "a:b:c", "x@sha256:12", "--help.x/y", "-x.io/y:1"])
def test_reference_refused(uri):
    with pytest.raises(ValueError):
        parse(uri)


# -- sources and config ---------------------------------------------------------------------------------------
def test_oci_layout_flattened_with_whiteouts_hardlinks_and_config(tmp_path):
    img = BuiltImage([layer(BASE), layer(TOP)])
    write_oci_layout(str(tmp_path / "images" / "demo"), {"local/demo:1": img})
    s = store(tmp_path)
    got = s.resolve("local/demo:1")
    assert got.source == "image-dir" and got.digest == img.digest and got.id == sha(img.config)
    assert (got.env, got.working_dir, got.user) == (["PATH=/usr/bin:/bin", "HELLO=world"], "/work", "1000:1000")
    assert (got.entrypoint, got.cmd, got.labels) == (["/bin/sh"], ["-c", "true"], {"a": "b"})
    root = got.rootfs()
    t = tree(root)
    assert "etc/gone" not in t and t["etc/os-release"] == "ID=test\n"  # .wh.gone
    assert "opt/old" not in t and "opt/sub" not in t and t["opt/new"] == "new"  # opaque dir
    assert t["bin/busybox"] == "-> /bin/sh" and t["ro/f"] == "r"
    st1, st2 = os.stat(os.path.join(root, "bin/sh")), os.stat(os.path.join(root, "bin/sh-link"))
    assert st1.st_ino == st2.st_ino and st1.st_mode & 0o777 == 0o755  # hard link kept
    assert "dev-null" not in t  # device node skipped
    assert got.layers[0]["skipped_devices"] == ["dev-null"]
    assert os.stat(os.path.join(root, "ro")).st_mode & 0o777 in (0o555, 0o755)
    assert os.stat(root).st_mode & 0o777 == 0o755


def test_overlay_lowerdirs_topmost_first_with_whiteouts_as_overlayfs_reads_them(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("overlayfs whiteouts (mknod 0/0, trusted.* xattrs) need root")
    img = BuiltImage([layer(BASE), layer(TOP)])
    write_oci_layout(str(tmp_path / "images" / "demo"), {"local/demo:1": img})
    got = store(tmp_path).resolve("local/demo:1")
    lower = got.lowerdirs()
    assert lower == [got.layers[1]["path"], got.layers[0]["path"]]
    wh = os.lstat(os.path.join(lower[0], "etc", "gone"))
    assert os.major(wh.st_rdev) == 0 and os.minor(wh.st_rdev) == 0 and (wh.st_mode & 0o170000) == 0o020000
    assert os.getxattr(os.path.join(lower[0], "opt"), "trusted.overlay.opaque") == b"y"


def test_docker_save_tarball(tmp_path):
    img = BuiltImage([layer(BASE, gz=False), layer(TOP, gz=False)], gz=False)
    os.makedirs(tmp_path / "images")
    write_docker_save(str(tmp_path / "images" / "demo.tar"), "local/demo:latest", img)
    got = store(tmp_path).resolve("local/demo")  # tag-less = latest
    assert got.source == "image-dir" and got.digest is None and got.id == sha(img.config)
    t = tree(got.rootfs())
    assert t["opt/new"] == "new" and "etc/gone" not in t


def test_index_picks_the_host_platform_or_the_requested_one(tmp_path):
    amd = BuiltImage([layer([("file", "arch", "amd64")])], arch="amd64")
    arm = BuiltImage([layer([("file", "arch", "arm64")])], arch="arm64")
    write_oci_layout(str(tmp_path / "images" / "multi"), {}, index_for={"local/multi:1": [arm, amd]})
    s = store(tmp_path)
    import platform

    if platform.machine() in ("x86_64", "amd64"):
        assert tree(s.resolve("local/multi:1").rootfs())["arch"] == "amd64"
    got = s.resolve("local/multi:1", platform={"os": "linux", "arch": "arm64"})
    assert got.architecture == "arm64" and tree(got.rootfs())["arch"] == "arm64"
    with pytest.raises(UnsupportedImage, match="no manifest for platform linux/s390x"):
        s.resolve("local/multi:1", platform={"os": "linux", "arch": "s390x"})


def test_unknown_image_is_typed(tmp_path):
    os.makedirs(tmp_path / "images")
    with pytest.raises(ImageNotFound, match="local/none:1"):
        store(tmp_path).resolve("local/none:1")


def test_cache_hit_needs_no_source_and_layers_are_shared(tmp_path):
    base = layer(BASE)
    a = BuiltImage([base, layer([("file", "a", "a")])])
    b = BuiltImage([base, layer([("file", "b", "b")])])
    write_oci_layout(str(tmp_path / "images" / "ab"), {"local/a:1": a, "local/b:1": b})
    s = store(tmp_path)
    ia, ib = s.resolve("local/a:1"), s.resolve("local/b:1")
    assert ia.layers[0]["path"] == ib.layers[0]["path"]  # one unpacked copy of the shared base
    assert len(os.listdir(tmp_path / "cache" / "layers" / "sha256")) == 3
    import shutil

    shutil.rmtree(tmp_path / "images" / "ab")  # no source any more: the cache answers
    s2 = store(tmp_path)  # ... also for a new store on the same cache
    assert s2.resolve("local/a:1").id == ia.id
    assert {i["id"] for i in s2.images()} == {ia.id, ib.id}
    assert all(i["size"] > 0 and i["digest"] for i in s2.images())


def test_the_image_listing_is_read_again_only_after_a_change(tmp_path, monkeypatch):
    """images() (the dashboard reads it on every state change) keeps its listing until an image is added or
    removed, here or by another store on the same cache; each caller gets dicts of its own."""
    write_oci_layout(
        str(tmp_path / "images" / "ab"),
        {"local/a:1": BuiltImage([layer(BASE)]), "local/b:1": BuiltImage([layer([("file", "b", "b")])])},
    )
    s, other = store(tmp_path), store(tmp_path)
    reads = []
    real = ImageStore._load_image
    monkeypatch.setattr(ImageStore, "_load_image", lambda self, i: reads.append(i) or real(self, i))
    ia = s.resolve("local/a:1")
    assert [i["id"] for i in s.images()] == [ia.id]
    reads.clear()
    first = s.images()
    first[0]["sandboxes"] = ["x"]
    assert "sandboxes" not in s.images()[0]  # a caller's key stays in the caller's dict
    assert reads == []  # nothing changed: no record read
    ib = other.resolve("local/b:1")  # another process's store on the same cache
    assert {i["id"] for i in s.images()} == {ia.id, ib.id} and reads
    reads.clear()
    s.drop_image(ib.id)
    assert [i["id"] for i in s.images()] == [ia.id] and reads
    s.clear()
    assert s.images() == []


# -- corrupt and hostile images -------------------------------------------------------------------------------
def test_layer_digest_mismatch_refused_and_nothing_cached(tmp_path):
    img = BuiltImage([layer(BASE)])
    write_oci_layout(str(tmp_path / "images" / "bad"), {"local/bad:1": img}, corrupt=sha(img.layers[0][0]))
    s = store(tmp_path)
    with pytest.raises(CorruptImage):  # gzip CRC or the blob digest, whichever sees it first
        s.resolve("local/bad:1")
    assert os.listdir(tmp_path / "cache" / "layers" / "sha256") == []
    cache_clean(tmp_path)


def test_diff_id_mismatch_refused(tmp_path):
    img = BuiltImage([layer(BASE)], config_extra={"rootfs": {"type": "layers", "diff_ids": ["sha256:" + "0" * 64]}})
    write_oci_layout(str(tmp_path / "images" / "bad"), {"local/bad:1": img})
    with pytest.raises(DigestMismatch, match="diff_id"):
        store(tmp_path).resolve("local/bad:1")
    cache_clean(tmp_path)


def test_manifest_and_config_digests_checked(tmp_path):
    img = BuiltImage([layer(BASE)])
    write_oci_layout(str(tmp_path / "images" / "bad"), {"local/bad:1": img}, corrupt=sha(img.config))
    with pytest.raises(DigestMismatch, match="image config"):
        store(tmp_path).resolve("local/bad:1")
    img2 = BuiltImage([layer(BASE)])
    write_oci_layout(str(tmp_path / "images" / "bad2"), {"local/bad2:1": img2}, corrupt=img2.digest)
    with pytest.raises(DigestMismatch, match="manifest"):
        store(tmp_path).resolve("local/bad2:1")


def test_docker_save_config_digest_checked(tmp_path):
    img = BuiltImage([layer(BASE, gz=False)], gz=False)
    os.makedirs(tmp_path / "images")
    p = str(tmp_path / "images" / "x.tar")
    write_docker_save(p, "local/x:1", img)
    with tarfile.open(p) as tf:
        members = [(m, tf.extractfile(m).read()) for m in tf.getmembers()]
    with tarfile.open(p, "w") as tf:
        for m, data in members:
            if m.name.endswith(".json") and m.name != "manifest.json":
                data = data.replace(b"HELLO=world", b"HELLO=WORLD")
            tf.addfile(m, io.BytesIO(data))
    with pytest.raises(DigestMismatch, match="image config"):
        store(tmp_path).resolve("local/x:1")


def test_zstd_layer_is_unsupported(tmp_path):
    dest = tmp_path / "d"
    dest.mkdir()
    with pytest.raises(UnsupportedImage, match="zstd"):
        unpack_layer(io.BytesIO(b"\x28\xb5\x2f\xfd" + b"\0" * 64), str(dest))


def test_garbage_layer_is_corrupt(tmp_path):
    dest = tmp_path / "d"
    dest.mkdir()
    with pytest.raises(CorruptImage):
        unpack_layer(io.BytesIO(gzip.compress(b"not a tar at all" * 100)), str(dest))


HOSTILE = {
    "dotdot": [("file", "../escape", "x")],
    "dotdot_deep": [("dir", "a"), ("file", "a/../../escape", "x")],
    "absolute": [("file", "{outside}/escape", "x")],
    "symlink_parent": [("symlink", "link", "{outside}"), ("file", "link/escape", "x")],
    "symlink_dotdot": [("symlink", "up", ".."), ("file", "up/escape", "x")],
    "symlink_dir_then_dir": [("symlink", "d", "{outside}"), ("dir", "d/sub")],
    "hardlink_outside": [("hardlink", "h", "../../escape-target")],
    "hardlink_absolute": [("hardlink", "h", "{outside}/target")],
    "hardlink_via_symlink": [("symlink", "s", "{outside}"), ("hardlink", "h", "s/target")],
    "whiteout_dotdot": [("file", ".wh...", "")],
    "whiteout_through_symlink": [("symlink", "s", "{outside}"), ("file", "s/.wh.target", "")],
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_hostile_layer_refused_and_writes_nothing_outside(tmp_path, case):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target").write_text("keep")
    entries = [tuple(x.format(outside=outside) if isinstance(x, str) else x for x in e) for e in HOSTILE[case]]
    img = BuiltImage([layer([("file", "ok", "ok")]), layer(entries)])
    write_oci_layout(str(tmp_path / "images" / "evil"), {"local/evil:1": img})
    s = store(tmp_path)
    with pytest.raises(UnsafeLayer):
        s.resolve("local/evil:1")
    assert sorted(os.listdir(outside)) == ["target"] and (outside / "target").read_text() == "keep"
    assert not os.path.exists(tmp_path / "escape") and not os.path.exists(tmp_path / "cache" / "escape")
    assert len(os.listdir(tmp_path / "cache" / "layers" / "sha256")) == 1  # only the honest layer
    cache_clean(tmp_path)


def test_layer_replacing_a_symlink_by_a_directory_does_not_write_through_it(tmp_path):
    """Across layers: a lower symlink ``d -> outside`` and an upper real dir ``d/`` with a file: the
    flattened tree gets a real directory, the outside stays untouched."""
    outside = tmp_path / "outside"
    outside.mkdir()
    img = BuiltImage(
        [
            layer([("symlink", "d", str(outside)), ("symlink", "e", str(outside))]),
            layer([("dir", "d"), ("file", "d/f", "in"), ("file", "e/.wh.x", "")]),
        ]
    )
    write_oci_layout(str(tmp_path / "images" / "x"), {"local/x:1": img})
    t = tree(store(tmp_path).resolve("local/x:1").rootfs())
    assert t["d"] == "dir" and t["d/f"] == "in"
    assert os.listdir(outside) == []


def test_store_errors_carry_no_paths_outside_the_request(tmp_path):
    os.makedirs(tmp_path / "images")
    with pytest.raises(ImageNotFound) as ei:
        store(tmp_path).resolve("Bad Name")
    assert "invalid reference format" in str(ei.value)
    json.dumps(str(ei.value))


def test_concurrent_resolves_unpack_once_and_share_the_cache(tmp_path):
    """Threads of one store and two stores on one cache (two mocks of a parallel test run) resolve the same
    image at once: every one gets the image, each layer is unpacked into one place."""
    import threading

    img = BuiltImage([layer(BASE), layer(TOP)])
    write_oci_layout(str(tmp_path / "images" / "demo"), {"local/demo:1": img})
    stores = [store(tmp_path), store(tmp_path)]
    got, errors = [], []

    def run(s):
        try:
            got.append(s.resolve("local/demo:1").layer_dirs())
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(stores[i % 2],)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert errors == [] and len(got) == 6 and all(g == got[0] for g in got)
    assert len(os.listdir(tmp_path / "cache" / "layers" / "sha256")) == 2
    for s in stores:
        s.close()
    assert os.listdir(tmp_path / "cache" / "tmp") == []


def test_a_dead_stores_half_written_layers_are_removed(tmp_path):
    os.makedirs(tmp_path / "cache" / "tmp" / "999999999.dead" / "layer-x")
    s = store(tmp_path)
    assert os.listdir(tmp_path / "cache" / "tmp") == [os.path.basename(s.tmp_dir)]


def test_docker_save_with_blobs_paths(tmp_path):
    """Docker 25+ writes manifest.json whose Config/Layers are blobs/sha256/<hex> paths (gzip or plain)."""
    img = BuiltImage([layer(BASE, gz=False)], gz=False)
    p = tmp_path / "images" / "new.tar"
    os.makedirs(p.parent)
    members = [
        ("blobs/sha256/" + sha(img.config)[7:], img.config),
        ("blobs/sha256/" + sha(img.layers[0][0])[7:], img.layers[0][0]),
        (
            "manifest.json",
            json.dumps(
                [
                    {
                        "Config": "blobs/sha256/" + sha(img.config)[7:],
                        "RepoTags": ["local/new:2"],
                        "Layers": ["blobs/sha256/" + sha(img.layers[0][0])[7:]],
                    }
                ]
            ).encode(),
        ),
    ]
    with tarfile.open(p, "w") as tf:
        for n, data in members:
            ti = tarfile.TarInfo(n)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    got = store(tmp_path).resolve("docker.io/local/new:2")
    assert got.layers[0]["blob_digest"] == sha(img.layers[0][0])
    assert tree(got.rootfs())["etc/os-release"] == "ID=test\n"


def test_local_docker_save_is_a_source(tmp_path):
    """A local daemon that has the image: ``docker image inspect`` then ``docker save -o`` (a stand-in CLI
    here, answering like docker does), never a pull through the daemon."""
    img = BuiltImage([layer(BASE, gz=False)], gz=False)
    saved = str(tmp_path / "saved.tar")
    write_docker_save(saved, "local/busybox:latest", img)
    log = tmp_path / "calls"
    cli = tmp_path / "docker"
    cli.write_text(
        '#!/bin/sh\necho "$@" >> %s\ncase "$1" in\n  info) echo 28.2.2;;\n'
        '  image) [ "$6" = local/busybox:latest ] || exit 1; echo sha256:x;;\n'
        '  save) cp %s "$3";;\n  *) exit 1;;\nesac\n' % (log, saved)
    )
    cli.chmod(0o755)
    from mock_opensandbox.images.sources import LocalDaemon

    s = ImageStore(str(tmp_path / "cache"), None, local_daemon=True, registry=False)
    s.daemon = LocalDaemon(s.tmp_dir, clis=(str(cli),))
    got = s.resolve("local/busybox:latest")
    assert got.source == "docker" and got.id == sha(img.config)
    assert "docker" in s.sources()
    with pytest.raises(ImageNotFound):
        s.resolve("local/other:1")
    calls = log.read_text().splitlines()
    assert calls[0].startswith("info") and not any(c.startswith("pull") for c in calls)
    assert "save -o" in calls[2] and calls[2].endswith("-- local/busybox:latest")
    assert os.listdir(s.tmp_dir) == []  # the saved tarball is removed once unpacked


def test_gzipped_docker_save_and_parallel_reads_of_one_archive(tmp_path):
    """``docker save | gzip`` is read too; two images of one plain archive resolved by two threads at once
    each read their own layer bytes (a shared tar handle would interleave the seeks: digest errors)."""
    import threading

    os.makedirs(tmp_path / "images")
    a = BuiltImage([layer([("file", "a%d" % i, "a" * 20000) for i in range(20)], gz=False)], gz=False)
    b = BuiltImage([layer([("file", "b%d" % i, "b" * 20000) for i in range(20)], gz=False)], gz=False)
    plain = str(tmp_path / "two.tar")
    write_docker_save(plain, "local/a:1", a)
    with tarfile.open(plain) as src, tarfile.open(str(tmp_path / "images" / "two.tar"), "w") as dst:
        for m in src.getmembers():
            dst.addfile(m, src.extractfile(m))
    write_docker_save(str(tmp_path / "b.tar"), "local/b:1", b)
    with tarfile.open(str(tmp_path / "b.tar")) as src, tarfile.open(str(tmp_path / "images" / "two.tar"), "a") as dst:
        for m in src.getmembers():
            if m.name != "manifest.json":
                dst.addfile(m, src.extractfile(m))
    with tarfile.open(str(tmp_path / "images" / "two.tar")) as tf:
        both = [json.load(tf.extractfile("manifest.json"))[0]]
    with tarfile.open(str(tmp_path / "b.tar")) as tf:
        both += json.load(tf.extractfile("manifest.json"))
    # rewrite the archive with one manifest.json naming both images (as `docker save a b` writes it)
    members = []
    with tarfile.open(str(tmp_path / "images" / "two.tar")) as tf:
        members = [(m, tf.extractfile(m).read()) for m in tf.getmembers() if m.name != "manifest.json"]
    with tarfile.open(str(tmp_path / "images" / "two.tar"), "w") as tf:
        for m, data in members:
            tf.addfile(m, io.BytesIO(data))
        mj = json.dumps(both).encode()
        ti = tarfile.TarInfo("manifest.json")
        ti.size = len(mj)
        tf.addfile(ti, io.BytesIO(mj))
    s = store(tmp_path)
    errors = []

    def run(ref):
        try:
            s.resolve(ref)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    ts = [threading.Thread(target=run, args=(r,)) for r in ("local/a:1", "local/b:1")]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert errors == []
    assert sorted(tree(s.resolve("local/b:1").rootfs())) == ["b%d" % i for i in sorted(range(20), key=str)]
    with open(plain, "rb") as f, gzip.open(str(tmp_path / "images" / "gz.tar.gz"), "wb") as g:
        g.write(f.read().replace(b"local/a:1", b"local/z:1"))
    assert sorted(tree(s.resolve("local/z:1").rootfs()))[0] == "a0"


def test_an_image_dir_layout_that_changes_is_read_again(tmp_path):
    s = store(tmp_path)
    one = BuiltImage([layer([("file", "v", "1")])])
    write_oci_layout(str(tmp_path / "images" / "app"), {"local/app:1": one})
    assert s.resolve("local/app:1").id == sha(one.config)
    two = BuiltImage([layer([("file", "v", "2"), ("file", "w", "new")])])
    write_oci_layout(str(tmp_path / "images" / "app"), {"local/app:1": two})
    os.utime(tmp_path / "images" / "app" / "index.json", ns=(1, 1))  # a different mtime, whatever the clock
    got = s.resolve("local/app:1")
    assert got.id == sha(two.config) and tree(got.rootfs())["v"] == "2"


def test_member_lookups_and_reads_of_one_tar_from_several_threads(tmp_path):
    """Archive.has (whose first lookup reads the whole member list) and Archive.open share one tarfile: without
    one lock their seeks interleave ("unexpected end of data", about 1 round in 5 before the fix)."""
    import threading

    from mock_opensandbox.images.sources import Archive

    path = str(tmp_path / "a.tar")
    with tarfile.open(path, "w") as tf:
        for i in range(400):
            ti = tarfile.TarInfo("m%03d" % i)
            ti.size = 700
            tf.addfile(ti, io.BytesIO(bytes([i % 256]) * 700))
    errors: list[Exception] = []
    for _ in range(20):
        a = Archive(path)

        def look(a=a):
            try:
                assert a.has("m399") and a.read("m398") == bytes([398 % 256]) * 700
            except Exception as e:  # noqa: BLE001 - reported below
                errors.append(e)

        ts = [threading.Thread(target=look) for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        a.close()
    assert errors == []
