"""local-up.sh up / status / env / down against the stubbed docker, dockerd, apt-get, sudo, python3, pip,
opensandbox-server and curl of tiers/t0/tools/local_up_stubs.py: no real network, no real Docker. The locally built
images (OSB_LOCAL_IMAGES=1): test_local_up_images.py.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
import textwrap

import pytest

from tiers.t0.tools.local_up_stubs import BASE, EXECD, PY, SCRIPT, Env, _pid_running
from tiers.t4 import liveconfig
from tiers.toolkit.waits import port_closed, wait_until


@pytest.fixture
def tmpdir_clean():
    """A temp dir removed afterwards (pytest's tmp_path would be kept around)."""
    d = tempfile.mkdtemp(prefix="osb-local-up-")
    try:
        yield d
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def world(tmpdir_clean):
    w = Env(tmpdir_clean)
    yield w
    w.cleanup()


def _started(argv, word):
    return [line for line in argv if line.split(" ", 1)[0] == word]


# ----------------------------------------------------------------------------------------------- tests


def test_up_is_idempotent_and_down_stops_only_what_up_started(world):
    world.set_lines("pullable", [EXECD, BASE])
    # a sandbox container that existed before `up`, and an unrelated container
    world.set_lines("containers", ["aaa111 sandbox-old", "bbb222 web"])

    r = world.run("up")
    assert r.returncode == 0, r.stderr + r.stdout
    argv = world.argv()
    assert _started(argv, "dockerd") == ["dockerd "]
    assert f"docker pull {EXECD}" in argv and f"docker pull {BASE}" in argv
    assert any(line.startswith("python3 -m venv ") for line in argv)
    assert any(line.startswith("venv-python -m pip install") and "opensandbox-server==1.1.1" in line for line in argv)
    assert len(_started(argv, "opensandbox-server")) == 1
    server_pid, dockerd_pid = world.pid("server.pid"), world.pid("dockerd.pid")
    assert server_pid and _pid_running(server_pid)
    assert dockerd_pid and _pid_running(dockerd_pid)
    assert "healthy" in r.stdout

    config = open(os.path.join(world.workdir, "server.toml")).read()
    assert 'host = "127.0.0.1"' in config and f"port = {world.port}" in config
    assert 'network_mode = "bridge"' in config and 'publish_host = "127.0.0.1"' in config
    assert 'type = "sqlite"' in config and f'path = "{world.workdir}/opensandbox.db"' in config
    assert f'execd_image = "{EXECD}"' in config
    key = open(os.path.join(world.workdir, "api-key")).read().strip()
    assert re.fullmatch(r"[0-9a-f]{32}", key)
    assert f'api_key = "{key}"' in config
    assert "[egress]" not in config
    assert f'[storage]\nallowed_host_paths = ["{world.workdir}/host-volumes"]' in config
    assert key not in r.stdout + r.stderr  # the key is only printed by `env`

    # the server "creates" a sandbox
    with open(os.path.join(world.state, "containers"), "a") as fh:
        fh.write("ccc333 sandbox-0d1e\n")

    # second up: nothing new is started, pulled or installed
    world.clear_argv()
    config_mtime = os.stat(os.path.join(world.workdir, "server.toml")).st_mtime_ns
    r2 = world.run("up")
    assert r2.returncode == 0, r2.stderr + r2.stdout
    argv2 = world.argv()
    for word in ("dockerd", "opensandbox-server", "python3", "venv-python", "apt-get", "sudo"):
        assert _started(argv2, word) == [], (word, argv2)
    assert not [line for line in argv2 if line.startswith(("docker pull", "docker rm"))]
    assert world.pid("server.pid") == server_pid and world.pid("dockerd.pid") == dockerd_pid
    assert os.stat(os.path.join(world.workdir, "server.toml")).st_mtime_ns == config_mtime
    assert "already running" in r2.stdout

    st = world.run("status")
    assert st.returncode == 0, st.stderr
    assert f"server: running (pid {server_pid})" in st.stdout
    assert f"dockerd: running (pid {dockerd_pid}, started by local-up)" in st.stdout
    assert "containers: 1 sandbox-* container(s) created since up" in st.stdout

    env = world.run("env")
    assert env.returncode == 0
    assert env.stdout.splitlines() == [
        f"export OPENSANDBOX_BASE_URL=http://127.0.0.1:{world.port}/v1",
        f"export OPENSANDBOX_API_KEY={key}",
        "export OPENSANDBOX_LIVE=1",
        f"export OPENSANDBOX_IMAGE={BASE}",
        f"export ABX_OPENSANDBOX_BASE_URL=http://127.0.0.1:{world.port}",
        f"export OPEN_SANDBOX_API_KEY={key}",
        f"export ABX_OPENSANDBOX_DEFAULT_IMAGE={BASE}",
        f"export OPENSANDBOX_ALLOWED_HOST_PATHS={world.workdir}/host-volumes",  # t4's host binds
        "export OSB_EGRESS_MODE=off",  # no egress image (OSB_WITH_EGRESS=0): the mock's --egress-mode for this stack
        "export OPENSANDBOX_RUNTIME=docker/99.0.0",  # the daemon's version, for the recorder's fixture headers
    ]

    world.clear_argv()
    d = world.run("down")
    assert d.returncode == 0, d.stderr + d.stdout
    assert [line for line in world.argv() if line.startswith("docker rm")] == ["docker rm -f ccc333"]
    assert world.lines("containers") == ["aaa111 sandbox-old", "bbb222 web"]
    # the stopped processes are reaped by init asynchronously
    wait_until(lambda: not (_pid_running(server_pid) or _pid_running(dockerd_pid)), 5.0, 0.1)
    assert not _pid_running(server_pid) and not _pid_running(dockerd_pid)
    assert world.pid("server.pid") is None and world.pid("dockerd.pid") is None
    assert not os.path.exists(os.path.join(world.state, "daemon_up"))

    st2 = world.run("status")
    assert st2.returncode == 3
    assert "server: not running" in st2.stdout and "dockerd: no daemon answers" in st2.stdout

    # a second down is harmless
    assert world.run("down").returncode == 0


def test_daemons_keep_none_of_the_callers_open_files(world, tmpdir_clean):
    """`flock LOCK ./local-up.sh up` (flock without -o): the lock's fd must not live on in the server and dockerd
    that `up` leaves running, or the lock stays held by them after the session ends."""
    world.set_lines("pullable", [EXECD, BASE])
    lock = os.path.join(tmpdir_clean, "live.lock")
    fd = os.open(lock, os.O_CREAT | os.O_RDWR)
    try:
        r = subprocess.run(
            ["bash", SCRIPT, "up"],
            env=world.env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            pass_fds=(fd,),
        )
    finally:
        os.close(fd)
    assert r.returncode == 0, r.stderr + r.stdout
    for name in ("server.pid", "dockerd.pid"):
        pid = world.pid(name)
        assert pid and _pid_running(pid), name
        held = {os.path.realpath(os.path.join("/proc/%d/fd" % pid, f)) for f in os.listdir("/proc/%d/fd" % pid)}
        assert lock not in held, (name, held)
    assert world.run("down").returncode == 0


def test_existing_daemon_and_images_are_used_and_left_alone(world):
    open(os.path.join(world.state, "daemon_up"), "w").close()
    world.set_lines("images", [EXECD, BASE])
    r = world.run("up", OSB_API_KEY="my-key.1")
    assert r.returncode == 0, r.stderr
    argv = world.argv()
    assert _started(argv, "dockerd") == []
    assert not [line for line in argv if line.startswith("docker pull")]
    assert world.pid("dockerd.pid") is None
    assert 'api_key = "my-key.1"' in open(os.path.join(world.workdir, "server.toml")).read()
    assert not os.path.exists(os.path.join(world.workdir, "api-key"))
    server_pid = world.pid("server.pid")

    d = world.run("down")
    assert d.returncode == 0, d.stderr
    assert os.path.exists(os.path.join(world.state, "daemon_up"))  # not ours: still running
    wait_until(lambda: not _pid_running(server_pid), 5.0, 0.1)
    assert not _pid_running(server_pid)


def test_unpullable_image_names_the_image_and_the_knobs(world):
    world.set_lines("pullable", [BASE])  # the execd image is neither present nor pullable
    r = world.run("up")
    assert r.returncode == 1
    assert r.stderr == textwrap.dedent(f"""\
        local-up: step "images" failed
          command: docker pull {EXECD}
          cause:   image {EXECD} is not present locally and cannot be pulled: Error response from daemon: Get "https://registry-1.docker.io/v2/": dial tcp: lookup registry-1.docker.io: no such host
          fix:     no registry access? Build the execd and base images on this machine: OSB_LOCAL_IMAGES=1 ./local-up.sh up (debootstrap + busybox-static + OSB_EXECD_BIN); or load/tag the image locally (docker load -i FILE.tar; docker tag LOCAL {EXECD}), or point OSB_EXECD_IMAGE at an image that is already present (see docker image ls)
        """)
    assert world.pid("server.pid") is None
    assert world.run("down").returncode == 0  # stops the dockerd that `up` started before failing
    assert world.pid("dockerd.pid") is None


def test_unpullable_base_image_names_its_knob(world):
    world.set_lines("pullable", [EXECD])
    r = world.run("up", OSB_BASE_IMAGE="local/python:3-slim")
    assert r.returncode == 1
    assert "cannot pull" not in r.stdout
    assert "  command: docker pull local/python:3-slim\n" in r.stderr
    assert "point OSB_BASE_IMAGE at an image that is already present" in r.stderr
    world.run("down")


def test_egress_and_code_interpreter_images_are_opt_in(world):
    egress, ci = "opensandbox/egress:v1.1.7", "opensandbox/code-interpreter:v1.1.0"
    open(os.path.join(world.state, "daemon_up"), "w").close()
    world.set_lines("images", [EXECD, BASE])
    world.set_lines("pullable", [egress, ci])
    r = world.run("up", OSB_WITH_EGRESS="1", OSB_WITH_CODE_INTERPRETER="1")
    assert r.returncode == 0, r.stderr
    assert [line for line in world.argv() if line.startswith("docker pull")] == [
        f"docker pull {egress}",
        f"docker pull {ci}",
    ]
    config = open(os.path.join(world.workdir, "server.toml")).read()
    assert f'[egress]\nimage = "{egress}"\nmode = "dns"' in config
    world.run("down")


def test_missing_docker_is_installed_only_with_consent(tmpdir_clean):
    world = Env(tmpdir_clean, install_docker=False)
    try:
        world.set_lines("pullable", [EXECD, BASE])
        r = world.run("up")  # no terminal, no -y, no CI=true: refuse and say how
        assert r.returncode == 1
        assert 'local-up: step "docker-install" failed' in r.stderr
        assert (
            "  command: apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y docker.io iptables\n"
            in r.stderr
        )
        assert "  cause:   no terminal to ask for confirmation\n" in r.stderr
        assert "rerun with: ./local-up.sh up -y" in r.stderr
        assert _started(world.argv(), "apt-get") == []

        r = world.run("up", CI="true")
        assert r.returncode == 0, r.stderr
        assert "installing the OS packages docker.io and iptables" in r.stdout
        installs = [line.split("apt-get ", 1)[1] for line in world.argv() if "apt-get " in line]
        assert installs[0] == "update" and installs[-1] == "install -y docker.io iptables"
        assert world.pid("dockerd.pid")
        assert world.run("down").returncode == 0
    finally:
        world.cleanup()


def test_foreign_server_on_the_port_is_refused(world):
    open(os.path.join(world.state, "daemon_up"), "w").close()
    world.set_lines("images", [EXECD, BASE])
    config = os.path.join(world.tmp, "other.toml")
    with open(config, "w") as fh:
        fh.write(f"port = {world.port}\n")
    other = subprocess.Popen([PY, os.path.join(world.stubs, "opensandbox-server.py"), "--config", config])
    try:
        assert wait_until(lambda: not port_closed(world.port), 5.0)
        r = world.run("up")
        assert r.returncode == 1
        assert 'local-up: step "server" failed' in r.stderr
        assert f"something local-up did not start already answers on 127.0.0.1:{world.port}" in r.stderr
        assert "OSB_PORT=18080 ./local-up.sh up" in r.stderr
        assert world.pid("server.pid") is None
    finally:
        other.terminate()
        other.wait(timeout=10)


@pytest.mark.parametrize(
    "args, needle",
    [
        (("bogus",), "unknown argument: bogus"),
        ((), "usage: ./local-up.sh"),
        (("up", "down"), "usage: ./local-up.sh"),
    ],
)
def test_bad_arguments_exit_2_with_usage(world, args, needle):
    r = world.run(*args)
    assert r.returncode == 2 and needle in r.stderr
    assert world.argv() == []


def test_bad_knob_is_reported_before_anything_runs(world):
    r = world.run("up", OSB_PORT="80x")
    assert r.returncode == 1
    assert 'step "knobs" failed' in r.stderr and "command: OSB_PORT=80x" in r.stderr
    r = world.run("up", OSB_API_KEY='a"b')
    assert r.returncode == 1 and "OSB_API_KEY=<hidden>" in r.stderr and 'a"b' not in r.stderr
    assert world.argv() == []


def test_the_values_env_exports_are_valid_knobs(world):
    """`eval "$(./local-up.sh env)"` then `./local-up.sh down` (the live session's shape): env's
    OSB_EGRESS_MODE=off (no egress image) is accepted; with OSB_WITH_EGRESS=1 it is refused."""
    world.set_lines("pullable", [EXECD, BASE])
    assert world.run("up").returncode == 0
    exported = dict(
        line[len("export ") :].split("=", 1)
        for line in world.run("env").stdout.splitlines()
        if line.startswith("export ")
    )
    assert exported["OSB_EGRESS_MODE"] == "off"
    d = world.run("down", **exported)
    assert d.returncode == 0, d.stderr + d.stdout
    r = world.run("up", OSB_EGRESS_MODE="off", OSB_WITH_EGRESS="1")
    assert r.returncode == 1 and "command: OSB_EGRESS_MODE=off OSB_WITH_EGRESS=1" in r.stderr


def test_env_before_up_says_so(world):
    r = world.run("env")
    assert r.returncode == 1 and "run ./local-up.sh up first" in r.stderr and r.stdout == ""


def test_shellcheck_clean():
    shellcheck = shutil.which("shellcheck")
    if not shellcheck:
        pytest.skip("shellcheck is not installed (apt-get install -y shellcheck)")
    r = subprocess.run([shellcheck, SCRIPT], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr


def test_down_after_eval_env_of_a_stack_without_egress(world):
    # `env` exports OSB_EGRESS_MODE=off (the mock's --egress-mode for this stack); `down` with it must work
    open(os.path.join(world.state, "daemon_up"), "w").close()
    world.set_lines("images", [EXECD, BASE])
    assert world.run("up").returncode == 0
    env = dict(
        line[len("export ") :].split("=", 1)
        for line in world.run("env").stdout.splitlines()
        if line.startswith("export OSB_EGRESS_MODE=")
    )
    assert env == {"OSB_EGRESS_MODE": "off"}
    r = world.run("down", OSB_WITH_EGRESS="1", **env)
    assert r.returncode == 0, r.stderr
    assert world.pid("server.pid") is None
    r = world.run("up", OSB_EGRESS_MODE="nft")
    assert r.returncode == 1 and "set OSB_EGRESS_MODE to dns or dns+nft (or off: no egress image)" in r.stderr
    world.run("down")


# -- host binds (QUIRKS.md, Volumes): [storage] allowed_host_paths under one prefix -----------------------------


def test_host_binds_are_allowed_under_one_prefix_in_the_work_dir_by_default(world):
    open(os.path.join(world.state, "daemon_up"), "w").close()
    world.set_lines("images", [EXECD, BASE])
    r = world.run("up")
    assert r.returncode == 0, r.stderr
    prefix = os.path.join(world.workdir, "host-volumes")
    config = open(os.path.join(world.workdir, "server.toml")).read()
    assert f'[storage]\nallowed_host_paths = ["{prefix}"]\n' in config
    assert os.path.isdir(prefix)  # made by up, so the live tier can put files there
    assert f"export OPENSANDBOX_ALLOWED_HOST_PATHS={prefix}\n" in world.run("env").stdout
    # t4 reads the same prefixes from this config when the variable is not exported (tiers/t4/liveconfig.py)
    assert liveconfig.from_config(config, world.port) == [prefix]
    assert liveconfig.from_config(config, world.port + 1) is None  # another server's config
    world.run("down")


def test_host_binds_prefix_knob_and_none(world, tmp_path):
    open(os.path.join(world.state, "daemon_up"), "w").close()
    world.set_lines("images", [EXECD, BASE])
    prefix = str(tmp_path / "binds")
    r = world.run("up", OSB_ALLOWED_HOST_PATHS=prefix)
    assert r.returncode == 0, r.stderr
    assert f'allowed_host_paths = ["{prefix}"]' in open(os.path.join(world.workdir, "server.toml")).read()
    world.run("down", OSB_ALLOWED_HOST_PATHS=prefix)
    r = world.run("up", OSB_ALLOWED_HOST_PATHS="none")
    assert r.returncode == 0, r.stderr
    config = open(os.path.join(world.workdir, "server.toml")).read()
    assert "[storage]" not in config and "allowed_host_paths" not in config  # the server's default: []
    assert liveconfig.from_config(config, world.port) == []
    assert "OPENSANDBOX_ALLOWED_HOST_PATHS" not in world.run("env", OSB_ALLOWED_HOST_PATHS="none").stdout
    world.run("down", OSB_ALLOWED_HOST_PATHS="none")


@pytest.mark.parametrize("value", ["relative/dir", "/", '/a"b', "/a/../b", "/a//b", "/a/"])
def test_bad_host_binds_prefix_is_refused_before_anything_runs(world, value):
    r = world.run("up", OSB_ALLOWED_HOST_PATHS=value)
    assert r.returncode == 1 and 'step "knobs" failed' in r.stderr, r.stderr
    assert "OSB_ALLOWED_HOST_PATHS" in r.stderr
    assert world.argv() == []
