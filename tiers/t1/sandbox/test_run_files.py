"""execd's files of each run in the sandbox's /tmp (mock_opensandbox/execd/runfiles.py): made at the run's start,
or with ``OSB_MOCK_SPARE_FILES=1`` the next run's two made ahead, unnamed, once an answer is out, and a run's start
names them by a link. What code inside sees is
the same either way (tiers/flows/sandbox/sandbox_inside.py `execd_files`, live and mock); here, what the mock
holds: the files made ahead, where a run's files land when code inside moved /tmp, and that none are left
open when the execd stops (an open file would keep the sandbox's file system busy)."""

from __future__ import annotations

import json
import os

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit import rest
from tiers.toolkit.marks import needs_isolation
from tiers.toolkit.waits import wait_until

pytestmark = needs_isolation


@pytest.fixture(params=["ahead", "at-start"])
def box(request, monkeypatch):
    monkeypatch.setenv("OSB_MOCK_SPARE_FILES", "1" if request.param == "ahead" else "0")
    with MockOpenSandbox(execd_close_delay=0) as m:
        h = {"OPEN-SANDBOX-API-KEY": m.api_key}
        body = {"image": {"uri": "python:3"}, "timeout": 120, "entrypoint": ["tail", "-f", "/dev/null"]}
        body["resourceLimits"] = {"cpu": "500m", "memory": "512Mi"}
        sid = json.loads(rest.call(m.base_url, "POST", "/v1/sandboxes", body, h).body)["id"]
        assert wait_until(
            lambda: (
                json.loads(rest.call(m.base_url, "GET", "/v1/sandboxes/" + sid, None, h).body)["status"]["state"]
                == "Running"
            ),
            30,
        ), "never Running"
        sb = m.store.get(sid)
        yield request.param, sb, sb.execd


def _run(execd, command: str, background: bool = False) -> tuple[str, str]:
    """(the run's id, its stdout) through the execd's own listener."""
    url = "127.0.0.1:%d" % execd.port
    st, _h, body = rest.call(url, "POST", "/command", {"command": command, "background": background}, {})
    assert st == 200
    events = [json.loads(x) for x in body.decode().split("\n\n") if x.strip().startswith("{")]
    out = "".join(e.get("text", "") + "\n" for e in events if e.get("type") == "stdout")
    return next(e["text"] for e in events if e.get("type") == "init"), out


def _open_tmpfiles(files) -> int:
    """How many of the mock's fds are unnamed files made ahead (``/proc/self/fd`` shows "/tmp/#<ino> (deleted)")."""
    return sum(1 for fd in files._spares if "(deleted)" in os.readlink("/proc/self/fd/%d" % fd))


def _made_ahead(files, n: int) -> bool:
    """The files made ahead number n (made once the answer is written: the client may read it first)."""
    wait_until(lambda: _open_tmpfiles(files) == n, 5)
    return _open_tmpfiles(files) == n


def test_the_next_runs_files_are_made_ahead_and_named_at_its_start(box):
    how, _sb, execd = box
    files = execd.commands.files
    first, _ = _run(execd, "true")
    assert _made_ahead(files, 2 if how == "ahead" else 0)
    cid, out = _run(execd, "ls /tmp; stat -c '%a %s' /tmp/*.stdout | sort -u")
    assert {first + ".stdout", first + ".stderr", cid + ".stdout", cid + ".stderr"} <= set(out.split())
    assert "755 0" in out.splitlines()  # its own, empty; the first run's too
    bg, _ = _run(execd, "echo in-the-log", background=True)
    assert wait_until(lambda: _run(execd, "cat /tmp/%s.output" % bg)[1] == "in-the-log\n", 10)


def test_a_run_names_its_files_in_the_tmp_code_inside_put_there(box):
    _how, _sb, execd = box
    _run(execd, "true")
    _run(execd, "mkdir /moved && mv /tmp/* /moved/ && rmdir /tmp && ln -s /moved /tmp")
    cid, _ = _run(execd, "echo here")
    assert _run(execd, "cat /moved/%s.stdout; ls -ld /tmp | cut -c1" % cid)[1] == "here\nl\n"


def test_no_file_made_ahead_is_left_open_when_the_execd_stops(box):
    _how, _sb, execd = box
    files = execd.commands.files
    _run(execd, "true")
    held = list(files._spares)
    execd.stop()
    assert files._spares == []
    for fd in held:  # closed (or the number taken since by another file, not an unnamed one of this sandbox)
        try:
            target = os.readlink("/proc/self/fd/%d" % fd)
        except OSError:
            continue
        assert "(deleted)" not in target or "/tmp/#" not in target
    files.refill()  # an answer written after the stop makes none
    assert files._spares == []


def test_a_session_runs_its_script_from_a_file_made_ahead(box):
    """A session's run writes its script to os.CreateTemp("", "execd_bash_*.sh") (mode 0600, kept: bash_session.go
    at 3bb6fad); the mock writes it into a file made ahead and links it under such a name."""
    how, _sb, execd = box
    url = "127.0.0.1:%d" % execd.port
    session = json.loads(rest.call(url, "POST", "/session", {}, {}).body)["session_id"]

    def run(command: str) -> str:
        st, _h, body = rest.call(url, "POST", "/session/%s/run" % session, {"command": command}, {})
        assert st == 200
        events = [json.loads(x) for x in body.decode().split("\n\n") if x.strip().startswith("{")]
        return "".join(e.get("text", "") + "\n" for e in events if e.get("type") == "stdout")

    first = run("echo $0")
    assert _made_ahead(execd.commands.files, 2 if how == "ahead" else 0)
    out = run("echo $0; stat -c '%a %U %h' $0; grep -c '^export ' $0; ls /tmp | grep -c '^execd_bash_'").split()
    assert out[0] != first.strip() and out[0].startswith("/tmp/execd_bash_") and out[0].endswith(".sh")
    assert out[1:4] == ["600", "root", "1"] and int(out[4]) > 0 and out[5] == "2"


@pytest.mark.parametrize("way", ["empty-path", "proc"])
def test_link_fd_names_an_unnamed_file_either_way(tmp_path, monkeypatch, way):
    """openat2.link_fd: linkat(AT_EMPTY_PATH), or the /proc/self/fd walk where the kernel refuses that."""
    from mock_opensandbox.runtime import openat2

    monkeypatch.setattr(openat2, "_empty_path_links", way == "empty-path")
    d = os.open(str(tmp_path), os.O_PATH | os.O_DIRECTORY)
    fd = os.open(str(tmp_path), os.O_TMPFILE | os.O_WRONLY, 0o644)
    try:
        os.write(fd, b"kept")
        openat2.link_fd(fd, d, "named")
        with pytest.raises(FileExistsError):
            openat2.link_fd(fd, d, "named")
        assert (tmp_path / "named").read_bytes() == b"kept" and os.stat(tmp_path / "named").st_nlink == 1
        assert openat2._empty_path_links is (way == "empty-path")
    finally:
        os.close(fd)
        os.close(d)


def test_a_tmp_that_is_no_directory_fails_a_run_as_live(box):
    """execd's os.MkdirAll of /tmp fails when code made /tmp a file: a foreground run is RunCommand's 500, a
    background one its init and the JSON in the stream (no ping), the bodies as live answered them (2026-12-07;
    QUIRKS.md, "A command's fd 1 and fd 2")."""
    _how, _sb, execd = box
    _run(execd, "rm -rf /tmp && touch /tmp")
    url = "127.0.0.1:%d" % execd.port
    st, _h, body = rest.call(url, "POST", "/command", {"command": "echo hi"}, {})
    assert (st, json.loads(body)) == (
        500,
        {
            "code": "RUNTIME_ERROR",
            "message": "error running commands failed to get stdlog descriptor: "
            "failed to create temp dir /tmp: mkdir /tmp: not a directory",
        },
    )
    st, _h, body = rest.call(url, "POST", "/command", {"command": "echo hi", "background": True}, {})
    frames = [json.loads(x) for x in body.decode().split("\n\n") if x.strip()]
    assert st == 200 and [f.get("type") for f in frames] == ["init", None]
    assert frames[1] == {
        "code": "RUNTIME_ERROR",
        "message": "error running commands failed to get combined output descriptor: "
        "failed to create temp dir /tmp: mkdir /tmp: not a directory",
    }


def test_the_sandbox_trees_are_spread_over_the_file_system(tmp_path):
    """The mock's own root is a top directory for ext2/3/4 (``chattr +T``: runtime/_util.py ``spread_subdirs``)
    where the file system has the flag: each sandbox's tree, and the run files in its /tmp, in a block group of
    its own; a root the user gave too (the mock's, as the sandboxes it reaps there)."""
    import fcntl
    import struct

    from mock_opensandbox.runtime import _util

    def topdir(path: str) -> bool:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            flags = struct.unpack("i", fcntl.ioctl(fd, _util._FS_IOC_GETFLAGS, struct.pack("i", 0)))[0]
        finally:
            os.close(fd)
        return bool(flags & _util._FS_TOPDIR_FL)

    with MockOpenSandbox() as m:
        root = m.root
        if not _util.spread_subdirs(str(tmp_path)):
            pytest.skip("no FS_TOPDIR_FL where the mock's root is")
        assert topdir(root)
    given = tmp_path / "given"
    given.mkdir()
    with MockOpenSandbox(root=str(given)):
        assert topdir(str(given))
    with MockOpenSandbox(root=str(tmp_path / "made")):
        assert topdir(str(tmp_path / "made"))
