"""The sandbox underneath one mock execd: a root directory that plays the sandbox's "/", path mapping
that never leaves it, and real processes (one process group per command, like execd's Setpgid).

Isolation. Where the OS allows it every process runs as
``unshare [--user --map-root-user] --mount sh -c PRELUDE`` : the prelude bind-mounts the host's
system directories (read-only where possible) into the root and then ``unshare --root/--wd`` makes
the root the process's "/". Commands then see a file written through the files API at the same
absolute path, and ``id -u`` prints 0 as in recording 12. The mounts live in a private mount
namespace: the host never sees them, so removing the root can never reach host files.
Where that does not work (no ``unshare``, user namespaces disabled, not Linux) commands run on the
host with cwd/HOME/TMPDIR inside the root (seed 000 §5.3) and ``isolated`` is False.

PID namespace. Like a container, the whole sandbox shares ONE mount + PID namespace (+ user
namespace when not root) and ``ps`` inside shows only the sandbox's processes (seed 001: PID 1
``/bin/sh /opt/opensandbox/bootstrap.sh tail -f /dev/null``, execd, ``tail -f /dev/null``). The
namespaces are created once per sandbox by its main process, the *holder*:
``unshare --mount --pid --fork --kill-child sh -c HOLDER_PRELUDE``; the prelude makes the same bind
mounts, mounts a fresh procfs for the new PID namespace at ``<root>/proc``, reports its host pid
through a FIFO and becomes PID 1: a short ``/bin/sh -s`` init that runs the entrypoint as its
child, reaps orphans and exits with the entrypoint's status (what bootstrap.sh does). A runtime
whose entrypoint was never started gets ``tail -f /dev/null`` as its main process on first use.
Later commands join the holder's namespaces. As root the spawning thread switches its
``pid_for_children`` to the sandbox's PID namespace (``setns``) for the one ``fork`` and the child
runs ``nsenter --mount -- unshare --root --wd ARGV``: no intermediate process, the command is the
Popen child, in its own session and process group like execd's Setpgid. A non-root process cannot
do that from a multithreaded mock (entering a user namespace needs a single thread), so a tiny
Python helper (``_NSEXEC``, started with ``-I -S``) enters the user, mount and PID namespaces,
forks the command and waits: it survives the signals sent to the process group and passes the
command's exit status or fatal signal on exactly (util-linux 2.38's ``unshare --fork`` turns a
SIGKILLed child into "exit 1" plus a stderr line). When the main process has exited the sandbox is
dead like a stopped container and spawn() raises SandboxNotRunning. Without ``nsenter`` (root) or
PID namespaces (``OSB_MOCK_PIDNS=0`` forces it) every command gets its own mount namespace as above
and shares the host's PID namespace and /proc.

Pause = SIGSTOP of every process group (seed 000 §5.3, "docker pause ~ SIGSTOP"), resume = SIGCONT.
Standard library only, Python >= 3.10.
"""
from __future__ import annotations

import contextlib
import errno
import os
import select
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Any, Mapping, Sequence

__all__ = ["SandboxRuntime", "PathEscape", "SandboxTerminated", "SandboxNotRunning", "probe_isolation",
           "isolation_note", "ISOLATION_NOTE", "SYSTEM_DIRS"]

# Host directories bind-mounted into every isolated sandbox view. /dev and /proc stay writable
# (/dev/null, /proc/self/fd); the others are remounted read-only.
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "dev", "proc", "sys")
_WRITABLE_MOUNTS = ("dev", "proc")
# Directories every sandbox root starts with (the brief; a Debian image has them all).
BASE_DIRS = ("tmp", "home", "root", "workspace")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MAX_SYMLINKS = 40  # Linux's own limit (ELOOP)
_MARKER_ENV = "OPENSANDBOX_MOCK_SANDBOX"  # only used when not isolated, to find escaped processes

# Both preludes start by binding the host's system dirs into the sandbox root $R (read-only but for
# /dev and /proc), inside the new mount namespace.
def _bind_system_dirs(dirs) -> str:
    return r'''for d in __DIRS__; do
  if [ -L "/$d" ]; then
    [ -e "$R/$d" ] || [ -L "$R/$d" ] || ln -s "$(readlink "/$d")" "$R/$d" 2>/dev/null
  elif [ -d "/$d" ]; then
    if [ -L "$R/$d" ] || { [ -e "$R/$d" ] && [ ! -d "$R/$d" ]; }; then rm -f "$R/$d"; fi
    mkdir -p "$R/$d" || exit 125
    mount --rbind "/$d" "$R/$d" || exit 125
    case " __RW__ " in *" $d "*) ;; *) mount -o remount,bind,ro "$R/$d" 2>/dev/null ;; esac
  fi
done
'''.replace("__DIRS__", " ".join(dirs)).replace("__RW__", " ".join(_WRITABLE_MOUNTS))

# The prelude runs inside the new mount namespace, before the sandbox root becomes "/".
# $1 = unshare binary, $2 = root, $3 = working directory inside the sandbox, $4... = argv.
_PRELUDE = r'''
U="$1"; R="$2"; W="$3"; shift 3
''' + _bind_system_dirs(SYSTEM_DIRS) + r'''exec "$U" --root="$R" --wd="$W" "$@"
'''

# The holder's prelude: same bind mounts, but /proc is a fresh procfs of the new PID namespace (seed
# 001: `ps` in a sandbox lists only its own processes). $1 = unshare binary, $2 = root, $3 = a FIFO
# the mock reads, $4... = the entrypoint. It opens the FIFO as fd 9, reports "pid <its host pid>"
# (read through the host's /proc, still mounted at /proc here) and becomes PID 1: an init that
# starts the entrypoint as its child, reports "started", reaps orphans (its `wait` reaps every
# child) and exits with the entrypoint's status; TERM/INT are forwarded and end it with 0 -
# bootstrap.sh's shape (seed 001 process list; execd bootstrap.sh: `"$@" &`, `wait $CMD_PID`,
# `exit $CMD_STATUS`, TERM/INT traps).
_HOLDER_PRELUDE = r"""
U="$1"; R="$2"; F="$3"; shift 3
exec 9>"$F" || exit 125
""" + _bind_system_dirs(d for d in SYSTEM_DIRS if d != "proc") + r"""if [ -L "$R/proc" ] || { [ -e "$R/proc" ] && [ ! -d "$R/proc" ]; }; then rm -f "$R/proc"; fi
mkdir -p "$R/proc" || exit 125
mount -t proc -o nosuid,nodev,noexec proc "$R/proc" || exit 125
read -r P _ < /proc/self/stat || exit 125
echo "pid $P" >&9 || exit 125
case "$1" in -*) set -- -- "$@" ;; esac
exec "$U" --root="$R" --wd=/ /bin/sh -s "$@" <<'OSB_INIT'
trap 'kill -TERM $c 2>/dev/null; wait $c; exit 0' TERM INT
"$@" </dev/null 9>&- &
c=$!
echo started >&9
exec 9>&-
wait $c
OSB_INIT
"""
# Non-root: enter a sandbox's user, mount and PID namespaces (a fresh, single-threaded process may;
# the multithreaded mock may not), fork the command into them and wait for it. The helper shares
# the command's process group, so it ignores the job-control and termination signals the mock
# sends to that group and lets the command decide; it then exits with the command's status or
# dies of the same signal (SIGKILL included), so Popen sees what it would see for the command
# itself. argv: target pid, root, working directory, keep-LC_CTYPE flag, command...
_NSEXEC = r"""
import ctypes, errno, os, sys
import _signal as signal  # the C module: `signal` would import enum (~5 ms per command)
def fail(msg, code):
    try:
        os.write(2, msg.encode("utf-8", "replace") + b"\n")
    finally:
        os._exit(code)
def main():
    target, root, wd, keep_lc = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4] == "1"
    argv = sys.argv[5:]
    if not keep_lc:
        os.environ.pop("LC_CTYPE", None)
    libc = ctypes.CDLL(None, use_errno=True)
    for name, flag in (("user", 0x10000000), ("mnt", 0x00020000), ("pid", 0x20000000)):
        try:
            fd = os.open("/proc/%d/ns/%s" % (target, name), os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            fail("nsenter: cannot open /proc/%d/ns/%s: %s" % (target, name, e.strerror), 1)
        if libc.setns(fd, flag) != 0:
            fail("nsenter: reassociate to namespace '%s' failed: %s" % (name, os.strerror(ctypes.get_errno())), 1)
        os.close(fd)
    sigs = [signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2,
            signal.SIGALRM]
    signal.pthread_sigmask(signal.SIG_BLOCK, sigs)
    try:
        pid = os.fork()
    except OSError as e:
        fail("unshare: fork failed: %s" % e.strerror, 1)
    if pid == 0:
        for s in sigs + [signal.SIGPIPE, signal.SIGXFSZ]:
            signal.signal(s, signal.SIG_DFL)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG, like unshare --kill-child
        signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs)
        try:
            os.chroot(root)
        except OSError as e:
            fail("unshare: cannot change root directory to %s: %s" % (root, e.strerror), 1)
        try:
            os.chdir(wd)
        except OSError as e:
            fail("unshare: cannot change directory to %s: %s" % (wd, e.strerror), 1)
        try:
            os.execvp(argv[0], argv)
        except OSError as e:
            fail("unshare: failed to execute %s: %s" % (argv[0], e.strerror), 127 if e.errno == errno.ENOENT else 126)
    for s in sigs:
        signal.signal(s, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, sigs)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    if os.WIFSIGNALED(status):
        s = os.WTERMSIG(status)
        if s not in (signal.SIGKILL, signal.SIGSTOP):
            signal.signal(s, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, [s])
        os.kill(os.getpid(), s)
        os._exit(128 + s)
    os._exit(os.waitstatus_to_exitcode(status))
main()
"""

# A runtime used without start_entrypoint() (stand-alone execd, unit tests) gets this main process,
# the usual keep-alive entrypoint of OpenSandbox sandboxes (seed 001).
IMPLICIT_ENTRYPOINT = ("tail", "-f", "/dev/null")
HOLDER_READY_TIMEOUT = 15.0
CLONE_NEWPID = 0x20000000


class PathEscape(ValueError):
    """A sandbox path that would resolve outside the sandbox root (never returned, always raised)."""


class SandboxTerminated(RuntimeError):
    """spawn() after terminate()."""


class SandboxNotRunning(SandboxTerminated):
    """spawn() after the sandbox's main process (PID 1 of its PID namespace) exited: the sandbox is
    dead like a stopped container and nothing can join its namespaces."""


# ---------------------------------------------------------------------------------------------
# isolation probe (once per process)

_probe_lock = threading.Lock()
# (isolated, note, per-command unshare prefix, PID-namespace mode: "direct" | "helper" | None)
_probe_result: tuple[bool, str, list[str], str | None] | None = None
ISOLATION_NOTE: str | None = None  # filled in by the first probe_isolation()
_OFF = ("0", "off", "no", "false")


def _unshare_prefix(unshare: str) -> list[str]:
    if os.geteuid() == 0:
        return [unshare, "--mount", "--propagation", "private"]
    return [unshare, "--user", "--map-root-user", "--mount", "--propagation", "private"]


def probe_isolation() -> tuple[bool, str]:
    """Whether commands can run with the sandbox root as "/" (cached). Returns (ok, one-line note)."""
    global _probe_result, ISOLATION_NOTE
    with _probe_lock:
        if _probe_result is None:
            _probe_result = _probe()
            ISOLATION_NOTE = _probe_result[1]
        return _probe_result[0], _probe_result[1]


def isolation_note() -> str:
    return probe_isolation()[1]


def _probe() -> tuple[bool, str, list[str], str | None]:
    fallback = ("commands run on the host with cwd/HOME/TMPDIR inside the sandbox root; absolute paths "
                "such as /tmp are NOT shared with the files API")
    if os.environ.get("OSB_MOCK_ISOLATION", "").lower() in _OFF:
        return False, f"sandbox isolation disabled by OSB_MOCK_ISOLATION: {fallback}", [], None
    if not sys.platform.startswith("linux"):
        return False, f"sandbox isolation needs Linux mount namespaces ({sys.platform}): {fallback}", [], None
    unshare = shutil.which("unshare")
    sh = shutil.which("sh")
    if not unshare or not sh:
        return False, f"sandbox isolation needs util-linux unshare (not found): {fallback}", [], None
    prefix = _unshare_prefix(unshare)
    tmp = tempfile.mkdtemp(prefix="osb-probe-")
    try:
        for d in BASE_DIRS:
            os.mkdir(os.path.join(tmp, d))
        env = {"PATH": DEFAULT_PATH}
        cmd = prefix + [sh, "-c", _PRELUDE, "osb-prelude", unshare, tmp, "/tmp", "/bin/sh", "-c",
                        "id -u; pwd; test -d /workspace && echo ok"]
        try:
            out = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, env=env, timeout=10, cwd=tmp)
        except (OSError, subprocess.SubprocessError) as exc:
            return False, f"sandbox isolation probe failed ({exc}): {fallback}", [], None
        if out.returncode != 0 or out.stdout.split() != [b"0", b"/tmp", b"ok"]:
            why = (out.stderr.decode("utf-8", "replace").strip().splitlines() or ["exit %d" % out.returncode])[-1]
            return False, f"sandbox isolation unavailable ({why[:160]}): {fallback}", [], None
    finally:
        _rmtree(tmp)
    mode = "mount namespace" if os.geteuid() == 0 else "user + mount namespace"
    pid_mode, why = _probe_pidns(unshare)
    if pid_mode is not None:
        how = ("setns + nsenter" if pid_mode == "direct" else "a setns helper")
        return True, (f"sandbox isolation: one PID + {mode} per sandbox via {unshare} and {how}; commands "
                      "see the sandbox root as / (system dirs bind-mounted read-only from the host) and "
                      "`ps` shows only the sandbox's processes"), prefix, pid_mode
    return True, (f"sandbox isolation: {mode} via {unshare}; commands see the sandbox root as / "
                  "(system dirs bind-mounted read-only from the host); no PID namespace "
                  f"({why}): `ps` in a sandbox shows every host process"), prefix, None


def _probe_pidns(unshare: str) -> tuple[str | None, str]:
    """Can a sandbox hold its own PID namespace that later commands join? Returns (mode, why-not)."""
    if os.environ.get("OSB_MOCK_PIDNS", "").lower() in _OFF:
        return None, "disabled by OSB_MOCK_PIDNS"
    nsenter = shutil.which("nsenter") or "nsenter"
    mode = "direct" if os.geteuid() == 0 else "helper"
    if mode == "direct":
        if not shutil.which("nsenter"):
            return None, "util-linux nsenter not found"
        try:
            _own_pidns_fd()
            _setns_function()
        except (OSError, AttributeError) as exc:
            return None, f"setns unavailable: {exc}"
    elif not sys.executable:
        return None, "no Python interpreter path for the namespace helper"
    tmp = tempfile.mkdtemp(prefix="osb-probe-")
    holder: _Holder | None = None
    try:
        for d in BASE_DIRS:
            os.mkdir(os.path.join(tmp, d))
        for d in SYSTEM_DIRS:
            _make_mountpoint(tmp, d)
        env = {"PATH": DEFAULT_PATH}
        holder, why = _Holder.start(unshare, tmp, list(IMPLICIT_ENTRYPOINT), env, mode, implicit=True,
                                    stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=10)
        if holder is None:
            return None, why
        argv = ["/bin/sh", "-c", "echo $$; id -u; ls /proc"]
        p = None
        try:
            with holder.children_inside():
                p = subprocess.Popen(holder.command(nsenter, unshare, tmp, "/", argv, env), cwd=tmp, env=env,
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     close_fds=True, start_new_session=True)
            out, err = p.communicate(timeout=10)
        except (OSError, subprocess.SubprocessError) as exc:
            if p is not None:
                _killpg(p.pid, signal.SIGKILL)
                p.communicate()
            return None, f"joining the sandbox's namespaces failed: {exc}"
        lines = out.decode("utf-8", "replace").split()
        pids = [x for x in lines[2:] if x.isdigit()]
        if (p.returncode != 0 or len(lines) < 2 or not lines[0].isdigit() or lines[1] != "0"
                or not pids or len(pids) > 16 or str(os.getpid()) in pids and os.getpid() > 16):
            why = (err.decode("utf-8", "replace").strip().splitlines() or ["exit %s" % p.returncode])[-1]
            return None, f"joining the sandbox's namespaces failed: {why[:160]}"
        return mode, ""
    except OSError as exc:
        return None, f"PID namespace probe failed: {exc}"
    finally:
        if holder is not None:
            holder.kill()
        _rmtree(tmp)


# ---------------------------------------------------------------------------------------------
# joining a sandbox's namespaces

_setns_fn: Any = None
_own_pidns: int | None = None


def _setns_function() -> Any:
    """setns(2): os.setns on Python >= 3.12, libc through ctypes before."""
    global _setns_fn
    if _setns_fn is None:
        fn = getattr(os, "setns", None)
        if fn is None:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            raw = libc.setns
            raw.argtypes = [ctypes.c_int, ctypes.c_int]
            raw.restype = ctypes.c_int

            def fn(fd: int, nstype: int) -> None:
                if raw(fd, nstype) != 0:
                    e = ctypes.get_errno()
                    raise OSError(e, os.strerror(e))
        _setns_fn = fn
    return _setns_fn


def _own_pidns_fd() -> int:
    """The mock process's own (active) PID namespace, to switch a thread back to."""
    global _own_pidns
    if _own_pidns is None:
        _own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
    return _own_pidns


def _make_mountpoint(root: str, d: str) -> None:
    host, mine = "/" + d, os.path.join(root, d)
    if os.path.lexists(mine):
        return
    try:
        if os.path.islink(host):
            os.symlink(os.readlink(host), mine)
        elif os.path.isdir(host):
            os.mkdir(mine, 0o755)
    except OSError:
        pass


class _Holder:
    """A sandbox's main process: PID 1 of its PID namespace, owner of its mount (+ user) namespace."""

    def __init__(self, proc: subprocess.Popen, pid: int, mode: str, implicit: bool):
        self.proc = proc          # the outer `unshare --fork` (host PID namespace); its exit status is PID 1's
        self.pid = pid            # host pid of PID 1
        self.mode = mode          # "direct" (root: setns + fork, nsenter --mount) | "helper" (_NSEXEC)
        self.implicit = implicit  # started on first use, not by start_entrypoint()
        self.pidns_fd: int | None = None
        self.pidns_id = ""
        self.start_time = _start_time(pid)  # tells PID 1 from a later process reusing its pid
        if mode == "direct":
            self.pidns_fd = os.open("/proc/%d/ns/pid" % pid, os.O_RDONLY | os.O_CLOEXEC)
        try:
            self.pidns_id = os.readlink("/proc/%d/ns/pid" % pid)
        except OSError:
            pass

    @classmethod
    def start(cls, unshare: str, root: str, argv: list[str], env: Mapping[str, str], mode: str, *,
              implicit: bool, stdout: Any, stderr: Any, timeout: float = HOLDER_READY_TIMEOUT,
              ) -> tuple["_Holder | None", str]:
        """Start the holder and wait until its namespaces are set up. (holder, "") or (None, why)."""
        cmd = [unshare]
        if os.geteuid() != 0:
            cmd += ["--user", "--map-root-user"]
        cmd += ["--mount", "--propagation", "private", "--pid", "--fork", "--kill-child",
                "/bin/sh", "-c", _HOLDER_PRELUDE, "osb-holder", unshare, root]
        # readiness: a FIFO (a pipe fd number above 9 cannot be named in POSIX sh); the read end is
        # open before the holder starts, so its open for writing never blocks
        tmp = tempfile.gettempdir()
        if os.path.realpath(tmp).startswith(root.rstrip("/") + "/") and os.access("/tmp", os.W_OK):
            tmp = "/tmp"  # a stand-alone execd whose TMPDIR is the sandbox's: keep the FIFO out of it
        fifo_dir = tempfile.mkdtemp(prefix="osb-holder-", dir=tmp)
        fifo = os.path.join(fifo_dir, "ready")
        proc = None
        try:
            os.mkfifo(fifo, 0o600)
            r = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                proc = subprocess.Popen(cmd + [fifo] + list(argv), cwd=root, env=dict(env), close_fds=True,
                                        start_new_session=True, stdin=subprocess.DEVNULL,
                                        stdout=stdout, stderr=stderr)
                lines = _read_lines(r, 2, timeout, proc)
            finally:
                os.close(r)
        except OSError as exc:
            if proc is not None:
                _killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            return None, f"the sandbox's PID namespace could not be set up: {exc}"
        finally:
            shutil.rmtree(fifo_dir, ignore_errors=True)
        pid = 0
        if len(lines) == 2 and lines[0].startswith("pid ") and lines[1] == "started":
            try:
                pid = int(lines[0][4:])
            except ValueError:
                pid = 0
        if pid <= 1 or not _is_child_init(pid, proc.pid):
            why = "no ready signal"
            if proc.poll() is None:
                _killpg(proc.pid, signal.SIGKILL)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:  # pragma: no cover
                pass
            if proc.stderr is not None:
                try:
                    tail = proc.stderr.read().decode("utf-8", "replace").strip().splitlines()
                    why = tail[-1] if tail else why
                except (OSError, ValueError):
                    pass
                proc.stderr.close()
            return None, "the sandbox's PID namespace did not come up (exit %s: %s)" % (
                proc.returncode, why[:160])
        # "started" comes right after the fork of the entrypoint: wait for its exec (see _await_exec)
        _await_exec(proc, (True, {_read_cmdline(pid)}), pid=pid)
        try:
            return cls(proc, pid, mode, implicit), ""
        except OSError as exc:
            _killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return None, f"cannot open the sandbox's PID namespace: {exc}"

    def alive(self) -> bool:
        """PID 1 runs and is not exiting (an exiting init waits for the mock to reap the processes it
        forked into the namespace - kernel zap_pid_ns_processes - and no fork can join any more)."""
        if self.proc.poll() is not None:
            return False
        try:
            with open("/proc/%d/stat" % self.pid, "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            return fields[0] not in (b"Z", b"X") and not int(fields[6]) & 0x4  # PF_EXITING
        except (OSError, IndexError, ValueError):
            return False

    def gone(self) -> bool:
        """PID 1 has finished exiting: the whole namespace is empty (the kernel lets an exiting init
        go only after every other process of its namespace is reaped)."""
        try:
            with open("/proc/%d/stat" % self.pid, "rb") as fh:
                fields = fh.read().rsplit(b")", 1)[1].split()
            return fields[0] in (b"Z", b"X") or int(fields[19]) != self.start_time
        except (OSError, IndexError, ValueError):
            return True

    def exit_text(self) -> str:
        rc = self.proc.poll()
        if rc is None:
            return "its main process (PID 1) has exited"
        if rc < 0:
            return "its main process (PID 1) was killed by signal %d" % -rc
        return "its main process (PID 1) exited with status %d" % rc

    @contextlib.contextmanager
    def children_inside(self) -> Any:
        """Direct mode: processes forked by this thread inside the block are born in the sandbox's PID
        namespace (setns(CLONE_NEWPID) changes only the calling thread's pid_for_children)."""
        if self.pidns_fd is None:
            yield
            return
        setns = _setns_function()
        setns(self.pidns_fd, CLONE_NEWPID)
        try:
            yield
        finally:
            setns(_own_pidns_fd(), CLONE_NEWPID)

    def command(self, nsenter: str, unshare: str, root: str, wd: str, argv: Sequence[str],
                env: Mapping[str, str] | None = None) -> list[str]:
        """argv that enters the holder's namespaces, makes the root "/" and runs argv in wd."""
        if self.mode == "direct":
            return [nsenter, "--target=%d" % self.pid, "--mount", "--", unshare, "--root=" + root,
                    "--wd=" + wd] + list(argv)
        # Python may add LC_CTYPE to its own environment (PEP 538 locale coercion): the helper drops
        # it again when the command's environment did not have it
        keep_lc = "1" if env is not None and "LC_CTYPE" in env else "0"
        return [sys.executable, "-I", "-S", "-c", _NSEXEC, str(self.pid), root, wd,
                keep_lc] + list(argv)

    def stages(self, cmd: list[str]) -> tuple[bool, set[bytes]]:
        """What the spawned process looks like before it runs the command: (the command is a child
        of the spawned process, the /proc cmdlines of the wrapper stages)."""
        raw = [a.encode("utf-8", "surrogateescape") for a in cmd]
        if self.mode == "direct":  # nsenter ... -- unshare --root --wd ARGV: both exec in place
            cut = raw.index(b"--") + 1
            return False, {b"\0".join(raw) + b"\0", b"\0".join(raw[cut:]) + b"\0"}
        return True, {b"\0".join(raw) + b"\0"}  # the helper's forked child, until it execs

    def kill(self) -> None:
        if self.proc.poll() is None:
            _killpg(self.proc.pid, signal.SIGKILL)
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
            pass
        self.close()

    def close(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            if f is not None:
                try:
                    f.close()
                except OSError:
                    pass
        if self.pidns_fd is not None:
            try:
                os.close(self.pidns_fd)
            except OSError:
                pass
            self.pidns_fd = None


def _read_lines(fd: int, n: int, timeout: float, proc: subprocess.Popen) -> list[str]:
    """Up to n lines from a non-blocking pipe/FIFO within timeout; fewer on EOF, timeout or when proc
    exits (a FIFO without a writer yet shows no EOF, hence the poll of proc)."""
    buf = b""
    deadline = time.monotonic() + timeout
    while buf.count(b"\n") < n:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        ready, _, _ = select.select([fd], [], [], min(left, 0.2))
        if not ready:
            if proc.poll() is not None:
                break
            continue
        try:
            chunk = os.read(fd, 256)
        except BlockingIOError:
            continue
        if not chunk:
            if proc.poll() is not None:
                break
            time.sleep(0.01)  # EOF between two writers (the prelude's and PID 1's fd 9 are one open file)
            continue
        buf += chunk
    return [x.decode("ascii", "replace") for x in buf.split(b"\n")[:-1][:n]]


def _read_cmdline(pid: int) -> bytes | None:
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as fh:
            return fh.read()
    except OSError:
        return None


def _first_child(pid: int) -> int | None:
    try:
        with open("/proc/%d/task/%d/children" % (pid, pid)) as fh:
            kids = fh.read().split()
        return int(kids[0]) if kids else None
    except (OSError, ValueError):
        pass
    for name in os.listdir("/proc"):  # kernels without CONFIG_PROC_CHILDREN
        if name.isdigit():
            try:
                with open("/proc/%s/stat" % name, "rb") as fh:
                    if int(fh.read().rsplit(b")", 1)[1].split()[1]) == pid:
                        return int(name)
            except (OSError, IndexError, ValueError):
                continue
    return None


def _await_exec(proc: subprocess.Popen, stages: tuple[bool, set[bytes | None]], *, pid: int | None = None,
                timeout: float = 2.0) -> None:
    """Wait (bounded) until the process running the command - proc itself, or its first child when
    stages[0] - no longer shows one of the wrapper cmdlines stages[1]: it has exec'd the command,
    exited, or been reaped."""
    child, stale = stages
    parent = pid if pid is not None else proc.pid
    target = None if child else proc.pid
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pid is None and proc.poll() is not None:
            return
        if target is None:
            target = _first_child(parent)
            if target is None:
                if _read_cmdline(parent) in (None, b""):
                    return  # the parent is gone
                time.sleep(0.0005)
                continue
        line = _read_cmdline(target)
        if line is None or line == b"" or line not in stale:
            return
        time.sleep(0.0005)


def _start_time(pid: int) -> int:
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return -1


def _is_child_init(pid: int, parent: int) -> bool:
    """pid is a child of parent and PID 1 of its own PID namespace (guards the pid read from the pipe)."""
    try:
        with open("/proc/%d/status" % pid) as fh:
            fields = dict(line.split(":", 1) for line in fh if ":" in line)
    except OSError:
        return False
    ppid = fields.get("PPid", "").strip()
    nspid = fields.get("NSpid", "").split()
    return ppid == str(parent) and (not nspid or nspid[-1] == "1")


# ---------------------------------------------------------------------------------------------


class SandboxRuntime:
    """One sandbox: a root directory and the process groups running in it."""

    def __init__(self, root: str, env: Mapping[str, str] | None = None, *, isolate: bool | None = None,
                 create: bool = True):
        if create:
            os.makedirs(root, exist_ok=True)
        self.root = os.path.realpath(root)
        if not os.path.isdir(self.root):
            raise ValueError(f"sandbox root is not a directory: {root}")
        self.env: dict[str, str] = dict(env or {})
        ok, note = probe_isolation() if isolate is not False else (False, "isolation disabled by caller")
        if isolate is True and not ok:
            raise RuntimeError(note)
        self.isolated: bool = bool(ok and isolate is not False)
        self.isolation_note = note
        self._prefix: list[str] = list(_probe_result[2]) if self.isolated and _probe_result else []
        self._unshare = shutil.which("unshare") or "unshare"
        self._nsenter = shutil.which("nsenter") or "nsenter"
        # one PID (+ mount) namespace per sandbox, held by its main process (see the module docstring)
        self._pid_mode: str | None = _probe_result[3] if self.isolated and _probe_result else None
        self._holder: _Holder | None = None
        self._token = uuid.uuid4().hex
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._procs: list[subprocess.Popen] = []
        self.paused = False
        self.terminated = False
        for d in BASE_DIRS:
            p = os.path.join(self.root, d)
            if not os.path.lexists(p):
                os.makedirs(p, exist_ok=True)
        try:  # /tmp in a container is world-writable and sticky
            os.chmod(os.path.join(self.root, "tmp"), 0o1777)
        except OSError:
            pass
        if self.isolated:
            self._make_mountpoints()

    # -- paths ----------------------------------------------------------------------------------
    def _make_mountpoints(self) -> None:
        for d in SYSTEM_DIRS:
            _make_mountpoint(self.root, d)

    @property
    def pid_namespace(self) -> bool:
        """True when the sandbox's processes share one PID namespace of their own (`ps` shows only them)."""
        return self._pid_mode is not None

    def resolve(self, sandbox_path: str, *, follow_symlinks: bool = True) -> str:
        """Map a sandbox path to a host path inside the root, resolving symlinks the way a process
        chrooted into the root would (absolute targets are relative to the root, ".." stops at
        the root). The final component is left unresolved when follow_symlinks is False.
        Raises ValueError for NUL bytes / non-strings, OSError(ELOOP) for symlink loops."""
        if not isinstance(sandbox_path, str):
            raise ValueError("path must be a string")
        if "\x00" in sandbox_path:
            raise ValueError("path contains a NUL byte")
        root = self.root
        todo = [p for p in sandbox_path.split("/") if p not in ("", ".")]
        todo.reverse()  # a stack: next component at the end
        done: list[str] = []
        hops = 0
        while todo:
            name = todo.pop()
            if name == ".":
                continue
            if name == "..":
                if done:
                    done.pop()
                continue
            cand = os.path.join(root, *done, name)
            last = not todo
            if last and not follow_symlinks:
                done.append(name)
                break
            try:
                st = os.lstat(cand)
            except OSError:
                done.append(name)
                continue
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                if hops > MAX_SYMLINKS:
                    raise OSError(errno.ELOOP, "too many levels of symbolic links", "/" + "/".join(done + [name]))
                target = os.readlink(cand)
                if "\x00" in target:  # impossible on Linux, but never trust it
                    raise ValueError("symlink target contains a NUL byte")
                if target.startswith("/"):
                    done = []
                parts = [p for p in target.split("/") if p not in ("", ".")]
                todo.extend(reversed(parts))
                continue
            done.append(name)
        result = os.path.join(root, *done) if done else root
        if result != root and not result.startswith(root + os.sep):
            raise PathEscape(f"path escapes the sandbox: {sandbox_path!r}")
        return result

    def to_sandbox(self, host_path: str) -> str:
        """Inverse of resolve() for host paths inside the root."""
        hp = os.path.abspath(host_path)
        if hp == self.root:
            return "/"
        if not hp.startswith(self.root + os.sep):
            raise PathEscape(f"not inside the sandbox root: {host_path!r}")
        return hp[len(self.root):]

    # -- processes -----------------------------------------------------------------------------
    def view_path(self, sandbox_path: str) -> str:
        """Host path of what a *command* sees at sandbox_path: the host's own system directories when
        isolated (they are bind-mounted), else the sandbox root's file (resolve())."""
        if self.isolated:
            norm = os.path.normpath("/" + sandbox_path.lstrip("/"))
            first = norm.split("/")[1] if norm != "/" else ""
            if first in SYSTEM_DIRS:
                return norm
        return self.resolve(sandbox_path)

    def which(self, name: str, path: str | None = None) -> str | None:
        """PATH lookup of an executable as a command inside the sandbox would do it."""
        for d in (path if path is not None else self.base_env().get("PATH", DEFAULT_PATH)).split(":"):
            if not d.startswith("/"):
                continue
            cand = d.rstrip("/") + "/" + name
            try:
                host = self.view_path(cand) if self.isolated else cand
            except (OSError, ValueError):
                continue
            if os.path.isfile(host) and os.access(host, os.X_OK):
                return cand
        return None

    def shell(self) -> list[str]:
        """The shell execd would use: "bash" when present in the sandbox view, else "sh" (execd
        runtime/command.go getShell; recording 11 stderr "bash: line 1: ...")."""
        return ["bash"] if self.which("bash") else ["sh"]

    def base_env(self) -> dict[str, str]:
        if self.isolated:
            env = {"PATH": DEFAULT_PATH, "HOME": "/root", "TMPDIR": "/tmp"}
        else:
            env = {"PATH": os.environ.get("PATH", DEFAULT_PATH), "HOME": os.path.join(self.root, "root"),
                   "TMPDIR": os.path.join(self.root, "tmp")}
        env["HOSTNAME"] = "sandbox"
        env.update(self.env)
        return env

    def host_cwd(self, cwd: str | None) -> str:
        """Host directory a non-isolated process starts in for a sandbox cwd."""
        if not cwd:
            return self.root
        return self.resolve(cwd)

    def spawn(self, argv: Sequence[str], *, cwd: str | None = None, env: Mapping[str, str] | None = None,
              stdin: Any = None, stdout: Any = None, stderr: Any = None,
              controlling_tty: bool = False) -> subprocess.Popen:
        """Start argv in its own process group (a new session) inside the sandbox. cwd is a sandbox
        path (default "/"); env overrides the sandbox environment. controlling_tty=True makes stdin
        (a terminal) the session's controlling terminal (for PTY sessions).
        Raises SandboxTerminated, OSError, ValueError."""
        if not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError("argv must be a non-empty list of strings")
        if any("\x00" in a for a in argv):
            raise ValueError("argv contains a NUL byte")
        full_env = self.base_env()
        full_env.update(env or {})
        for k, v in list(full_env.items()):
            if "\x00" in k or "\x00" in v or "=" in k or not k:
                raise ValueError(f"invalid environment variable name or value: {k!r}")
        wd = cwd or "/"
        if not self.isolated:
            full_env[_MARKER_ENV] = self._token
        with self._lock:
            if self.terminated:
                raise SandboxTerminated("sandbox is terminated")
            holder = self._ensure_holder() if self._pid_mode is not None else None
            if holder is not None:
                if not holder.alive():
                    raise SandboxNotRunning("the sandbox is not running: " + holder.exit_text())
                cmd = holder.command(self._nsenter, self._unshare, self.root, wd, argv, full_env)
                host_cwd = self.root
            elif self.isolated:
                cmd = self._prefix + ["/bin/sh", "-c", _PRELUDE, "osb-prelude", self._unshare, self.root, wd] + list(argv)
                host_cwd = self.root
            else:
                cmd = list(argv)
                host_cwd = self.host_cwd(wd)
            try:
                with holder.children_inside() if holder is not None else contextlib.nullcontext():
                    proc = subprocess.Popen(
                        cmd, cwd=host_cwd, env=full_env, close_fds=True, start_new_session=True,
                        stdin=subprocess.DEVNULL if stdin is None else stdin, stdout=stdout, stderr=stderr,
                        preexec_fn=_take_ctty if controlling_tty else None)
            except OSError as exc:
                # fork() into a PID namespace whose init is gone fails with ENOMEM
                if holder is not None and exc.errno == errno.ENOMEM:
                    raise SandboxNotRunning("the sandbox is not running: " + holder.exit_text()) from exc
                raise
            self._track(proc)
            paused = self.paused
        if holder is not None and not paused:
            # like Go's cmd.Start (execd), return once the command itself runs: a `ps` right after
            # must not see the joining wrapper (nsenter/unshare or the helper, host paths included)
            _await_exec(proc, holder.stages(cmd))
        return proc

    def _track(self, proc: subprocess.Popen) -> None:
        self._procs = [p for p in self._procs if p.poll() is None]
        self._procs.append(proc)
        if self.paused:  # a frozen sandbox runs nothing (docker pause freezes new processes too)
            _killpg(proc.pid, signal.SIGSTOP)

    def _ensure_holder(self) -> _Holder | None:
        """The sandbox's namespace holder, started with the implicit main process on first use.
        None (and PID namespaces off for this sandbox) when it cannot start. Call with the lock held."""
        if self._holder is None and self._pid_mode is not None:
            self._start_holder(list(IMPLICIT_ENTRYPOINT), self.base_env(), implicit=True,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return self._holder

    def _start_holder(self, argv: list[str], env: Mapping[str, str], *, implicit: bool, stdout: Any,
                      stderr: Any) -> _Holder | None:
        assert self._pid_mode is not None
        holder, why = _Holder.start(self._unshare, self.root, argv, env, self._pid_mode, implicit=implicit,
                                    stdout=stdout, stderr=stderr)
        if holder is None:
            # graceful degradation: this sandbox's commands get one mount namespace each (no PID namespace)
            self._pid_mode = None
            self.isolation_note += f"; this sandbox has no PID namespace of its own ({why})"
            return None
        self._holder = holder
        self._track(holder.proc)
        return holder

    def start_entrypoint(self, argv: Sequence[str], *, stdout: Any = None, stderr: Any = None) -> subprocess.Popen:
        """Run the sandbox entrypoint (exec form, no shell), like the container's main process. With a
        PID namespace it is the child of the sandbox's PID 1, and the returned process exits with its
        status (128 + n when a signal n ended it, like the container's exit code)."""
        argv = list(argv)
        stdout = subprocess.DEVNULL if stdout is None else stdout
        stderr = subprocess.DEVNULL if stderr is None else stderr
        if self._pid_mode is not None:
            if not argv or not all(isinstance(a, str) and "\x00" not in a for a in argv):
                raise ValueError("argv must be a non-empty list of strings without NUL bytes")
            env = self.base_env()
            with self._lock:
                if self.terminated:
                    raise SandboxTerminated("sandbox is terminated")
                if self._holder is None:
                    holder = self._start_holder(argv, env, implicit=False, stdout=stdout, stderr=stderr)
                    if holder is not None:
                        return holder.proc
        return self.spawn(argv, cwd="/", stdout=stdout, stderr=stderr)

    def process_groups(self) -> list[int]:
        """Process groups started through spawn()/start_entrypoint() that are still running (an
        implicit main process started on first use is the runtime's own and not listed)."""
        with self._lock:
            skip = self._holder.proc if self._holder is not None and self._holder.implicit else None
            return [p.pid for p in self._procs if p.poll() is None and p is not skip]

    # -- pause / resume / terminate -------------------------------------------------------------
    def pause(self) -> None:
        with self._lock:
            if self.terminated:
                return
            self.paused = True
            for pid in self._live_pgids():
                _killpg(pid, signal.SIGSTOP)
            for pid in self._stray_pids():
                _kill(pid, signal.SIGSTOP)
            self._cond.notify_all()

    def resume(self) -> None:
        with self._lock:
            self.paused = False
            for pid in self._live_pgids():
                _killpg(pid, signal.SIGCONT)
            for pid in self._stray_pids():
                _kill(pid, signal.SIGCONT)
            self._cond.notify_all()

    def wait_unpaused(self, timeout: float | None = None) -> bool:
        """Block while paused; True once running (False on timeout or when terminated while paused)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cond:
            while self.paused and not self.terminated:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._cond.wait(left if left is not None else 1.0)
            return not self.paused

    def terminate(self) -> None:
        """SIGKILL every process group and every stray process of this sandbox, then reap them.
        Idempotent."""
        with self._lock:
            self.terminated = True
            procs = list(self._procs)
            self._cond.notify_all()
        for p in procs:
            if p.poll() is None:
                _killpg(p.pid, signal.SIGKILL)
        for _ in range(50):
            strays = self._stray_pids()
            if not strays:
                break
            for pid in strays:
                _kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        # reap in any order: a dying PID 1 (and so its holder) only finishes once the processes the
        # mock forked into its namespace are reaped (kernel zap_pid_ns_processes)
        pending, deadline = list(procs), time.monotonic() + 5
        while pending and time.monotonic() < deadline:
            pending = [p for p in pending if p.poll() is None]
            if pending:
                time.sleep(0.005)
        # PID 1 outlives its killed holder by a moment (reparented, it is still emptying the namespace)
        holder = self._holder
        while holder is not None and not holder.gone() and time.monotonic() < deadline:
            time.sleep(0.005)
        for p in procs:
            for f in (p.stdin, p.stdout, p.stderr):
                if f is not None:
                    try:
                        f.close()
                    except OSError:
                        pass
        with self._lock:
            self._procs = []
            holder, self._holder = self._holder, None
        if holder is not None:
            holder.close()

    def cleanup(self) -> None:
        """terminate() and remove the root directory (never "/")."""
        self.terminate()
        if self.root != "/":
            _rmtree(self.root)

    def _live_pgids(self) -> list[int]:
        return [p.pid for p in self._procs if p.poll() is None]

    def _stray_pids(self) -> list[int]:
        """Processes of this sandbox that left our process groups (setsid daemons, `cmd &` + setsid).
        Isolated: their root is our root or they are in our PID namespace. Not isolated: they carry
        our marker variable or are chrooted into our root."""
        out: list[int] = []
        if self.isolated and self.root == "/":
            return out  # every process has "/" as its root: nothing identifies ours
        try:
            names = os.listdir("/proc")
        except OSError:
            return out
        me = os.getpid()
        marker = f"{_MARKER_ENV}={self._token}".encode()
        holder = self._holder
        pidns = holder.pidns_id if holder is not None else ""
        for name in names:
            if not name.isdigit():
                continue
            pid = int(name)
            if pid == me:
                continue
            try:
                if self.isolated:
                    # in the sandbox's view (root) or anywhere in its PID namespace
                    if os.readlink(f"/proc/{pid}/root") != self.root and not (
                            pidns and _readlink(f"/proc/{pid}/ns/pid") == pidns):
                        continue
                elif _readlink(f"/proc/{pid}/root") != self.root:
                    # not chrooted into the root (what an execd *process* started here runs its
                    # commands in, PID 1 of its own namespace included): it must carry our marker
                    with open(f"/proc/{pid}/environ", "rb") as fh:
                        if marker not in fh.read().split(b"\x00"):
                            continue
                with open(f"/proc/{pid}/stat", "rb") as fh:
                    state = fh.read().rsplit(b")", 1)[1].split()[0]
                if state == b"Z":
                    continue
            except OSError:
                continue
            out.append(pid)
        return out


def _readlink(path: str) -> str:
    try:
        return os.readlink(path)
    except OSError:
        return ""


def _take_ctty() -> None:  # runs in the child after setsid(), before exec
    import fcntl
    import termios
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


def _killpg(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _rmtree(path: str) -> None:
    """Remove a tree, fixing permissions on the way, never following symlinks or crossing mounts."""
    if not os.path.lexists(path):
        return

    def onerror(func, p, exc_info):  # noqa: ANN001
        parent = os.path.dirname(p)
        try:
            os.chmod(parent, 0o700)
            if os.path.isdir(p) and not os.path.islink(p):
                os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    if os.path.islink(path):
        os.unlink(path)
        return
    for dirpath, dirnames, _ in os.walk(path):
        for d in list(dirnames):
            full = os.path.join(dirpath, d)
            if os.path.ismount(full):  # never descend into a (leaked) bind mount
                dirnames.remove(d)
                raise RuntimeError(f"refusing to remove a mount point inside the sandbox root: {full}")
    shutil.rmtree(path, onerror=onerror)
