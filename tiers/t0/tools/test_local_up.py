"""local-up.sh against stubbed docker / dockerd / apt-get / sudo / python3 / pip / opensandbox-server / curl.

The stubs are small shell scripts placed first on PATH. They log their argv to ``argv.log`` and keep their state in
files (``daemon_up``, ``images``, ``pullable``, ``containers``). The stub server is a tiny ``http.server`` answering
``/health`` on the port written in the generated config. No real network, no real Docker.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import textwrap

import pytest

from mock_opensandbox.wire.relay import free_port
from tiers.t4 import liveconfig
from tiers.toolkit.waits import port_closed, wait_until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
SCRIPT = os.path.join(REPO, "local-up.sh")
PY = sys.executable

SYSTEM_TOOLS = (
    "bash",
    "sh",
    "cat",
    "cp",
    "dirname",
    "env",
    "grep",
    "id",
    "mkdir",
    "mv",
    "nohup",
    "od",
    "ps",
    "rm",
    "seq",
    "sleep",
    "tail",
    "tr",
    "cmp",
    # building images (OSB_LOCAL_IMAGES=1)
    "awk",
    "sed",
    "tar",
    "tee",
    "sha256sum",
    "cut",
    "date",
    "ln",
    "touch",
    "wc",
)
OPTIONAL_TOOLS = ("kill", "chmod")  # reached through `sudo` when the tests run as a non-root user

EXECD = "opensandbox/execd:latest"
BASE = "python:3.12-slim"

# ----------------------------------------------------------------------------------------------- stub sources

DOCKER = r"""#!/bin/sh
S="$OSB_STUB_STATE"
printf 'docker %s\n' "$*" >>"$S/argv.log"
case "$1" in
  info)
    if [ -e "$S/daemon_up" ]; then echo 99.0.0; exit 0; fi
    echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?" >&2
    exit 1 ;;
  image)
    [ -e "$S/daemon_up" ] || exit 1
    img="$3"; [ "$3" = "--format" ] && img="$5"
    if grep -qxF "$img" "$S/images" 2>/dev/null; then
      if [ "$3" = "--format" ]; then grep "^$img	" "$S/labels" 2>/dev/null | cut -f2; else echo '[{}]'; fi
      exit 0
    fi
    echo "Error response from daemon: No such image: $img" >&2; exit 1 ;;
  import)
    [ -e "$S/daemon_up" ] || exit 1
    label=""; img=""
    shift
    while [ $# -gt 0 ]; do
      case "$1" in
        --message) label="$2"; shift 2 ;;
        --change) case "$2" in LABEL*) echo "stub: a LABEL would leak into every sandbox's metadata" >&2; exit 1 ;; esac; shift 2 ;;
        -) shift ;;
        *) img="$1"; shift ;;
      esac
    done
    n="$(wc -c)"
    [ "$n" -gt 0 ] || { echo "stub: empty tar on stdin" >&2; exit 1; }
    echo "$img" >>"$S/images"
    printf '%s\t%s\n' "$img" "$label" >>"$S/labels"
    echo "sha256:0123"; exit 0 ;;
  rmi)
    grep -vxF "$2" "$S/images" >"$S/images.tmp" || true
    mv "$S/images.tmp" "$S/images"; exit 0 ;;
  pull)
    if grep -qxF "$2" "$S/pullable" 2>/dev/null; then echo "$2" >>"$S/images"; echo "Status: Downloaded newer image for $2"; exit 0; fi
    echo "Error response from daemon: Get \"https://registry-1.docker.io/v2/\": dial tcp: lookup registry-1.docker.io: no such host" >&2
    exit 1 ;;
  ps)
    [ -e "$S/daemon_up" ] || exit 1
    cat "$S/containers" 2>/dev/null; exit 0 ;;
  rm)
    shift; [ "$1" = "-f" ] && shift
    for id in "$@"; do
      grep -v "^$id " "$S/containers" >"$S/containers.tmp" || true
      mv "$S/containers.tmp" "$S/containers"
    done
    exit 0 ;;
esac
echo "docker stub: unsupported: $*" >&2
exit 99
"""

DOCKERD = r"""#!/bin/sh
printf 'dockerd %s\n' "$*" >>"$OSB_STUB_STATE/argv.log"
exec "@PY@" "@STUBS@/dockerd_impl.py"
"""

DOCKERD_IMPL = r"""
import os, signal, sys, time
state = os.environ["OSB_STUB_STATE"]
flag = os.path.join(state, "daemon_up")
def stop(*_):
    try:
        os.unlink(flag)
    except FileNotFoundError:
        pass
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGINT, stop)
time.sleep(0.1)  # a daemon takes a moment before it answers
open(flag, "w").close()
while True:
    signal.pause()
"""

PYTHON3 = r"""#!/bin/sh
printf 'python3 %s\n' "$*" >>"$OSB_STUB_STATE/argv.log"
case "$1" in
  -c) exit 0 ;;
  -m) if [ "$2" = venv ]; then mkdir -p "$3/bin" && cp "@STUBS@/venv-python" "$3/bin/python" && exit 0; fi ;;
esac
echo "python3 stub: unsupported: $*" >&2
exit 99
"""

VENV_PYTHON = r"""#!/bin/sh
printf 'venv-python %s\n' "$*" >>"$OSB_STUB_STATE/argv.log"
if [ "$1 $2 $3" = "-m pip install" ]; then
  cp "@STUBS@/opensandbox-server" "$(dirname "$0")/opensandbox-server"
  exit 0
fi
echo "venv python stub: unsupported: $*" >&2
exit 99
"""

SERVER = r"""#!/bin/sh
printf 'opensandbox-server %s\n' "$*" >>"$OSB_STUB_STATE/argv.log"
exec "@PY@" "@STUBS@/opensandbox-server.py" "$@"
"""

SERVER_IMPL = r"""
import http.server, re, signal, sys, threading
config = sys.argv[sys.argv.index("--config") + 1]
port = int(re.search(r"^port = (\d+)$", open(config).read(), re.M).group(1))
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b'{"status":"healthy"}' if self.path == "/health" else b'{"detail":"Not Found"}'
        self.send_response(200 if self.path == "/health" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
srv = http.server.HTTPServer(("127.0.0.1", port), H)
signal.signal(signal.SIGTERM, lambda *a: threading.Thread(target=srv.shutdown).start())
srv.serve_forever()
srv.server_close()
"""

CURL = r"""#!/bin/sh
printf 'curl %s\n' "$*" >>"$OSB_STUB_STATE/argv.log"
exec "@PY@" "@STUBS@/curl_impl.py" "$@"
"""

CURL_IMPL = r"""
import sys, urllib.request, urllib.error
url = [a for a in sys.argv[1:] if a.startswith("http://")][0]
assert url.startswith("http://127.0.0.1:"), url  # the script only ever talks to loopback
try:
    with urllib.request.urlopen(url, timeout=2) as r:
        sys.stdout.write(r.read().decode())
except urllib.error.HTTPError:
    sys.exit(22)
except OSError:
    sys.exit(7)
"""

APT_GET = r"""#!/bin/sh
printf 'apt-get %s\n' "$*" >>"$OSB_STUB_STATE/argv.log"
case "$*" in
  *"install -y docker.io iptables"*) cp "@STUBS@/pkg/docker" "@STUBS@/pkg/dockerd" "@STUBS@/" ;;
esac
exit 0
"""

DEBOOTSTRAP = r"""#!/bin/sh
printf 'debootstrap %s\n' "$*" >>"$OSB_STUB_STATE/argv.log"
echo "I: Retrieving InRelease"
echo "I: Retrieving bash 5.2"
echo "I: Validating bash 5.2"
echo "I: Retrieving python3 3.11"
echo "I: Validating python3 3.11"
while [ $# -gt 3 ]; do case "$1" in --include=*) inc="${1#--include=}" ;; esac; shift; done
if [ -e "$OSB_STUB_STATE/debootstrap_fails" ]; then echo "E: Failed getting release file $3/dists/$1/InRelease"; exit 1; fi
dir="$2"
mkdir -p "$dir/usr/bin" "$dir/bin" "$dir/usr/sbin" "$dir/var/cache/apt/archives"
case ",$inc," in *,python3,*) printf '#!/bin/sh\n' >"$dir/usr/bin/python3"; printf '#!/bin/sh\n' >"$dir/bin/bash";
  chmod 755 "$dir/usr/bin/python3" "$dir/bin/bash" ;; esac
case ",$inc," in *,nftables,*) printf '#!/bin/sh\n' >"$dir/usr/sbin/nft"; printf '#!/bin/sh\n' >"$dir/usr/sbin/ip";
  chmod 755 "$dir/usr/sbin/nft" "$dir/usr/sbin/ip" ;; esac
echo "I: Base system installed successfully."
"""

BUSYBOX = r"""#!/bin/sh
printf 'busybox %s\n' "$*" >>"$OSB_STUB_STATE/argv.log"
[ "$1" = "--list-full" ] && printf 'bin/busybox\nbin/sh\nbin/ls\nusr/bin/env\nsbin/ifconfig\n'
exit 0
"""

SUDO = r"""#!/bin/sh
printf 'sudo %s\n' "$*" >>"$OSB_STUB_STATE/argv.log"
[ "$1" = "-n" ] && shift
exec "$@"
"""


def _write(path: str, text: str, stubs: str) -> None:
    with open(path, "w") as fh:
        fh.write(text.replace("@PY@", PY).replace("@STUBS@", stubs))
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def _pid_running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class Env:
    """A stub world: PATH, state files, workdir, and helpers to run local-up.sh in it."""

    def __init__(self, tmp: str, *, install_docker: bool = True):
        self.tmp = tmp
        self.stubs = os.path.join(tmp, "stubs")
        self.state = os.path.join(tmp, "state")
        self.workdir = os.path.join(tmp, "work")
        os.makedirs(os.path.join(self.stubs, "pkg"))
        os.makedirs(self.state)
        self.port = free_port()
        for name, text in {
            "dockerd_impl.py": DOCKERD_IMPL,
            "python3": PYTHON3,
            "venv-python": VENV_PYTHON,
            "opensandbox-server": SERVER,
            "opensandbox-server.py": SERVER_IMPL,
            "curl": CURL,
            "curl_impl.py": CURL_IMPL,
            "apt-get": APT_GET,
            "sudo": SUDO,
            "pkg/docker": DOCKER,
            "pkg/dockerd": DOCKERD,
            "debootstrap": DEBOOTSTRAP,
            "busybox-static": BUSYBOX,
        }.items():
            _write(os.path.join(self.stubs, name), text, self.stubs)
        if install_docker:
            for name in ("docker", "dockerd"):
                shutil.copy(os.path.join(self.stubs, "pkg", name), os.path.join(self.stubs, name))
        # Only the plain tools the script and the stubs use; never the machine's own docker, curl, sudo or apt-get.
        self.sysbin = os.path.join(tmp, "sysbin")
        os.makedirs(self.sysbin)
        for tool in SYSTEM_TOOLS + OPTIONAL_TOOLS:
            found = shutil.which(tool)
            if found:
                os.symlink(found, os.path.join(self.sysbin, tool))
            else:
                assert tool in OPTIONAL_TOOLS, f"{tool} is needed by local-up.sh"
        self.env = {
            "PATH": f"{self.stubs}:{self.sysbin}",
            "HOME": tmp,
            "LANG": "C",
            "OSB_STUB_STATE": self.state,
            "OSB_WORKDIR": self.workdir,
            "OSB_PORT": str(self.port),
            "OSB_DOCKERD_TIMEOUT": "10",
            "OSB_HEALTH_TIMEOUT": "15",
        }

    # state helpers
    def set_lines(self, name: str, lines) -> None:
        with open(os.path.join(self.state, name), "w") as fh:
            fh.write("".join(line + "\n" for line in lines))

    def lines(self, name: str):
        try:
            with open(os.path.join(self.state, name)) as fh:
                return fh.read().splitlines()
        except FileNotFoundError:
            return []

    def argv(self):
        return self.lines("argv.log")

    def clear_argv(self) -> None:
        open(os.path.join(self.state, "argv.log"), "w").close()

    def pid(self, name: str):
        try:
            with open(os.path.join(self.workdir, name)) as fh:
                return int(fh.read().strip())
        except FileNotFoundError:
            return None

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["bash", SCRIPT, *args],
            env={**self.env, **env},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )

    def cleanup(self) -> None:
        """Safety net: stop anything a failed test left running (by pid file only)."""
        for name in ("server.pid", "dockerd.pid"):
            pid = self.pid(name)
            if pid and _pid_running(pid):
                os.kill(pid, signal.SIGKILL)


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


def test_local_images_knob_must_be_0_or_1(world):
    r = world.run("up", OSB_LOCAL_IMAGES="yes")
    assert r.returncode == 1 and "set OSB_LOCAL_IMAGES=1" in r.stderr and world.argv() == []


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
