"""One file system per sandbox (QUIRKS.md, Files and directories: "Files and view"): the files API, `cwd`, sessions and
commands all see the sandbox's own view - the image's /etc and read-only system directories, an image-like root with
/opt/opensandbox - and `ps` shows bootstrap.sh, execd and the entrypoint, like the real sandbox (recording 22's `ps`;
tiers/diff files.view compares the answers with the real execd). As root (in this process) and as an unprivileged user
(tiers/t1/sandbox/view_probes.py in a child process)."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess

import pytest

from mock_opensandbox.runtime import SandboxRuntime
from mock_opensandbox.server import MockOpenSandbox
from tiers.t1.sandbox import view_probes as vp
from tiers.toolkit.marks import needs_isolation

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
NOBODY = 65534

pytestmark = needs_isolation


def _nobody_skip() -> str | None:
    if os.geteuid() != 0:
        return "needs root to switch to an unprivileged user"
    if not shutil.which("setpriv") or not os.path.isfile("/usr/bin/python3"):
        return "no setpriv or /usr/bin/python3"
    try:
        pwd.getpwuid(NOBODY)
    except KeyError:
        return "no uid 65534"
    return None


@pytest.fixture(scope="module", params=["root", "nonroot"])
def seen(request):
    """(uid the mock ran as, the probes' observations) for one sandbox of a fresh mock."""
    if request.param == "root":
        osb = MockOpenSandbox(execd_close_delay=0).start()
        try:
            _, sid = vp.create(osb)
            yield vp.probe(osb, sid)
        finally:
            osb.stop()
        return
    why = _nobody_skip()
    if why:
        pytest.skip(why)
    p = subprocess.run(
        [
            shutil.which("setpriv"),
            "--reuid=%d" % NOBODY,
            "--regid=%d" % NOBODY,
            "--clear-groups",
            "--",
            "/usr/bin/python3",
            os.path.join(REPO, "tiers", "t1", "sandbox", "view_probes.py"),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=120,
        cwd="/tmp",
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp", "TMPDIR": "/tmp"},
    )
    if p.returncode != 0 and b"isolation" in p.stderr and b"unavailable" in p.stderr:
        pytest.skip("an unprivileged user cannot isolate here")
    if p.returncode == 2 and b"can't open file" in p.stderr and b"Permission denied" in p.stderr:
        # a checkout under a private directory (mktemp -d is 0700): the other non-root tests skip the same way
        pytest.skip("an unprivileged user cannot read the repository here")
    assert p.returncode == 0, p.stderr.decode("utf-8", "replace")[-2000:]
    out = json.loads(p.stdout)
    assert out["uid"] == NOBODY
    yield out


def test_files_api_reads_the_images_files(seen):
    st, info = seen["info"]
    assert st == 200, info
    assert info["/etc/os-release"]["type"] == "symlink" and info["/etc/passwd"]["type"] == "file"
    assert info["/etc/passwd"]["owner"] == "root" and info["/etc/passwd"]["group"] == "root"  # inside names
    st, text = seen["download_passwd"]
    assert st == 200 and text.startswith("root:x:0:0:root:/root:"), text  # the image's accounts
    st, found = seen["search_python"]
    assert st == 200 and "/usr/bin/python3" in found, found


def test_cwd_in_system_and_image_directories(seen):
    for wd, (out, err) in seen["cwd"].items():
        assert (out, err) == (wd, ""), (wd, out, err)


def test_session_in_var(seen):
    st, sess = seen["session_create"]
    assert st == 200, sess
    st, raw = seen["session_run"]
    assert st == 200 and '"text":"/var"' in raw, raw


def test_root_is_image_like(seen):
    assert tuple(seen["ls_root"]) == ("\n".join(vp.IMAGE_LS), "")
    assert tuple(seen["ls_opt"]) == ("bootstrap.sh\nexecd", "")


def test_ps_shows_bootstrap_execd_and_the_entrypoint(seen):
    out, _err = seen["ps"]
    rows = [line.split(None, 2) for line in out.splitlines()]
    by_args = {args: (int(pid), int(ppid)) for pid, ppid, args in rows}
    assert by_args["/bin/sh /opt/opensandbox/bootstrap.sh tail -f /dev/null"] == (1, 0), out
    assert by_args["/opt/opensandbox/execd"][1] == 1, out
    assert by_args["tail -f /dev/null"][1] == 1, out
    assert len(rows) == 4, out  # + the ps itself: nothing of the mock or the host


def test_absolute_symlinks_inside_stay_inside(seen):
    st, text = seen["shadow_via_link"]
    assert st == 200
    assert text.rstrip("\n") == seen["shadow_inside"][0]  # the sandbox's locked shadow ...
    assert text.startswith("root:*:")
    host = vp.host_shadow()
    if host is not None:
        assert text != host  # ... never the host's
    assert list(seen["root_mine_via_link"]) == [200, "sandbox-root\n"]


def test_writes_to_read_only_system_dirs_fail_like_execd(seen):
    # the real execd's answer (tiers/diff files.view "upload into read-only /usr")
    assert seen["upload_usr"] == [
        500,
        {
            "code": "RUNTIME_ERROR",
            "message": (
                "error opening destination file /usr/osb-view-probe. open /usr/osb-view-probe: read-only file system"
            ),
        },
    ]
    assert not os.path.exists("/usr/osb-view-probe")
    assert seen["upload_etc"][0] == 200 and tuple(seen["etc_inside"]) == ("mine", "")
    assert not os.path.exists("/etc/osb-view-probe.conf")


def test_agent_answers_from_inside(seen):
    assert seen["agent_ping"]["ok"] is True and seen["agent_ping"]["pid"] > 1
    assert seen["agent_refused"] == {"ok": False, "errno": 111, "error": os.strerror(111)}


def test_agent_connects_to_a_port_inside(tmp_path):
    """agent_call connect: a TCP socket to 127.0.0.1:PORT as the sandbox's own processes reach it."""
    rt = SandboxRuntime(str(tmp_path / "root"), isolate=True)
    try:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        server = rt.spawn(
            [
                "python3",
                "-c",
                "import socket; s = socket.socket(); s.bind(('127.0.0.1', %d)); "
                "s.listen(); print('up', flush=True); c, _ = s.accept(); c.sendall(b'inside'); "
                "c.close()" % port,
            ],
            stdout=subprocess.PIPE,
        )
        assert server.stdout.readline() == b"up\n"
        reply, fds = rt.agent_call({"op": "connect", "port": port}, timeout=10)
        assert reply == {"ok": True} and len(fds) == 1
        with socket.socket(fileno=fds[0]) as c:
            assert c.recv(100) == b"inside"
        assert server.wait(timeout=10) == 0
    finally:
        rt.cleanup()


def test_failed_spawn_answers_with_execds_text(tmp_path):
    """6a: cmd.Start fails (the uid cannot enter its cwd): execd's own text, as tiers/diff
    command.start_failure records from the real binary."""
    from mock_opensandbox.execd.server import ExecdServer
    from mock_opensandbox.wire import sse

    rt = SandboxRuntime(str(tmp_path / "root"), isolate=True)
    srv = ExecdServer(rt, close_delay=0)
    srv.start()
    try:
        import http.client

        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=30)
        c.request(
            "POST",
            "/command",
            body=json.dumps({"command": "pwd", "uid": NOBODY, "cwd": "/root"}),
            headers={"Content-Type": "application/json"},
        )
        events = list(sse.parse_stream([c.getresponse().read()]))
        c.close()
        err = [e["error"] for e in events if e.get("type") == "error"]
        assert err == [
            {
                "ename": "CommandExecError",
                "evalue": "fork/exec /usr/bin/bash: permission denied",
                "traceback": ["fork/exec /usr/bin/bash: permission denied"],
            }
        ], events
    finally:
        srv.stop()
        rt.cleanup()
