"""The containment probes (QUIRKS.md, Containment; fixtures/21_containment_probes.json), shared by
tiers/t1/sandbox/test_containment*.py.

Each probe is a shell command run inside a sandbox plus a check of what it printed and of the
host afterwards. The expected values come from the real sandbox: fixtures/21_containment_probes.json
(recorded from opensandbox-server 1.1.1 + Docker 20.10 by `python -m record`, scenario 21).
Every probe fails on a mock that hands the host to the sandbox (full capabilities, the host's
/dev, /etc, /proc/sys, /sys, a chroot instead of pivot_root).
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import re
import subprocess
import sys
import uuid
from typing import Any, Callable, Iterator, NamedTuple

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
FIXTURE = os.path.join(REPO, "fixtures", "21_containment_probes.json")
TOKEN = "osb-probe-" + uuid.uuid4().hex[:12]


def recorded() -> dict[str, list[str]]:
    """command -> stdout lines, from the real sandbox's recording."""
    with open(FIXTURE, encoding="utf-8") as fh:
        data = json.load(fh)
    out: dict[str, list[str]] = {}
    for ex in data["exchanges"]:
        cmd = json.loads(ex["request"]["body"])["command"]
        lines = []
        for chunk in ex["response"]["body"].split("\n\n"):
            chunk = re.sub(r"\{\{[a-z_:0-9]+\}\}", "0", chunk.strip())
            if chunk:
                ev = json.loads(chunk)
                if ev.get("type") == "stdout":
                    lines.append(ev["text"])
        out[cmd] = lines
    return out


REC = recorded()


def recorded_caps() -> dict[str, str]:
    return dict(line.split(":\t", 1) for line in REC["grep Cap /proc/self/status"])


def recorded_dev() -> list[str]:
    names = [line.split()[-1] if "->" not in line else line.split()[-3] for line in REC["ls -la /dev"][1:]]
    return sorted(n for n in names if n not in (".", ".."))


def ro_mounts(mountinfo: list[str], prefixes: tuple[str, ...] = ("/proc", "/sys")) -> set[str]:
    """Read-only mount points under the kernel interfaces (cgroup hierarchies by name)."""
    out = set()
    for line in mountinfo:
        f = line.split()
        if len(f) < 6:
            continue
        mp, opts = f[4], f[5].split(",")
        if "ro" in opts and mp.startswith(prefixes):
            out.add(mp)
    return out


class Probe(NamedTuple):
    name: str
    cmd: str
    check: Callable[[int, str], None]  # (exit status, stdout+stderr) -> raises AssertionError
    pidns_only: bool = False  # PID 1 is the sandbox's init only with a PID namespace
    python: bool = False  # needs python3 inside the sandbox view
    argv: tuple[str, ...] = ()  # run this argv as it is instead of /bin/sh -c cmd


def _lines(out: str) -> list[str]:
    return [line for line in out.splitlines() if line]


def _host_absent(*paths: str) -> None:
    for p in paths:
        assert not os.path.lexists(p), f"the sandbox wrote the host's {p}"


def _check_caps(rc: int, out: str) -> None:
    got = dict(line.split(":\t", 1) for line in _lines(out) if ":\t" in line)
    want = recorded_caps()
    assert {k: got.get(k) for k in want} == want
    assert got.get("NoNewPrivs") == "1"


def _check_dev(rc: int, out: str) -> None:
    assert rc == 0, out
    assert sorted(_lines(out)) == recorded_dev()


def _check_no_block(rc: int, out: str) -> None:
    assert _lines(out) == ["0"], out


def _check_remount(rc: int, out: str) -> None:
    assert "remount=0" not in out and "touch=0" not in out, out
    assert "permission denied" in out.lower(), out
    _host_absent("/usr/" + TOKEN)


def _check_write_etc_dev(rc: int, out: str) -> None:
    _host_absent("/etc/" + TOKEN, "/dev/" + TOKEN)


def _check_drop_caches(rc: int, out: str) -> None:
    assert rc != 0 and "Read-only file system" in out, out


def _check_cgroup(rc: int, out: str) -> None:
    assert "mkdir=0" not in out and "procs=0" not in out, out
    _host_absent("/sys/fs/cgroup/pids/" + TOKEN)


def _check_shadow(rc: int, out: str) -> None:
    with open(os.path.join(REPO, "mock_opensandbox", "runtime", "etc", "shadow")) as fh:
        assert out.split("---\n")[0] == fh.read(), "not the sandbox's own shadow stub"
    try:
        with open("/etc/shadow") as fh:
            host = [line for line in fh.read().splitlines() if line and line.split(":")[1] not in ("*", "!", "!*")]
    except OSError:
        host = []
    for line in host:  # no password hash of the host leaks
        assert line not in out
    assert "ssh=0" not in out, out
    for name in ("/etc/passwd-", "/etc/shadow-", "/root/.ssh"):  # host backups and root's keys stay invisible
        assert name not in out.split("---\n", 1)[1], out


def _check_passwd(rc: int, out: str) -> None:
    assert _lines(out) == REC["cat /etc/passwd"]


def _check_hostname(rc: int, out: str) -> None:
    lines = _lines(out)
    assert len(lines) == 3 and len(set(lines)) == 1, out
    assert re.fullmatch(r"[0-9a-f]{12}", lines[0]), out
    assert re.fullmatch(r"[0-9a-f]{12}", REC["cat /etc/hostname"][0])


def _check_mountinfo(rc: int, out: str) -> None:
    assert ro_mounts(_lines(out)) == ro_mounts(REC["cat /proc/self/mountinfo"])


def _check_masked(rc: int, out: str) -> None:
    assert _lines(out) == ["keys=0", "timer_list=0", "firmware=0"], out


def _check_privileged_ops(rc: int, out: str) -> None:
    for op in ("mount", "umount", "unshare_m", "unshare_userns", "unshare_umount", "mknod", "hostname"):
        assert f"{op}=0" not in out, f"{op} succeeded inside the sandbox:\n{out}"
    _host_absent("/usr/" + TOKEN + "-m", "/usr/" + TOKEN + "-u")


def _check_insmod_class(rc: int, out: str) -> None:
    got = dict(line.split("=", 1) for line in _lines(out) if "=" in line)
    # EPERM without CAP_SYS_MODULE (ENOSYS: a kernel without modules, EFAULT/EINVAL would mean the capability)
    assert got.get("init_module") in ("-1/1", "-1/38"), out
    assert got.get("iopl") in ("-1/1", "-1/38"), out  # CAP_SYS_RAWIO (ENOSYS off x86)
    assert got.get("swapoff") == "-1/1", out  # CAP_SYS_ADMIN before the path lookup (else ENOENT)


def _check_chroot_escape(rc: int, out: str) -> None:
    assert _lines(out)[-1:] == ["escaped=False"], out


def _check_pid1(rc: int, out: str) -> None:
    _check_caps(rc, out)


HOST_MARKER_DIR = "/tmp"  # the chroot-escape probe looks for this host file by its host path


def probes(host_marker: str) -> list[Probe]:
    t = TOKEN
    return [
        Probe("caps", "grep -E '^(Cap|NoNewPrivs)' /proc/self/status", _check_caps),
        Probe("pid1_caps", "grep -E '^(Cap|NoNewPrivs)' /proc/1/status", _check_pid1, pidns_only=True),
        Probe("dev", "ls /dev", _check_dev),
        Probe("no_block_devices", "find /dev -type b 2>/dev/null | wc -l", _check_no_block),
        Probe(
            "remount_usr_rw",
            f"mount -o remount,rw /usr 2>&1; echo remount=$?; touch /usr/{t} 2>&1; echo touch=$?",
            _check_remount,
        ),
        Probe("write_etc_dev", f"echo x > /etc/{t}; touch /dev/{t}; ls /etc/{t} /dev/{t}", _check_write_etc_dev),
        Probe("proc_sys_write", "echo 1 > /proc/sys/vm/drop_caches", _check_drop_caches),
        Probe(
            "cgroup_write",
            f"mkdir /sys/fs/cgroup/pids/{t} 2>&1; echo mkdir=$?; "
            "echo $$ 2>&1 > /sys/fs/cgroup/pids/cgroup.procs; echo procs=$?",
            _check_cgroup,
        ),
        Probe(
            "host_secrets",
            "cat /etc/shadow; echo ---; ls /etc/ssh >/dev/null 2>&1; echo ssh=$?; "
            "ls /etc/passwd- /etc/shadow- /etc/gshadow /root/.ssh 2>/dev/null; true",
            _check_shadow,
        ),
        Probe("passwd", "cat /etc/passwd", _check_passwd),
        Probe("hostname", "hostname; cat /etc/hostname; cat /proc/sys/kernel/hostname", _check_hostname),
        Probe("mountinfo_ro", "cat /proc/self/mountinfo", _check_mountinfo),
        Probe(
            "masked",
            "echo keys=$(wc -c < /proc/keys); echo timer_list=$(wc -c < /proc/timer_list); "
            "echo firmware=$(ls /sys/firmware | wc -l)",
            _check_masked,
        ),
        Probe(
            "privileged_ops",
            "mkdir -p /tmp/m; mount -t tmpfs none /tmp/m 2>&1; echo mount=$?; umount /proc/sys 2>&1; echo umount=$?; "
            f"unshare -m sh -c 'mount -o remount,rw /usr && touch /usr/{t}-m' 2>&1; echo unshare_m=$?; "
            f"unshare -Urm sh -c 'mount -o remount,rw /usr && touch /usr/{t}-u' 2>&1; echo unshare_userns=$?; "
            "unshare -Urm sh -c 'umount /proc/sys && echo 1 > /proc/sys/vm/drop_caches' 2>&1; "
            "echo unshare_umount=$?; "
            'mknod /tmp/blk b 8 0 2>&1; echo mknod=$?; hostname "$(hostname)" 2>&1; echo hostname=$?',
            _check_privileged_ops,
        ),
        Probe(
            "insmod_class",
            "python3 -c 'import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            'for name, call in (("init_module", lambda: libc.init_module(None, 0, b"")), '
            '("iopl", lambda: libc.iopl(3)), ("swapoff", lambda: libc.swapoff(b"/nonexistent"))):\n'
            '    ctypes.set_errno(0); r = call(); print("%s=%d/%d" % (name, r, ctypes.get_errno()))\'',
            _check_insmod_class,
            python=True,
        ),
        Probe(
            "chroot_escape",
            'python3 -c \'import os\nos.makedirs("/tmp/jail", exist_ok=True)\nos.chroot("/tmp/jail")\n'
            'for _ in range(64): os.chdir("..")\nos.chroot(".")\n'
            f'print("escaped=%s" % os.path.exists({json.dumps(host_marker)}))\'',
            _check_chroot_escape,
            python=True,
        ),
    ]


# The calls Docker's default seccomp profile closes (moby/profiles seccomp/default.json: SCMP_ACT_ERRNO,
# errno 1; QUIRKS.md "seccomp"): add_key(2) of a "user" key into the session keyring
# (KEY_SPEC_SESSION_KEYRING = -3), keyctl(2) KEYCTL_GET_KEYRING_ID, bpf(2), perf_event_open(2), mount(2)
SECCOMP_CALLS = ("add_key", "keyctl", "bpf", "perf_event_open", "mount")
_SECCOMP_SCRIPT = r"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
nr = {"x86_64": (248, 250, 321, 298, 165), "aarch64": (217, 219, 280, 241, 40)}[os.uname().machine]
calls = [("add_key", nr[0], (b"user", b"osb-probe", b"v", 1, -3)), ("keyctl", nr[1], (0, -3, 0)),
         ("bpf", nr[2], (0, 0, 0)), ("perf_event_open", nr[3], (0, 0, -1, -1, 0)),
         ("mount", nr[4], (b"none", b"/tmp", b"tmpfs", 0, 0))]
for name, n, args in calls:
    r = libc.syscall(n, *args)
    print(name, r, ctypes.get_errno())
"""
UNSHARE_REFUSED = "unshare: unshare failed: Operation not permitted"
# the filter's mark in /proc/self/status (2 = SECCOMP_MODE_FILTER) and what it does to unshare -U
SECCOMP_STATUS_CMD = "grep Seccomp: /proc/self/status; unshare -U true"
SECCOMP_STATUS_LINES = ["Seccomp:\t2", UNSHARE_REFUSED]


def _check_unshare_refused(rc: int, out: str) -> None:
    assert (rc, out.strip()) == (1, UNSHARE_REFUSED)


def _check_seccomp_eperm(rc: int, out: str) -> None:
    assert rc == 0, out
    got = {line.split()[0]: line.split()[1:] for line in out.splitlines()}
    assert got == {n: ["-1", "1"] for n in SECCOMP_CALLS}


def _check_ordinary_calls(rc: int, out: str) -> None:
    assert (rc, out.split()) == (0, ["t", "ok"])


def seccomp_probes() -> list[Probe]:
    """Closed calls answer EPERM; threads (clone3 ENOSYS -> clone), fork and a plain socket still work,
    as in a container."""
    return [
        Probe("unshare_user", "unshare -U true", _check_unshare_refused, argv=("unshare", "-U", "true")),
        Probe(
            "keyring_bpf_perf_mount",
            "",
            _check_seccomp_eperm,
            python=True,
            argv=("python3", "-I", "-S", "-c", _SECCOMP_SCRIPT),
        ),
        Probe(
            "ordinary_calls",
            "",
            _check_ordinary_calls,
            python=True,
            argv=(
                "python3",
                "-I",
                "-c",
                "import socket, subprocess, threading; "
                "t = threading.Thread(target=print, args=('t',)); t.start(); t.join(); socket.socket().close(); "
                "subprocess.run(['true'], check=True); print('ok')",
            ),
        ),
    ]


@contextlib.contextmanager
def isolated_runtime(root: str) -> Iterator[Any]:
    """A SandboxRuntime(root, isolate=True) for probes; cleaned up with what a probe could leave on the host."""
    from mock_opensandbox.runtime import SandboxRuntime  # lazily: run as a script, the repo joins sys.path first

    r = SandboxRuntime(root, isolate=True)
    try:
        yield r
    finally:
        r.cleanup()
        cleanup_host_leftovers()


def run_probe(rt: Any, pr: Probe) -> tuple[int, str]:
    """(exit status, stdout + stderr) of one probe spawned in the runtime, cwd /."""
    argv = list(pr.argv) or ["/bin/sh", "-c", pr.cmd]
    p = rt.spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd="/")
    out, _ = p.communicate(timeout=60)
    return p.returncode, out.decode("utf-8", "replace")


API_PROBES = (
    "caps",
    "pid1_caps",
    "dev",
    "no_block_devices",
    "remount_usr_rw",
    "write_etc_dev",
    "proc_sys_write",
    "cgroup_write",
    "host_secrets",
    "hostname",
    "mountinfo_ro",
    "privileged_ops",
    "chroot_escape",
)
BODY = {"image": {"uri": "python:3"}, "entrypoint": ["tail", "-f", "/dev/null"], "resourceLimits": {}}


class Api:
    def __init__(self, osb):
        self.osb = osb
        self.hostport = osb.base_url.split("://")[1]

    def call(
        self, method: str, path: str, body=None, hostport: str | None = None, headers: dict[str, str] | None = None
    ) -> tuple[int, bytes]:
        c = http.client.HTTPConnection(hostport or self.hostport, timeout=60)
        h = {"OPEN-SANDBOX-API-KEY": self.osb.api_key or "", "Content-Type": "application/json"}
        h.update(headers or {})
        try:
            c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def create(self) -> str:
        status, body = self.call("POST", "/v1/sandboxes", BODY)
        assert status == 202, body
        return json.loads(body)["id"]

    def execd(self, sid: str) -> tuple[str, str, dict[str, str]]:
        ep = json.loads(self.call("GET", f"/v1/sandboxes/{sid}/endpoints/44772")[1])
        hostport, _, prefix = ep["endpoint"].partition("/")
        return hostport, ("/" + prefix if prefix else ""), ep.get("headers") or {}

    def run(self, sid: str, command: str) -> tuple[int, str]:
        """(exit status, stdout + stderr lines) of POST /command."""
        hostport, prefix, headers = self.execd(sid)
        if self.osb.execd_token:
            headers = dict(headers, **{"X-EXECD-ACCESS-TOKEN": self.osb.execd_token})
        status, body = self.call("POST", prefix + "/command", {"command": command}, hostport=hostport, headers=headers)
        assert status == 200, body
        from mock_opensandbox.wire import sse  # lazily: run as a script, the repo joins sys.path in __main__

        rc, lines = 0, []
        for ev in sse.parse_stream([body]):
            if ev.get("type") in ("stdout", "stderr"):
                lines.append(ev["text"])
            elif ev.get("type") == "error":
                rc = int(ev["error"].get("evalue") or 1)
        return rc, "\n".join(lines) + "\n"


def host_python_in_view() -> bool:
    return os.path.isfile("/usr/bin/python3")


def cleanup_host_leftovers() -> None:
    """Undo what a probe could have done to the host of an uncontained mock (the tests then fail)."""
    for p in ("/usr/" + TOKEN, "/usr/" + TOKEN + "-m", "/usr/" + TOKEN + "-u", "/etc/" + TOKEN, "/dev/" + TOKEN):
        try:
            os.unlink(p)
        except OSError:
            pass
    try:
        os.rmdir("/sys/fs/cgroup/pids/" + TOKEN)
    except OSError:
        pass


if __name__ == "__main__":  # run the battery in a fresh process (non-root, OSB_MOCK_PIDNS=0): JSON on stdout
    sys.path.insert(0, REPO)
    import tempfile

    from mock_opensandbox.runtime import SandboxRuntime

    marker = sys.argv[1]
    if sys.argv[2:] == ["--http"]:  # through POST /command of a MockOpenSandbox() sandbox
        from mock_opensandbox.server import MockOpenSandbox

        osb = MockOpenSandbox(execd_close_delay=0.05).start()
        result = {"uid": os.geteuid(), "probes": {}}
        try:
            api = Api(osb)
            sid = api.create()
            result["pid_namespace"] = osb.sandboxes[sid].runtime.pid_namespace
            for pr in probes(marker):
                if pr.name in API_PROBES:
                    result["probes"][pr.name] = list(api.run(sid, pr.cmd))
        finally:
            osb.stop()
        print(json.dumps(result))
        sys.exit(0)
    base = tempfile.mkdtemp(prefix="osb-contain-")
    rt = SandboxRuntime(os.path.join(base, "root"), isolate=True)
    result = {"pid_namespace": rt.pid_namespace, "uid": os.geteuid(), "probes": {}}
    try:
        # a bare name: the exec's PATH lookup runs after pivot_root, where the mock's stdlib may be gone
        result["path_lookup"] = rt.spawn(["true"], stderr=subprocess.PIPE).wait(timeout=60)
        for pr in probes(marker):
            p = rt.spawn(["/bin/sh", "-c", pr.cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd="/")
            out, _ = p.communicate(timeout=60)
            result["probes"][pr.name] = [p.returncode, out.decode("utf-8", "replace")]
        holder = rt.pid1.holder
        result["forker"] = holder is not None and holder.forker is not None  # runtime/forker.py forked them
    finally:
        rt.cleanup()
        os.rmdir(base)
    print(json.dumps(result))
