"""Stubs for local-up.sh: docker / dockerd / apt-get / sudo / python3 / pip / opensandbox-server / curl, and ``Env``,
a stub world to run the script in (tiers/t0/tools/test_local_up.py and test_local_up_images.py).

The stubs are small shell scripts placed first on PATH. They log their argv to ``argv.log`` and keep their state in
files (``daemon_up``, ``images``, ``pullable``, ``containers``). The stub server is a tiny ``http.server`` answering
``/health`` on the port written in the generated config. No real network, no real Docker.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys

from mock_opensandbox.wire.relay import free_port

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
