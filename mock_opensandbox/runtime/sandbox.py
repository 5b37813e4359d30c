"""SandboxRuntime: the sandbox underneath one mock execd - a root directory that plays the sandbox's
"/", path mapping that never leaves it, and real processes (one process group per command, like
execd's Setpgid) contained the way a container of the real server is (see __init__.py).

Pause = SIGSTOP of every process group (QUIRKS.md, Delete, pause, resume, renew, metadata patch), resume = SIGCONT.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Mapping, Sequence

from mock_opensandbox.runtime import cgjoin, cgroups, netns, pspawn
from mock_opensandbox.runtime import stages as scripts
from mock_opensandbox.runtime._util import (
    DEFAULT_PATH,
    SYSTEM_DIRS,
    await_exec,
    container_id,
    kill,
    killpg,
    make_image_root,
    make_mountpoint,
    rmtree,
    take_ctty,
)
from mock_opensandbox.runtime.agent import oneshot_call
from mock_opensandbox.runtime.contained import (
    SIGINT_STAGE,
    SPAWN_LOCK,
    contained_spawner,
    ctty_stage,
    group_kwargs,
    pts_inside,
    sigint_ignored,
    sigint_native,
    sigint_stage_forced,
)
from mock_opensandbox.runtime.contained import creds as _creds
from mock_opensandbox.runtime.contained import user_ids as contained_user
from mock_opensandbox.runtime.execdproc import ExecdSpec, install_agent, install_binary, prepare_execd, start_execd
from mock_opensandbox.runtime.forker import Forker, ForkerError
from mock_opensandbox.runtime.forker import wanted as forker_wanted
from mock_opensandbox.runtime.holder import Holder, lifeline_call
from mock_opensandbox.runtime.janitor import Janitor
from mock_opensandbox.runtime.paths import _MARKER_ENV, SandboxPaths, stray_pids
from mock_opensandbox.runtime.pid1 import Pid1, SandboxNotRunning, SandboxTerminated
from mock_opensandbox.runtime.probe import probe_isolation, probe_result
from mock_opensandbox.runtime.pspawn import SpawnedPopen
from mock_opensandbox.runtime.rootfs import ImageRoot, ImageTree
from mock_opensandbox.runtime.scripts.lookpath import look_path
from mock_opensandbox.runtime.spawner import Spawner

if TYPE_CHECKING:  # pragma: no cover
    from mock_opensandbox.runtime.execdproc import ExecdProcess

_netns_lock = threading.Lock()
_netns_result: tuple[bool, str] | None = None


def _netns_probe(unshare: str) -> tuple[bool, str]:
    """Can a sandbox get a network namespace of its own here? Probed once per process."""
    global _netns_result
    with _netns_lock:
        if _netns_result is None:
            _netns_result = netns.probe_netns(unshare)
        return _netns_result


def network_note(network: str) -> str:
    """What of the network of this process's sandboxes is not like a container's ("" = nothing):
    the x-mock-isolation suffix and the start-up banner's line."""
    if network == "host":
        return "not contained: the host network (--network host)"
    ok, _, _, pid_mode = probe_result()
    if not ok:
        return ""
    if pid_mode is None:
        return "not contained: the host network (no PID namespace to hold a network namespace)"
    has, why = _netns_probe(shutil.which("unshare") or "unshare")
    if not has:
        return "not contained: the host network (%s)" % why
    return netns.no_outbound_note()


def _devnull(pid1: int | None) -> int:
    """A read-only /dev/null descriptor: the sandbox's (through PID 1's root) where it has one, else the host's."""
    if pid1 is not None:
        try:
            return os.open("/proc/%d/root/dev/null" % pid1, os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            pass
    return os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)


class SandboxRuntime:
    """One sandbox: a root directory and the process groups running in it. Its components: ``pid1``
    (pid1.Pid1: PID 1, its view, devpts, network namespace and agent) and ``paths`` (paths.SandboxPaths:
    sandbox paths as host paths through that view)."""

    _spawner: Spawner | None = None  # cgroup v1: the thread that forks its processes (_cg_spawner)

    def __init__(
        self,
        root: str,
        env: Mapping[str, str] | None = None,
        *,
        isolate: bool | None = None,
        create: bool = True,
        hostname: str | None = None,
        network: str = netns.DEFAULT_NETWORK,
        limits: "cgroups.Limits | None" = None,
        cgroup_name: str | None = None,
        janitor: Janitor | None = None,
        image: ImageTree | None = None,
    ):
        if create:
            os.makedirs(root, exist_ok=True)
        self.root = os.path.realpath(root)
        if not os.path.isdir(self.root):
            raise ValueError(f"sandbox root is not a directory: {root}")
        self.env: dict[str, str] = dict(env or {})
        # what `hostname` prints inside: the caller's, else 12 hex digits like a Docker container's short id
        self.hostname = hostname or _short_id()
        if not (len(self.hostname) <= 64 and self.hostname.replace("-", "").isalnum() and self.hostname.isascii()):
            raise ValueError(f"invalid sandbox hostname: {self.hostname!r}")
        if isolate is False:
            ok, note = False, "isolation disabled by caller"
        elif not scripts.root_is_safe(self.root):
            ok, note = False, f"sandbox isolation needs a root path without whitespace or backslashes: {self.root!r}"
        else:
            ok, note = probe_isolation()
        if isolate is True and not ok:
            raise RuntimeError(note)
        self.isolated: bool = bool(ok and isolate is not False)
        self.isolation_note = note
        result = probe_result() if self.isolated else None
        self._prefix: list[str] = list(result[2]) if result else []
        self._unshare = shutil.which("unshare") or "unshare"
        self._nsenter = shutil.which("nsenter") or "nsenter"
        self._setpriv = shutil.which("setpriv", path=DEFAULT_PATH) or "/usr/bin/setpriv"
        # one PID (+ mount, IPC, UTS) namespace per sandbox, held by its main process (see holder.py)
        pid_mode: str | None = result[3] if result else None
        self._root_id: tuple[int, int] | None = None
        # a network namespace of the sandbox's own ("bridge", netns.py), held by its PID 1
        if network not in netns.NETWORK_MODES:
            raise ValueError("network must be one of %s, not %r" % (", ".join(netns.NETWORK_MODES), network))
        self.network = network
        net_note = ""  # what of the network is not like a container's ("" = nothing): Pid1.net_note
        has_netns = False
        if network == "host":
            net_note = "not contained: the host network (--network host)"
        elif pid_mode is not None:
            has_netns, why = _netns_probe(self._unshare)
            if not has_netns:
                net_note = "not contained: the host network (%s)" % why
            else:
                net_note = netns.no_outbound_note()
        elif self.isolated:
            net_note = "not contained: the host network (no PID namespace to hold a network namespace)"
        self._token = uuid.uuid4().hex
        self._lock = threading.RLock()
        self._cond = threading.Condition(self._lock)
        self._procs: list[subprocess.Popen[bytes]] = []
        # view.py's "mount the volumes" argument (mounts.plan); set before the first process starts
        self.volumes = ""
        self.paused = False
        self.terminated = False
        # what PID 1's bootstrap.sh starts as /opt/opensandbox/execd: a real binary (use_execd) or the
        # mock's agent (scripts/agent.py, when the view has a Python)
        self._execd_spec: ExecdSpec | None = None
        # -- the image's own tree as the root (rootfs.py), else the host-tools view --------
        self.home = self.root  # the sandbox's own directory (removed by cleanup())
        self.image_root: ImageRoot | None = None
        self.view_kind = "host-tools"
        self._user: tuple[int, int, list[int], str] | None = None
        if image is not None and pid_mode is not None:
            self._use_image(image)
        elif image is not None:
            self.isolation_note += "; the image's tree needs a PID namespace of the sandbox's own: host tools"
        if self.image_root is None:
            make_image_root(self.root)  # a Debian image's top-level tree, the sandbox's own
        if self.isolated and self.image_root is None:
            for d in SYSTEM_DIRS:
                make_mountpoint(self.root, d)
            st = os.stat(self.root)
            self._root_id = (st.st_dev, st.st_ino)
        # the components, on the final root (the image's once _use_image() ran)
        self.pid1 = Pid1(
            self,
            self._lock,
            root=self.root,
            hostname=self.hostname,
            mode=pid_mode,
            unshare=self._unshare,
            netns=has_netns,
            net_note=net_note,
            image_root=self.image_root,
            user=self._user,
            intend=janitor.intend if janitor is not None else None,
        )
        self.paths = SandboxPaths(
            self.root, self.isolated, view_root=self.pid1.view_root, base_env=self.base_env, pid1=self.pid1.holder_pid
        )
        # resource limits (cgroups.py): one cgroup per sandbox that every process of it joins
        # before it execs; the janitor (janitor.py) removes it should the mock die first
        self.cgroup: cgroups.Cgroup | None = None
        self.limits_note = ""
        self._janitor = janitor
        if limits is not None and limits.wanted():
            self._make_cgroup(limits, cgroup_name or "%s%s" % (cgroups.NAME_PREFIX, self._token[:12]))

    def _use_image(self, image: ImageTree) -> None:
        """The sandbox's root is its image (rootfs.py: an overlay or a copy in the sandbox's directory).
        Raises rootfs.RootfsError / UserNotFound: the create fails like a container Docker cannot make."""
        ir = ImageRoot(self.root, image)
        self._user = ir.user() if os.geteuid() == 0 else None  # a user namespace maps only root
        ir.prepare()
        self.image_root, self.root, self.view_kind = ir, ir.root, "image"

    def changes_dir(self) -> tuple[str, str]:
        """(host path, kind) of what the sandbox wrote over its image, readable while it runs or is
        paused: "overlay" (an overlayfs upper dir: whiteouts are 0/0 char devices, opaque dirs carry
        trusted.overlay.opaque=y), "full" (the copied root) or "host-tools" (the root directory of the
        host-tools view: its own directories; the host's dirs are bound in its namespace, not here)."""
        if self.image_root is not None:
            return self.image_root.changes()
        return self.root, "host-tools"

    def _make_cgroup(self, limits: "cgroups.Limits", name: str) -> None:
        host = cgroups.host()
        self.limits_note = host.note()
        if not host.bases:
            return
        if self._janitor is not None:
            self._janitor.intend("cgroup-name", name)  # before it exists: a restart reaps it (janitor.reap_root)
        try:
            self.cgroup = host.create(name, limits)
        except OSError as exc:
            self.limits_note = "resource limits not applied: %s" % exc
            return
        if self.cgroup is not None and self._janitor is not None:
            for d in self.cgroup.dirs:
                self._janitor.track("cgroup", d)
        self._cg_spawner()  # its cgroup move now, in the background: PID 1's move right after skips the RCU wait

    def _cg_spawner(self) -> Spawner | None:
        """cgroup v1: the thread in the sandbox's cgroups that forks its processes (spawner.py); once it has
        entered the sandbox it is the holder's (contained.py), and an uncontained fork gets a new one."""
        sp = self._spawner
        holder = self.pid1.holder
        if sp is not None and (sp.stopped or (holder is not None and holder.contained is sp)):
            sp = self._spawner = None
        if sp is None and self.cgroup is not None and self.cgroup.thread_join and not self.cgroup.removed:
            sp = self._spawner = Spawner(self.cgroup, "osb-spawner-%s" % self.hostname)
        return sp

    def _forker(self, holder: Holder) -> Forker | None:
        """The sandbox's forker (forker.py), started on first use; None where it cannot start (the stages then,
        for good) or is switched off. Lock held."""
        if holder.forker is None and not holder.forker_tried and forker_wanted():
            holder.forker_tried = True
            procs = self.cgroup.procs if self.cgroup is not None else []
            try:
                holder.forker = Forker(lifeline_call, holder.pid, procs)
            except OSError:
                holder.forker = None
        forker: Forker | None = holder.forker
        return forker

    def _join(self, cmd: list[str], controlling_tty: bool) -> tuple[list[str], Any, Any]:
        return cgjoin.command_join(self.cgroup, self._cg_spawner(), cmd, controlling_tty)

    def _pid1_start(self, env: dict[str, str]) -> tuple[dict[str, Any], dict[str, str], str | None]:
        """The runtime's part of PID 1's start (pid1.Owner): how it joins the cgroup (cgjoin.holder_join),
        what only view.py reads (the cgroup's and the image's view, the v1 join) and its execd."""
        holder_join = cgjoin.holder_join(self.cgroup, self._setpriv)
        view_env = {**self._view_env(), "OSB_MOCK_CGROUP_JOIN": "", **holder_join.pop("view_env", {})}
        return holder_join, view_env, self._install_execd(env)

    def _view_env(self) -> dict[str, str]:
        out = {"OSB_MOCK_CGROUP_VIEW": self.cgroup.view_env()} if self.cgroup is not None else {}
        if self.image_root is not None:
            out.update(self.image_root.view_env(self._user[:3] if self._user else None))
        return out

    def _remove_cgroup(self) -> None:
        cg = self.cgroup
        if cg is None or cg.removed:
            return
        if self._spawner is not None:
            self._spawner.stop()  # out of the cgroups first (spawner.py)
        if cg.remove() and self._janitor is not None:
            for d in cg.dirs:
                self._janitor.untrack("cgroup", d)

    @property
    def pid_namespace(self) -> bool:
        """True when the sandbox's processes share one PID namespace of their own (`ps` shows only them)."""
        return self.pid1.mode is not None

    # -- the sandbox's paths and PID 1 (paths.py, pid1.py) --------------------------------------
    def resolve(self, sandbox_path: str, *, follow_symlinks: bool = True) -> str:
        """The host path of sandbox_path in the sandbox's view, never outside it (SandboxPaths.resolve:
        symlinks resolved as a process inside would; raises ValueError, PathEscape, OSError ELOOP)."""
        return self.paths.resolve(sandbox_path, follow_symlinks=follow_symlinks)

    @property
    def has_netns(self) -> bool:
        """True when the sandbox has a network namespace of its own (reach its ports with connect())."""
        return self.pid1.netns

    def connect(self, port: int, timeout: float | None = None) -> socket.socket:
        """A TCP connection to 127.0.0.1:port as seen from inside the sandbox (Pid1.connect)."""
        return self.pid1.connect(port, timeout)

    def listen(self, port: int) -> socket.socket:
        """A TCP socket listening on 0.0.0.0:port inside the sandbox's own network namespace (Pid1.listen)."""
        return self.pid1.listen(port)

    def openpty(self) -> tuple[int, int]:
        """(master, slave) for a PTY session, from the sandbox's own devpts when it has one (Pid1.openpty)."""
        return self.pid1.openpty()

    def agent_call(self, request: Mapping[str, Any], timeout: float = 5.0) -> tuple[dict[str, Any], list[int]]:
        """One request to the sandbox's agent (runtime/agent.py), in the sandbox's namespaces:
        ``{"op": "ping"}`` -> ``{"ok": True, "pid": N}``; ``{"op": "connect", "port": P}`` ->
        ``({"ok": True}, [fd])`` (a TCP socket connected to 127.0.0.1:P in the sandbox's network
        namespace; the caller owns the fd) or ``{"ok": False, "errno": E, "error": "..."}``.
        Without a resident agent (a real execd binary, per-command fallback) a one-shot agent runs
        as a sandbox command. Raises AgentError (none can run, timeout), SandboxTerminated."""
        agent = self.pid1.resident_agent()
        if agent is not None:
            return agent.call(request, timeout)
        return oneshot_call(self, request, timeout)

    # -- processes -----------------------------------------------------------------------------
    def base_env(self) -> dict[str, str]:
        if self.image_root is not None:  # the image's Env, PATH and HOME (rootfs.py), + bootstrap.sh's export
            env = self.image_root.env(self._user[3] if self._user else None)
            env["EXECD_ENVS"] = "/opt/opensandbox/.env"
            # bootstrap.sh's sh exports PWD (its directory: the image's WORKDIR) to execd, and execd's environment
            # goes to every process it starts (live: a session's script exports PWD='/')
            env.setdefault("PWD", self.image_root.working_dir())
        elif self.isolated:
            # + what bootstrap.sh exports to execd and so to every command (live: identity probe)
            env = {"PATH": DEFAULT_PATH, "HOME": "/root", "TMPDIR": "/tmp", "EXECD_ENVS": "/opt/opensandbox/.env"}
            env["PWD"] = "/"
        else:
            env = {
                "PATH": os.environ.get("PATH", DEFAULT_PATH),
                "HOME": os.path.join(self.root, "root"),
                "TMPDIR": os.path.join(self.root, "tmp"),
            }
        env["HOSTNAME"] = self.hostname  # Docker sets it to the container's hostname
        env.update(self.env)
        return env

    def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: Any = None,
        stdout: Any = None,
        stderr: Any = None,
        controlling_tty: bool = False,
        user: str | None = None,
        shell_form: bool = False,
        ignore_sigint: bool = False,
    ) -> subprocess.Popen[bytes]:
        """Start argv in its own process group (contained.group_kwargs) inside the sandbox. cwd is a sandbox
        path (default "/"); env overrides the sandbox environment. controlling_tty=True makes stdin
        (a terminal) the session's controlling terminal (for PTY sessions). ``shell_form``: argv is execd's
        ``[shell, "-c", code]``, whose shell is getShell()'s: "bash" where LookPath finds it on execd's PATH
        (the sandbox's), else "sh" (components/execd/pkg/runtime/command.go at 3bb6fad); the contained
        thread looks it up in the sandbox's own "/" and runs the bash it found, as exec.Cmd runs its Path.
        ``ignore_sigint`` (not with ``shell_form``): argv starts with SIGINT ignored, as a process execd starts
        outside a command run: the contained thread's fork (contained.sigint_ignored) or the forker's leaves it
        so, else the sandbox's sh does (contained.SIGINT_STAGE). Raises SandboxTerminated, OSError, ValueError."""
        if not argv or not all(isinstance(a, str) for a in argv):
            raise ValueError("argv must be a non-empty list of strings")
        if any("\x00" in a for a in argv):
            raise ValueError("argv contains a NUL byte")
        given = argv
        trap = None  # the SIGINT stage's own cmdline, awaited past like the other wrappers
        if ignore_sigint:
            argv = SIGINT_STAGE + list(argv)
            trap = b"\0".join(a.encode("utf-8", "surrogateescape") for a in argv) + b"\0"
        full_env = self.base_env()
        execd_path = full_env.get("PATH", DEFAULT_PATH)  # LookPath's (execd's own environment, not the command's)
        full_env.update(env or {})
        for k, v in list(full_env.items()):
            if "\x00" in k or "\x00" in v or "=" in k or not k:
                raise ValueError(f"invalid environment variable name or value: {k!r}")
        wd = cwd or (self.image_root.working_dir() if self.image_root is not None else "/")
        if not self.isolated:
            full_env[_MARKER_ENV] = self._token
        with self._lock:
            if self.terminated:
                raise SandboxTerminated("sandbox is terminated")
            holder = self.pid1.ensure_holder() if self.pid1.mode is not None else None
            contained = forker = None
            spawn_tty: str | None = None  # a PTY shell's terminal: the contained thread's posix_spawn opens it
            quiet = False  # SIGINT left ignored by the fork itself: the contained thread's or the forker's
            if holder is not None:
                if not holder.alive():
                    raise SandboxNotRunning("the sandbox is not running: " + holder.exit_text())
                self.pid1.await_net(holder)
                contained = contained_spawner(holder, self.cgroup, self.hostname, self._spawner)  # forks from inside
                if contained is None:  # a process inside instead (forker.py)
                    forker = self._forker(holder)
            creds: dict[str, Any] = {}
            # the shell form: the contained thread or the forker looks the shell up where it forks (its "/" is the
            # sandbox's); anywhere else it is picked here, through the view
            inside_fork = contained is not None or forker is not None
            look = execd_path if shell_form and inside_fork and not controlling_tty else None
            if shell_form and look is None:
                argv = self.paths.shell() + list(argv[1:])
            ctty = None
            if forker is not None and holder is not None:  # the forker is inside: the command, nothing around it
                cmd, host_cwd, joining, stages, preexec = list(argv), wd, None, None, None
                if trap is not None and not sigint_stage_forced():  # the forker's own spawn leaves it ignored
                    cmd, trap, quiet = cmd[len(SIGINT_STAGE) :], None, True
                if controlling_tty:  # a PTY shell: its terminal opened by its path inside, else TIOCSCTTY on stdin
                    index = pts_inside(stdin, holder.pid)
                    ctty = "/dev/pts/%d" % index if index is not None else ""
            elif contained is not None and holder is not None:  # the thread is inside: the command, nothing around it
                cmd, host_cwd, joining, stages, preexec = list(argv), wd, None, None, None
                creds = _creds(user or holder.user, contained.identity)
                if trap is not None and not creds and sigint_native():  # the thread's own fork leaves it ignored
                    cmd, trap, quiet = cmd[len(SIGINT_STAGE) :], None, True
                if controlling_tty and not creds and trap is None and pspawn.available():
                    # a PTY shell by posix_spawn (pspawn.py): the child opens its terminal by its path inside
                    index = pts_inside(stdin, holder.pid)
                    spawn_tty = "/dev/pts/%d" % index if index is not None else None
                    preexec = take_ctty if index is None else None  # a host PTY: TIOCSCTTY (a full fork)
                elif controlling_tty and not creds:  # a PTY shell: the sandbox's sh takes the terminal (a vfork)
                    if trap is not None:  # one sh for both: it ignores SIGINT and opens the terminal
                        cmd, trap = cmd[len(SIGINT_STAGE) :], None
                        cmd, stages, preexec = ctty_stage(cmd, stdin, holder.pid, ignore_sigint=True)
                    else:
                        cmd, stages, preexec = ctty_stage(cmd, stdin, holder.pid)
                elif controlling_tty:  # another user: a full fork anyway (Popen user=), TIOCSCTTY before the exec
                    preexec = take_ctty
            elif holder is not None:
                cmd, full_env = holder.command(self._nsenter, self._setpriv, wd, argv, full_env)
                host_cwd = self.root
            elif self.isolated:
                full_env = scripts.protect_view_env(full_env)
                full_env.update(self._view_env())
                cmd = scripts.prelude_argv(self._prefix, self.root, wd, self.hostname, argv, self.volumes)
                host_cwd = self.root
            else:
                cmd = list(argv)
                host_cwd = self.paths.host_cwd(wd)
            # cgroup v1: forked by the sandbox's spawner thread, in its cgroups already (spawner.py)
            spawner = contained or (self._cg_spawner() if self.cgroup is not None and forker is None else None)
            if not inside_fork:
                stages = holder.stages(cmd) if holder is not None else None
                if holder is not None and holder.fork_joins:  # an image's view as root (forkjoin.py)
                    preexec, joining = holder.fork_join(
                        wd, self.cgroup if spawner is None else None, controlling_tty, user
                    )  # user: "UID GID G,.."
                else:
                    joined, preexec, joining = self._join(cmd, controlling_tty)
                    if stages is not None and joined is not cmd:  # the v2 join stage is a wrapper stage too
                        stages[1].add(b"\0".join(a.encode("utf-8", "surrogateescape") for a in joined) + b"\0")
                    cmd = joined
            if trap is not None:
                stages = (False, {trap}) if stages is None else (stages[0], stages[1] | {trap})
            inside = holder.children_inside() if holder is not None and not inside_fork else None

            def fork() -> subprocess.Popen[bytes]:
                if forker is not None and holder is not None:
                    return forker.spawn(
                        cmd,
                        env=full_env,
                        cwd=host_cwd,
                        stdin=stdin_fd,
                        stdout=stdout,
                        stderr=stderr,
                        user=contained_user(user or holder.user),
                        look=look,
                        ctty=ctty,
                        ignore_sigint=quiet,
                    )
                exe = None
                if look is not None:  # in the sandbox already: its "/" is this thread's
                    exe = look_path("bash", look)
                    if exe is None:
                        cmd[0], exe = "sh", look_path("sh", look)  # not found: the exec says so, as before
                if contained is not None:  # (one contained fork at a time: contained.SPAWN_LOCK)
                    with SPAWN_LOCK, sigint_ignored() if quiet else contextlib.nullcontext():
                        return popen(exe)
                return popen(exe)

            def popen(exe: str | None) -> subprocess.Popen[bytes]:
                if spawn_tty is not None:
                    return SpawnedPopen(
                        cmd,
                        executable=exe,
                        cwd=host_cwd,
                        env=full_env,
                        stdin=stdin_fd,
                        stdout=stdout,
                        stderr=stderr,
                        ctty=spawn_tty,
                    )
                with (
                    inside if inside is not None else contextlib.nullcontext(),
                    joining if joining is not None else contextlib.nullcontext(),
                ):
                    return subprocess.Popen(
                        cmd,
                        executable=exe,
                        cwd=host_cwd,
                        env=full_env,
                        close_fds=True,
                        stdin=stdin_fd,
                        stdout=stdout,
                        stderr=stderr,
                        preexec_fn=preexec,
                        **creds,
                        **group_kwargs(controlling_tty or contained is None),
                    )

            # no stdin: /dev/null opened read-only, as Go's exec.Cmd and execd's background commands open it
            # (os.Open: `echo x >&0` fails "Bad file descriptor" live), the sandbox's own (its path inside)
            stdin_fd = _devnull(holder.pid if holder is not None else None) if stdin is None else stdin
            try:
                proc = spawner.call(fork) if spawner is not None else fork()
            except ForkerError:
                assert holder is not None  # (a forker is only made for a holder)
                holder.drop_forker()
                proc = None
            except OSError as exc:
                # fork() into a PID namespace whose init is gone fails with ENOMEM
                if holder is not None and exc.errno == errno.ENOMEM:
                    raise SandboxNotRunning("the sandbox is not running: " + holder.exit_text()) from exc
                raise
            finally:
                if stdin is None:
                    os.close(stdin_fd)
            if proc is not None:
                self._track(proc)
            paused = self.paused
        if proc is None:  # the forker failed: the stages, for this command and the sandbox's next ones
            return self.spawn(
                given,
                cwd=cwd,
                env=env,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                controlling_tty=controlling_tty,
                user=user,
                shell_form=shell_form,
                ignore_sigint=ignore_sigint,
            )
        if holder is not None and stages is not None and not paused:
            # like Go's cmd.Start (execd), return once the command itself runs: a `ps` right after
            # must not see the joining wrapper (nsenter/unshare or the helper, host paths included)
            await_exec(proc, stages)
        return proc

    def _track(self, proc: subprocess.Popen[bytes]) -> None:
        self._procs = [p for p in self._procs if p.poll() is None]
        self._procs.append(proc)
        if self.paused:  # a frozen sandbox runs nothing (docker pause freezes new processes too)
            killpg(proc.pid, signal.SIGSTOP)

    def start_entrypoint(
        self, argv: Sequence[str], *, stdout: Any = None, stderr: Any = None
    ) -> subprocess.Popen[bytes]:
        """Run the sandbox entrypoint (exec form, no shell), like the container's main process. With a
        PID namespace it is the child of the sandbox's PID 1, and the returned process exits with its
        status (128 + n when a signal n ended it, like the container's exit code)."""
        argv = list(argv)
        stdout = subprocess.DEVNULL if stdout is None else stdout
        stderr = subprocess.DEVNULL if stderr is None else stderr
        if self.pid1.mode is not None:
            if not argv or not all(isinstance(a, str) and "\x00" not in a for a in argv):
                raise ValueError("argv must be a non-empty list of strings without NUL bytes")
            env = self.base_env()
            with self._lock:
                if self.terminated:
                    raise SandboxTerminated("sandbox is terminated")
                if self.pid1.holder is None:
                    holder = self.pid1.start(argv, env, implicit=False, stdout=stdout, stderr=stderr)
                    if holder is not None:
                        return holder.proc
        return self.spawn(argv, cwd="/", stdout=stdout, stderr=stderr)

    def process_groups(self) -> list[int]:
        """Process groups started through spawn()/start_entrypoint() that are still running (an
        implicit main process started on first use is the runtime's own and not listed)."""
        with self._lock:
            holder = self.pid1.holder
            skip = holder.proc if holder is not None and holder.implicit else None
            return [p.pid for p in self._procs if p.poll() is None and p is not skip]

    # -- pause / resume / terminate -------------------------------------------------------------
    def pause(self) -> None:
        with self._lock:
            if self.terminated:
                return
            self.paused = True
            self._signal_all(signal.SIGSTOP)

    def resume(self) -> None:
        with self._lock:
            self.paused = False
            self._signal_all(signal.SIGCONT)

    def _signal_all(self, sig: int) -> None:
        """sig to every process group and stray process; wakes wait_unpaused(). Lock held."""
        for pid in self._live_pgids():
            killpg(pid, sig)
        for pid in self._stray_pids():
            kill(pid, sig)
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
                killpg(p.pid, signal.SIGKILL)
        for _ in range(50):
            strays = self._stray_pids()
            if not strays:
                break
            for pid in strays:
                kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        # reap in any order: a dying PID 1 (and so its holder) only finishes once the processes the
        # mock forked into its namespace are reaped (kernel zap_pid_ns_processes)
        pending, deadline = list(procs), time.monotonic() + 5
        while pending and time.monotonic() < deadline:
            pending = [p for p in pending if p.poll() is None]
            if pending:
                time.sleep(0.005)
        # PID 1 outlives its killed holder by a moment (reparented, it is still emptying the namespace)
        holder = self.pid1.holder
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
            holder, agent = self.pid1.detach()
        if holder is not None:
            holder.close()
        self._remove_cgroup()
        if agent is not None:
            agent.close()

    def cleanup(self) -> None:
        """terminate() and remove the root directory (never "/")."""
        self.terminate()
        self.pid1.close_view()
        if self.home != "/":
            rmtree(self.home)

    def _live_pgids(self) -> list[int]:
        return [p.pid for p in self._procs if p.poll() is None]

    def _stray_pids(self) -> list[int]:
        holder = self.pid1.holder
        pidns = holder.pidns_id if holder is not None else ""
        strays = stray_pids(self.root, self.isolated, self._token, pidns, self._root_id)
        forker = holder.forker if holder is not None else None
        if forker is not None:  # its root is the sandbox's, but it is the mock's: never stopped or killed as one
            strays = [pid for pid in strays if pid != forker.proc.pid]
        return strays

    # -- execd ------------------------------------------------------------------------------------
    def use_execd(
        self,
        binary: str,
        *,
        port: int | None = None,
        token: str | None = None,
        env: Mapping[str, str] | None = None,
        args: list[str] | None = None,
    ) -> int:
        """Make a real execd binary this sandbox's /opt/opensandbox/execd, started by PID 1's
        bootstrap.sh as ``/opt/opensandbox/execd --port PORT [-access-token TOKEN] ARGS...`` when
        the sandbox starts (call before start_entrypoint(); start_execd() waits for it). Returns the
        port (a free one when None). Raises RuntimeError (not isolated), ValueError (bad binary)."""
        with self._lock:
            self._execd_spec = prepare_execd(self, binary, port=port, token=token, env=env, args=args)
            return self._execd_spec["port"]

    def _install_execd(self, env: dict[str, str]) -> str | None:
        """Put PID 1's execd in place: "binary" (a real execd, env gets its flags for bootstrap.sh),
        the host path of the Python interpreter to bind there for the mock's agent, or None (no
        Python 3 in the view: no execd process)."""
        spec = self._execd_spec
        if spec is not None:
            install_binary(self.root, spec["binary"])
            env.update(spec["env"])
            spec["started"] = True
            return "binary"
        return install_agent(self)

    def start_execd(
        self,
        binary: str,
        *,
        port: int | None = None,
        token: str | None = None,
        env: Mapping[str, str] | None = None,
        args: list[str] | None = None,
        timeout: float = 15.0,
    ) -> "ExecdProcess":
        """Run a real execd binary inside this sandbox (execd.py) the way the server's container does:
        bootstrap.sh (PID 1) starts ``/opt/opensandbox/execd --port PORT [-access-token TOKEN]``
        (+ args) with ``EXECD_ENVS=/opt/opensandbox/.env``, output to /tmp/execd.log, in the
        sandbox's namespaces with its capability set. Starts the sandbox (implicit entrypoint) when
        nothing did yet; after use_execd() + start_entrypoint() it only waits. Returns once execd
        accepts connections on 127.0.0.1:PORT. Raises RuntimeError when the sandbox is not isolated
        (a real execd never runs on the host) or execd does not come up, ValueError for a bad binary."""
        return start_execd(self, binary, port=port, token=token, env=env, args=args, timeout=timeout)


def _short_id() -> str:
    """12 hex digits, not all of them decimal ones: a container's short id (_util.container_id)."""
    return container_id()[:12]
