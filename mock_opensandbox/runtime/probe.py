"""Can this process contain a sandbox? Probed once per process; the answer is one line the mock
prints at start-up and sends in ``x-mock-isolation``."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading

from mock_opensandbox.runtime import caps, optional
from mock_opensandbox.runtime import stages as scripts
from mock_opensandbox.runtime._util import DEFAULT_PATH, SYSTEM_DIRS, killpg, make_image_root, make_mountpoint, rmtree
from mock_opensandbox.runtime.cgroups import host
from mock_opensandbox.runtime.holder import Holder, own_pidns_fd, setns_function

_probe_lock = threading.Lock()
# (isolated, note, per-command unshare prefix, PID-namespace mode: "direct" | "helper" | None)
_probe_result: tuple[bool, str, list[str], str | None] | None = None
ISOLATION_NOTE: str | None = None  # filled in by the first probe_isolation()
_OFF = ("0", "off", "no", "false")
PROBE_HOSTNAME = "0123456789ab"
# the network is per mock (--network) and per sandbox: runtime/netns.py, sandbox.network_note()
NOT_CONTAINED = "network: a namespace of its own per sandbox unless --network host (see x-mock-isolation)"


def unshare_prefix(unshare: str) -> list[str]:
    if os.geteuid() == 0:
        return [unshare, "--mount", "--ipc", "--uts", "--propagation", "private"]
    return [unshare, "--user", "--map-root-user", "--mount", "--ipc", "--uts", "--propagation", "private"]


def probe_isolation() -> tuple[bool, str]:
    """Whether commands can run contained with the sandbox root as "/" (cached). Returns (ok, one-line note)."""
    global _probe_result, ISOLATION_NOTE
    with _probe_lock:
        if _probe_result is None:
            _probe_result = _probe()
            ISOLATION_NOTE = _probe_result[1]
        return _probe_result[0], _probe_result[1]


def probe_result() -> tuple[bool, str, list[str], str | None]:
    probe_isolation()
    assert _probe_result is not None
    return _probe_result


def isolation_note() -> str:
    return probe_isolation()[1]


def _cap_line_ok(lines: list[bytes]) -> bool:
    want = ("%016x" % caps.SANDBOX_CAP_MASK).encode()
    return any(line == b"CapEff:\t" + want for line in lines)


def _probe() -> tuple[bool, str, list[str], str | None]:
    fallback = (
        "commands run ON THE HOST as the mock's user, with cwd/HOME/TMPDIR inside the sandbox root; "
        "absolute paths such as /tmp are NOT shared with the files API and nothing is contained"
    )
    if os.environ.get("OSB_MOCK_ISOLATION", "").lower() in _OFF:
        return False, f"sandbox isolation disabled by OSB_MOCK_ISOLATION: {fallback}", [], None
    if os.geteuid() != 0 and optional.off("userns"):
        return False, f"sandbox isolation needs a user namespace (switched off by {optional.ENV}): {fallback}", [], None
    if not sys.platform.startswith("linux"):
        return False, f"sandbox isolation needs Linux namespaces ({sys.platform}): {fallback}", [], None
    unshare = shutil.which("unshare")
    setpriv = shutil.which("setpriv", path=DEFAULT_PATH)
    sh = shutil.which("sh")
    if not unshare or not sh:
        return False, f"sandbox isolation needs util-linux unshare (not found): {fallback}", [], None
    if not sys.executable:
        return False, f"sandbox isolation needs the Python interpreter's path (sys.executable): {fallback}", [], None
    prefix = unshare_prefix(unshare)
    tmp = tempfile.mkdtemp(prefix="osb-probe-")
    try:
        make_image_root(tmp)
        for d in SYSTEM_DIRS:
            make_mountpoint(tmp, d)
        env = {"PATH": DEFAULT_PATH}
        cmd = scripts.prelude_argv(
            prefix,
            os.path.realpath(tmp),
            "/tmp",
            PROBE_HOSTNAME,
            [
                "/bin/sh",
                "-c",
                "id -u; pwd; test -d /var/log && echo ok; cat /etc/hostname; grep CapEff /proc/self/status",
            ],
        )
        try:
            out = subprocess.run(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                env=env,
                timeout=20,
                cwd=tmp,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            return False, f"sandbox isolation probe failed ({exc}): {fallback}", [], None
        lines = out.stdout.splitlines()
        if (
            out.returncode != 0
            or lines[:4] != [b"0", b"/tmp", b"ok", PROBE_HOSTNAME.encode()]
            or not _cap_line_ok(lines)
        ):
            why = (out.stderr.decode("utf-8", "replace").strip().splitlines() or ["exit %d" % out.returncode])[-1]
            return False, f"sandbox isolation unavailable ({why[:160]}): {fallback}", [], None
    finally:
        rmtree(tmp)
    mode = "mount + IPC + UTS namespace" if os.geteuid() == 0 else "user + mount + IPC + UTS namespace"
    view = (
        "commands see the sandbox root as / (pivot_root; /usr /bin /lib* read-only from the host, a "
        "container /dev, read-only /sys and /proc/sys, a per-sandbox /etc) and run with the server's "
        "capability set %#x and no_new_privs" % caps.SANDBOX_CAP_MASK
    )
    view += "; " + seccomp_note()
    pid_mode, why = _probe_pidns(unshare, setpriv)
    if pid_mode is not None:
        how = "setns + nsenter" if pid_mode == "direct" else "a setns helper"
        return (
            True,
            (
                f"sandbox isolation: one PID + {mode} per sandbox via {unshare} and {how}; {view}; "
                f"`ps` shows only the sandbox's processes; {NOT_CONTAINED}"
            ),
            prefix,
            pid_mode,
        )
    return (
        True,
        (
            f"sandbox isolation: one {mode} per command via {unshare}; {view}; no PID namespace ({why}): "
            f"not contained: the host's processes (`ps` lists them and a root command may signal them), "
            f"the host network"
        ),
        prefix,
        None,
    )


def _probe_pidns(unshare: str, setpriv: str | None) -> tuple[str | None, str]:
    """Can a sandbox hold its own PID namespace that later commands join? Returns (mode, why-not)."""
    if os.environ.get("OSB_MOCK_PIDNS", "").lower() in _OFF:
        return None, "disabled by OSB_MOCK_PIDNS"
    nsenter = shutil.which("nsenter") or "nsenter"
    mode = "direct" if os.geteuid() == 0 else "helper"
    if mode == "direct":
        if not shutil.which("nsenter") or not setpriv:
            return None, "util-linux nsenter or setpriv not found"
        try:
            own_pidns_fd()
            setns_function()
        except (OSError, AttributeError) as exc:
            return None, f"setns unavailable: {exc}"
    elif not sys.executable:
        return None, "no Python interpreter path for the namespace helper"
    tmp = tempfile.mkdtemp(prefix="osb-probe-")
    holder: Holder | None = None
    try:
        make_image_root(tmp)
        for d in SYSTEM_DIRS:
            make_mountpoint(tmp, d)
        root = os.path.realpath(tmp)
        env = {"PATH": DEFAULT_PATH}
        holder, why = Holder.start(
            unshare,
            root,
            PROBE_HOSTNAME,
            ["tail", "-f", "/dev/null"],
            env,
            mode,
            implicit=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=20,
        )
        if holder is None:
            return None, why
        argv = ["/bin/sh", "-c", "echo $$; id -u; grep CapEff /proc/self/status; ls /proc"]
        p = None
        try:
            cmd, cmd_env = holder.command(nsenter, setpriv or "setpriv", "/", argv, env)
            with holder.children_inside():
                p = subprocess.Popen(
                    cmd,
                    cwd=root,
                    env=cmd_env,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    close_fds=True,
                    start_new_session=True,
                )
            out, err = p.communicate(timeout=20)
        except (OSError, subprocess.SubprocessError) as exc:
            if p is not None:
                killpg(p.pid, signal.SIGKILL)
                p.communicate()
            return None, f"joining the sandbox's namespaces failed: {exc}"
        raw = out.splitlines()
        lines = out.decode("utf-8", "replace").split()
        pids = [x for x in lines[4:] if x.isdigit()]
        if (
            p.returncode != 0
            or len(lines) < 4
            or not lines[0].isdigit()
            or lines[1] != "0"
            or not _cap_line_ok(raw)
            or not pids
            or len(pids) > 16
            or str(os.getpid()) in pids
            and os.getpid() > 16
        ):
            why = (err.decode("utf-8", "replace").strip().splitlines() or ["exit %s" % p.returncode])[-1]
            return None, f"joining the sandbox's namespaces failed: {why[:160]}"
        return mode, ""
    except OSError as exc:
        return None, f"PID namespace probe failed: {exc}"
    finally:
        if holder is not None:
            holder.kill()
        rmtree(tmp)


def seccomp_note() -> str:
    """Docker's default seccomp profile (scripts/seccomp.py): installed in every sandbox process, or why not."""
    if scripts.SECCOMP["seccomp_program"](os.uname().machine) is None:
        return "NO seccomp filter (no system call table for %s)" % os.uname().machine
    try:
        with open("/proc/self/status") as fh:
            has = any(line.startswith("Seccomp:") for line in fh)
    except OSError:
        has = False
    if not has:
        return "NO seccomp filter (the kernel has no CONFIG_SECCOMP)"
    return "the system calls Docker's default seccomp profile closes answer EPERM"


def isolation_header() -> str:
    """The x-mock-isolation value: "isolated" (contained like the real sandbox), "isolated; not
    contained: ..." without a PID namespace, "host; <why>" (the network part: sandbox.network_note)."""
    ok, note = probe_isolation()
    if not ok:
        return "host; " + " ".join(note.split())
    if not seccomp_note().startswith("the "):
        return "isolated; not contained: " + seccomp_note() + _limits(", ")
    if probe_result()[3] is None:
        return "isolated; not contained: the host's processes (no PID namespace of the sandbox's own)" + _limits(", ")
    return "isolated" + _limits("; not contained: ")


def _limits(sep: str) -> str:
    """What of resourceLimits / pids_limit cannot be applied here (cgroups.py), '' when all can."""
    note = host().note()
    return sep + note if note else ""
