"""The image store's trees are usable roots (QUIRKS.md, Image store): a busybox image the test
builds from Debian's busybox-static, resolved by the store, runs from its flattened rootfs (chroot) and from its
layers mounted as overlayfs lower dirs (whiteouts and opaque dirs honoured by the kernel). Each run is in its
own mount namespace (unshare -m), so no mount outlives it."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from mock_opensandbox.images import ImageStore
from tiers.toolkit.images import BUSYBOX, BuiltImage, layer, static_busybox, write_oci_layout

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="chroot and overlay mounts need root"),
    pytest.mark.skipif(not static_busybox(), reason="no static /bin/busybox (Debian busybox-static)"),
    pytest.mark.skipif(shutil.which("unshare") is None, reason="no unshare(1)"),
]


@pytest.fixture
def image(tmp_path):
    data = open(BUSYBOX, "rb").read()
    base = [
        ("dir", "bin"),
        ("file", "bin/busybox", data, 0o755),
        ("dir", "etc"),
        ("file", "etc/os-release", 'PRETTY_NAME="BusyBox test"\nID=busybox\n'),
        ("file", "etc/motd", "old\n"),
        ("dir", "var"),
        ("dir", "var/cache"),
        ("file", "var/cache/stale", "x"),
        ("dir", "tmp", 0o1777),
    ]
    base += [("hardlink", "bin/" + a, "bin/busybox") for a in ("sh", "cat", "ls", "id", "echo")]
    top = [
        ("file", "etc/.wh.motd", ""),
        ("file", "var/cache/.wh..wh..opq", ""),
        ("file", "var/cache/fresh", "y"),
        ("dir", "work"),
        ("file", "work/hello.txt", "hi\n"),
    ]
    img = BuiltImage([layer(base), layer(top)], config_extra={})
    write_oci_layout(str(tmp_path / "images" / "busybox"), {"local/busybox:latest": img})
    s = ImageStore(str(tmp_path / "cache"), str(tmp_path / "images"), local_daemon=False, registry=False)
    yield s.resolve("local/busybox:latest")
    s.close()


# the image's own PATH inside the chroot (moby oci.DefaultPathEnv), not the host's
ENV = {"PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
PROBE = "cat /etc/os-release; ls /etc; ls /var/cache; cat /work/hello.txt; ls /bin/bash 2>&1; echo rc=$?"


def _check(out: str) -> None:
    assert 'PRETTY_NAME="BusyBox test"' in out
    assert "motd" not in out and "stale" not in out  # whiteout, opaque dir
    assert "fresh" in out and "hi" in out
    assert "rc=1" in out  # no bash in a busybox image


def test_flattened_rootfs_runs_busybox(image):
    r = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "chroot", image.rootfs(), "/bin/sh", "-c", PROBE],
        capture_output=True,
        text=True,
        timeout=30,
        env=ENV,
    )
    assert r.returncode == 0, r.stderr
    _check(r.stdout)


def test_layers_as_overlay_lowerdirs(image, tmp_path):
    lower = image.lowerdirs()
    assert lower is not None
    for d in ("upper", "work", "merged"):
        (tmp_path / d).mkdir()
    script = (
        "mount -t overlay overlay -o lowerdir=%s,upperdir=%s,workdir=%s %s && "
        'chroot %s /bin/sh -c "%s; echo new > /etc/written"'
        % (
            ":".join(lower),
            tmp_path / "upper",
            tmp_path / "work",
            tmp_path / "merged",
            tmp_path / "merged",
            PROBE.replace("$", "\\$"),
        )
    )
    r = subprocess.run(
        ["unshare", "-m", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=30,
        env=ENV,
    )
    if r.returncode != 0 and "mount" in r.stderr and "chroot" not in r.stderr:
        pytest.skip("overlayfs mount refused here: " + r.stderr.strip()[:200])
    assert r.returncode == 0, r.stderr
    _check(r.stdout)
    # the sandbox's write went to its upper dir, never into the shared layer cache
    assert (tmp_path / "upper" / "etc" / "written").read_text() == "new\n"
    assert all(not os.path.exists(os.path.join(d, "etc", "written")) for d in lower)
    assert os.listdir(tmp_path / "merged") == []  # the mount died with its namespace
