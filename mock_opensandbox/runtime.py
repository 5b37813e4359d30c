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

Pause = SIGSTOP of every process group (seed 000 §5.3, "docker pause ~ SIGSTOP"), resume = SIGCONT.
Standard library only, Python >= 3.10.
"""
from __future__ import annotations

import errno
import os
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

__all__ = ["SandboxRuntime", "PathEscape", "SandboxTerminated", "probe_isolation", "isolation_note",
           "ISOLATION_NOTE", "SYSTEM_DIRS"]

# Host directories bind-mounted into every isolated sandbox view. /dev and /proc stay writable
# (/dev/null, /proc/self/fd); the others are remounted read-only.
SYSTEM_DIRS = ("usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32", "etc", "dev", "proc", "sys")
_WRITABLE_MOUNTS = ("dev", "proc")
# Directories every sandbox root starts with (the brief; a Debian image has them all).
BASE_DIRS = ("tmp", "home", "root", "workspace")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
MAX_SYMLINKS = 40  # Linux's own limit (ELOOP)
_MARKER_ENV = "OPENSANDBOX_MOCK_SANDBOX"  # only used when not isolated, to find escaped processes

# The prelude runs inside the new mount namespace, before the sandbox root becomes "/".
# $1 = unshare binary, $2 = root, $3 = working directory inside the sandbox, $4... = argv.
_PRELUDE = r'''
U="$1"; R="$2"; W="$3"; shift 3
for d in __DIRS__; do
  if [ -L "/$d" ]; then
    [ -e "$R/$d" ] || [ -L "$R/$d" ] || ln -s "$(readlink "/$d")" "$R/$d" 2>/dev/null
  elif [ -d "/$d" ]; then
    if [ -L "$R/$d" ] || { [ -e "$R/$d" ] && [ ! -d "$R/$d" ]; }; then rm -f "$R/$d"; fi
    mkdir -p "$R/$d" || exit 125
    mount --rbind "/$d" "$R/$d" || exit 125
    case " __RW__ " in *" $d "*) ;; *) mount -o remount,bind,ro "$R/$d" 2>/dev/null ;; esac
  fi
done
exec "$U" --root="$R" --wd="$W" "$@"
'''.replace("__DIRS__", " ".join(SYSTEM_DIRS)).replace("__RW__", " ".join(_WRITABLE_MOUNTS))


class PathEscape(ValueError):
    """A sandbox path that would resolve outside the sandbox root (never returned, always raised)."""


class SandboxTerminated(RuntimeError):
    """spawn() after terminate()."""


# ---------------------------------------------------------------------------------------------
# isolation probe (once per process)

_probe_lock = threading.Lock()
_probe_result: tuple[bool, str, list[str]] | None = None
ISOLATION_NOTE: str | None = None  # filled in by the first probe_isolation()


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


def _probe() -> tuple[bool, str, list[str]]:
    fallback = ("commands run on the host with cwd/HOME/TMPDIR inside the sandbox root; absolute paths "
                "such as /tmp are NOT shared with the files API")
    if os.environ.get("OSB_MOCK_ISOLATION", "").lower() in ("0", "off", "no", "false"):
        return False, f"sandbox isolation disabled by OSB_MOCK_ISOLATION: {fallback}", []
    if not sys.platform.startswith("linux"):
        return False, f"sandbox isolation needs Linux mount namespaces ({sys.platform}): {fallback}", []
    unshare = shutil.which("unshare")
    sh = shutil.which("sh")
    if not unshare or not sh:
        return False, f"sandbox isolation needs util-linux unshare (not found): {fallback}", []
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
            return False, f"sandbox isolation probe failed ({exc}): {fallback}", []
        if out.returncode != 0 or out.stdout.split() != [b"0", b"/tmp", b"ok"]:
            why = (out.stderr.decode("utf-8", "replace").strip().splitlines() or ["exit %d" % out.returncode])[-1]
            return False, f"sandbox isolation unavailable ({why[:160]}): {fallback}", []
        mode = "mount namespace" if os.geteuid() == 0 else "user + mount namespace"
        return True, (f"sandbox isolation: {mode} via {unshare}; commands see the sandbox root as / "
                      "(system dirs bind-mounted read-only from the host)"), prefix
    finally:
        _rmtree(tmp)


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
            host, mine = "/" + d, os.path.join(self.root, d)
            if os.path.lexists(mine):
                continue
            try:
                if os.path.islink(host):
                    os.symlink(os.readlink(host), mine)
                elif os.path.isdir(host):
                    os.mkdir(mine, 0o755)
            except OSError:
                pass

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
        if self.isolated:
            cmd = self._prefix + ["/bin/sh", "-c", _PRELUDE, "osb-prelude", self._unshare, self.root, wd] + list(argv)
            host_cwd = self.root
        else:
            full_env[_MARKER_ENV] = self._token
            cmd = list(argv)
            host_cwd = self.host_cwd(wd)
        with self._lock:
            if self.terminated:
                raise SandboxTerminated("sandbox is terminated")
            proc = subprocess.Popen(
                cmd, cwd=host_cwd, env=full_env, close_fds=True, start_new_session=True,
                stdin=subprocess.DEVNULL if stdin is None else stdin, stdout=stdout, stderr=stderr,
                preexec_fn=_take_ctty if controlling_tty else None)
            self._procs = [p for p in self._procs if p.poll() is None]
            self._procs.append(proc)
            if self.paused:  # a frozen sandbox runs nothing (docker pause freezes new processes too)
                _killpg(proc.pid, signal.SIGSTOP)
        return proc

    def start_entrypoint(self, argv: Sequence[str], *, stdout: Any = None, stderr: Any = None) -> subprocess.Popen:
        """Run the sandbox entrypoint (exec form, no shell), like the container's main process."""
        return self.spawn(list(argv), cwd="/",
                          stdout=subprocess.DEVNULL if stdout is None else stdout,
                          stderr=subprocess.DEVNULL if stderr is None else stderr)

    def process_groups(self) -> list[int]:
        with self._lock:
            return [p.pid for p in self._procs if p.poll() is None]

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
        for p in procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
                pass
            for f in (p.stdin, p.stdout, p.stderr):
                if f is not None:
                    try:
                        f.close()
                    except OSError:
                        pass
        with self._lock:
            self._procs = []

    def cleanup(self) -> None:
        """terminate() and remove the root directory (never "/")."""
        self.terminate()
        if self.root != "/":
            _rmtree(self.root)

    def _live_pgids(self) -> list[int]:
        return [p.pid for p in self._procs if p.poll() is None]

    def _stray_pids(self) -> list[int]:
        """Processes of this sandbox that left our process groups (setsid daemons, `cmd &` + setsid).
        Isolated: their root is our root. Not isolated: they carry our marker variable."""
        out: list[int] = []
        if self.isolated and self.root == "/":
            return out  # every process has "/" as its root: nothing identifies ours
        try:
            names = os.listdir("/proc")
        except OSError:
            return out
        me = os.getpid()
        marker = f"{_MARKER_ENV}={self._token}".encode()
        for name in names:
            if not name.isdigit():
                continue
            pid = int(name)
            if pid == me:
                continue
            try:
                if self.isolated:
                    if os.readlink(f"/proc/{pid}/root") != self.root:
                        continue
                else:
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
