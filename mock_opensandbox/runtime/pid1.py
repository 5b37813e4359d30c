"""Pid1, the component of SandboxRuntime (sandbox.py) around the sandbox's main process: PID 1 (the
namespace holder, holder.py) started on first use, its view of "/", its devpts, its network namespace
and its agent. The runtime holds it as ``runtime.pid1`` and gives it what it cannot know itself (the
``Owner`` protocol below: the sandbox's lifecycle flag, its notes, its mounts and the runtime's part of
a start); everything else comes in through the constructor.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import threading
from typing import Any, Callable, Mapping, Protocol

from mock_opensandbox.runtime import nethub, netns
from mock_opensandbox.runtime.agent import AgentChannel
from mock_opensandbox.runtime.execdproc import idle_execd
from mock_opensandbox.runtime.holder import Holder
from mock_opensandbox.runtime.paths import sandbox_pty
from mock_opensandbox.runtime.rootfs import ImageRoot, user_word

# A runtime used without start_entrypoint() (stand-alone execd, unit tests) gets this main process,
# the usual keep-alive entrypoint of OpenSandbox sandboxes.
IMPLICIT_ENTRYPOINT = ("tail", "-f", "/dev/null")


class SandboxTerminated(RuntimeError):
    """spawn() after terminate()."""


class SandboxNotRunning(SandboxTerminated):
    """spawn() after the sandbox's main process (PID 1 of its PID namespace) exited: the sandbox is
    dead like a stopped container and nothing can join its namespaces."""


class Owner(Protocol):
    """What Pid1 uses of the SandboxRuntime holding it (sandbox.py, which imports this module)."""

    terminated: bool  # read before PID 1 starts or is used; set when a start cannot mount the sandbox
    isolation_note: str  # + why this sandbox has no PID namespace of its own, when PID 1 cannot start
    volumes: str  # view.py's "mount the volumes" argument (mounts.plan), set before PID 1 starts

    def base_env(self) -> dict[str, str]: ...  # the implicit main process's environment

    # the runtime's part of a start: Holder.start's cgroup join arguments, what only view.py reads, and
    # PID 1's execd ("binary": a real one, env gets its flags; the agent's Python; None: no execd process)
    def _pid1_start(self, env: dict[str, str]) -> tuple[dict[str, Any], dict[str, str], str | None]: ...

    def _track(self, proc: subprocess.Popen[bytes]) -> None: ...  # PID 1 is one of the sandbox's processes (pause)

    # the network namespace's way in when not root (netns.SandboxNet): the resident agent
    def agent_call(self, request: Mapping[str, Any], timeout: float = 5.0) -> tuple[dict[str, Any], list[int]]: ...


class Pid1:
    """PID 1 of one sandbox (held as SandboxRuntime.pid1). ``mode``: how commands join its namespaces
    (holder.py), None when the sandbox has no PID namespace of its own (also once PID 1 could not start);
    ``netns``: it holds a network namespace of the sandbox's own; ``net_note``: what of the network is not
    like a container's ("" = nothing). ``holder``, ``agent`` while it runs."""

    def __init__(
        self,
        owner: Owner,
        lock: threading.RLock,
        *,
        root: str,
        hostname: str,
        mode: str | None,
        unshare: str,
        netns: bool,
        net_note: str,
        image_root: ImageRoot | None,
        user: tuple[int, int, list[int], str] | None,
        intend: Callable[[str, str], Any] | None,
    ):
        self._owner, self._lock = owner, lock  # the runtime's RLock (ensure_holder, start, detach: held by the caller)
        self.root, self.hostname, self.mode, self._unshare = root, hostname, mode, unshare
        self.netns, self.net_note = netns, net_note
        self._image_root, self._user, self._intend = image_root, user, intend
        self.holder: Holder | None = None
        self.agent: AgentChannel | None = None  # the resident agent's channel (PID 1's execd is the mock's)
        # an O_PATH fd on PID 1's root ("/" of the sandbox's mount namespace: the view the files API works on)
        self.root_fd: int | None = None

    def view_root(self) -> str:
        """The host path that is the sandbox's "/" for every file operation of its execd: with a PID 1
        (a PID namespace), "/" of the sandbox's mount namespace, reached through an O_PATH descriptor
        on /proc/<PID 1>/root (the kernel walks that namespace's mounts: the read-only system dirs,
        /etc's overlay, /dev, ...: what a command sees); else the root directory (no namespace of the
        sandbox's own holds a view: the per-command fallback, or no isolation). Never realpath() it:
        the link text of /proc/PID/root is "/". Starts PID 1 (with the implicit entrypoint) when
        nothing did yet, like spawn()."""
        if self.mode is None:  # also when not isolated (no PID namespace then)
            return self.root
        with self._lock:
            if self._owner.terminated:
                return self.root
            holder = self.ensure_holder()
            if holder is not None and self.root_fd is not None:
                return "/proc/self/fd/%d/." % self.root_fd  # "/." : lstat sees the directory, not the fd link
        return self.root

    def holder_pid(self) -> int | None:
        """PID 1's host pid (its holder's), None while there is none."""
        holder = self.holder
        return holder.pid if holder is not None else None

    def openpty(self) -> tuple[int, int]:
        """(master, slave) for a PTY session. With a PID namespace the pair comes from the sandbox's
        own devpts (like execd opening /dev/ptmx inside the container), so `tty` inside names it
        /dev/pts/N; otherwise (no holder, the per-command fallback, not isolated) the host's."""
        with self._lock:
            if self._owner.terminated:
                raise SandboxTerminated("sandbox is terminated")
            holder = self.ensure_holder() if self.mode is not None else None
            if holder is not None and holder.alive():
                try:
                    return sandbox_pty(holder.pid)
                except OSError:
                    pass
        return os.openpty()

    def ensure_holder(self) -> Holder | None:
        """The sandbox's namespace holder, started with the implicit main process on first use.
        None (and PID namespaces off for this sandbox) when it cannot start. Call with the lock held."""
        if self.holder is None and self.mode is not None:
            self.start(
                list(IMPLICIT_ENTRYPOINT),
                self._owner.base_env(),
                implicit=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        return self.holder

    def start(
        self, argv: list[str], env: Mapping[str, str], *, implicit: bool, stdout: Any, stderr: Any
    ) -> Holder | None:
        """PID 1 with argv as the sandbox's main process. Call with the lock held, no holder yet."""
        assert self.mode is not None
        env = dict(env)
        # root: an address on the sandboxes' bridge (nethub.py), else a slirp4netns of its own
        lease = nethub.lease() if self.netns and self.mode == "direct" else None
        if self.netns:
            ip = lease.ip if lease is not None else netns.GUEST_IP
            env.update(netns.holder_env(self.hostname, bool(netns.find_stack()[0]), ip))
        agent = agent_fd = python = idle = None
        holder_join, view_env, execd = self._owner._pid1_start(env)
        try:
            if execd is not None and execd != "binary" and (self.mode == "direct" or self._image_root):
                # root: connect/listen go through setns, agent_call through a one-shot agent, so
                # /opt/opensandbox/execd is an idle placeholder (execd.IDLE_EXECD: ~1 MB, not ~9)
                idle = idle_execd(self._image_root.home if self._image_root is not None else None)
            if execd is not None and execd != "binary" and idle is None:
                python = execd
                agent, agent_fd = AgentChannel.pair()
            holder, why = Holder.start(
                self._unshare,
                self.root,
                self.hostname,
                argv,
                env,
                self.mode,
                implicit=implicit,
                stdout=stdout,
                stderr=stderr,
                net=self.netns,
                volumes=self._owner.volumes,
                agent_fd=agent_fd,
                agent_python=python,
                execd=execd is not None,
                idle_execd=idle,
                view_env=view_env,
                intend=self._intend,
                **holder_join,
            )
        except BaseException:
            if lease is not None:
                lease.close()
            raise
        finally:
            if agent_fd is not None:
                os.close(agent_fd)
        if holder is not None:
            try:
                self.root_fd = os.open("/proc/%d/root" % holder.pid, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                self.root_fd = None  # PID 1 already ended: files are the root directory's
            if self._image_root is not None:  # commands join through scripts/nsexec.py: nothing of the host in the view
                holder.via_helper, holder.user = True, user_word(self._user) if self._user else "-"
        if agent is not None:
            if holder is not None:
                self.agent = agent
            else:
                agent.close()
        if holder is None and lease is not None:
            lease.close()
        volumes = self._owner.volumes
        if holder is None and (volumes or self._image_root is not None):
            # the volumes or the image's root could not be mounted (view.py failed closed): no sandbox,
            # like a container whose mounts fail (no fallback without them)
            self._owner.terminated = True
            raise SandboxTerminated(
                "the sandbox's %s could not be mounted (%s)" % ("volumes" if volumes else "root", why)
            )
        if holder is not None and self.netns:
            # a real execd ("binary") spawns its own: wait for eth0 now (_attach_net)
            self._attach_net(holder, wait=execd == "binary", lease=lease)
        if holder is None:
            # graceful degradation: this sandbox's commands get one mount namespace each (no PID namespace)
            self.mode = None
            self._owner.isolation_note += f"; this sandbox has no PID namespace of its own ({why})"
            if self.netns:
                self.netns = False
                self.net_note = "not contained: the host network (no PID 1 to hold a network namespace)"
            return None
        self.holder = holder
        self._owner._track(holder.proc)
        if implicit:
            holder.settle()
        return holder

    def _attach_net(self, holder: Holder, *, wait: bool, lease: Any) -> None:
        """The holder's network namespace: connect() and eth0, from the bridge's lease or, when installed,
        a slirp4netns of its own."""
        try:
            # the resident agent (the mock's own execd) connects from inside; else netns's helper
            holder.net = netns.SandboxNet(
                holder.pid, holder.mode, self._owner.agent_call if self.agent is not None else None, lease
            )
        except OSError:  # PID 1 already ended (a stopped sandbox): nothing to reach
            if lease is not None:
                lease.close()
            return
        # no wait for slirp4netns's readiness here when the mock's execd runs the commands: eth0 is
        # used from a command, and spawn() awaits it first (a real execd spawns its own: wait now)
        note = holder.net.start_stack(wait=wait)
        if note:
            self.net_note = note

    def await_net(self, holder: Holder) -> None:
        """Before a command runs: PID 1's execd and entrypoint run (Holder.settle), and eth0 is up (or known
        not to come): slirp4netns's ready fd (netns)."""
        holder.settle()
        net = holder.net
        if net is not None and net.stack_pending:
            note = net.await_stack()
            if note:
                self.net_note = note

    def connect(self, port: int, timeout: float | None = None) -> socket.socket:
        """A TCP connection to 127.0.0.1:port as seen from inside the sandbox: in its own network
        namespace (bridge), else the host's loopback (--network host, no namespaces). Raises OSError
        (ECONNREFUSED when nothing listens there, or the sandbox is not running)."""
        with self._lock:
            holder = self.ensure_holder() if self.netns and not self._owner.terminated else self.holder
            net: netns.SandboxNet | None = holder.net if holder is not None else None
            netns_wanted = self.netns
        if net is not None:
            return net.connect(port, timeout)
        if netns_wanted:  # a bridge sandbox that is not running: nothing listens inside
            raise ConnectionRefusedError(111, "the sandbox is not running")
        return socket.create_connection(("127.0.0.1", port), timeout=timeout)

    def listen(self, port: int) -> socket.socket:
        """A TCP socket listening on 0.0.0.0:port inside the sandbox's own network namespace (the
        mock's in-process execd listens on 44772 there too: execd/inside.py). Only for a running
        sandbox with a network namespace; never starts its PID 1. Raises OSError (ENOTSUP without a
        namespace of its own, ECONNREFUSED when it is not running, EADDRINUSE)."""
        with self._lock:
            holder = None if self._owner.terminated else self.holder
            net: netns.SandboxNet | None = holder.net if holder is not None else None
            netns_wanted = self.netns
        if net is None:
            raise OSError(
                errno.ENOTSUP if not netns_wanted else errno.ECONNREFUSED,
                "the sandbox has no network namespace of its own" if not netns_wanted else "the sandbox is not running",
            )
        return net.listen(port)

    def resident_agent(self) -> AgentChannel | None:
        """The agent PID 1 runs (PID 1 started when nothing did yet), None when it has none or its
        channel closed (SandboxRuntime.agent_call then runs a one-shot agent). Raises SandboxTerminated."""
        with self._lock:
            if self._owner.terminated:
                raise SandboxTerminated("sandbox is terminated")
            if self.mode is not None:
                self.ensure_holder()
            agent = self.agent
        return agent if agent is not None and not agent.closed else None

    def detach(self) -> tuple[Holder | None, AgentChannel | None]:
        """terminate(): (holder, agent) for the caller to close, none kept; the root fd now names the
        root directory: a file operation still in flight never meets a reused descriptor number, and
        the dead namespace's mounts are let go. Lock held."""
        holder, self.holder = self.holder, None
        agent, self.agent = self.agent, None
        if self.root_fd is not None:
            try:
                fd = os.open(self.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
                os.dup2(fd, self.root_fd, inheritable=False)
                os.close(fd)
            except OSError:
                pass
        return holder, agent

    def close_view(self) -> None:
        """cleanup(): the root fd closed."""
        with self._lock:
            fd, self.root_fd = self.root_fd, None
        if fd is not None:
            os.close(fd)
