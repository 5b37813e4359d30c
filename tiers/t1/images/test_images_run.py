"""A mock sandbox runs the image it was asked for (QUIRKS.md, Image store): images the test writes itself as OCI
layouts (Debian's static /bin/busybox in a layer, no bash, an /etc/os-release of its own), created through
the lifecycle API of a ``MockOpenSandbox(image_dir=...)`` and probed through its execd like the live server
(tiers/flows/sandbox/sandbox_inside.Target): the image's own files, whiteouts and opaque directories of an upper layer,
the image's User / WorkingDir / Env as server 1.1.1 + Docker apply them (fixtures/README.md, "Seen by hand"),
PID 1 and execd as on live in local/busybox:latest, a layer with ``../`` refused, an image without /bin/sh
ending like live (Failed, CONTAINER_EXITED_ERROR, runc's line in the log), a root that cannot be mounted
failing the create with the server's 500, and ``SandboxRuntime.changes_dir()`` (what snapshots read)."""

from __future__ import annotations

import os
import stat

import pytest

from mock_opensandbox.runtime.probe import probe_result
from mock_opensandbox.server import MockOpenSandbox
from tiers.flows.sandbox import sandbox_inside as si
from tiers.toolkit.images import BUSYBOX, BuiltImage, layer, static_busybox, write_oci_layout
from tiers.toolkit.waits import poll

APPLETS = ("sh", "cat", "ls", "id", "echo", "ps", "tail", "env", "pwd", "touch", "rm", "stat", "tr", "readlink")
PASSWD = "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
GROUP = "root:x:0:\nnogroup:x:65534:\n"


def _pid_namespaces() -> bool:
    ok, _, _, pid_mode = probe_result()
    return ok and pid_mode is not None


pytestmark = [
    pytest.mark.skipif(not static_busybox(), reason="no static /bin/busybox (Debian busybox-static) to build images"),
    pytest.mark.skipif(not _pid_namespaces(), reason="no PID namespace per sandbox here: sandboxes get host tools"),
]


def _base(extra=()) -> list:
    out = [
        ("dir", "bin"),
        ("file", "bin/busybox", open(BUSYBOX, "rb").read(), 0o755),
        ("dir", "etc"),
        ("file", "etc/os-release", 'PRETTY_NAME="Test BusyBox"\nID=osbtest\n'),
        ("file", "etc/motd", "old\n"),
        ("file", "etc/passwd", PASSWD),
        ("file", "etc/group", GROUP),
        ("dir", "var"),
        ("dir", "var/cache"),
        ("file", "var/cache/stale", "x"),
        ("dir", "tmp", 0o1777),
        ("dir", "root", 0o700),
    ]
    return out + [("hardlink", "bin/" + a, "bin/busybox") for a in APPLETS] + list(extra)


TOP = [("file", "etc/.wh.motd", ""), ("file", "var/cache/.wh..wh..opq", ""), ("file", "var/cache/fresh", "y")]
USER_CFG = {"Env": ["PATH=/opt/imgbin:/bin", "IMG_VAR=from-image"], "WorkingDir": "/srv/app", "User": "nobody"}


@pytest.fixture(scope="module")
def osb(tmp_path_factory):
    d = tmp_path_factory.mktemp("images")
    images = {
        "local/osbtest-busybox:1": BuiltImage([layer(_base()), layer(TOP)], config_extra={"config": {}}),
        "local/osbtest-user:1": BuiltImage([layer(_base())], config_extra={"config": USER_CFG}),
        "local/osbtest-private:1": BuiltImage([layer([("dir", ".", 0o700)] + _base())], config_extra={"config": {}}),
        "local/osbtest-noshell:1": BuiltImage([layer([("file", "hello.txt", "hi\n")])], config_extra={"config": {}}),
        "local/osbtest-dotdot:1": BuiltImage([layer([("file", "../escape", "no")])], config_extra={"config": {}}),
    }
    for name, img in images.items():
        write_oci_layout(str(d / "dir" / name.split("/")[1].split(":")[0]), {name: img})
    m = MockOpenSandbox(image_dir=str(d / "dir"), image_cache=str(d / "cache"), execd_close_delay=0.05).start()
    try:
        yield m
    finally:
        m.stop()


@pytest.fixture
def target(osb):
    t = si.Target(osb.base_url, osb.api_key or "", "local/osbtest-busybox:1", execd_token=osb.execd_token)
    yield t
    t.delete_all()


def _body(uri: str) -> dict:
    return {"image": {"uri": uri}, "entrypoint": ["tail", "-f", "/dev/null"], "resourceLimits": dict(si.RESOURCES)}


def _sh(t: si.Target, sid: str, cmd: str, cwd: str | None = None) -> si.Result:
    return t.command(sid, cmd, cwd=cwd)


@pytest.mark.spec_exempt("/__mock__/sandboxes/{id} (the sandbox's view) is mock-only, not in the OpenSandbox spec")
def test_busybox_image_is_the_root_like_live(target, osb):
    sid = target.create()
    r = _sh(target, sid, "cat /etc/os-release")
    assert r.rc == 0 and r.out == 'PRETTY_NAME="Test BusyBox"\nID=osbtest\n'
    r = _sh(target, sid, "ls /bin/bash")  # live local/busybox:latest: no bash; execd runs `sh -c`
    assert r.rc == 1 and "/bin/bash: No such file or directory" in r.err
    assert _sh(target, sid, "echo $0").out == "sh\n"
    r = _sh(target, sid, "ps -o pid,user,args")
    rows = [line.split(None, 2) for line in r.out.splitlines()[1:]]
    assert rows[0] == ["1", "root", "{bootstrap.sh} /bin/sh /opt/opensandbox/bootstrap.sh tail -f /dev/null"]
    assert ["root", "/opt/opensandbox/execd"] in [x[1:] for x in rows]
    assert ["root", "tail -f /dev/null"] in [x[1:] for x in rows]
    r = _sh(target, sid, "id; pwd; cat /etc/hostname")
    lines = r.out.splitlines()
    assert lines[:2] == ["uid=0(root) gid=0(root) groups=0(root)", "/"] and len(lines[2]) == 12
    # nothing of the host's tools: no /usr at all in this image
    assert _sh(target, sid, "ls /usr").rc == 1
    view = si.request(
        "GET",
        osb.base_url.rsplit("/v1", 1)[0],
        "/__mock__/sandboxes/" + sid,
        headers={"OPEN-SANDBOX-API-KEY": osb.api_key or ""},
    ).json()["view"]
    assert view["kind"] == "image" and view["rootfs"] == ("overlay" if os.geteuid() == 0 else "copy")


def test_whiteouts_and_opaque_dirs_of_an_upper_layer(target):
    sid = target.create()
    r = _sh(target, sid, "ls /etc; ls /var/cache")
    names = r.out.split()
    assert "motd" not in names and "stale" not in names
    assert "fresh" in names and "os-release" in names


def test_image_user_workdir_env_as_docker_applies_them(target):
    target.image = "local/osbtest-user:1"
    sid = target.create(env={"IMG_VAR": "from-request", "REQ_VAR": "r"})
    r = _sh(target, sid, "id; pwd; env")
    lines = r.out.splitlines()
    assert lines[0] == "uid=65534(nobody) gid=65534(nogroup) groups=65534(nogroup)"
    assert lines[1] == "/srv/app"
    env = dict(x.split("=", 1) for x in lines[2:] if "=" in x)
    assert env["PATH"] == "/opt/imgbin:/bin" and env["HOME"] == "/nonexistent" and env["PWD"] == "/srv/app"
    assert env["IMG_VAR"] == "from-request" and env["REQ_VAR"] == "r" and env["OPENSANDBOX_ID"] == sid
    assert env["EXECD_ENVS"] == "/opt/opensandbox/.env"
    assert _sh(target, sid, "pwd", cwd="/tmp").out == "/tmp\n"
    r = _sh(target, sid, "ps -o user,args")
    assert {line.split()[0] for line in r.out.splitlines()[1:]} == {"nobody"}  # PID 1 and execd too
    r = _sh(target, sid, "touch /tmp/mine; stat -c '%U:%G' /tmp/mine; stat -c '%U' /srv/app /opt/opensandbox")
    assert r.out.split() == ["nobody:nogroup", "root", "root"]


def test_a_layer_with_dotdot_is_refused(target):
    target.image = "local/osbtest-dotdot:1"
    r = target.life("POST", "/v1/sandboxes", json_body=_body(target.image))
    assert r.status == 500 and r.json()["code"] == "DOCKER::SANDBOX_IMAGE_PULL_FAILED"
    assert target.life("GET", "/v1/sandboxes").json()["items"] == []


@pytest.mark.spec_exempt("diagnostics routes of server 1.1.1 are not in the June spec")
def test_an_image_without_a_shell_ends_like_live(target):
    """Live (Docker 20.10, an image FROM scratch): 202 Running, then Failed / CONTAINER_EXITED_ERROR "exited
    with code 1", and runc's line in the container log."""
    r = target.life("POST", "/v1/sandboxes", json_body=_body("local/osbtest-noshell:1"))
    assert r.status == 202
    sid = r.json()["id"]
    target.created.append(sid)
    st = poll(
        lambda: target.life("GET", "/v1/sandboxes/" + sid).json()["status"], lambda st: st["state"] != "Running", 20
    )
    assert (st["state"], st["reason"], st["message"]) == (
        "Failed",
        "CONTAINER_EXITED_ERROR",
        "Sandbox container exited with code 1.",
    )
    log = target.life("GET", "/v1/sandboxes/%s/diagnostics/logs?scope=container" % sid).json()["content"]
    assert "exec /opt/opensandbox/bootstrap.sh: no such file or directory" in log


def test_changes_dir_holds_what_the_sandbox_wrote(target, osb):
    sid = target.create()
    assert _sh(target, sid, "echo new > /etc/written; rm /etc/os-release").rc == 0
    path, kind = osb.sandboxes[sid].runtime.changes_dir()
    assert kind == ("overlay" if os.geteuid() == 0 else "full")  # overlayfs as root, a copy otherwise
    with open(os.path.join(path, "etc", "written")) as fh:
        assert fh.read() == "new\n"
    if kind == "overlay":  # a whiteout: a 0/0 character device
        st = os.lstat(os.path.join(path, "etc", "os-release"))
        assert stat.S_ISCHR(st.st_mode) and st.st_rdev == 0
        assert not os.path.exists(os.path.join(path, "bin", "busybox"))  # the image's files stay below
    else:
        assert not os.path.exists(os.path.join(path, "etc", "os-release"))


def test_a_root_that_cannot_be_mounted_fails_the_create_like_the_server(target, osb, monkeypatch):
    from mock_opensandbox.images.store import Image

    if os.geteuid() != 0:
        pytest.skip("overlay lower dirs are used as root only")
    monkeypatch.setattr(Image, "lowerdirs", lambda self: ["/nonexistent/osbtest-layer"])
    r = target.life("POST", "/v1/sandboxes", json_body=_body(target.image))
    assert r.status == 500, r
    body = r.json()
    assert body["code"] == "DOCKER::SANDBOX_START_FAILED"
    assert body["message"].startswith("Failed to create or start container: ")
    assert target.life("GET", "/v1/sandboxes").json()["items"] == []


def test_copy_mode_never_writes_into_the_cache(target, osb, monkeypatch):
    """Where overlayfs cannot take the layers (not root: whiteouts not in overlay form), the root is a copy of
    the flattened image; the sandbox's writes stay in its copy."""
    from mock_opensandbox.images.store import Image

    monkeypatch.setattr(Image, "lowerdirs", lambda self: None)
    sid = target.create()
    rt = osb.sandboxes[sid].runtime
    assert rt.image_root.mode == "copy" and rt.changes_dir() == (rt.root, "full")
    img = osb.sandboxes[sid].rootfs_image
    cached = os.path.join(img.rootfs(), "etc", "os-release")
    before = open(cached).read()
    r = _sh(target, sid, "echo changed >> /etc/os-release; cat /etc/os-release; ls /etc")
    assert r.out.startswith(before) and "changed" in r.out and "motd" not in r.out.split()
    assert open(cached).read() == before
    with open(os.path.join(rt.changes_dir()[0], "etc", "os-release")) as fh:
        assert fh.read().endswith("changed\n")


def test_pty_shell_and_capabilities_in_an_image(target, osb):
    """A PTY shell (controlling terminal from the sandbox's devpts) and a command's capabilities, as the image's
    root and as its User (setuid clears the effective set, the bounding set stays: a container process's)."""
    for image, eff in (("local/osbtest-busybox:1", "00000000800405fb"), ("local/osbtest-user:1", "0000000000000000")):
        target.image = image
        sid = target.create()
        rt = osb.sandboxes[sid].runtime
        master, slave = rt.openpty()
        try:
            p = rt.spawn(
                ["sh", "-c", "tty; grep -E '^Cap(Eff|Bnd)' /proc/self/status"],
                stdin=slave,
                stdout=slave,
                stderr=slave,
                controlling_tty=True,
            )
            os.close(slave)
            slave = -1
            assert p.wait(timeout=20) == 0
            out = b""
            while b"CapBnd" not in out:
                out += os.read(master, 4096)
        finally:
            os.close(master)
            if slave >= 0:
                os.close(slave)
        lines = out.decode().split()
        assert lines[0].startswith("/dev/pts/") and lines[lines.index("CapEff:") + 1] == eff
        assert lines[lines.index("CapBnd:") + 1] == "00000000800405fb"


def test_command_uid_uses_the_images_accounts(target):
    """``uid``/``gid`` of POST /command (execd buildCredential) in an image without setpriv: the user's primary
    gid and groups from the sandbox's own /etc/passwd and /etc/group, gid 0 for a uid without an entry."""
    from tiers.flows.server.smoke_flow import output_of, stream_command

    sid = target.create()
    url, headers = target.endpoint(sid)
    got = []
    for extra in ({"uid": 65534}, {"uid": 4242}, {"uid": 65534, "gid": 0}):
        status, _, events = stream_command(
            url, {**headers, "Accept": "text/event-stream"}, {"command": "id -u; id -g; id -G", **extra}
        )
        assert status == 200
        got.append(output_of(events, "stdout").split())
    # an explicit gid replaces the primary gid only; the groups stay the user's (credential_prefix, diff uid_gid)
    assert got == [["65534", "65534", "65534"], ["4242", "0", "0"], ["65534", "0", "0", "65534"]]


def test_the_images_own_root_mode(target):
    """live local/busybox:latest has a 0700 "./" (its rootfs was a mktemp dir): "/" in the sandbox is 0700 too."""
    target.image = "local/osbtest-private:1"
    sid = target.create()
    assert _sh(target, sid, "stat -c %a /").out == "700\n"
    target.image = "local/osbtest-busybox:1"
    assert _sh(target, target.create(), "stat -c %a /").out == "755\n"


def test_a_pty_shell_needs_bash_like_live(target, osb):
    """execd starts a PTY shell as `bash --norc --noprofile`, never sh (pty_session.go at 3bb6fad): in an image
    without bash the start fails with Go's words, which the WebSocket sends as START_FAILED (live on
    local/busybox:latest, both modes). The argv with bash: tiers/t1/execd/test_pty_mock.py."""
    target.image = "local/osbtest-busybox:1"
    sid = target.create()
    pty = osb.sandboxes[sid].execd.pty_sessions
    for pipe_mode, word in ((False, "pty.StartWithSize"), (True, "cmd.Start")):
        s = pty.create("", "")
        with pytest.raises(RuntimeError) as err:
            s.start(pipe_mode)
        assert str(err.value) == word + ': exec: "bash": executable file not found in $PATH'
        assert s.launch_failed and not s.is_running()
