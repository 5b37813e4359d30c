"""SandboxPid1, the part of SandboxRuntime (sandbox.py) around the sandbox's main process: PID 1 (the
namespace holder, holder.py) started on first use, its view of "/", its devpts, its network namespace
and its agent. A mixin with no state of its own; split out of sandbox.py.
"""

from __future__ import annotations

import errno
import os
import socket
import subprocess
from typing import Any, Mapping

from mock_opensandbox.runtime import netns
from mock_opensandbox.runtime.agent import AgentChannel, oneshot_call
from mock_opensandbox.runtime.execdproc import idle_execd
from mock_opensandbox.runtime.holder import Holder
from mock_opensandbox.runtime.paths import SandboxPaths, sandbox_pty
from mock_opensandbox.runtime.rootfs import ImageRoot, user_word

# A runtime used without start_entrypoint() (stand-alone execd, unit tests) gets this main process,
# the usual keep-alive entrypoint of OpenSandbox sandboxes.
IMPLICIT_ENTRYPOINT = ("tail", "-f", "/dev/null")


class SandboxTerminated(RuntimeError):
    """spawn() after terminate()."""


class SandboxNotRunning(SandboxTerminated):
    """spawn() after the sandbox's main process (PID 1 of its PID namespace) exited: the sandbox is
    dead like a stopped container and nothing can join its namespaces."""


class SandboxPid1(SandboxPaths):
    """PID 1 of SandboxRuntime (the attributes below are set by its __init__)."""

    hostname: str
    home: str
    image_root: ImageRoot | None
    isolation_note: str
    net_note: str
    terminated: bool
    volumes: str
    _agent: AgentChannel | None
    _execd_spec: dict[str, Any] | None
    _holder: Holder | None
    _janitor: Any
    _lock: Any
    _netns: bool
    _pid_mode: str | None
    _root_fd: int | None
    _unshare: str
    _user: tuple[int, int, list[int], str] | None

    def _holder_join(self) -> dict[str, Any]:  # pragma: no cover - SandboxRuntime's
        raise NotImplementedError

    def _view_env(self) -> dict[str, str]:  # pragma: no cover - SandboxRuntime's
        raise NotImplementedError

    def _install_execd(self, env: dict[str, str]) -> str | None:  # pragma: no cover - SandboxRuntime's
        raise NotImplementedError

    def _track(self, proc: subprocess.Popen) -> None:  # pragma: no cover - SandboxRuntime's
        raise NotImplementedError

    def view_root(self) -> str:
        """The host path that is the sandbox's "/" for every file operation of its execd: with a PID 1
        (a PID namespace), "/" of the sandbox's mount namespace, reached through an O_PATH descriptor
        on /proc/<PID 1>/root (the kernel walks that namespace's mounts: the read-only system dirs,
        /etc's overlay, /dev, ...: what a command sees); else the root directory (no namespace of the
        sandbox's own holds a view: the per-command fallback, or no isolation). Never realpath() it:
        the link text of /proc/PID/root is "/". Starts PID 1 (with the implicit entrypoint) when
        nothing did yet, like spawn()."""
        if not self.isolated or self._pid_mode is None:
            return self.root
        with self._lock:
            if self.terminated:
                return self.root
            holder = self._ensure_holder()
            if holder is not None and self._root_fd is not None:
                return "/proc/self/fd/%d/." % self._root_fd  # "/." : lstat sees the directory, not the fd link
        return self.root

    def openpty(self) -> tuple[int, int]:
        """(master, slave) for a PTY session. With a PID namespace the pair comes from the sandbox's
        own devpts (like execd opening /dev/ptmx inside the container), so `tty` inside names it
        /dev/pts/N; otherwise (no holder, the per-command fallback, not isolated) the host's."""
        with self._lock:
            if self.terminated:
                raise SandboxTerminated("sandbox is terminated")
            holder = self._ensure_holder() if self._pid_mode is not None else None
            if holder is not None and holder.alive():
                try:
                    return sandbox_pty(holder.pid)
                except OSError:
                    pass
        return os.openpty()

    def _ensure_holder(self) -> Holder | None:
        """The sandbox's namespace holder, started with the implicit main process on first use.
        None (and PID namespaces off for this sandbox) when it cannot start. Call with the lock held."""
        if self._holder is None and self._pid_mode is not None:
            self._start_holder(
                list(IMPLICIT_ENTRYPOINT),
                self.base_env(),
                implicit=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        return self._holder

    def _start_holder(
        self, argv: list[str], env: Mapping[str, str], *, implicit: bool, stdout: Any, stderr: Any
    ) -> Holder | None:
        assert self._pid_mode is not None
        env = dict(env)
        if self._netns:
            env.update(netns.holder_env(self.hostname, bool(netns.find_stack()[0])))
        agent = agent_fd = python = idle = None
        holder_join = self._holder_join()
        view_env = {**self._view_env(), "OSB_MOCK_CGROUP_JOIN": "", **holder_join.pop("view_env", {})}
        try:
            execd = self._install_execd(env)
            if execd is not None and execd != "binary" and (self._pid_mode == "direct" or self.image_root):
                # root: connect/listen go through setns, agent_call through a one-shot agent, so
                # /opt/opensandbox/execd is an idle placeholder (execd.IDLE_EXECD: ~1 MB, not ~9)
                idle = idle_execd(self.home if self.image_root is not None else None)
            if execd is not None and execd != "binary" and idle is None:
                python = execd
                agent, agent_fd = AgentChannel.pair()
            holder, why = Holder.start(
                self._unshare,
                self.root,
                self.hostname,
                argv,
                env,
                self._pid_mode,
                implicit=implicit,
                stdout=stdout,
                stderr=stderr,
                net=self._netns,
                volumes=self.volumes,
                agent_fd=agent_fd,
                agent_python=python,
                execd=execd is not None,
                idle_execd=idle,
                view_env=view_env,
                intend=self._janitor.intend if self._janitor is not None else None,
                **holder_join,
            )
        finally:
            if agent_fd is not None:
                os.close(agent_fd)
        if holder is not None:
            try:
                self._root_fd = os.open("/proc/%d/root" % holder.pid, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            except OSError:
                self._root_fd = None  # PID 1 already ended: files are the root directory's
            if self.image_root is not None:  # commands join through scripts/nsexec.py: nothing of the host in the view
                holder.via_helper, holder.user = True, user_word(self._user) if self._user else "-"
        if agent is not None:
            if holder is not None:
                self._agent = agent
            else:
                agent.close()
        if holder is None and (self.volumes or self.image_root is not None):
            # the volumes or the image's root could not be mounted (view.py failed closed): no sandbox,
            # like a container whose mounts fail (no fallback without them)
            self.terminated = True
            raise SandboxTerminated(
                "the sandbox's %s could not be mounted (%s)" % ("volumes" if self.volumes else "root", why)
            )
        if holder is not None and self._netns:
            self._attach_net(holder)
        if holder is None:
            # graceful degradation: this sandbox's commands get one mount namespace each (no PID namespace)
            self._pid_mode = None
            self.isolation_note += f"; this sandbox has no PID namespace of its own ({why})"
            if self._netns:
                self._netns = False
                self.net_note = "not contained: the host network (no PID 1 to hold a network namespace)"
            return None
        self._holder = holder
        self._track(holder.proc)
        return holder

    def _attach_net(self, holder: Holder) -> None:
        """The holder's network namespace: connect() and, when installed, slirp4netns for eth0."""
        try:
            # the resident agent (the mock's own execd) connects from inside; else netns's helper
            holder.net = netns.SandboxNet(holder.pid, holder.mode, self.agent_call if self._agent is not None else None)
        except OSError:  # PID 1 already ended (a stopped sandbox): nothing to reach
            return
        # no wait for slirp4netns's readiness here when the mock's execd runs the commands: eth0 is
        # used from a command, and spawn() awaits it first (a real execd spawns its own: wait now)
        note = holder.net.start_stack(wait=self._execd_spec is not None)
        if note:
            self.net_note = note

    def _await_net(self, holder: Holder) -> None:
        """eth0 is up (or known not to come) before a command runs: slirp4netns's ready fd (netns)."""
        net = holder.net
        if net is not None and net.stack_pending:
            note = net.await_stack()
            if note:
                self.net_note = note

    @property
    def has_netns(self) -> bool:
        """True when the sandbox has a network namespace of its own (reach its ports with connect())."""
        return self._netns

    def connect(self, port: int, timeout: float | None = None) -> socket.socket:
        """A TCP connection to 127.0.0.1:port as seen from inside the sandbox: in its own network
        namespace (bridge), else the host's loopback (--network host, no namespaces). Raises OSError
        (ECONNREFUSED when nothing listens there, or the sandbox is not running)."""
        with self._lock:
            holder = self._ensure_holder() if self._netns and not self.terminated else self._holder
            net = holder.net if holder is not None else None
            netns_wanted = self._netns
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
            holder = None if self.terminated else self._holder
            net = holder.net if holder is not None else None
            netns_wanted = self._netns
        if net is None:
            raise OSError(
                errno.ENOTSUP if not netns_wanted else errno.ECONNREFUSED,
                "the sandbox has no network namespace of its own" if not netns_wanted else "the sandbox is not running",
            )
        return net.listen(port)

    def _release_view(self) -> None:
        """The root fd now names the root directory: a file operation still in flight never meets a
        reused descriptor number, and the dead namespace's mounts are let go. Lock held."""
        if self._root_fd is None:
            return
        try:
            fd = os.open(self.root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            os.dup2(fd, self._root_fd, inheritable=False)
            os.close(fd)
        except OSError:
            pass

    def agent_call(self, request: Mapping[str, Any], timeout: float = 5.0) -> tuple[dict[str, Any], list[int]]:
        """One request to the sandbox's agent (runtime/agent.py), in the sandbox's namespaces:
        ``{"op": "ping"}`` -> ``{"ok": True, "pid": N}``; ``{"op": "connect", "port": P}`` ->
        ``({"ok": True}, [fd])`` (a TCP socket connected to 127.0.0.1:P in the sandbox's network
        namespace; the caller owns the fd) or ``{"ok": False, "errno": E, "error": "..."}``.
        Without a resident agent (a real execd binary, per-command fallback) a one-shot agent runs
        as a sandbox command. Raises AgentError (none can run, timeout), SandboxTerminated."""
        with self._lock:
            if self.terminated:
                raise SandboxTerminated("sandbox is terminated")
            if self._pid_mode is not None:
                self._ensure_holder()
            agent = self._agent
        if agent is not None and not agent.closed:
            return agent.call(request, timeout)
        return oneshot_call(self, request, timeout)
