"""Recording scenarios of what a sandbox looks like from inside: 21, the containment probes; 22, the inside of a
500m/512Mi sandbox (files, cwd, processes, cgroup limits, network, disk, identity); 23, two sandboxes serving the
same port. Their commands and the noise the drift check blanks are read by the tests too (tiers/flows/sandbox/sandbox_inside.py,
tiers/t1/sandbox/containment_probes.py, tiers/t0/tools/test_recorder_runs.py)."""

from __future__ import annotations

from urllib.parse import urlsplit

from record.client import Execd, Session, created_id, execd_from
from record.scenarios_common import Ctx, _create

# The containment probes (QUIRKS.md, Containment): what a process inside a real sandbox sees and may do. Each one is a
# plain command through execd, recorded raw (tiers/t1/sandbox/containment_probes.py reads the fixture by command text);
# their raw outputs on a live stack are recording 21 (fixtures/21_containment_probes.json, 2026-12-01).
CONTAINMENT_PROBES: list[tuple[str, str]] = [
    ("capabilities", "grep Cap /proc/self/status"),
    ("dev", "ls -la /dev"),
    ("mountinfo", "cat /proc/self/mountinfo"),
    ("id", "id"),
    ("etc_hostname", "cat /etc/hostname"),
    ("etc_passwd", "cat /etc/passwd"),
    ("etc_shadow", "ls -la /etc/shadow"),
    ("remount_usr", "mount -o remount,rw /usr"),
    ("proc_hostname", "cat /proc/sys/kernel/hostname"),
    ("drop_caches", "echo 1 > /proc/sys/vm/drop_caches"),
    ("sys_fs_cgroup", "ls /sys/fs/cgroup"),
    ("touch_cgroup", "touch /sys/fs/cgroup/x"),
    ("proc_kcore", "cat /proc/kcore | head -c1"),
    ("proc_keys", "ls /proc/keys"),
    ("nonewprivs", "cat /proc/1/status | grep -i nonewprivs"),
    ("ulimit", "ulimit -a"),
]
# What differs between two sandboxes of the same stack, blanked on both sides by the drift check (--check):
# container ids, mount and peer-group ids, overlay layer names, file times.
PROBE_NOISE: tuple[tuple[str, str], ...] = (
    (r"[0-9a-f]{64}", "<id64>"),
    (r"\b[0-9a-f]{12}\b", "<id12>"),
    (r'"text":"\d+ \d+ \d+:\d+ ', '"text":"<mnt> <parent> <dev> '),
    (r"(master|shared):\d+", r"\1:<n>"),
    (r"overlay2/(l/)?[A-Za-z0-9]+", r"overlay2/\1<layer>"),
    (r"[A-Z][a-z]{2} [ 0-9]\d \d\d:\d\d", "<mtime>"),
    # `ulimit -a`: the kernel sizes RLIMIT_SIGPENDING and the default RLIMIT_NPROC from the host's memory (96369
    # recorded, 96367 on a later host), so a drift there is the host's, never the server's
    (r"((?:pending signals +\(-i\)|max user processes +\(-u\)) )\d+", r"\1<host>"),
)


def s21(s: Session, ctx: Ctx) -> None:
    ex = ctx.execd
    assert ex is not None
    for _name, cmd in CONTAINMENT_PROBES:
        ex.command({"command": cmd})


# What the inside of a sandbox shows (tiers/flows/sandbox/sandbox_inside.py): the files API, cwd, the root, processes, cgroup limits, the
# network and the image's defaults, in a sandbox created with RESOURCES (500m / 512Mi). The commands are plain
# shell run through execd and recorded raw; tiers/flows/sandbox/sandbox_inside.py holds the checks and reads this fixture by
# command text. "@SERVER_PORT@" stands for the lifecycle server's port (the recorder fills it in; the probes
# print no host:port pair, so the scrubber leaves their output alone).
INSIDE_FILES: list[tuple[str, str]] = [
    ("files_info_os_release", "/files/info?path=/etc/os-release"),
    ("files_download_passwd", "/files/download?path=/etc/passwd"),
    ("files_search_python3", "/files/search?path=/usr/bin&pattern=python3%2A"),
]
INSIDE_CWDS: tuple[str, ...] = ("/usr/lib", "/var/log", "/opt")
_CGROUP_FILES = (
    "memory/memory.limit_in_bytes memory/memory.memsw.limit_in_bytes pids/pids.max "
    "cpu/cpu.cfs_quota_us cpu/cpu.cfs_period_us memory.max memory.swap.max pids.max cpu.max"
)
_CPU_SHARE = """python3 - <<'EOF'
import os, time
def usage():
    p = "/sys/fs/cgroup/cpuacct/cpuacct.usage"
    if os.path.exists(p):
        return int(open(p).read()) / 1e9
    return int(dict(line.split() for line in open("/sys/fs/cgroup/cpu.stat"))["usage_usec"]) / 1e6
def stat():
    for p in ("/sys/fs/cgroup/cpu/cpu.stat", "/sys/fs/cgroup/cpu.stat"):
        if os.path.exists(p):
            st = dict(line.split() for line in open(p))
            return int(st.get("nr_periods", 0)), int(st.get("nr_throttled", 0))
    return 0, 0
u0, s0, t0 = usage(), stat(), time.monotonic()
while time.monotonic() - t0 < 2:
    pass
u1, s1, t1 = usage(), stat(), time.monotonic()
print("share=%.1f" % ((u1 - u0) / (t1 - t0)))
print("cfs_periods=%s" % ("yes" if s1[0] > s0[0] else "no"))
print("throttled=%s" % ("yes" if s1[1] > s0[1] else "no"))
EOF"""
_CONNECT = """python3 - <<'EOF'
import socket, struct
def probe(host, port):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((host, port))
        return "connected"
    except socket.timeout:
        return "timeout"
    except OSError as exc:
        return "refused" if exc.errno == 111 else "errno%d" % exc.errno
    finally:
        s.close()
gw = None
for line in open("/proc/net/route").read().splitlines()[1:]:
    f = line.split()
    if len(f) > 2 and f[1] == "00000000":
        gw = socket.inet_ntoa(struct.pack("<I", int(f[2], 16)))
print("loopback_server=" + probe("127.0.0.1", @SERVER_PORT@))
print("gateway_server=" + (probe(gw, @SERVER_PORT@) if gw else "no-default-route"))
print("loopback_execd=" + probe("127.0.0.1", 44772))
EOF"""
INSIDE_PROBES: list[tuple[str, str]] = [
    ("ls_root", "ls /"),
    ("opt_opensandbox", "ls -la /opt/opensandbox"),
    ("ps", "ps -eo pid,ppid,args"),
    ("oom_1g", "python3 -c 'b = b\"x\" * (1 << 30)'; echo exit=$?"),
    (
        "cgroup_limits",
        f'for f in {_CGROUP_FILES}; do [ -e /sys/fs/cgroup/$f ] && echo "$f=$(cat /sys/fs/cgroup/$f)"; done; true',
    ),
    ("cpu_share", _CPU_SHARE),
    ("etc_net_files", "cat /etc/hosts; echo ---; cat /etc/resolv.conf; echo ---; cat /etc/hostname"),
    ("net_dev_route", "cat /proc/net/dev; echo ---; cat /proc/net/route"),
    ("connect_host", _CONNECT),
    ("df_mount", "df /tmp; echo ---; mount | grep -E ' / | /tmp '"),
    ("identity", "env | sort; echo ---; pwd; id"),
]
INSIDE_NOISE: tuple[tuple[str, str], ...] = PROBE_NOISE + (
    (r"172\.17\.\d+\.\d+", "<bridge-ip>"),  # the container's address on the docker bridge
    (r"\\t[0-9a-f]{12}\b", r"\\t<id12>"),  # its hostname after a tab (JSON "\t") in /etc/hosts
    (r'("text":" *(?:lo|eth0):)[ 0-9]+', r"\1<counters>"),  # /proc/net/dev byte and packet counters
    (r'("text":"\S+ +)\d+ +\d+ +\d+ +\d+%', r"\1<df>"),  # df sizes
    (r'"text":" +\d+ +\d+ ps -eo pid,ppid,args"', '"text":"<ps itself>"'),
    (r"line 1: +\d+ Killed", "line 1: <pid> Killed"),  # bash's job report of the OOM kill
    (r"nameserver [0-9a-fA-F.:]+", "nameserver <host's>"),  # Docker copies the host's resolver
    (r"OPENSANDBOX_ID=[^\"]+", "OPENSANDBOX_ID=<sandbox id>"),  # the setup's sandbox (never in a recorded answer)
    (r"share=\d\.\d", "share=<measured>"),  # a measurement: the quota bounds it at 0.5
    (r"throttled=(yes|no)", "throttled=<load>"),  # throttled only when the host left it 0.5
    (r'"text":" +\d+ +1 ', '"text":"<pid> 1 '),  # ps: the pids of execd and the entrypoint
)


def server_port(s: Session) -> str:
    return str(urlsplit(s.base_url).port or (443 if s.scheme == "https" else 80))


def inside_command(cmd: str, port: str) -> str:
    return cmd.replace("@SERVER_PORT@", port)


def s22(s: Session, ctx: Ctx) -> None:
    ex = ctx.execd
    assert ex is not None
    for _name, path in INSIDE_FILES:
        ex.get(path)
    for cwd in INSIDE_CWDS:
        ex.command({"command": "pwd", "cwd": cwd})
    port = server_port(s)
    for _name, cmd in INSIDE_PROBES:
        ex.command({"command": inside_command(cmd, port)})


# Two sandboxes serve the same in-sandbox port; each endpoint answers with its own sandbox's files (bridge
# network: one network namespace per container, execd's /proxy/9000 relays inside it).
SAME_PORT = 9000
SERVE_TEMPLATE = (
    "mkdir -p /tmp/www && echo 'i am @WHO@' > /tmp/www/who.txt && cd /tmp/www && "
    "(nohup python3 -m http.server @PORT@ --bind 127.0.0.1 >/dev/null 2>&1 &); "
    "for i in $(seq 50); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", @PORT@), 1)' "
    "2>/dev/null && break; sleep 0.1; done; echo serving"
)


def serve_command(who: str, port: int = SAME_PORT) -> str:
    """Serve a file saying ``i am <who>`` (the sandbox's id) on ``port``, from 127.0.0.1 inside the sandbox."""
    return SERVE_TEMPLATE.replace("@PORT@", str(port)).replace("@WHO@", who)


def s23(s: Session, ctx: Ctx) -> None:
    sandboxes = []
    for _ in range(2):
        sid = created_id(_create(s, ctx, ctx.default_create()))
        ex = execd_from(s, s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772"))
        s.wait_ready(ex)  # unrecorded: Docker's readiness window (accepted, then dropped) before execd listens
        sandboxes.append((sid, ex))
    for sid, ex in sandboxes:
        ex.command({"command": serve_command(sid)})
    for sid, _ex in sandboxes:
        r = s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/{SAME_PORT}")
        Execd(s, r.json()["endpoint"], r.json().get("headers") or {}).get("/who.txt")
    for sid, _ex in sandboxes:
        s.lc("DELETE", f"/v1/sandboxes/{sid}")
