"""local-up.sh with OSB_LOCAL_IMAGES=1: the execd, base, busybox and egress images built on this machine
(debootstrap + busybox-static + OSB_EXECD_BIN), reused, rebuilt and cleaned, and the failures that name their
knob; against the stubs of tiers/t0/tools/local_up_stubs.py (split from test_local_up.py).
"""

from __future__ import annotations

import os

from tiers.t0.tools import test_local_up

# the fixtures of test_local_up.py (a temp dir removed afterwards, the stub world in it), registered here too
tmpdir_clean = test_local_up.tmpdir_clean
world = test_local_up.world


# ----------------------------------------------------------------------------------------------- OSB_LOCAL_IMAGES=1

LOCAL_EXECD = "local/execd:from-binary"
LOCAL_BASE = "local/python:3-slim"
LOCAL_BUSYBOX = "local/busybox:latest"


def _local_knobs(world, *, sources: str = "deb822") -> dict:
    """An execd binary + bootstrap.sh, a static busybox and an apt sources dir, all fake, in the stub world."""
    shared = os.path.join(world.tmp, "shared")
    apt = os.path.join(world.tmp, "apt")
    os.makedirs(shared)
    os.makedirs(os.path.join(apt, "sources.list.d"))
    with open(os.path.join(shared, "execd"), "w") as fh:
        fh.write("fake execd v1\n")
    with open(os.path.join(shared, "bootstrap.sh"), "w") as fh:
        fh.write('#!/bin/sh\nexec "$@"\n')
    if sources == "deb822":
        with open(os.path.join(apt, "sources.list.d", "debian.sources"), "w") as fh:
            fh.write(
                "Types: deb\nURIs: http://mirror.example.invalid/debian\nSuites: bookworm\nComponents: main\n\n"
                "Types: deb\nURIs: http://mirror.example.invalid/debian-security\nSuites: bookworm-security\n"
            )
    else:
        with open(os.path.join(apt, "sources.list"), "w") as fh:
            fh.write("# comment\ndeb [arch=amd64] http://old.example.invalid/debian bookworm main\n")
    return {
        "OSB_LOCAL_IMAGES": "1",
        "OSB_EXECD_BIN": os.path.join(shared, "execd"),
        "OSB_BUSYBOX_BIN": os.path.join(world.stubs, "busybox-static"),
        "OSB_APT_SOURCES": apt,
        "OSB_DEBIAN_SUITE": "bookworm",
    }


def test_local_images_are_built_once_reused_listed_and_cleaned(world):
    knobs = _local_knobs(world)
    r = world.run("up", **knobs)
    assert r.returncode == 0, r.stderr + r.stdout
    argv = world.argv()
    assert not [a for a in argv if a.startswith("docker pull")]  # nothing is pulled
    assert [a.rsplit(" ", 1)[1] for a in argv if a.startswith("docker import")] == [
        LOCAL_EXECD,
        LOCAL_BUSYBOX,
        LOCAL_BASE,
    ]
    deb = [a for a in argv if a.startswith("debootstrap ")]
    assert len(deb) == 1 and deb[0].endswith(
        " bookworm " + os.path.join(world.workdir, "build", "base-rootfs") + " http://mirror.example.invalid/debian"
    )
    assert "--variant=minbase --include=python3,bash,coreutils,procps,ca-certificates" in deb[0]
    # progress: one line per debootstrap phase, per-package lines collapsed
    assert "local-up: base: Retrieving InRelease\n" in r.stdout
    assert "local-up: base:   ... 3 x Retrieving\n" in r.stdout and "Validating" not in r.stdout
    with open(os.path.join(world.workdir, "server.toml")) as fh:
        assert f'execd_image = "{LOCAL_EXECD}"' in fh.read()
    env = world.run("env", **knobs).stdout
    assert (
        f"export OPENSANDBOX_IMAGE={LOCAL_BASE}\n" in env
        and f"export OPENSANDBOX_BUSYBOX_IMAGE={LOCAL_BUSYBOX}\n" in env
    )
    assert not os.path.exists(os.path.join(world.workdir, "build", "base-rootfs"))  # scratch removed

    world.clear_argv()
    r = world.run("up", **knobs)
    assert r.returncode == 0, r.stderr
    assert not [a for a in world.argv() if a.startswith(("docker import", "debootstrap"))]
    assert f"local-up: images: {LOCAL_BASE} present (reused" in r.stdout

    st = world.run("status", **knobs)
    for img in (LOCAL_EXECD, LOCAL_BASE, LOCAL_BUSYBOX):
        assert f"local-up: image: {img} present (built by local-up)\n" in st.stdout

    world.set_lines("images", world.lines("images") + ["someone/else:1"])
    r = world.run("clean", **knobs)
    assert r.returncode == 0, r.stderr
    assert sorted(a for a in world.argv() if a.startswith("docker rmi")) == sorted(
        f"docker rmi {i}" for i in (LOCAL_EXECD, LOCAL_BASE, LOCAL_BUSYBOX)
    )
    assert world.lines("images") == ["someone/else:1"]  # only what up built
    assert world.pid("server.pid") is None and world.pid("dockerd.pid") is None


def test_local_execd_image_is_rebuilt_when_the_binary_changes(world):
    knobs = _local_knobs(world)
    assert world.run("up", **knobs).returncode == 0
    with open(knobs["OSB_EXECD_BIN"], "a") as fh:
        fh.write("v2\n")
    world.clear_argv()
    r = world.run("up", **knobs)
    assert r.returncode == 0, r.stderr
    assert [a.rsplit(" ", 1)[1] for a in world.argv() if a.startswith("docker import")] == [LOCAL_EXECD]
    assert "was built from another execd/bootstrap.sh; rebuilding" in r.stdout
    world.run("down")


def test_local_images_mirror_from_a_one_line_sources_list(world):
    knobs = _local_knobs(world, sources="list")
    r = world.run("up", **knobs)
    assert r.returncode == 0, r.stderr
    assert [a for a in world.argv() if a.startswith("debootstrap ")][0].endswith(" http://old.example.invalid/debian")
    world.run("down")


def test_local_images_missing_execd_binary_names_the_knob(world):
    knobs = {**_local_knobs(world), "OSB_EXECD_BIN": os.path.join(world.tmp, "nope", "execd")}
    r = world.run("up", **knobs)
    assert r.returncode == 1
    assert r.stderr.startswith('local-up: step "local-images" failed\n')
    assert "no execd binary at" in r.stderr and "point OSB_EXECD_BIN at an execd binary" in r.stderr
    assert "Traceback" not in r.stderr and world.pid("server.pid") is None
    world.run("down")


def test_local_images_missing_bootstrap_names_osb_bootstrap(world):
    knobs = _local_knobs(world)
    os.unlink(os.path.join(os.path.dirname(knobs["OSB_EXECD_BIN"]), "bootstrap.sh"))
    r = world.run("up", **knobs)
    assert r.returncode == 1 and "point OSB_BOOTSTRAP at it" in r.stderr
    other = os.path.join(world.tmp, "boot.sh")
    with open(other, "w") as fh:
        fh.write("#!/bin/sh\n")
    assert world.run("up", OSB_BOOTSTRAP=other, **knobs).returncode == 0
    world.run("down")


def test_local_images_failed_debootstrap_says_where_to_look(world):
    knobs = _local_knobs(world)
    world.set_lines("debootstrap_fails", [])
    r = world.run("up", **knobs)
    assert r.returncode == 1
    assert "debootstrap --variant=minbase bookworm" in r.stderr
    assert "OSB_DEBIAN_MIRROR" in r.stderr and "E: Failed getting release file" in r.stderr
    assert world.pid("server.pid") is None
    world.run("down")


def test_local_egress_image_shares_the_debootstrap_cache_and_mode(world):
    knobs = _local_knobs(world)
    eb = os.path.join(world.tmp, "egress-bin")
    os.makedirs(eb)
    for f in ("egress", "opensandbox-supervisor", "cleanup.sh"):
        with open(os.path.join(eb, f), "w") as fh:
            fh.write("fake %s\n" % f)
    knobs.update(OSB_WITH_EGRESS="1", OSB_EGRESS_BIN=eb, OSB_EGRESS_MODE="dns+nft")
    r = world.run("up", **knobs)
    assert r.returncode == 0, r.stderr + r.stdout
    argv = world.argv()
    deb = [a for a in argv if a.startswith("debootstrap ")]
    cache = "--cache-dir=" + os.path.join(world.workdir, "build", "debs")
    assert len(deb) == 2 and all(cache in a for a in deb)  # one download cache for both rootfs
    assert "--include=iptables,iproute2,nftables,ca-certificates,procps" in deb[1]
    imp = [a for a in argv if a.startswith("docker import")]
    assert imp[-1].endswith(" local/egress:src3bb6fad") and "/opt/opensandbox-egress/supervisor" in imp[-1]
    config = open(os.path.join(world.workdir, "server.toml")).read()
    assert '[egress]\nimage = "local/egress:src3bb6fad"\nmode = "dns+nft"' in config
    env = world.run("env", **knobs).stdout
    assert (
        "export OSB_EGRESS_MODE=dns+nft\n" in env and "export OPENSANDBOX_EGRESS_IMAGE=local/egress:src3bb6fad\n" in env
    )
    world.clear_argv()
    assert world.run("up", **knobs).returncode == 0
    assert not [a for a in world.argv() if a.startswith(("docker import", "debootstrap"))]  # reused
    os.unlink(os.path.join(eb, "cleanup.sh"))
    world.run("down")
    r = world.run("up", **{**knobs, "OSB_EGRESS_IMAGE": "local/egress:other"})
    assert r.returncode == 1 and "no cleanup.sh in" in r.stderr and "OSB_EGRESS_BIN" in r.stderr
    world.run("down")


def test_local_images_knob_must_be_0_or_1(world):
    r = world.run("up", OSB_LOCAL_IMAGES="yes")
    assert r.returncode == 1 and "set OSB_LOCAL_IMAGES=1" in r.stderr and world.argv() == []
