"""A sandbox's own network: a network namespace with loopback, reached from the host by connect(),
and outbound traffic through a user-mode network stack (slirp4netns) when one is installed.

The server's example config runs Docker with ``network_mode = "bridge"`` (opensandbox-server 1.1.1
services/docker/networking.py): every container has its own network namespace (``lo`` + ``eth0``
on 172.17.0.0/16), ports 44772 and 8080 are published on the host's 127.0.0.1 through
docker-proxy, and other ports are reached through execd's ``/proxy/<port>``. Here:

* the holder (PID 1) is started with ``unshare --net``; scripts/view.py brings ``lo`` up and writes
  a container's ``/etc/hosts`` and ``/etc/resolv.conf``; every joining path enters the namespace;
* ``SandboxNet.connect(port)`` opens a TCP connection to 127.0.0.1:port *inside* the namespace: as
  root the calling thread setns()es into it around socket() (a socket keeps the namespace it was
  made in) and back; as non-root (setns(CLONE_NEWNET) also needs CAP_SYS_ADMIN in our own user
  namespace) a short-lived helper enters the sandbox's user + network namespaces, connects and
  hands the socket back over SCM_RIGHTS (or the sandbox's in-sandbox agent, when the runtime has
  one: ``agent_call({"op": "connect", "port": N}) -> (reply, fds)``);
* ``slirp4netns --configure --disable-host-loopback --cidr 172.17.0.0/16 PID eth0`` gives the
  namespace ``eth0`` and a default route; the host's loopback stays unreachable. It dies with the
  sandbox (``--exit-fd``: the mock holds the other end, close-on-exec) and with the mock (the
  kernel closes that end when the mock dies, however it dies).

Standard library only.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any, Callable, Protocol

from mock_opensandbox.runtime import optional
from mock_opensandbox.runtime.holder import setns_function
from mock_opensandbox.wire.pollio import readable

CLONE_NEWNET = 0x40000000
CLONE_NEWUSER = 0x10000000
NETWORK_MODES = ("bridge", "host")
DEFAULT_NETWORK = "bridge"  # the server's example config (docker network_mode = "bridge")

# Docker's default bridge: 172.17.0.0/16, gateway .1, the first container .2, MTU 1500. slirp4netns
# on the same /16 has its gateway at .2, its DNS forwarder at .3 and the guest always at .100.
CIDR = "172.17.0.0/16"
GUEST_IP = "172.17.0.100"
MTU = 1500
IFNAME = "eth0"
STACK_READY_TIMEOUT = 10.0
_OFF = ("0", "off", "no", "false", "none")

# moby libnetwork etchosts (Docker 20.10): the localhost block, then "<ip>\t<hostname>"
HOSTS_HEAD = (
    "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\nfe00::0\tip6-localnet\n"
    "ff00::0\tip6-mcastprefix\nff02::1\tip6-allnodes\nff02::2\tip6-allrouters\n"
)
# moby libnetwork resolvconf: without a usable (non-localhost) nameserver of the host, Google's
DEFAULT_NAMESERVERS = ("8.8.8.8", "8.8.4.4")

# The environment variables scripts/view.py reads (and drops) in the holder
ENV_HOSTS = "OSB_MOCK_NET_HOSTS"
ENV_RESOLV = "OSB_MOCK_NET_RESOLV"
ENV_ADDR = "OSB_MOCK_NET_ADDR"  # without slirp4netns: GUEST_IP, bound on lo (view.py loopback_up)

_own_lock = threading.Lock()
_own_netns: int | None = None
_stack_lock = threading.Lock()
_stack: tuple[str, str] | None = None  # ("slirp4netns", path) | ("", why not)


def own_netns_fd() -> int:
    """The mock process's own network namespace (to switch a thread back to)."""
    global _own_netns
    with _own_lock:
        if _own_netns is None:
            _own_netns = os.open("/proc/self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        return _own_netns


def find_stack() -> tuple[str, str]:
    """(name, path) of the user-mode network stack to use, or ("", why there is none). The lookup is
    cached; the switches (OSB_MOCK_NETSTACK=none, OSB_MOCK_NO=slirp4netns, ../optional.py) are read
    at each call, so one mock of a process can run without it. pasta is not used (Debian's 2023
    pasta would not join a namespace made by root without a user namespace)."""
    global _stack
    if os.environ.get("OSB_MOCK_NETSTACK", "").lower() in _OFF:
        return ("", "disabled by OSB_MOCK_NETSTACK")
    if optional.off("slirp4netns"):
        return ("", "slirp4netns switched off by " + optional.ENV)
    with _stack_lock:
        if _stack is None:
            path = shutil.which("slirp4netns")
            _stack = ("slirp4netns", path) if path else ("", "no slirp4netns installed")
        return _stack


_stack_failure = ""  # the last reason slirp4netns could not start for a sandbox (say it in the header)


def no_outbound_note() -> str:
    name, why = find_stack()
    if not name:
        return "no outbound network (%s; %s)" % (why, optional.install_hint("slirp4netns"))
    return _stack_failure


def hosts_file(hostname: str, ip: str | None) -> str:
    return HOSTS_HEAD + ("%s\t%s\n" % (ip, hostname) if ip else "")


def resolv_conf(host_text: str | None = None) -> str:
    """The host's resolv.conf without localhost nameservers, Google's when none is left (what Docker
    gives a container on the default bridge)."""
    if host_text is None:
        try:
            with open("/etc/resolv.conf", encoding="utf-8", errors="replace") as fh:
                host_text = fh.read()
        except OSError:
            host_text = ""
    out: list[str] = []
    servers = 0
    for line in host_text.splitlines():
        words = line.split()
        if words[:1] == ["nameserver"] and len(words) > 1:
            try:
                addr = ipaddress.ip_address(words[1].split("%")[0])
            except ValueError:
                continue
            if addr.is_loopback or addr.version == 6:  # IPv6 is off in the sandbox (the server's sysctls)
                continue
            servers += 1
        out.append(line)
    if not servers:
        out += ["nameserver %s" % ns for ns in DEFAULT_NAMESERVERS]
    return "\n".join(out).strip("\n") + "\n"


def holder_env(hostname: str, with_stack: bool, ip: str = GUEST_IP) -> dict[str, str]:
    """The variables view.py turns into /etc/hosts and /etc/resolv.conf of a sandbox with its own
    network namespace. The hostname maps to the sandbox's address with or without outbound traffic (a
    container's hostname resolves whatever its network): eth0 has it (the bridge's lease, nethub.py, or
    slirp4netns's GUEST_IP), else view.py binds it on lo (ENV_ADDR)."""
    env = {ENV_HOSTS: hosts_file(hostname, ip), ENV_RESOLV: resolv_conf()}
    if not with_stack:
        env[ENV_ADDR] = ip
    return env


# What connect() and listen() do with a TCP socket made in the sandbox's network namespace: one text,
# run in this process (root: the socket is made after setns) and by the non-root helper (CONNECT_PY)
SOCKET_STEP_PY = r"""
def socket_step(s, port, timeout, listen):
    if listen:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", port))
        s.listen(128)
    else:
        s.settimeout(timeout)
        s.connect(("127.0.0.1", port))
"""
_step: dict[str, Any] = {"socket": socket}
exec(SOCKET_STEP_PY, _step)  # our own text above: socket_step here is the helper's
socket_step: Callable[[socket.socket, int, "float | None", bool], None] = _step["socket_step"]

# The non-root connector: enter the sandbox's user and network namespaces (a fresh single-threaded
# process may), connect to 127.0.0.1:PORT (or listen on PORT) and pass the socket back over the
# inherited fd (SCM_RIGHTS).
CONNECT_PY = (
    r"""
import os, sys, socket, ctypes
libc = ctypes.CDLL(None, use_errno=True)
pid, port, timeout = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
back = socket.socket(fileno=int(sys.argv[4]))
"""
    + SOCKET_STEP_PY
    + r"""
try:
    for name, flag in (("user", 0x10000000), ("net", 0x40000000)):
        fd = os.open("/proc/%d/ns/%s" % (pid, name), os.O_RDONLY | os.O_CLOEXEC)
        if libc.setns(fd, flag) != 0:
            raise OSError(ctypes.get_errno(), "setns %s: %s" % (name, os.strerror(ctypes.get_errno())))
        os.close(fd)
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    socket_step(s, port, timeout, sys.argv[5:6] == ["listen"])
    socket.send_fds(back, [b"ok"], [s.fileno()])
except OSError as e:
    back.sendall(("err %d %s" % (e.errno or 0, e.strerror or e)).encode())
"""
)


class AddressLease(Protocol):
    """A sandbox's address on the sandboxes' bridge (nethub.py Lease: nethub imports this module, not the other
    way round): ``attach`` gives the namespace its eth0, ``close`` takes the address back."""

    def attach(self, netns_fd: int) -> None: ...

    def close(self) -> None: ...


class SandboxNet:
    """The network namespace of one sandbox (held by its PID 1) and its way out: a veth on the bridge
    (lease: nethub.Lease) or a user-mode stack of its own."""

    def __init__(
        self,
        pid: int,
        mode: str,
        agent: Callable[[dict[str, Any]], tuple[dict[str, Any], list[int]]] | None = None,
        lease: AddressLease | None = None,
    ):
        self.pid = pid
        self.lease = lease
        self.mode = mode  # "direct" (root: setns) | "helper" (non-root)
        self.agent = agent
        self.netns_fd: int | None = None
        self.stack: subprocess.Popen[bytes] | None = None
        self._exit_w: int | None = None
        self._pending: tuple[int, Any, float] | None = None  # (ready fd, log, deadline) until await_stack()
        self._pending_lock = threading.Lock()
        self.note = ""  # why outbound traffic is not available ("" = it is)
        if mode == "direct":
            self.netns_fd = os.open("/proc/%d/ns/net" % pid, os.O_RDONLY | os.O_CLOEXEC)
            own_netns_fd()

    # -- outbound ------------------------------------------------------------------------------
    def start_stack(self, wait: bool = True) -> str:
        """Start slirp4netns for this namespace; "" when eth0 is up, else the reason it is not.
        wait=False: return once it is started (""), and await_stack() waits for its ready fd later
        (a sandbox uses eth0 only from a command: SandboxRuntime.spawn awaits it first)."""
        global _stack_failure
        if self.lease is not None and self.netns_fd is not None:
            try:
                self.lease.attach(self.netns_fd)
            except OSError as exc:
                self.note = "no outbound network (the sandboxes' bridge: %s)" % (exc.strerror or exc)
            return self.note
        name, path = find_stack()
        if not name:
            self.note = no_outbound_note()
            return self.note
        ready_r, ready_w = os.pipe()
        exit_r, exit_w = os.pipe()
        os.set_inheritable(ready_w, True)
        os.set_inheritable(exit_r, True)
        cmd = [
            path,
            "--configure",
            "--mtu=%d" % MTU,
            "--disable-host-loopback",
            "--cidr=" + CIDR,
            "--ready-fd=%d" % ready_w,
            "--exit-fd=%d" % exit_r,
            str(self.pid),
            IFNAME,
        ]
        proc = None

        log = tempfile.TemporaryFile()  # its messages (a pipe nobody reads could fill and block it)
        try:
            try:
                # no preexec_fn (PR_SET_PDEATHSIG): it would force a full fork of the mock (~5 ms)
                # where Popen otherwise uses vfork; --exit-fd ends it with the mock just as well, as
                # the kernel closes exit_w (close-on-exec, the mock's only) when the mock dies
                proc = subprocess.Popen(
                    cmd,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=log,
                    pass_fds=(ready_w, exit_r),
                    start_new_session=True,
                )
            finally:
                os.close(ready_w)
                os.close(exit_r)
        except OSError as exc:
            os.close(ready_r)
            os.close(exit_w)
            log.close()
            self.note = "no outbound network (slirp4netns: %s)" % exc
            _stack_failure = self.note
            return self.note
        self.stack, self._exit_w = proc, exit_w
        self._pending = (ready_r, log, time.monotonic() + STACK_READY_TIMEOUT)
        return self.await_stack() if wait else ""

    @property
    def stack_pending(self) -> bool:
        """slirp4netns was started and await_stack() has not waited for it yet."""
        return self._pending is not None

    def await_stack(self) -> str:
        """Wait (bounded) for a started slirp4netns's ready fd; "" when eth0 is up, else why not.
        Thread-safe; at once when nothing is pending."""
        global _stack_failure
        with self._pending_lock:
            pending, self._pending = self._pending, None
            if pending is None:
                return self.note
            ready_r, log, deadline = pending
            ok = False
            try:
                ready = readable([ready_r], max(0.0, deadline - time.monotonic()))
                if ready:
                    ok = os.read(ready_r, 16).startswith(b"1")
            except OSError:
                ok = False
            finally:
                os.close(ready_r)
            proc = self.stack
            if not ok and proc is not None:
                err = b""
                if self._exit_w is not None:
                    os.close(self._exit_w)
                self._exit_w, self.stack = None, None
                try:
                    proc.wait(timeout=1.0)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait(timeout=5)
                try:
                    log.seek(0)
                    err = log.read(4096)
                except (OSError, ValueError):
                    pass
                why = "; ".join(err.decode("utf-8", "replace").strip().splitlines()) or "not ready"
                self.note = "no outbound network (slirp4netns: %s)" % why[:160]
            log.close()
            _stack_failure = self.note
            return self.note

    def stop_stack(self) -> None:
        with self._pending_lock:
            pending, self._pending = self._pending, None
        if pending is not None:  # never awaited: drop its ready fd and log
            os.close(pending[0])
            pending[1].close()
        proc, self.stack = self.stack, None
        if self._exit_w is not None:
            try:
                os.close(self._exit_w)  # --exit-fd: slirp4netns ends on its own
            except OSError:
                pass
            self._exit_w = None
        if proc is not None:
            try:
                proc.wait(timeout=1.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)

    # -- inbound -------------------------------------------------------------------------------
    def connect(self, port: int, timeout: float | None = None) -> socket.socket:
        """A TCP connection to 127.0.0.1:port inside the sandbox. Raises OSError (ECONNREFUSED when
        nothing listens there)."""
        return self._socket_inside(port, timeout, listen=False)

    def listen(self, port: int) -> socket.socket:
        """A TCP socket listening on 0.0.0.0:port inside the sandbox (what execd's ``:44772`` is
        there), owned by the caller: it keeps the namespace alive until closed. Raises OSError
        (EADDRINUSE when something inside already listens there)."""
        return self._socket_inside(port, None, listen=True)

    def _socket_inside(self, port: int, timeout: float | None, listen: bool) -> socket.socket:
        """A TCP socket made in the sandbox's network namespace, connected to 127.0.0.1:port or
        listening on 0.0.0.0:port: setns as root, else the in-sandbox agent, else the helper."""
        if not isinstance(port, int) or not 0 < port < 65536:
            raise OSError(22, "invalid port %r" % (port,))
        if self.netns_fd is not None:
            setns = setns_function()
            setns(self.netns_fd, CLONE_NEWNET)
            try:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)  # it keeps the sandbox's namespace
            finally:
                setns(own_netns_fd(), CLONE_NEWNET)
            try:
                socket_step(s, port, timeout, listen)
            except BaseException:
                s.close()
                raise
            return s
        if self.agent is not None:
            reply, fds = self.agent({"op": "listen" if listen else "connect", "port": port})
            if not fds:
                raise OSError(
                    int((reply or {}).get("errno") or (98 if listen else 111)),
                    str((reply or {}).get("error") or ("cannot listen" if listen else "refused")),
                )
            for extra in fds[1:]:
                os.close(extra)
            s = socket.socket(fileno=fds[0])
            if not listen:
                s.settimeout(timeout)
            return s
        s = self._connect_helper(port, timeout, listen=listen)
        if listen:
            s.settimeout(None)
        return s

    def _connect_helper(self, port: int, timeout: float | None, listen: bool = False) -> socket.socket:
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    "-I",
                    "-S",
                    "-c",
                    CONNECT_PY,
                    str(self.pid),
                    str(port),
                    str(timeout if timeout is not None else 30.0),
                    str(b.fileno()),
                ]
                + (["listen"] if listen else []),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                pass_fds=(b.fileno(),),
                close_fds=True,
            )
            b.close()
            try:
                a.settimeout((timeout or 30.0) + 10.0)
                msg, fds, _, _ = socket.recv_fds(a, 256, 2)
            finally:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        finally:
            a.close()
            b.close()
        if msg == b"ok" and fds:
            for extra in fds[1:]:
                os.close(extra)
            s = socket.socket(fileno=fds[0])
            s.settimeout(timeout)
            return s
        for fd in fds:
            os.close(fd)
        words = msg.decode("utf-8", "replace").split(" ", 2)
        if words[:1] == ["err"] and len(words) == 3 and words[1].isdigit():
            raise OSError(int(words[1]) or 111, words[2])
        raise OSError(111, "cannot reach the sandbox's network namespace")

    def close(self) -> None:
        self.stop_stack()
        lease, self.lease = self.lease, None
        if lease is not None:
            lease.close()
        if self.netns_fd is not None:
            try:
                os.close(self.netns_fd)
            except OSError:
                pass
            self.netns_fd = None


def probe_netns(unshare: str) -> tuple[bool, str]:
    """Can a sandbox get a network namespace of its own with loopback up? Probed once per process
    by the runtime (``unshare [--user --map-root-user] --net`` + the loopback ioctl)."""
    if os.environ.get("OSB_MOCK_NETNS", "").lower() in _OFF:
        return False, "disabled by OSB_MOCK_NETNS"
    cmd = (
        [unshare]
        + ([] if os.geteuid() == 0 else ["--user", "--map-root-user"])
        + ["--net", sys.executable, "-I", "-S", "-c", LO_UP_PY]
    )
    try:
        out = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
    except (OSError, subprocess.SubprocessError) as exc:
        return False, "network namespace probe failed: %s" % exc
    if out.returncode != 0 or out.stdout.strip() != b"up":
        why = (out.stderr.decode("utf-8", "replace").strip().splitlines() or ["exit %d" % out.returncode])[-1]
        return False, "no network namespace (%s)" % why[:160]
    return True, ""


# Bring lo up in the current network namespace (also in scripts/view.py): SIOCGIFFLAGS/SIOCSIFFLAGS
LO_UP_PY = r"""
import fcntl, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
req = struct.pack("16sH14x", b"lo", 0)
flags = struct.unpack("16sH14x", fcntl.ioctl(s.fileno(), 0x8913, req))[1]
fcntl.ioctl(s.fileno(), 0x8914, struct.pack("16sH14x", b"lo", flags | 0x1))
print("up")
"""
