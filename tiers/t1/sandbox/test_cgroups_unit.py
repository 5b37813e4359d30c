"""runtime/cgroups.py without a kernel: the files Docker (runc) writes for the server's mem_limit,
nano_cpus and pids_limit, and where a cgroup v2 host's sandbox cgroups go, on a fake cgroupfs
(this machine is cgroup v1; GitHub's runners are v2)."""

from __future__ import annotations

import os

import pytest

from mock_opensandbox.runtime import cgroups

MIB = 1 << 20
OWN = "/user.slice/user-1000.slice/user@1000.service/app.slice/run-1.scope"


def test_v1_files_are_what_docker_writes():
    lim = cgroups.Limits(memory=512 * MIB, nano_cpus=500_000_000, pids=4096)
    assert lim.v1_files() == {
        "memory": [("memory.limit_in_bytes", "536870912"), ("memory.memsw.limit_in_bytes", "1073741824")],
        "cpu": [("cpu.cfs_period_us", "100000"), ("cpu.cfs_quota_us", "50000")],
        "pids": [("pids.max", "4096")],
    }
    assert cgroups.Limits(nano_cpus=2_000_000_000).v1_files() == {
        "cpu": [("cpu.cfs_period_us", "100000"), ("cpu.cfs_quota_us", "200000")]
    }
    assert cgroups.Limits(memory=64 * MIB).v1_files(has_memsw=False) == {
        "memory": [("memory.limit_in_bytes", "67108864")]
    }


def test_v2_files_are_what_runc_writes():
    lim = cgroups.Limits(memory=512 * MIB, nano_cpus=500_000_000, pids=64)
    assert lim.v2_files() == [
        ("memory.max", "536870912"),
        ("memory.swap.max", "536870912"),
        ("cpu.max", "50000 100000"),
        ("pids.max", "64"),
    ]
    assert cgroups.Limits().v2_files() == [] and cgroups.Limits().wanted() == []


def _fake_v2(tmp_path, subtree: dict[str, str]):
    """A cgroup2 mount at tmp/cg and a /proc saying this process lives in OWN."""
    cg, proc = tmp_path / "cg", tmp_path / "proc"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "mountinfo").write_text("30 23 0:26 / %s rw,nosuid - cgroup2 cgroup2 rw\n" % cg)
    (proc / "self" / "cgroup").write_text("0::%s\n" % OWN)
    d = cg
    parts = [""] + OWN.strip("/").split("/")
    for i, part in enumerate(parts):
        d = d / part if part else d
        d.mkdir(exist_ok=True)
        (d / "cgroup.controllers").write_text("cpuset cpu io memory pids\n" if i == 0 else "cpu memory pids\n")
        (d / "cgroup.subtree_control").write_text(subtree.get("/".join(parts[1 : i + 1]), "") + "\n")
        (d / "cgroup.procs").write_text("")
    return str(cg), str(proc)


@pytest.fixture
def writable_files(monkeypatch):
    """A plain directory has no interface files: writing creates them, as the kernel would show them."""

    def write(path, value):
        with open(path, "w") as fh:
            fh.write(value)

    monkeypatch.setattr(cgroups, "_write", write)
    monkeypatch.setattr(cgroups, "_rmdir", lambda d, timeout: True)
    monkeypatch.delenv("OSB_MOCK_CGROUPS", raising=False)
    monkeypatch.delenv("OSB_MOCK_NO", raising=False)  # these probe fake trees: the switch off is its own test


def test_v2_uses_the_nearest_delegated_ancestor(tmp_path, writable_files):
    all3 = "cpu memory pids"
    cg, proc = _fake_v2(
        tmp_path,
        {
            "": "cpu io memory pids",
            "user.slice": all3,
            "user.slice/user-1000.slice": all3,
            "user.slice/user-1000.slice/user@1000.service": all3,
            "user.slice/user-1000.slice/user@1000.service/app.slice": all3,
        },
    )
    host = cgroups.probe(cg, proc)
    app = os.path.join(cg, os.path.dirname(OWN).lstrip("/"))
    assert (host.version, host.bases, host.controllers, host.missing) == (2, {"": app}, {"cpu", "memory", "pids"}, {})
    assert host.note() == ""
    g = host.create("osb-mock-ab12-sb1", cgroups.Limits(512 * MIB, 500_000_000, 4096))
    d = os.path.join(app, "osb-mock-ab12-sb1")
    assert g.dirs == [d] and g.procs == [os.path.join(d, "cgroup.procs")] and g.view_env() == "=" + d
    got = {f: open(os.path.join(d, f)).read() for f in ("memory.max", "memory.swap.max", "cpu.max", "pids.max")}
    assert got == {
        "memory.max": "536870912",
        "memory.swap.max": "536870912",
        "cpu.max": "50000 100000",
        "pids.max": "4096",
    }
    assert cgroups.stale(host, "ab12") == [d] and cgroups.stale(host, "*", "sb1") == [d]


def test_v2_names_what_is_not_delegated(tmp_path, writable_files):
    two = "memory pids"
    cg, proc = _fake_v2(
        tmp_path,
        {
            "": two,
            "user.slice": two,
            "user.slice/user-1000.slice": two,
            "user.slice/user-1000.slice/user@1000.service": two,
            "user.slice/user-1000.slice/user@1000.service/app.slice": two,
        },
    )
    for d, _, files in os.walk(cg):  # no cpu controller anywhere (a host that keeps it for itself)
        if "cgroup.controllers" in files:
            with open(os.path.join(d, "cgroup.controllers"), "w") as fh:
                fh.write("memory pids\n")
    host = cgroups.probe(cg, proc)
    assert host.controllers == {"memory", "pids"} and set(host.missing) == {"cpu"}
    assert "resource limits cpu (" in host.note()


def test_no_cgroupfs_and_switched_off(tmp_path, monkeypatch):
    monkeypatch.delenv("OSB_MOCK_NO", raising=False)
    proc = tmp_path / "proc" / "self"
    proc.mkdir(parents=True)
    (proc / "mountinfo").write_text("")
    (proc / "cgroup").write_text("")
    host = cgroups.probe(str(tmp_path / "cg"), str(tmp_path / "proc"))
    assert host.bases == {} and host.create("x", cgroups.Limits(pids=1)) is None
    assert host.note().startswith("resource limits memory/cpu/pids (no cgroup file system")
    monkeypatch.setenv("OSB_MOCK_CGROUPS", "0")
    assert cgroups.probe().note() == "resource limits memory/cpu/pids (disabled by OSB_MOCK_CGROUPS)"
    monkeypatch.setenv("OSB_MOCK_CGROUPS", "1")
    monkeypatch.setenv("OSB_MOCK_NO", "slirp4netns,cgroups")
    assert cgroups.probe().note() == "resource limits memory/cpu/pids (switched off by OSB_MOCK_NO)"
