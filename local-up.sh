#!/usr/bin/env bash
# local-up.sh — run a real OpenSandbox server (Docker runtime) on this machine, for tiers t4 and the nightly job.
#
#   ./local-up.sh up [-y]   install/start what is missing, then wait for /health
#   ./local-up.sh status    what is running (exit 0 when the server answers, 3 otherwise)
#   ./local-up.sh env       export lines for the live tier and the plugin:  eval "$(./local-up.sh env)"
#   ./local-up.sh down      stop only what `up` started, remove the sandbox-* containers created since
#   ./local-up.sh clean     remove the images `up` built (OSB_LOCAL_IMAGES=1), then down
#
# No registry: OSB_LOCAL_IMAGES=1 ./local-up.sh up builds the base, busybox and execd images on this machine.
#
# Knobs (environment): see `./local-up.sh help` and docs/LOCAL_UP.md.
# Every external command (docker, dockerd, apt-get, sudo, curl, python3) is looked up on PATH, so tests can put stubs
# first; OSB_PYTHON chooses the interpreter that creates the venv.
set -euo pipefail

PROG="local-up"

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

OSB_PORT="${OSB_PORT:-8080}"
OSB_WORKDIR="${OSB_WORKDIR:-${XDG_CACHE_HOME:-$HOME/.cache}/opensandbox-provider/local-up}"
OSB_SERVER_VERSION="${OSB_SERVER_VERSION:-1.1.1}"
OSB_LOCAL_IMAGES="${OSB_LOCAL_IMAGES:-0}"
if [ "$OSB_LOCAL_IMAGES" = 1 ]; then
    # Built on this machine (no registry): the names say so.
    OSB_EXECD_IMAGE="${OSB_EXECD_IMAGE:-local/execd:from-binary}"
    OSB_BASE_IMAGE="${OSB_BASE_IMAGE:-local/python:3-slim}"
else
    OSB_EXECD_IMAGE="${OSB_EXECD_IMAGE:-opensandbox/execd:latest}"
    OSB_BASE_IMAGE="${OSB_BASE_IMAGE:-python:3.12-slim}"
fi
OSB_BUSYBOX_IMAGE="${OSB_BUSYBOX_IMAGE:-local/busybox:latest}"
OSB_EXECD_BIN="${OSB_EXECD_BIN:-$SCRIPT_DIR/../shared/opensandbox/execd}"
OSB_BOOTSTRAP="${OSB_BOOTSTRAP:-}"
OSB_BUSYBOX_BIN="${OSB_BUSYBOX_BIN:-/bin/busybox}"
OSB_DEBIAN_SUITE="${OSB_DEBIAN_SUITE:-}"
OSB_DEBIAN_MIRROR="${OSB_DEBIAN_MIRROR:-}"
OSB_APT_SOURCES="${OSB_APT_SOURCES:-/etc/apt}"
OSB_WITH_EGRESS="${OSB_WITH_EGRESS:-0}"
ACTION=""  # the command (main): up, down, ...
OSB_EGRESS_IMAGE="${OSB_EGRESS_IMAGE:-}"  # default: see the egress block below
OSB_EGRESS_MODE="${OSB_EGRESS_MODE:-dns}"
OSB_EGRESS_BIN="${OSB_EGRESS_BIN:-$SCRIPT_DIR/../shared/opensandbox/egress}"
OSB_WITH_CODE_INTERPRETER="${OSB_WITH_CODE_INTERPRETER:-0}"
OSB_WITH_TSLAB="${OSB_WITH_TSLAB:-auto}"  # the TypeScript kernel in the local code-interpreter image: auto | 1 | 0
OSB_CODE_INTERPRETER_IMAGE="${OSB_CODE_INTERPRETER_IMAGE:-}"  # default: see the code-interpreter block below
OSB_PYTHON="${OSB_PYTHON:-python3}"
OSB_DOCKERD_ARGS="${OSB_DOCKERD_ARGS:-}"
OSB_DOCKERD_TIMEOUT="${OSB_DOCKERD_TIMEOUT:-30}"
OSB_HEALTH_TIMEOUT="${OSB_HEALTH_TIMEOUT:-60}"
# Host binds (volumes[].host) are allowed under this one prefix ([storage] allowed_host_paths); "none" refuses them.
OSB_ALLOWED_HOST_PATHS="${OSB_ALLOWED_HOST_PATHS:-$OSB_WORKDIR/host-volumes}"

VENV="$OSB_WORKDIR/venv"
CONFIG="$OSB_WORKDIR/server.toml"
SERVER_PID="$OSB_WORKDIR/server.pid"
SERVER_LOG="$OSB_WORKDIR/server.log"
DOCKERD_PID="$OSB_WORKDIR/dockerd.pid"
DOCKERD_LOG="$OSB_WORKDIR/dockerd.log"
BEFORE="$OSB_WORKDIR/containers.before"
ENV_FILE="$OSB_WORKDIR/env.sh"
KEY_FILE="$OSB_WORKDIR/api-key"
STAMP="$VENV/.local-up-server-version"
BUILD_DIR="$OSB_WORKDIR/build"
BUILT="$OSB_WORKDIR/images.built"
LABEL="org.opensandbox-provider.local-up"

ASSUME_YES=0
if [ "${CI:-}" = "true" ]; then ASSUME_YES=1; fi

say() { printf '%s: %s\n' "$PROG" "$*"; }

# die STEP COMMAND FIX [CAUSE] — every failure names the step, the command and the fix.
die() {
    {
        printf '%s: step "%s" failed\n' "$PROG" "$1"
        printf '  command: %s\n' "$2"
        if [ -n "${4:-}" ]; then printf '  cause:   %s\n' "$4"; fi
        printf '  fix:     %s\n' "$3"
    } >&2
    exit 1
}

usage() {
    cat <<'EOF'
usage: ./local-up.sh up [-y] | down | status | env | clean | help

  up      install Docker (apt, asks first unless -y or CI=true) if missing, start dockerd if no daemon
          answers, create a venv with opensandbox-server, pull images that are not present, write the
          server config, start the server and wait for /health. A second `up` changes nothing.
  down    stop the server and dockerd if (and only if) `up` started them; remove the sandbox-*
          containers that appeared since `up` started the server. Keeps the venv, images and config.
  status  say what is running; exit 0 when the server answers /health, 3 otherwise.
  env     print export lines (OPENSANDBOX_BASE_URL, OPENSANDBOX_API_KEY, OPENSANDBOX_LIVE=1, OPENSANDBOX_IMAGE, ...).
  clean   remove the images `up` built (OSB_LOCAL_IMAGES=1) and its build dir, then `down`.

No image registry? OSB_LOCAL_IMAGES=1 ./local-up.sh up builds the images on this machine instead of pulling:
  the base image with debootstrap from this machine's Debian mirror, a busybox image from busybox-static, and the
  execd image from OSB_EXECD_BIN (+ bootstrap.sh beside it, or OSB_BOOTSTRAP). Each is built once and reused.

knobs: OSB_PORT (8080)  OSB_WORKDIR (~/.cache/opensandbox-provider/local-up)  OSB_API_KEY (generated,
       kept in $OSB_WORKDIR/api-key)  OSB_SERVER_VERSION (1.1.1)  OSB_EXECD_IMAGE (opensandbox/execd:latest)
       OSB_BASE_IMAGE (python:3.12-slim)  OSB_WITH_EGRESS (0)  OSB_EGRESS_MODE (dns; or dns+nft; off = no egress image)
       OSB_EGRESS_IMAGE (local/egress:src3bb6fad with OSB_LOCAL_IMAGES=1, else opensandbox/egress:v1.1.7)
       OSB_EGRESS_BIN (../shared/opensandbox/egress: egress, opensandbox-supervisor, cleanup.sh)
       OSB_WITH_CODE_INTERPRETER (0)  OSB_CODE_INTERPRETER_IMAGE (local/code-interpreter:py-bash with
       OSB_LOCAL_IMAGES=1, else opensandbox/code-interpreter:v1.1.0)  OSB_WITH_TSLAB (auto: the local
       code-interpreter image gets tslab, the TypeScript kernel, when node and npm are on PATH; 1; 0)
       OSB_PYTHON (python3)  OSB_DOCKERD_ARGS ()  OSB_DOCKERD_TIMEOUT (30)  OSB_HEALTH_TIMEOUT (60)
       OSB_LOCAL_IMAGES (0; 1 = build, defaults become OSB_EXECD_IMAGE=local/execd:from-binary
       OSB_BASE_IMAGE=local/python:3-slim)  OSB_BUSYBOX_IMAGE (local/busybox:latest)
       OSB_EXECD_BIN (../shared/opensandbox/execd)  OSB_BOOTSTRAP (bootstrap.sh beside OSB_EXECD_BIN)
       OSB_BUSYBOX_BIN (/bin/busybox)  OSB_DEBIAN_SUITE (this machine's)  OSB_DEBIAN_MIRROR (this machine's apt mirror)
       OSB_ALLOWED_HOST_PATHS ($OSB_WORKDIR/host-volumes: the one prefix host binds may use; none = no host binds)
EOF
}

# ---------------------------------------------------------------- helpers

sudo_cmd() {
    # Run a privileged command: directly as root, through sudo otherwise.
    if [ "$(id -u)" = "0" ]; then "$@"; else sudo "$@"; fi
}

pid_alive() {
    # pid_alive PIDFILE WORD — the pid in PIDFILE is running and its command line mentions WORD
    # (guards against a recycled pid after a reboot).
    local pid args
    [ -s "$1" ] || return 1
    pid="$(cat "$1")"
    case "$pid" in '' | *[!0-9]*) return 1 ;; esac
    if [ -r "/proc/$pid/cmdline" ]; then
        args="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
    else
        args="$(ps -p "$pid" -o args= 2>/dev/null || true)"
    fi
    [ -n "$args" ] || return 1
    case "$args" in *"$2"*) return 0 ;; *) return 1 ;; esac
}

started_alive() {
    # started_alive PIDFILE — the process we just started is still there (not yet reaped, not a zombie). Unlike
    # pid_alive it does not look at the command line: right after `nohup CMD &` the child may not have exec'd yet.
    local pid st
    pid="$(cat "$1" 2>/dev/null || true)"
    case "$pid" in '' | *[!0-9]*) return 1 ;; esac
    if [ -r "/proc/$pid/stat" ]; then
        st="$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)"
        [ -n "$st" ] && [ "$st" != Z ]
    else
        st="$(ps -p "$pid" -o stat= 2>/dev/null || true)"
        [ -n "$st" ] && case "$st" in Z*) false ;; *) true ;; esac
    fi
}

stop_pidfile() {
    # stop_pidfile PIDFILE WORD NAME [sudo] — TERM, wait up to 10 s, then KILL.
    local pid i kill_cmd=(kill)
    if [ "${4:-}" = "sudo" ] && [ "$(id -u)" != "0" ]; then kill_cmd=(sudo kill); fi
    if ! pid_alive "$1" "$2"; then
        if [ -e "$1" ]; then say "$3: pid file $1 is stale; removing it"; rm -f "$1"; fi
        return 0
    fi
    pid="$(cat "$1")"
    say "$3: stopping pid $pid"
    "${kill_cmd[@]}" -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do
        pid_alive "$1" "$2" || break
        sleep 0.2
        if [ "$i" = 50 ]; then
            say "$3: pid $pid ignored SIGTERM for 10 s; sending SIGKILL"
            "${kill_cmd[@]}" -KILL "$pid" 2>/dev/null || true
        fi
    done
    rm -f "$1"
}

# exec "$@" holding none of this shell's files but stdin, stdout and stderr: a daemon that `up` leaves running must
# not keep the caller's open files (a flock(1) lock taken without -o, a pipe) after `up` returns
without_open_fds() {
    local fd
    for fd in /proc/self/fd/*; do
        fd=${fd##*/}
        if [ "$fd" -gt 2 ] 2>/dev/null; then eval "exec $fd>&-" 2>/dev/null || true; fi
    done
    exec "$@"
}

docker_answers() { docker info --format '{{.ServerVersion}}' >/dev/null 2>&1; }

health_ok() { curl -fsS --max-time 2 "http://127.0.0.1:$OSB_PORT/health" >/dev/null 2>&1; }

api_key() {
    if [ -n "${OSB_API_KEY:-}" ]; then
        printf '%s' "$OSB_API_KEY"
    elif [ -s "$KEY_FILE" ]; then
        cat "$KEY_FILE"
    else
        return 1
    fi
}

check_knobs() {
    case "$OSB_PORT" in '' | *[!0-9]*) die knobs "OSB_PORT=$OSB_PORT" "set OSB_PORT to a TCP port number (1-65535)" ;; esac
    if [ "$OSB_PORT" -lt 1 ] || [ "$OSB_PORT" -gt 65535 ]; then
        die knobs "OSB_PORT=$OSB_PORT" "set OSB_PORT to a TCP port number (1-65535)"
    fi
    case "$OSB_WORKDIR" in
        /*) ;;
        *) die knobs "OSB_WORKDIR=$OSB_WORKDIR" "set OSB_WORKDIR to an absolute path" ;;
    esac
    case "$OSB_WORKDIR" in
        *'"'* | *\\*) die knobs "OSB_WORKDIR=$OSB_WORKDIR" "choose an OSB_WORKDIR without quotes or backslashes (it goes into the TOML config)" ;;
    esac
    if [ -n "${OSB_API_KEY:-}" ]; then
        case "$OSB_API_KEY" in
            *[!A-Za-z0-9._~+/=-]*) die knobs "OSB_API_KEY=<hidden>" "use only letters, digits and . _ ~ + / = - in OSB_API_KEY" ;;
        esac
    fi
    case "$OSB_LOCAL_IMAGES" in
        0 | 1) ;;
        *) die knobs "OSB_LOCAL_IMAGES=$OSB_LOCAL_IMAGES" "set OSB_LOCAL_IMAGES=1 (build images on this machine) or 0 (pull them)" ;;
    esac
    if [ "$OSB_ALLOWED_HOST_PATHS" != none ]; then
        case "$OSB_ALLOWED_HOST_PATHS" in
            /) die knobs "OSB_ALLOWED_HOST_PATHS=/" "choose a directory, not / (every host path would be bindable)" ;;
            /*) ;;
            *) die knobs "OSB_ALLOWED_HOST_PATHS=$OSB_ALLOWED_HOST_PATHS" "set OSB_ALLOWED_HOST_PATHS to one absolute path (or none)" ;;
        esac
        case "$OSB_ALLOWED_HOST_PATHS" in
            *'"'* | *\\* | *//* | */ | */../* | */.. | *[[:cntrl:]]*)
                die knobs "OSB_ALLOWED_HOST_PATHS=$OSB_ALLOWED_HOST_PATHS" "use one normalized absolute path without quotes, backslashes, '..' or a trailing slash" ;;
        esac
    fi
    egress_defaults
    code_interpreter_defaults
    local img
    for img in "$OSB_EXECD_IMAGE" "$OSB_BASE_IMAGE" "$OSB_BUSYBOX_IMAGE" "$OSB_EGRESS_IMAGE" "$OSB_CODE_INTERPRETER_IMAGE"; do
        case "$img" in
            '' | *[!A-Za-z0-9._:/@-]*) die knobs "image '$img'" "image references may contain only letters, digits and . _ : / @ -" ;;
        esac
    done
}

# ---------------------------------------------------------------- up: steps

confirm_install() {
    # confirm_install STEP CMD WHAT — go on when -y / CI=true or the user says yes at a terminal;
    # otherwise fail STEP, naming CMD and how to install WHAT instead.
    local step="$1" cmd="$2" what="$3"
    [ "$ASSUME_YES" = 1 ] && return 0
    if [ -t 0 ]; then
        local answer=""
        printf '%s: install now? [y/N] ' "$PROG"
        read -r answer || true
        case "$answer" in
            y | Y | yes | YES) ;;
            *) die "$step" "$cmd" "install $what yourself, or rerun with: ./local-up.sh up -y" "declined at the prompt" ;;
        esac
    else
        die "$step" "$cmd" "rerun with: ./local-up.sh up -y (or CI=true), or install $what yourself" \
            "no terminal to ask for confirmation"
    fi
}

step_docker_engine() {
    if command -v docker >/dev/null 2>&1 && docker_answers; then
        return 0 # a daemon answers (local, rootless, or DOCKER_HOST): nothing to install
    fi
    if command -v docker >/dev/null 2>&1 && command -v dockerd >/dev/null 2>&1; then
        return 0
    fi
    local cmd="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y docker.io iptables"
    if ! command -v apt-get >/dev/null 2>&1; then
        die docker-install "command -v apt-get" \
            "install Docker Engine for your OS (https://docs.docker.com/engine/install/), then rerun ./local-up.sh up" \
            "Docker Engine (docker, dockerd) is missing and this system has no apt-get"
    fi
    say "docker: Docker Engine (docker, dockerd) is missing; installing the OS packages docker.io and iptables:"
    say "docker:   $cmd$([ "$(id -u)" = "0" ] || printf ' (through sudo)')"
    confirm_install docker-install "$cmd" Docker
    sudo_cmd apt-get update ||
        die docker-install "apt-get update" "check the apt sources and network access, then rerun"
    sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y docker.io iptables ||
        die docker-install "apt-get install -y docker.io iptables" "read apt's message above; install Docker Engine yourself if the package is unavailable"
    command -v dockerd >/dev/null 2>&1 ||
        die docker-install "command -v dockerd" "the docker.io package did not provide dockerd on PATH; install Docker Engine yourself"
}

step_docker_daemon() {
    if docker_answers; then
        if pid_alive "$DOCKERD_PID" dockerd; then
            say "docker: daemon answers (started by local-up, pid $(cat "$DOCKERD_PID"))"
        else
            say "docker: daemon answers"
        fi
        return 0
    fi
    if [ "$(id -u)" != "0" ] && sudo -n docker info >/dev/null 2>&1; then
        die docker-daemon "docker info" \
            "give your user access to the socket: sudo usermod -aG docker \"\$USER\" && newgrp docker (or sudo chmod 666 /var/run/docker.sock)" \
            "a Docker daemon runs but your user may not use /var/run/docker.sock"
    fi
    local extra=()
    if [ -n "$OSB_DOCKERD_ARGS" ]; then read -r -a extra <<<"$OSB_DOCKERD_ARGS"; fi
    say "docker: no daemon answers; starting dockerd${extra[*]:+ ${extra[*]}} (log: $DOCKERD_LOG)"
    if [ "$(id -u)" = "0" ]; then
        (without_open_fds nohup dockerd "${extra[@]}") </dev/null >"$DOCKERD_LOG" 2>&1 &
    else
        (without_open_fds nohup sudo -n dockerd "${extra[@]}") </dev/null >"$DOCKERD_LOG" 2>&1 &
    fi
    echo "$!" >"$DOCKERD_PID"
    local waited=0
    while ! docker_answers; do
        if ! started_alive "$DOCKERD_PID"; then
            rm -f "$DOCKERD_PID"
            die docker-daemon "dockerd${extra[*]:+ ${extra[*]}}" \
                "read $DOCKERD_LOG; on an overlayfs root give dockerd a real data root, e.g. OSB_DOCKERD_ARGS='--data-root /mnt/dockerdata'; without passwordless sudo start dockerd yourself" \
                "dockerd exited: $(tail -n 1 "$DOCKERD_LOG" 2>/dev/null || true)"
        fi
        if [ "$waited" -ge $((OSB_DOCKERD_TIMEOUT * 5)) ]; then
            die docker-daemon "docker info" "read $DOCKERD_LOG; raise OSB_DOCKERD_TIMEOUT if the daemon is just slow" \
                "dockerd did not answer within ${OSB_DOCKERD_TIMEOUT} s"
        fi
        sleep 0.2
        waited=$((waited + 1))
    done
    if [ "$(id -u)" != "0" ] && [ -S /var/run/docker.sock ] && [ ! -w /var/run/docker.sock ]; then
        say "docker: making /var/run/docker.sock usable by $(id -un) (sudo chmod 666; the daemon is local-up's own)"
        sudo chmod 666 /var/run/docker.sock ||
            say "docker: could not chmod the socket; if docker commands fail, run: sudo chmod 666 /var/run/docker.sock"
    fi
    say "docker: daemon answers (pid $(cat "$DOCKERD_PID"))"
}

step_venv() {
    if [ -x "$VENV/bin/opensandbox-server" ] && [ "$(cat "$STAMP" 2>/dev/null || true)" = "$OSB_SERVER_VERSION" ]; then
        say "server: opensandbox-server $OSB_SERVER_VERSION already installed in $VENV"
        return 0
    fi
    command -v "$OSB_PYTHON" >/dev/null 2>&1 ||
        die venv "$OSB_PYTHON" "install Python >= 3.10, or point OSB_PYTHON at one" "$OSB_PYTHON not found"
    "$OSB_PYTHON" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 10) else 1)' ||
        die venv "$OSB_PYTHON -c 'import sys; ...'" "opensandbox-server needs Python >= 3.10: set OSB_PYTHON=python3.12 (or another >= 3.10)" \
            "$OSB_PYTHON is older than 3.10"
    if [ ! -x "$VENV/bin/python" ]; then
        say "server: creating venv $VENV"
        "$OSB_PYTHON" -m venv "$VENV" ||
            die venv "$OSB_PYTHON -m venv $VENV" "install the venv module (Debian/Ubuntu: apt-get install python3-venv) or set OSB_PYTHON"
    fi
    say "server: installing opensandbox-server==$OSB_SERVER_VERSION into $VENV"
    "$VENV/bin/python" -m pip install --disable-pip-version-check -q "opensandbox-server==$OSB_SERVER_VERSION" ||
        die venv "$VENV/bin/python -m pip install opensandbox-server==$OSB_SERVER_VERSION" \
            "check access to PyPI (or set PIP_INDEX_URL) and that OSB_SERVER_VERSION=$OSB_SERVER_VERSION exists"
    [ -x "$VENV/bin/opensandbox-server" ] ||
        die venv "test -x $VENV/bin/opensandbox-server" "remove $VENV and rerun; the package did not install its console script"
    printf '%s\n' "$OSB_SERVER_VERSION" >"$STAMP"
}

image_knob() {
    case "$1" in
        "$OSB_EXECD_IMAGE") echo OSB_EXECD_IMAGE ;;
        "$OSB_BASE_IMAGE") echo OSB_BASE_IMAGE ;;
        "$OSB_EGRESS_IMAGE") echo OSB_EGRESS_IMAGE ;;
        *) echo OSB_CODE_INTERPRETER_IMAGE ;;
    esac
}

step_images() {
    local images=("$OSB_EXECD_IMAGE" "$OSB_BASE_IMAGE") img out knob
    if [ "$OSB_LOCAL_IMAGES" = 1 ]; then
        step_local_images
        images=()
    fi
    if [ "$OSB_WITH_EGRESS" = 1 ]; then images+=("$OSB_EGRESS_IMAGE"); fi
    if [ "$OSB_WITH_CODE_INTERPRETER" = 1 ] && [ "$OSB_LOCAL_IMAGES" != 1 ]; then images+=("$OSB_CODE_INTERPRETER_IMAGE"); fi
    for img in ${images[@]+"${images[@]}"}; do
        if docker image inspect "$img" >/dev/null 2>&1; then
            say "images: $img present"
            continue
        fi
        say "images: pulling $img"
        if ! out="$(docker pull "$img" 2>&1)"; then
            knob="$(image_knob "$img")"
            die images "docker pull $img" \
                "no registry access? Build the execd and base images on this machine: OSB_LOCAL_IMAGES=1 ./local-up.sh up (debootstrap + busybox-static + OSB_EXECD_BIN); or load/tag the image locally (docker load -i FILE.tar; docker tag LOCAL $img), or point $knob at an image that is already present (see docker image ls)" \
                "image $img is not present locally and cannot be pulled: $(printf '%s' "$out" | tail -n 1)"
        fi
    done
}

# ---------------------------------------------------------------- up: images built locally (OSB_LOCAL_IMAGES=1)

apt_install() {
    # apt_install WHAT PKG... — install OS packages with apt-get, asking first unless -y / CI=true.
    local what="$1" cmd
    shift
    cmd="apt-get install -y $*"
    command -v apt-get >/dev/null 2>&1 ||
        die local-images "command -v apt-get" "install $* for your OS, or point the image knobs at images that are already present" \
            "$what is missing and this system has no apt-get"
    say "images: $what is missing; installing the OS package(s) $*: $cmd$([ "$(id -u)" = "0" ] || printf ' (through sudo)')"
    confirm_install local-images "$cmd" "$*"
    sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y "$@" ||
        { sudo_cmd apt-get update && sudo_cmd env DEBIAN_FRONTEND=noninteractive apt-get install -y "$@"; } ||
        die local-images "$cmd" "read apt's message above; install $* yourself"
}

debian_suite() {
    if [ -n "$OSB_DEBIAN_SUITE" ]; then printf '%s' "$OSB_DEBIAN_SUITE"; return 0; fi
    local codename=""
    if [ -r /etc/os-release ]; then
        codename="$(sed -n 's/^VERSION_CODENAME=//p' /etc/os-release | tr -d '"')"
    fi
    printf '%s' "${codename:-bookworm}"
}

debian_mirror() {
    # The Debian mirror this machine's apt already uses (deb822 *.sources first, then sources.list lines).
    if [ -n "$OSB_DEBIAN_MIRROR" ]; then printf '%s' "$OSB_DEBIAN_MIRROR"; return 0; fi
    local f uri=""
    for f in "$OSB_APT_SOURCES"/sources.list.d/*.sources; do
        [ -r "$f" ] || continue
        uri="$(awk 'tolower($1)=="uris:" && $2 !~ /security/ {print $2; exit}' "$f")"
        [ -z "$uri" ] || break
    done
    if [ -z "$uri" ]; then
        for f in "$OSB_APT_SOURCES"/sources.list "$OSB_APT_SOURCES"/sources.list.d/*.list; do
            [ -r "$f" ] || continue
            uri="$(awk '$1=="deb" { for (i = 2; i <= NF; i++) if ($i ~ /^(https?|file):/) { if ($i !~ /security/) { print $i; exit } } }' "$f")"
            [ -z "$uri" ] || break
        done
    fi
    printf '%s' "${uri:-http://deb.debian.org/debian}"
}

image_present() { docker image inspect "$1" >/dev/null 2>&1; }

# What an image was built from is kept in its import comment, not in a LABEL: opensandbox-server 1.1.1 reports a
# container's labels (the image's included) as the sandbox's metadata, so a label would show up in every sandbox.
image_label() { docker image inspect --format '{{.Comment}}' "$1" 2>/dev/null || true; }

note_built() {
    # Remember an image `up` built, so that `clean` removes exactly those.
    touch "$BUILT"
    grep -qxF "$1" "$BUILT" || printf '%s\n' "$1" >>"$BUILT"
}

import_rootfs() {
    # import_rootfs DIR IMAGE LABELVALUE [--change ...] — tar a root file system into a Docker image.
    local dir="$1" img="$2" value="$3" out
    shift 3
    if ! out="$(tar -C "$dir" --numeric-owner -cf - . | docker import --message "$LABEL: $value" "$@" - "$img" 2>&1)"; then
        die local-images "tar -C $dir -c . | docker import - $img" "read the message; check disk space and that the Docker daemon answers" \
            "$(printf '%s' "$out" | tail -n 1)"
    fi
    note_built "$img"
}

debootstrap_progress() {
    # debootstrap_progress TAG — collapse debootstrap's per-package lines into one line per phase, with a package
    # count at each phase change.
    local tag="${1:-base}" line verb last="" n=0
    while IFS= read -r line; do
        case "$line" in
            I:\ Validating\ *) ;;
            I:\ *)
                verb="${line#I: }"
                verb="${verb%% *}"
                if [ "$verb" != "$last" ]; then
                    if [ "$n" -gt 1 ]; then say "$tag:   ... $n x $last"; fi
                    say "$tag: ${line#I: }"
                    last="$verb"
                    n=1
                else
                    n=$((n + 1))
                fi
                ;;
            W:\ * | E:\ *) say "$tag: $line" ;;
        esac
    done
    if [ "$n" -gt 1 ]; then say "$tag:   ... $n x $last"; fi
}

debootstrap_rootfs() {
    # debootstrap_rootfs TAG DIR INCLUDE CHECK... — a minbase root file system of this machine's Debian suite and
    # mirror with the packages INCLUDE (comma list) in DIR, or die naming the log. Every image shares one download
    # cache ($BUILD_DIR/debs, --cache-dir), so a second rootfs fetches only the packages the first did not have.
    local tag="$1" dir="$2" include="$3" suite mirror log ok=1 f
    shift 3
    command -v debootstrap >/dev/null 2>&1 || apt_install "debootstrap (builds the $tag image)" debootstrap
    suite="$(debian_suite)"
    mirror="$(debian_mirror)"
    log="$BUILD_DIR/debootstrap-$tag.log"
    rm -rf "$dir"
    mkdir -p "$BUILD_DIR/debs"
    say "images: debootstrap of the $tag rootfs ($suite from $mirror; +$include; log: $log)"
    debootstrap --variant=minbase --include="$include" --cache-dir="$BUILD_DIR/debs" \
        "$suite" "$dir" "$mirror" 2>&1 | tee "$log" | debootstrap_progress "$tag" || ok=0
    for f in "$@"; do [ -x "$dir/$f" ] || ok=0; done
    if [ "$ok" != 1 ]; then
        die local-images "debootstrap --variant=minbase $suite $dir $mirror (--include=$include)" \
            "read $log; check the mirror (OSB_DEBIAN_MIRROR) and suite (OSB_DEBIAN_SUITE), or point the image knob at an image that is present" \
            "$(tail -n 1 "$log" 2>/dev/null || true)"
    fi
    rm -rf "$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* 2>/dev/null || true
}

build_base_image() {
    local img="$OSB_BASE_IMAGE" dir="$BUILD_DIR/base-rootfs" start
    if image_present "$img"; then
        say "images: $img present (reused; ./local-up.sh clean removes it if up built it)"
        return 0
    fi
    say "images: building $img (takes a few minutes)"
    start="$(date +%s)"
    debootstrap_rootfs base "$dir" python3,bash,coreutils,procps,ca-certificates usr/bin/python3 bin/bash
    say "images: importing $img"
    import_rootfs "$dir" "$img" "base $(debian_suite)" --change 'CMD ["/bin/bash"]'
    rm -rf "$dir"
    say "images: built $img in $(($(date +%s) - start)) s"
}

busybox_rootfs() {
    # busybox_rootfs DIR — a root file system of the static busybox and its applets.
    local dir="$1" applet
    rm -rf "$dir"
    mkdir -p "$dir/bin" "$dir/sbin" "$dir/usr/bin" "$dir/usr/sbin" "$dir/etc" "$dir/root" "$dir/tmp" "$dir/proc" "$dir/sys" "$dir/dev"
    chmod 1777 "$dir/tmp"
    cp "$OSB_BUSYBOX_BIN" "$dir/bin/busybox"
    chmod 755 "$dir/bin/busybox"
    for applet in $("$OSB_BUSYBOX_BIN" --list-full); do
        case "$applet" in bin/busybox | *..* | /*) continue ;; esac
        [ -e "$dir/$applet" ] || ln -s /bin/busybox "$dir/$applet"
    done
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$dir/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$dir/etc/group"
}

need_busybox() {
    if [ ! -x "$OSB_BUSYBOX_BIN" ]; then
        if [ "$OSB_BUSYBOX_BIN" = /bin/busybox ]; then
            apt_install "a static busybox (builds the busybox and execd images)" busybox-static
        fi
        [ -x "$OSB_BUSYBOX_BIN" ] ||
            die local-images "test -x $OSB_BUSYBOX_BIN" "install busybox-static, or point OSB_BUSYBOX_BIN at a static busybox" \
                "no static busybox at $OSB_BUSYBOX_BIN"
    fi
}

build_busybox_image() {
    local img="$OSB_BUSYBOX_IMAGE" dir="$BUILD_DIR/busybox-rootfs"
    if image_present "$img"; then
        say "images: $img present (reused)"
        return 0
    fi
    need_busybox
    say "images: building $img from $OSB_BUSYBOX_BIN"
    mkdir -p "$BUILD_DIR"
    busybox_rootfs "$dir"
    import_rootfs "$dir" "$img" busybox --change 'CMD ["/bin/sh"]'
    rm -rf "$dir"
    say "images: built $img"
}

build_execd_image() {
    local img="$OSB_EXECD_IMAGE" boot="$OSB_BOOTSTRAP" sum have dir="$BUILD_DIR/execd-rootfs"
    [ -n "$boot" ] || boot="$(dirname "$OSB_EXECD_BIN")/bootstrap.sh"
    if [ ! -f "$OSB_EXECD_BIN" ]; then
        die local-images "test -f $OSB_EXECD_BIN" "point OSB_EXECD_BIN at an execd binary (e.g. ../shared/opensandbox/execd)" \
            "no execd binary at $OSB_EXECD_BIN"
    fi
    if [ ! -f "$boot" ]; then
        die local-images "test -f $boot" "put bootstrap.sh beside the execd binary, or point OSB_BOOTSTRAP at it" \
            "no bootstrap.sh at $boot"
    fi
    sum="execd $(cat "$OSB_EXECD_BIN" "$boot" | sha256sum | cut -c1-16)"
    if image_present "$img"; then
        have="$(image_label "$img")"
        if [ "$have" = "$LABEL: $sum" ] || [ -z "$have" ]; then
            say "images: $img present (reused)"
            return 0
        fi
        say "images: $img was built from another execd/bootstrap.sh; rebuilding"
    fi
    need_busybox
    say "images: building $img from $OSB_EXECD_BIN and $boot"
    mkdir -p "$BUILD_DIR"
    busybox_rootfs "$dir"
    cp "$OSB_EXECD_BIN" "$dir/execd"
    cp "$boot" "$dir/bootstrap.sh"
    chmod 755 "$dir/execd" "$dir/bootstrap.sh"
    import_rootfs "$dir" "$img" "$sum" --change 'ENTRYPOINT ["./execd"]' --change 'WORKDIR /'
    rm -rf "$dir"
    say "images: built $img"
}

step_local_images() {
    build_execd_image
    build_busybox_image
    build_base_image
    if [ "$OSB_WITH_EGRESS" = 1 ]; then build_egress_image; fi
    if [ "$OSB_WITH_CODE_INTERPRETER" = 1 ]; then build_code_interpreter_image; fi
}

# ---------------------------------------------------------------- egress sidecar image (networkPolicy)
# OSB_WITH_EGRESS=1: the server gets [egress] image + mode (OSB_EGRESS_MODE: dns, the server's example config,
# or dns+nft). With OSB_LOCAL_IMAGES=1 the image is built registry-free from OSB_EGRESS_BIN (a directory with
# egress, opensandbox-supervisor and cleanup.sh: ../shared/opensandbox/egress, built from components/egress at
# 3bb6fad) after the recipe in ../shared/opensandbox/README.md; else OSB_EGRESS_IMAGE is pulled. `down` removes
# the sidecars with the sandboxes (sandbox-egress-<id> containers).
egress_defaults() {
    if [ -z "$OSB_EGRESS_IMAGE" ]; then
        if [ "$OSB_LOCAL_IMAGES" = 1 ]; then OSB_EGRESS_IMAGE="local/egress:src3bb6fad"
        else OSB_EGRESS_IMAGE="opensandbox/egress:v1.1.7"; fi
    fi
    case "$OSB_WITH_EGRESS" in
        0 | 1) ;;
        *) die knobs "OSB_WITH_EGRESS=$OSB_WITH_EGRESS" "set OSB_WITH_EGRESS=1 (an egress image for networkPolicy) or 0" ;;
    esac
    case "$OSB_EGRESS_MODE" in
        dns | dns+nft) ;;
        off)  # what `env` exports without an egress image: `eval "$(./local-up.sh env)"; ./local-up.sh down` works;
              # only `up` refuses it beside OSB_WITH_EGRESS=1 (a stack is always taken down)
            if [ "$OSB_WITH_EGRESS" = 1 ] && [ "$ACTION" = up ]; then
                die knobs "OSB_EGRESS_MODE=off OSB_WITH_EGRESS=1" "set OSB_EGRESS_MODE to dns or dns+nft"
            fi
            OSB_WITH_EGRESS=0 ;;
        *) die knobs "OSB_EGRESS_MODE=$OSB_EGRESS_MODE" "set OSB_EGRESS_MODE to dns or dns+nft (or off: no egress image)" ;;
    esac
}

build_egress_image() {
    local img="$OSB_EGRESS_IMAGE" bin="$OSB_EGRESS_BIN" dir="$BUILD_DIR/egress-rootfs" sum f have start
    for f in egress opensandbox-supervisor cleanup.sh; do
        [ -f "$bin/$f" ] || die local-images "test -f $bin/$f" \
            "point OSB_EGRESS_BIN at a directory with egress, opensandbox-supervisor and cleanup.sh (../shared/opensandbox/egress)" \
            "no $f in $bin"
    done
    sum="egress $(cat "$bin/egress" "$bin/opensandbox-supervisor" "$bin/cleanup.sh" | sha256sum | cut -c1-16)"
    if image_present "$img"; then
        have="$(image_label "$img")"
        if [ "$have" = "$LABEL: $sum" ] || [ -z "$have" ]; then
            say "images: $img present (reused)"
            return 0
        fi
        say "images: $img was built from other egress binaries; rebuilding"
    fi
    say "images: building $img from $bin"
    start="$(date +%s)"
    debootstrap_rootfs egress "$dir" iptables,iproute2,nftables,ca-certificates,procps usr/sbin/nft usr/sbin/ip
    mkdir -p "$dir/opt/opensandbox-egress"
    cp "$bin/egress" "$dir/opt/opensandbox-egress/egress"
    cp "$bin/opensandbox-supervisor" "$dir/opt/opensandbox-egress/supervisor"
    cp "$bin/cleanup.sh" "$dir/opt/opensandbox-egress/cleanup.sh"
    chmod 755 "$dir/opt/opensandbox-egress/"*
    import_rootfs "$dir" "$img" "$sum" --change 'ENTRYPOINT ["/opt/opensandbox-egress/supervisor","--pre-start=/opt/opensandbox-egress/cleanup.sh","--name=egress","--grace-period=20s","--","/opt/opensandbox-egress/egress"]'
    rm -rf "$dir"
    say "images: built $img in $(($(date +%s) - start)) s"
}

egress_config() {
    if [ "$OSB_WITH_EGRESS" = 1 ]; then
        printf '\n[egress]\nimage = "%s"\nmode = "%s"\n' "$OSB_EGRESS_IMAGE" "$OSB_EGRESS_MODE"
    fi
}

egress_env() {
    # what the live tier compares against: the mock's --egress-mode for the same stack (off = no egress image)
    if [ "$OSB_WITH_EGRESS" = 1 ]; then
        printf 'export OSB_EGRESS_MODE=%s\nexport OPENSANDBOX_EGRESS_IMAGE=%s\n' "$OSB_EGRESS_MODE" "$OSB_EGRESS_IMAGE"
    else
        printf 'export OSB_EGRESS_MODE=off\n'
    fi
}
# ---------------------------------------------------------------- end of the egress block

# ---------------------------------------------------------------- code-interpreter image (/code, Jupyter)
# OSB_WITH_CODE_INTERPRETER=1: a code-interpreter image for the live tier. With OSB_LOCAL_IMAGES=1 it is built
# registry-free FROM the local base image: Jupyter and kernels from PyPI (the pins of mock_opensandbox/
# runtime/jupyterenv.py REQUIREMENTS) installed by pip in a chroot of the base image's root file system (a `docker build`
# RUN needs the build's network, which a fresh dockerd here may not have), then `docker import` with the
# upstream image's ENV/WORKDIR/ENTRYPOINT (sandboxes/code-interpreter/Dockerfile at 3bb6fad). Its entrypoint is
# upstream's scripts/code-interpreter.sh reduced to the kernels it has: python, bash and, where this machine has node
# and npm (OSB_WITH_TSLAB), TypeScript and JavaScript through tslab (upstream's Dockerfile: `npm install -g tslab`);
# no Java or Go kernel (docs/LOCAL_UP.md). Else OSB_CODE_INTERPRETER_IMAGE is pulled.
code_interpreter_defaults() {
    if [ -z "$OSB_CODE_INTERPRETER_IMAGE" ]; then
        if [ "$OSB_LOCAL_IMAGES" = 1 ]; then OSB_CODE_INTERPRETER_IMAGE="local/code-interpreter:py-bash"
        else OSB_CODE_INTERPRETER_IMAGE="opensandbox/code-interpreter:v1.1.0"; fi
    fi
    case "$OSB_WITH_CODE_INTERPRETER" in
        0 | 1) ;;
        *) die knobs "OSB_WITH_CODE_INTERPRETER=$OSB_WITH_CODE_INTERPRETER" "set OSB_WITH_CODE_INTERPRETER=1 (a code-interpreter image) or 0" ;;
    esac
    case "$OSB_WITH_TSLAB" in
        auto | 0 | 1) ;;
        *) die knobs "OSB_WITH_TSLAB=$OSB_WITH_TSLAB" "set OSB_WITH_TSLAB=auto (with node and npm on PATH), 1 or 0" ;;
    esac
}

TSLAB_PIN="tslab@1.0.22"  # upstream's Dockerfile installs the latest; this is it on 2026-12-06

# 1 when the local code-interpreter image gets tslab: OSB_WITH_TSLAB=1, or auto with node and npm on PATH
tslab_wanted() {
    case "$OSB_WITH_TSLAB" in
        1) return 0 ;;
        0) return 1 ;;
        *) command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1 ;;
    esac
}

# tslab into the image's root file system: the package tree by this machine's npm (zeromq's prebuilt addon is
# in the package), this machine's node binary as /usr/local/bin/node, and its kernelspecs (tslab, jslab) made
# in the chroot as upstream's entrypoint makes them
install_tslab() {
    local dir="$1" log="$2" node
    node="$(command -v node)" || die local-images "command -v node" "install node >= 18 and npm, or set OSB_WITH_TSLAB=0"
    command -v npm >/dev/null 2>&1 || die local-images "command -v npm" "install npm, or set OSB_WITH_TSLAB=0"
    say "images: tslab ($TSLAB_PIN) with $node $("$node" --version 2>/dev/null)"
    # a global install, as upstream's (its dependencies nested under it, where tslab finds @types/node)
    npm install -g -q --no-fund --no-audit --prefix "$dir/usr/local" "$TSLAB_PIN" >>"$log" 2>&1 ||
        die local-images "npm install -g --prefix $dir/usr/local $TSLAB_PIN" "check access to the npm registry, or set OSB_WITH_TSLAB=0; read $log" "$(tail -n 1 "$log")"
    cp -L "$node" "$dir/usr/local/bin/node"
    if ! sudo_cmd chroot "$dir" /usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root tslab install >>"$log" 2>&1; then
        die local-images "chroot $dir tslab install" "this machine's node may not run on $OSB_BASE_IMAGE's libraries: set OSB_WITH_TSLAB=0; read $log" "$(tail -n 1 "$log")"
    fi
}

code_interpreter_entrypoint() {
    # upstream 3bb6fad sandboxes/code-interpreter/scripts/code-interpreter.sh, python, bash and (with tslab) TypeScript
    cat <<'SCRIPT'
#!/bin/bash
# Written by local-up.sh: upstream's sandboxes/code-interpreter/scripts/code-interpreter.sh (3bb6fad) reduced
# to this image's kernels. Kernels are registered at start, in parallel with Jupyter, as upstream does.
declare -a pids=()
setup_python() { python3 --version; python3 -m ipykernel install --name python --display-name "Python"; }
setup_bash() { python3 -m bash_kernel.install; }
# upstream's setup_node without the npm install (done at build time, when this image has tslab at all)
setup_node() { command -v tslab >/dev/null 2>&1 || return 0; jupyter kernelspec list 2>/dev/null | grep -Eq '^[[:space:]]+tslab[[:space:]]' || tslab install; }
if [ -n "${EXECD_ENVS:-}" ]; then
	mkdir -p "$(dirname "$EXECD_ENVS")" 2>/dev/null || true
	printf 'PATH=%s\n' "$PATH" >>"$EXECD_ENVS" 2>/dev/null || true
fi
setup_python &
pids+=($!)
setup_node &
pids+=($!)
setup_bash &
pids+=($!)
jupyter notebook --ip=127.0.0.1 --port="${JUPYTER_PORT:-44771}" --allow-root --no-browser --NotebookApp.token="${JUPYTER_TOKEN:-opensandboxcodeinterpreterjupyter}" >/opt/code-interpreter/jupyter.log
SCRIPT
}

code_interpreter_requirements() {
    PYTHONPATH="$SCRIPT_DIR" "$OSB_PYTHON" -c 'from mock_opensandbox.runtime.jupyterenv import REQUIREMENTS; print(" ".join(REQUIREMENTS))'
}

build_code_interpreter_image() {
    local img="$OSB_CODE_INTERPRETER_IMAGE" dir="$BUILD_DIR/code-interpreter-rootfs" wheels="$BUILD_DIR/pip-wheel"
    local reqs sum have cid whl log="$BUILD_DIR/code-interpreter-pip.log" start ca ca_arg="" tslab
    reqs="$(code_interpreter_requirements)" ||
        die local-images "$OSB_PYTHON -c 'from mock_opensandbox.runtime.jupyterenv import REQUIREMENTS'" "run local-up.sh from the project's checkout (it reads the pins there)"
    tslab=""
    if tslab_wanted; then tslab="$TSLAB_PIN -g node $(node --version 2>/dev/null)"; fi
    sum="code-interpreter $( (printf '%s\n' "$reqs" "$tslab"; code_interpreter_entrypoint; docker image inspect --format '{{.Id}}' "$OSB_BASE_IMAGE") | sha256sum | cut -c1-16)"
    if image_present "$img"; then
        have="$(image_label "$img")"
        if [ "$have" = "$LABEL: $sum" ] || [ -z "$have" ]; then
            say "images: $img present (reused)"
            return 0
        fi
        say "images: $img was built from other pins, entrypoint or base image; rebuilding"
    fi
    start="$(date +%s)"
    say "images: building $img from $OSB_BASE_IMAGE + pip ($reqs; log: $log)"
    rm -rf "$dir" "$wheels"
    mkdir -p "$dir" "$wheels"
    cid="$(docker create "$OSB_BASE_IMAGE" /bin/true)" ||
        die local-images "docker create $OSB_BASE_IMAGE" "check that $OSB_BASE_IMAGE is present (docker image ls)"
    docker export "$cid" | tar -C "$dir" -xf - ||
        { docker rm "$cid" >/dev/null 2>&1; die local-images "docker export $cid | tar -x" "check disk space under $BUILD_DIR"; }
    docker rm "$cid" >/dev/null 2>&1 || true
    # pip itself is run from its wheel (python3 pip.whl/pip): the base image has python3 without pip or ensurepip
    "$OSB_PYTHON" -m pip download -q --no-deps -d "$wheels" pip >"$log" 2>&1 ||
        die local-images "$OSB_PYTHON -m pip download pip" "check access to PyPI (or set PIP_INDEX_URL); read $log" "$(tail -n 1 "$log")"
    for whl in "$wheels"/pip-*.whl; do whl="${whl##*/}"; break; done
    cp "$wheels/$whl" "$dir/tmp/$whl"
    cp -L /etc/resolv.conf "$dir/etc/resolv.conf" 2>/dev/null || true
    # the CA bundle this machine's pip trusts (a TLS-intercepting proxy's CA is in it, not in the base image's)
    ca="${PIP_CERT:-${REQUESTS_CA_BUNDLE:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}}"
    if [ -r "$ca" ]; then cp -L "$ca" "$dir/tmp/local-up-ca.crt"; ca_arg="--cert=/tmp/local-up-ca.crt"; fi
    # shellcheck disable=SC2086 # $reqs is a list of pins
    if ! sudo_cmd chroot "$dir" /usr/bin/env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root \
        ${PIP_INDEX_URL:+PIP_INDEX_URL=$PIP_INDEX_URL} python3 "/tmp/$whl/pip" install --no-cache-dir \
        --disable-pip-version-check --break-system-packages --root-user-action=ignore -q $ca_arg $reqs >>"$log" 2>&1; then
        die local-images "chroot $dir python3 pip.whl/pip install $reqs" "read $log; check access to PyPI (or set PIP_INDEX_URL)" "$(tail -n 1 "$log")"
    fi
    [ -x "$dir/usr/local/bin/jupyter-notebook" ] ||
        die local-images "test -x $dir/usr/local/bin/jupyter-notebook" "read $log" "pip did not install jupyter-notebook"
    if [ -n "$tslab" ]; then install_tslab "$dir" "$log"; fi
    rm -f "$dir/tmp/$whl" "$dir/tmp/local-up-ca.crt"
    : >"$dir/etc/resolv.conf"
    mkdir -p "$dir/opt/code-interpreter" "$dir/workspace" "$dir/root/.jupyter"
    code_interpreter_entrypoint >"$dir/opt/code-interpreter/code-interpreter.sh"
    chmod 755 "$dir/opt/code-interpreter/code-interpreter.sh"
    printf 'c = get_config()  #noqa\n' >"$dir/root/.jupyter/jupyter_notebook_config.py"
    say "images: importing $img"
    import_rootfs "$dir" "$img" "$sum" \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV JUPYTER_HOST=http://127.0.0.1:44771' --change 'ENV JUPYTER_PORT=44771' \
        --change 'ENV JUPYTER_TOKEN=opensandboxcodeinterpreterjupyter' \
        --change 'WORKDIR /workspace' --change 'ENTRYPOINT ["/opt/code-interpreter/code-interpreter.sh"]'
    rm -rf "$dir" "$wheels"
    say "images: built $img in $(($(date +%s) - start)) s"
}

code_interpreter_env() {
    if [ "$OSB_WITH_CODE_INTERPRETER" = 1 ]; then
        printf 'export OPENSANDBOX_CODE_INTERPRETER_IMAGE=%s\n' "$OSB_CODE_INTERPRETER_IMAGE"
        # the plugin's `code` template (image_aliases; its other aliases are replaced)
        printf 'export ABX_OPENSANDBOX_IMAGE_ALIASES=code=%s\n' "$OSB_CODE_INTERPRETER_IMAGE"
    fi
}
# ---------------------------------------------------------------- end of the code-interpreter block


render_config() {
    local key="$1"
    cat <<EOF
# Written by local-up.sh (regenerated by every \`up\`; edits are overwritten).
[server]
host = "127.0.0.1"
port = $OSB_PORT
api_key = "$key"
max_sandbox_timeout_seconds = 86400

[runtime]
type = "docker"
execd_image = "$OSB_EXECD_IMAGE"

[store]
type = "sqlite"
path = "$OSB_WORKDIR/opensandbox.db"

[docker]
network_mode = "bridge"
# Publish sandbox ports on loopback only (DockerConfig.publish_host in opensandbox-server 1.1.1).
publish_host = "127.0.0.1"

[ingress]
mode = "direct"

[proxy]
# The server reaches sandboxes through their host-published ports (as in the recorded stack, VERSIONS.md).
resolve_internal = false
EOF
    if [ "$OSB_ALLOWED_HOST_PATHS" != none ]; then
        # host binds (volumes[].host) only under this prefix, checked by the server lexically and after realpath
        printf '\n[storage]\nallowed_host_paths = ["%s"]\n' "$OSB_ALLOWED_HOST_PATHS"
    fi
    egress_config
}

step_config() {
    # Sets CONFIG_CHANGED=1 when server.toml was (re)written.
    local key
    if ! key="$(api_key)"; then
        key="$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')"
        printf '%s\n' "$key" >"$KEY_FILE"
        say "config: generated a throw-away API key in $KEY_FILE"
    fi
    if [ "$OSB_ALLOWED_HOST_PATHS" != none ]; then
        mkdir -p "$OSB_ALLOWED_HOST_PATHS" || die config "mkdir -p $OSB_ALLOWED_HOST_PATHS" \
            "set OSB_ALLOWED_HOST_PATHS to a directory you can create (or none)"
    fi
    render_config "$key" >"$CONFIG.new"
    if [ -f "$CONFIG" ] && cmp -s "$CONFIG" "$CONFIG.new"; then
        rm -f "$CONFIG.new"
        CONFIG_CHANGED=0
        say "config: $CONFIG unchanged"
    else
        mv -f "$CONFIG.new" "$CONFIG"
        CONFIG_CHANGED=1
        say "config: wrote $CONFIG"
    fi
}

print_env() {
    # print_env KEY — the export lines `env` prints (live tier + plugin variables).
    printf 'export OPENSANDBOX_BASE_URL=http://127.0.0.1:%s/v1\n' "$OSB_PORT"
    printf 'export OPENSANDBOX_API_KEY=%s\n' "$1"
    printf 'export OPENSANDBOX_LIVE=1\n'
    printf 'export OPENSANDBOX_IMAGE=%s\n' "$OSB_BASE_IMAGE"
    printf 'export ABX_OPENSANDBOX_BASE_URL=http://127.0.0.1:%s\n' "$OSB_PORT"
    printf 'export OPEN_SANDBOX_API_KEY=%s\n' "$1"
    printf 'export ABX_OPENSANDBOX_DEFAULT_IMAGE=%s\n' "$OSB_BASE_IMAGE"
    if [ "$OSB_ALLOWED_HOST_PATHS" != none ]; then
        printf 'export OPENSANDBOX_ALLOWED_HOST_PATHS=%s\n' "$OSB_ALLOWED_HOST_PATHS"
    fi
    if [ "$OSB_LOCAL_IMAGES" = 1 ]; then
        printf 'export OPENSANDBOX_BUSYBOX_IMAGE=%s\n' "$OSB_BUSYBOX_IMAGE"
    fi
    egress_env
    code_interpreter_env
    local dv
    dv="$(docker info --format '{{.ServerVersion}}' 2>/dev/null || true)"
    case "$dv" in '' | *[!A-Za-z0-9.+~_-]*) ;; *) printf 'export OPENSANDBOX_RUNTIME=docker/%s\n' "$dv" ;; esac
}

write_env_file() {
    print_env "$(api_key)" >"$ENV_FILE.new"
    if [ -f "$ENV_FILE" ] && cmp -s "$ENV_FILE" "$ENV_FILE.new"; then
        rm -f "$ENV_FILE.new"
    else
        mv -f "$ENV_FILE.new" "$ENV_FILE"
    fi
}

step_server() {
    if pid_alive "$SERVER_PID" opensandbox-server; then
        if [ "$CONFIG_CHANGED" = 1 ]; then
            say "server: configuration changed; restarting"
            stop_pidfile "$SERVER_PID" opensandbox-server server
        elif health_ok; then
            say "server: already running (pid $(cat "$SERVER_PID")) at http://127.0.0.1:$OSB_PORT"
            return 0
        fi
    else
        rm -f "$SERVER_PID"
        if health_ok; then
            die server "curl http://127.0.0.1:$OSB_PORT/health" \
                "stop that process, or choose another port: OSB_PORT=18080 ./local-up.sh up" \
                "something local-up did not start already answers on 127.0.0.1:$OSB_PORT"
        fi
    fi
    if ! pid_alive "$SERVER_PID" opensandbox-server; then
        if [ ! -f "$BEFORE" ]; then
            # Remember the sandbox-* containers that exist before our server runs: `down` removes only newer ones.
            docker ps -a --format '{{.ID}} {{.Names}}' >"$BEFORE.tmp" 2>/dev/null ||
                die server "docker ps -a" "check that the Docker daemon answers (./local-up.sh status)"
            mv -f "$BEFORE.tmp" "$BEFORE"
        fi
        say "server: starting opensandbox-server --config $CONFIG (log: $SERVER_LOG)"
        (without_open_fds nohup "$VENV/bin/opensandbox-server" --config "$CONFIG") </dev/null >"$SERVER_LOG" 2>&1 &
        echo "$!" >"$SERVER_PID"
    fi
    local waited=0
    while ! health_ok; do
        if ! started_alive "$SERVER_PID"; then
            rm -f "$SERVER_PID"
            die server "$VENV/bin/opensandbox-server --config $CONFIG" \
                "read $SERVER_LOG (port $OSB_PORT busy? set OSB_PORT; bad config? remove $CONFIG and rerun)" \
                "the server exited: $(tail -n 1 "$SERVER_LOG" 2>/dev/null || true)"
        fi
        if [ "$waited" -ge $((OSB_HEALTH_TIMEOUT * 5)) ]; then
            die server "curl http://127.0.0.1:$OSB_PORT/health" \
                "read $SERVER_LOG; raise OSB_HEALTH_TIMEOUT if the server is just slow" \
                "no healthy answer within ${OSB_HEALTH_TIMEOUT} s"
        fi
        sleep 0.2
        waited=$((waited + 1))
    done
    say "server: healthy (pid $(cat "$SERVER_PID")) at http://127.0.0.1:$OSB_PORT"
}

cmd_up() {
    check_knobs
    umask 077
    mkdir -p "$OSB_WORKDIR" || die workdir "mkdir -p $OSB_WORKDIR" "choose a writable OSB_WORKDIR"
    step_docker_engine
    step_docker_daemon
    step_venv
    step_images
    CONFIG_CHANGED=0
    step_config
    step_server
    write_env_file
    say "ready: eval \"\$(./local-up.sh env)\" then OPENSANDBOX_LIVE=1 python -m pytest tiers/t4"
}

# ---------------------------------------------------------------- down / status / env

cmd_down() {
    check_knobs
    stop_pidfile "$SERVER_PID" opensandbox-server server
    if [ -f "$BEFORE" ]; then
        if command -v docker >/dev/null 2>&1 && docker_answers; then
            local id name removed=0
            while read -r id name; do
                case "$name" in sandbox-*) ;; *) continue ;; esac
                if grep -q "^$id " "$BEFORE"; then continue; fi
                say "containers: removing $name ($id)"
                docker rm -f "$id" >/dev/null || say "containers: could not remove $name; remove it with: docker rm -f $id"
                removed=$((removed + 1))
            done < <(docker ps -a --format '{{.ID}} {{.Names}}')
            say "containers: removed $removed sandbox container(s) created since up"
        else
            say "containers: no Docker daemon answers; sandbox-* containers (if any) were left alone"
        fi
        rm -f "$BEFORE"
    fi
    if [ -e "$DOCKERD_PID" ]; then
        stop_pidfile "$DOCKERD_PID" dockerd dockerd sudo
    fi
    rm -f "$ENV_FILE"
    say "down: done (venv, images, config and database stay in $OSB_WORKDIR)"
}

cmd_clean() {
    # down, then remove the images `up` built and the build/ scratch dir. The venv, config and database stay.
    check_knobs
    local img removed=0
    if [ -s "$BUILT" ]; then
        if command -v docker >/dev/null 2>&1 && docker_answers; then
            while read -r img; do
                [ -n "$img" ] || continue
                if docker image inspect "$img" >/dev/null 2>&1; then
                    say "images: removing $img (built by up)"
                    docker rmi "$img" >/dev/null || say "images: could not remove $img; remove it with: docker rmi $img"
                    removed=$((removed + 1))
                fi
            done <"$BUILT"
            rm -f "$BUILT"
        else
            say "images: no Docker daemon answers; the images up built stay (listed in $BUILT; rerun clean with a daemon)"
        fi
    fi
    say "images: removed $removed image(s) built by up"
    rm -rf "$BUILD_DIR"
    cmd_down
}

cmd_status() {
    check_knobs
    local rc=3 n img id name
    say "workdir: $OSB_WORKDIR"
    if pid_alive "$DOCKERD_PID" dockerd; then
        say "dockerd: running (pid $(cat "$DOCKERD_PID"), started by local-up)"
    elif command -v docker >/dev/null 2>&1 && docker_answers; then
        say "dockerd: a daemon answers (not started by local-up)"
    else
        say "dockerd: no daemon answers"
    fi
    if pid_alive "$SERVER_PID" opensandbox-server; then
        if health_ok; then
            say "server: running (pid $(cat "$SERVER_PID")) at http://127.0.0.1:$OSB_PORT, /health ok"
            rc=0
        else
            say "server: process running (pid $(cat "$SERVER_PID")) but /health does not answer on port $OSB_PORT; see $SERVER_LOG"
        fi
    elif health_ok; then
        say "server: something answers on http://127.0.0.1:$OSB_PORT/health (not started by local-up)"
    else
        say "server: not running"
    fi
    if command -v docker >/dev/null 2>&1 && docker_answers; then
        local images=("$OSB_EXECD_IMAGE" "$OSB_BASE_IMAGE") how
        if [ "$OSB_LOCAL_IMAGES" = 1 ]; then images+=("$OSB_BUSYBOX_IMAGE"); fi
        for img in "${images[@]}"; do
            how=""
            if [ -f "$BUILT" ] && grep -qxF "$img" "$BUILT"; then how=" (built by local-up)"; fi
            if docker image inspect "$img" >/dev/null 2>&1; then say "image: $img present$how"; else say "image: $img missing"; fi
        done
        if [ -f "$BEFORE" ]; then
            n=0
            while read -r id name; do
                case "$name" in sandbox-*) grep -q "^$id " "$BEFORE" || n=$((n + 1)) ;; esac
            done < <(docker ps -a --format '{{.ID}} {{.Names}}' 2>/dev/null)
            say "containers: $n sandbox-* container(s) created since up"
        fi
    fi
    return "$rc"
}

cmd_env() {
    check_knobs
    if [ -s "$ENV_FILE" ]; then
        cat "$ENV_FILE"
        return 0
    fi
    local key
    if ! key="$(api_key)"; then
        echo "$PROG: the server was never started with OSB_WORKDIR=$OSB_WORKDIR; run ./local-up.sh up first" >&2
        return 1
    fi
    echo "$PROG: warning: the server is not running (./local-up.sh up); printing the values it would use" >&2
    print_env "$key"
}

# ---------------------------------------------------------------- main

main() {
    local action="" arg
    for arg in "$@"; do
        case "$arg" in
            -y | --yes) ASSUME_YES=1 ;;
            up | down | status | env | clean | help)
                if [ -n "$action" ]; then usage >&2; exit 2; fi
                action="$arg"
                ;;
            -h | --help) action=help ;;
            *) echo "$PROG: unknown argument: $arg" >&2; usage >&2; exit 2 ;;
        esac
    done
    ACTION="$action"
    case "$action" in
        up) cmd_up ;;
        down) cmd_down ;;
        status) cmd_status ;;
        clean) cmd_clean ;;
        env) cmd_env ;;
        help) usage ;;
        *) usage >&2; exit 2 ;;
    esac
}

main "$@"
