"""Resource limits of a sandbox with cgroups, the way Docker (runc) applies a container's.

opensandbox-server 1.1.1 (services/docker/container_ops.py ``_base_host_config_kwargs``) passes Docker
``mem_limit`` (resourceLimits.memory), ``nano_cpus`` (resourceLimits.cpu) and ``pids_limit`` ([docker]
pids_limit, 4096 in its config and example config). Docker turns them into cgroup files:

* memory: v1 ``memory.limit_in_bytes`` = M and ``memory.memsw.limit_in_bytes`` = 2 M (MemorySwap left
  unset defaults to twice the memory where swap accounting exists); v2 ``memory.max`` = M and
  ``memory.swap.max`` = M (runc: memsw - memory);
* cpu: the CFS quota over a 100 ms period: v1 ``cpu.cfs_period_us`` = 100000 and ``cpu.cfs_quota_us`` =
  nano_cpus * 100000 / 1e9 (50000 for "500m"); v2 ``cpu.max`` = "50000 100000";
* pids: ``pids.max`` = N (v1 and v2).

Each sandbox gets one cgroup per hierarchy (v1) or one cgroup (v2), named ``osb-mock-<mockid>-<sandbox>``
so that a janitor or a later mock finds what a dead one left. They are created under the mock's own
cgroup (v1: it may hold processes and children at once) or, on v2, under the nearest ancestor of it
that has the controllers enabled for its children and that this user may write (a delegated subtree,
such as the user's systemd slice). PID 1 of the sandbox joins before it forks anything (v1: by itself,
scripts/view.py; v2: ``join_preexec``); every later process is born inside (v1: forked by the sandbox's
spawner thread, which ``enter_thread`` put there once, spawner.py) or joins between fork and exec (v2:
``join_argv``, ``join_preexec``), so the whole sandbox is covered.
Only the standard library.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import os
import signal
import threading
import time
from typing import Callable, Iterable, Iterator

from mock_opensandbox.runtime import optional

CGROUP_ROOT = "/sys/fs/cgroup"
NAME_PREFIX = "osb-mock-"
CFS_PERIOD_US = 100000  # runc / Docker default CFS period
DEFAULT_PIDS_LIMIT = 4096  # server config.py DockerConfig.pids_limit default, example.config.toml
LIMIT_KEYS = ("memory", "cpu", "pids")
V2_CONTROLLERS = ("memory", "pids", "cpu")
# the v2 join stage: "0" written to cgroup.procs moves the writer; then the command replaces it
JOIN_SH = 'for f in $1; do echo 0 >"$f" || exit 125; done; shift; exec "$@"'


class Limits:
    """What one sandbox is allowed: bytes of memory, nano-CPUs (1e9 = one core), pids (None = no limit)."""

    __slots__ = ("memory", "nano_cpus", "pids")

    def __init__(self, memory: int | None = None, nano_cpus: int | None = None, pids: int | None = None):
        self.memory = memory
        self.nano_cpus = nano_cpus
        self.pids = pids

    def __repr__(self) -> str:
        return "Limits(memory=%r, nano_cpus=%r, pids=%r)" % (self.memory, self.nano_cpus, self.pids)

    def wanted(self) -> list[str]:
        return [k for k, v in (("memory", self.memory), ("cpu", self.nano_cpus), ("pids", self.pids)) if v]

    def v1_files(self, has_memsw: bool = True) -> dict[str, list[tuple[str, str]]]:
        """hierarchy controller -> [(file, value)] in the order runc writes them."""
        out: dict[str, list[tuple[str, str]]] = {}
        if self.memory:
            out["memory"] = [("memory.limit_in_bytes", str(self.memory))]
            if has_memsw:
                out["memory"].append(("memory.memsw.limit_in_bytes", str(2 * self.memory)))
        if self.nano_cpus:
            out["cpu"] = [
                ("cpu.cfs_period_us", str(CFS_PERIOD_US)),
                ("cpu.cfs_quota_us", str(self.nano_cpus * CFS_PERIOD_US // 1_000_000_000)),
            ]
        if self.pids:
            out["pids"] = [("pids.max", str(self.pids))]
        return out

    def v2_files(self) -> list[tuple[str, str]]:
        out: list[tuple[str, str]] = []
        if self.memory:
            out += [("memory.max", str(self.memory)), ("memory.swap.max", str(self.memory))]
        if self.nano_cpus:
            out.append(("cpu.max", "%d %d" % (self.nano_cpus * CFS_PERIOD_US // 1_000_000_000, CFS_PERIOD_US)))
        if self.pids:
            out.append(("pids.max", str(self.pids)))
        return out


def _write(path: str, value: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CLOEXEC)
    try:
        os.write(fd, value.encode())
    finally:
        os.close(fd)


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            return fh.read()
    except OSError:
        return ""


def _mountinfo(proc: str) -> list[tuple[str, str, str, str]]:
    """(mount root, mount point, fs type, super options) of every mount."""
    out = []
    for line in _read(os.path.join(proc, "self/mountinfo")).splitlines():
        left, _, right = line.partition(" - ")
        f, r = left.split(), right.split()
        if len(f) >= 5 and len(r) >= 3:
            out.append((f[3], f[4].replace("\\040", " "), r[0], r[2]))
    return out


class Host:
    """What this process can do with cgroups (probed once, see host()).

    version: 1, 2 or 0 (none usable); bases: v1 {mount dir name: directory new cgroups go in}, v2
    {"": directory}; controllers: the limits that can be applied; missing: {limit: why not}."""

    def __init__(
        self,
        version: int,
        bases: dict[str, str],
        controllers: set[str],
        missing: dict[str, str],
        has_memsw: bool = False,
    ):
        self.version = version
        self.bases = bases
        self.controllers = controllers
        self.missing = missing
        self.has_memsw = has_memsw

    def note(self) -> str:
        """'' when every limit applies, else one line naming those that do not and why."""
        if not self.missing:
            return ""
        whys: dict[str, list[str]] = {}
        for k in LIMIT_KEYS:
            if k in self.missing:
                whys.setdefault(self.missing[k], []).append(k)
        return "; ".join("resource limits %s (%s)" % ("/".join(ks), why) for why, ks in whys.items())

    def create(self, name: str, limits: Limits) -> "Cgroup | None":
        """The sandbox's cgroup(s) with limits written, or None when there is nothing to create.
        Raises OSError when a directory or a limit cannot be written (nothing is left behind)."""
        if not self.bases:
            return None
        made: list[str] = []
        procs: list[str] = []
        view: dict[str, str] = {}
        try:
            if self.version == 2:
                d = os.path.join(self.bases[""], name)
                _mkdir(d)
                made.append(d)
                for f, v in limits.v2_files():
                    ctrl = f.split(".", 1)[0]
                    if ctrl in self.controllers or (f == "memory.swap.max" and "memory" in self.controllers):
                        try:
                            _write(os.path.join(d, f), v)
                        except FileNotFoundError:
                            if f != "memory.swap.max":  # no swap controller (swap accounting off)
                                raise
                procs.append(os.path.join(d, "cgroup.procs"))
                view[""] = d
            else:
                files = limits.v1_files(self.has_memsw)
                for mdir, base in sorted(self.bases.items()):
                    d = os.path.join(base, name)
                    _mkdir(d)
                    made.append(d)
                    ctrls = mdir.split(",")
                    if "cpuset" in ctrls:  # an empty cpuset takes no task: inherit the parent's
                        for f in ("cpuset.cpus", "cpuset.mems"):
                            _write(os.path.join(d, f), _read(os.path.join(base, f)).strip() or "\n")
                    for c in ctrls:
                        for f, v in files.get(c, []):
                            _write(os.path.join(d, f), v)
                    procs.append(os.path.join(d, "cgroup.procs"))
                    view[mdir] = d
        except OSError:
            for d in reversed(made):
                _rmdir(d, 0.5)
            raise
        # v1: the mock's own cgroup per hierarchy, for a spawning thread to move back to
        home = [os.path.join(self.bases[k], "tasks") for k in sorted(self.bases)] if self.version == 1 else []
        return Cgroup(made, procs, view, home)


def _mkdir(d: str) -> None:
    try:
        os.mkdir(d, 0o755)
    except FileExistsError:
        # a dead mock's sandbox of the same name (ids are random: practically never): take it over empty
        kill_members(d)
        if not _rmdir(d, 1.0):
            raise
        os.mkdir(d, 0o755)


class Cgroup:
    """One sandbox's cgroup directories (one per v1 hierarchy, or one v2 directory)."""

    def __init__(self, dirs: list[str], procs: list[str], view: dict[str, str], home_tasks: list[str] | None = None):
        self.dirs = dirs
        self.procs = procs
        self.view = view  # v1 mount dir name (or "" for v2) -> directory, for the sandbox's /sys/fs/cgroup
        self._paths = [p.encode() for p in procs]
        # v1 (threads may sit in different cgroups): the sandbox's and the mock's own tasks files
        self._tasks_in = [os.path.join(d, "tasks") for d in dirs] if home_tasks else []
        self._tasks_home = list(home_tasks or [])
        self._task_fds: tuple[list[int], list[int]] | None = None  # the tasks files, opened once (thread_inside)
        self._fd_lock = threading.Lock()
        self.removed = False

    @property
    def thread_join(self) -> bool:
        """True (v1): spawn inside thread_inside() and the child is born in the cgroup; False (v2):
        prefix the command with join_argv() (or use join_preexec() when forking anyway)."""
        return bool(self._tasks_in)

    @contextlib.contextmanager
    def thread_inside(self) -> Iterator[None]:
        """v1: the calling thread sits in the sandbox's cgroups for the block, so a process it forks
        (subprocess's vfork included) is born there, and goes back to the mock's own cgroups after.
        Two writes per hierarchy on tasks files opened once (~0.1 ms for nine; opening them each time
        was ~0.27 ms); a preexec_fn would cost a full fork (8-19 ms here)."""
        tid = (str(threading.get_native_id()) if hasattr(threading, "get_native_id") else str(os.getpid())).encode()
        with self._fd_lock:
            if self._task_fds is None:
                fds_in: list[int] = []
                fds_home: list[int] = []
                try:
                    for p in self._tasks_in:
                        fds_in.append(os.open(p, os.O_WRONLY | os.O_CLOEXEC))
                    for p in self._tasks_home:
                        fds_home.append(os.open(p, os.O_WRONLY | os.O_CLOEXEC))
                except OSError:
                    for fd in fds_in + fds_home:
                        os.close(fd)
                    raise
                self._task_fds = (fds_in, fds_home)
            fds_in, fds_home = self._task_fds
        try:
            for fd in fds_in:
                os.write(fd, tid)
            yield
        finally:
            for fd in fds_home:
                try:
                    os.write(fd, tid)
                except OSError:  # pragma: no cover - the mock's own cgroup does not go away
                    pass

    def enter_thread(self) -> None:
        """v1: the calling thread joins the sandbox's cgroups for good (spawner.py: it forks the sandbox's
        processes; it leaves them when it ends). Raises OSError."""
        tid = str(threading.get_native_id())
        for p in self._tasks_in:
            _write(p, tid)

    def _close_task_fds(self) -> None:
        with self._fd_lock:
            fds, self._task_fds = self._task_fds, None
        for fd in (fds[0] + fds[1]) if fds is not None else []:
            try:
                os.close(fd)
            except OSError:
                pass

    def join_argv(self) -> list[str] | None:
        """v2: argv prefix of a /bin/sh stage that moves itself into the cgroup and execs the rest
        (exit 125 when it cannot); None when a path would not survive the word split."""
        if any(c.isspace() for p in self.procs for c in p):
            return None
        return ["/bin/sh", "-c", JOIN_SH, "osb-cgroup-join", " ".join(self.procs)]

    def view_env(self) -> str:
        """The value of OSB_MOCK_CGROUP_VIEW for scripts/view.py: "name=dir" lines."""
        return "\n".join("%s=%s" % kv for kv in sorted(self.view.items()))

    def join_preexec(self) -> Callable[[], None]:
        """A preexec_fn: the forked child moves itself into the sandbox's cgroups before it execs
        (writing "0" to cgroup.procs moves the writer). A failure fails the spawn (fail closed)."""
        paths = self._paths

        def join() -> None:
            for p in paths:
                fd = os.open(p, os.O_WRONLY | os.O_CLOEXEC)
                try:
                    os.write(fd, b"0")
                finally:
                    os.close(fd)

        return join

    def join_pid(self, pid: int) -> None:
        for p in self.procs:
            _write(p, str(pid))

    def members(self) -> set[int]:
        out: set[int] = set()
        for p in self.procs:
            out.update(int(x) for x in _read(p).split() if x.isdigit())
        return out

    def remove(self, timeout: float = 2.0) -> bool:
        """Kill what is left in it and remove the directories (children first). True when all are gone."""
        ok = True
        self._close_task_fds()
        for d in self.dirs:
            kill_members(d)
        for d in reversed(self.dirs):
            ok = _rmdir(d, timeout) and ok
        self.removed = ok
        return ok


def kill_members(d: str) -> None:
    """SIGKILL every process of cgroup directory d and of its children."""
    for dirpath, _dirs, _ in os.walk(d):
        for x in _read(os.path.join(dirpath, "cgroup.procs")).split():
            if x.isdigit() and int(x) != os.getpid():
                try:
                    os.kill(int(x), signal.SIGKILL)
                except OSError:
                    pass


def rmdir_tree(d: str) -> None:
    """rmdir a cgroup and the cgroups below it, deepest first (a cgroup holds no files to remove).
    The janitor's script carries this function's own source (janitor.script())."""
    for dirpath, dirnames, _ in os.walk(d, topdown=False):
        for sub in dirnames:
            try:
                os.rmdir(os.path.join(dirpath, sub))
            except FileNotFoundError:
                pass
    os.rmdir(d)


def _rmdir(d: str, timeout: float) -> bool:
    """rmdir a cgroup (and its children), retrying while its last tasks finish exiting (EBUSY)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            rmdir_tree(d)
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                return False
            kill_members(d)
            time.sleep(0.005)


# -- probing ------------------------------------------------------------------------------------


def own_paths(proc: str = "/proc") -> dict[str, str]:
    """/proc/self/cgroup: controller list ("memory", "cpu,cpuacct", "name=systemd", "" for v2) -> path."""
    out: dict[str, str] = {}
    for line in _read(os.path.join(proc, "self/cgroup")).splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            out[parts[1]] = parts[2]
    return out


def _probe_dir(d: str, files: Iterable[tuple[str, str]]) -> str:
    """Create a test cgroup in d and write the limit files; '' or why not."""
    t = os.path.join(d, "%sprobe-%d-%d" % (NAME_PREFIX, os.getpid(), threading.get_ident() % 10000))
    try:
        _mkdir(t)
    except OSError as exc:
        return "cannot create a cgroup in %s: %s" % (d, exc.strerror or exc)
    try:
        for f, v in files:
            try:
                _write(os.path.join(t, f), v)
            except FileNotFoundError:
                if f not in ("memory.memsw.limit_in_bytes", "memory.swap.max"):
                    return "%s is missing" % f
        return ""
    except OSError as exc:
        return "cannot write %s: %s" % (d, exc.strerror or exc)
    finally:
        _rmdir(t, 1.0)


def probe(root: str = CGROUP_ROOT, proc: str = "/proc") -> Host:
    """What cgroups this process can use for sandboxes (root and proc are parameters for tests)."""
    if os.environ.get("OSB_MOCK_CGROUPS", "").lower() in ("0", "off", "no", "false"):
        return Host(0, {}, set(), {k: "disabled by OSB_MOCK_CGROUPS" for k in LIMIT_KEYS})
    if optional.off("cgroups"):
        return Host(0, {}, set(), {k: "switched off by " + optional.ENV for k in LIMIT_KEYS})
    mounts = _mountinfo(proc)
    own = own_paths(proc)
    v1 = [(r, mp, opts) for r, mp, fs, opts in mounts if fs == "cgroup" and os.path.dirname(mp) == root]
    v2 = [(r, mp) for r, mp, fs, _ in mounts if fs == "cgroup2" and mp == root]
    if v1:
        return _probe_v1(root, v1, own)
    if v2:
        return _probe_v2(v2[-1][0], v2[-1][1], own.get("", "/"))
    return Host(0, {}, set(), {k: "no cgroup file system at %s" % root for k in LIMIT_KEYS})


def _probe_v1(root: str, v1: list[tuple[str, str, str]], own: dict[str, str]) -> Host:
    bases: dict[str, str] = {}
    missing: dict[str, str] = {}
    controllers: set[str] = set()
    probe_limits = Limits(memory=1 << 30, nano_cpus=1_000_000_000, pids=DEFAULT_PIDS_LIMIT)
    files = probe_limits.v1_files()
    for mroot, mp, opts in v1:
        ctrls = [o for o in opts.split(",") if o not in ("rw", "ro") and not o.startswith(("release_agent", "clone"))]
        ctrls = [c for c in ctrls if c != "xattr"]
        path = own.get(",".join(ctrls))
        if path is None:
            path = next((v for k, v in own.items() if k and set(k.split(",")) == set(ctrls)), None)
        if path is None:
            continue
        rel = path if mroot == "/" else (path[len(mroot) :] if path.startswith(mroot) else None)
        if rel is None:  # our cgroup is outside this mount's view
            continue
        base = os.path.normpath(os.path.join(mp, rel.lstrip("/")))
        want = [(f, v) for c in ctrls for f, v in files.get(c, [])]
        why = _probe_dir(
            base,
            want
            + (
                [("cpuset.cpus", _read(os.path.join(base, "cpuset.cpus")).strip() or "\n")] if "cpuset" in ctrls else []
            ),
        )
        if why:
            for c in ctrls:
                if c in LIMIT_KEYS:
                    missing[c] = why
            continue
        bases[os.path.basename(mp)] = base
        controllers.update(c for c in ctrls if c in LIMIT_KEYS)
    for k in LIMIT_KEYS:
        if k not in controllers and k not in missing:
            missing[k] = "no %s cgroup hierarchy" % k
    has_memsw = any(
        os.path.exists(os.path.join(b, "memory.memsw.limit_in_bytes"))
        for name, b in bases.items()
        if "memory" in name.split(",")
    )
    if os.geteuid() != 0:
        for k in LIMIT_KEYS:
            if k in missing:
                missing[k] = "cgroup v1 needs root"
    return Host(1, bases, controllers, missing, has_memsw)


def _probe_v2(mroot: str, mp: str, own: str) -> Host:
    rel = own if mroot == "/" else (own[len(mroot) :] if own.startswith(mroot) else "/")
    d = os.path.normpath(os.path.join(mp, rel.lstrip("/")))
    cands = []
    while True:
        cands.append(d)
        if d == mp or len(d) <= len(mp):
            break
        d = os.path.dirname(d)
    # first a directory whose children already get the controllers, then one where we may enable them
    # (our own cgroup holds us, so the "no internal processes" rule refuses enabling there unless root)
    best: tuple[str, set[str]] | None = None
    for enable in (False, True):
        for d in cands:
            avail = set(_read(os.path.join(d, "cgroup.controllers")).split()) & set(V2_CONTROLLERS)
            if not avail or not os.access(d, os.W_OK):
                continue
            enabled = set(_read(os.path.join(d, "cgroup.subtree_control")).split()) & avail
            if enable and enabled != avail:
                for c in sorted(avail - enabled):
                    try:
                        _write(os.path.join(d, "cgroup.subtree_control"), "+" + c)
                        enabled.add(c)
                    except OSError:
                        pass
            if not enabled or (not enable and enabled != avail):
                continue
            files = [
                (f, v)
                for f, v in Limits(1 << 30, 1_000_000_000, DEFAULT_PIDS_LIMIT).v2_files()
                if f.split(".", 1)[0] in enabled
            ]
            if _probe_dir(d, files) == "":
                if best is None or len(enabled) > len(best[1]):
                    best = (d, enabled)
            if best is not None and best[1] == set(V2_CONTROLLERS):
                break
        if best is not None and best[1] == set(V2_CONTROLLERS):
            break
    if best is None:
        why = (
            "no delegated cgroup v2 subtree with the memory, pids and cpu controllers that this user may write"
            if os.geteuid() != 0
            else "no cgroup v2 directory with the controllers enabled"
        )
        return Host(2, {}, set(), {k: why for k in LIMIT_KEYS})
    missing = {
        k: "cgroup v2 controller %s not delegated to %s" % (k, best[0]) for k in V2_CONTROLLERS if k not in best[1]
    }
    return Host(2, {"": best[0]}, set(best[1]), missing)


_host_lock = threading.Lock()
_host: Host | None = None


def host() -> Host:
    """probe(), once per process."""
    global _host
    with _host_lock:
        if _host is None:
            _host = probe()
        return _host


def stale(host_: Host, mock_id: str = "*", sandbox_id: str = "*") -> list[str]:
    """The cgroup directories named osb-mock-<mock_id>-<sandbox_id> ("*": any)."""
    pattern = "%s%s-%s" % (NAME_PREFIX, mock_id, sandbox_id)
    out = []
    for base in host_.bases.values():
        try:
            names = os.listdir(base)
        except OSError:
            continue
        out += [os.path.join(base, n) for n in names if fnmatch.fnmatchcase(n, pattern)]
    return out
