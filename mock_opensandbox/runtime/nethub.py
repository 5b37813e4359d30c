"""The sandboxes' bridge, as Docker's default bridge is (root): one network namespace per mock process
(the hub) holds a bridge with the gateway's address, routes for the sandboxes, and one slirp4netns for
everyone's outbound traffic. Each sandbox gets a veth pair: ``eth0`` in its own namespace, the other
end in the bridge.

What a sandbox sees is then a container's on ``docker0`` (live, local-up with Docker 20.10): ``eth0`` a
veth, up, txqueuelen 0, the lowest free 172.17.0.N/16 from .2 with the MAC Docker derives from it
(02:42:ac:11:..), the default route via 172.17.0.1, IPv6 off, and the other sandboxes reachable at their
addresses. 172.17.0.1 is the hub itself, where nothing listens (on Docker it is the host).

Outbound packets go from the bridge to slirp4netns's tap (10.0.2.100/24, its default network) by the
hub's routing; slirp4netns sends replies for 172.17.x.x to the hub, which answers its ARP for them
(proxy_arp, without the 0.8 s proxy_delay) and forwards them to the sandbox. No NAT, no iptables.

The cost per sandbox is two netlink requests here and three in its namespace (about 1 ms), where a
slirp4netns of its own costs a process (3.2 MiB RSS) and its start. The hub starts on first use and ends
when the last mock of the process stops (``hold``/``release``, like the view's zygote) or with the process:
its namespace is held by a file descriptor, slirp4netns ends on ``--exit-fd``, and the kernel removes the
bridge and the veths with the namespace. ``OSB_MOCK_NETHUB=0`` gives every sandbox a slirp4netns of its
own (netns.SandboxNet.start_stack, the way a non-root mock always goes). Standard library only.
"""

from __future__ import annotations

import contextlib
import ctypes
import ipaddress
import os
import secrets
import socket
import subprocess
import tempfile
import threading
from typing import Iterator

from mock_opensandbox.runtime import netns
from mock_opensandbox.runtime.holder import setns_function
from mock_opensandbox.runtime.rtnl import Rtnl, open_rtnl
from mock_opensandbox.wire.pollio import readable

HUB_ENV = "OSB_MOCK_NETHUB"
BRIDGE = "br0"
TAP = "tap0"
GATEWAY = "172.17.0.1"  # the hub's address on the bridge (Docker: the host's on docker0)
BROADCAST = "172.17.255.255"
PREFIX = 16
FIRST_HOST = 2
_NET = int(ipaddress.IPv4Network(netns.CIDR).network_address)
_HOSTS = 2 ** (32 - PREFIX) - 2  # 172.17.0.1 .. 172.17.255.254
MAX_PORTS = 1023  # a Linux bridge's ports (net/bridge/br_private.h BR_MAX_PORTS, port 0 unused), docker0's too
SYSCTLS = ("all", "default", "eth0")  # net.ipv6.conf.*.disable_ipv6 = 1: no IPv6 in a container here
HUB_SYSCTLS = (
    ("ipv6/conf/all/disable_ipv6", "1"),
    ("ipv6/conf/default/disable_ipv6", "1"),
    ("ipv4/ip_forward", "1"),
    ("ipv4/conf/all/rp_filter", "0"),
    ("ipv4/conf/default/rp_filter", "0"),
)
TAP_SYSCTLS = (("ipv4/conf/%s/proxy_arp" % TAP, "1"), ("ipv4/neigh/%s/proxy_delay" % TAP, "0"))
CLONE_NEWNET = 0x40000000


def wanted() -> bool:
    """Root (veth and bridge need CAP_NET_ADMIN here), not switched off, and slirp4netns installed."""
    return os.geteuid() == 0 and os.environ.get(HUB_ENV, "1") != "0" and bool(netns.find_stack()[0])


def address(n: int) -> str:
    return str(ipaddress.IPv4Address(_NET + n))


def mac_of(ip: str) -> bytes:
    """Docker's MAC for an address: 02:42 and the address's four bytes."""
    return b"\x02\x42" + socket.inet_aton(ip)


def write_sysctls(pairs: tuple[tuple[str, str], ...]) -> None:
    """Under /proc/sys/net, of the calling thread's network namespace (skipped: what the kernel lacks)."""
    for key, value in pairs:
        with contextlib.suppress(FileNotFoundError):
            with open("/proc/sys/net/" + key, "w") as fh:
                fh.write(value)


@contextlib.contextmanager
def inside(netns_fd: int) -> Iterator[None]:
    """The calling thread in a network namespace (sockets made here stay there), then back."""
    setns = setns_function()
    setns(netns_fd, CLONE_NEWNET)
    try:
        yield
    finally:
        setns(netns.own_netns_fd(), CLONE_NEWNET)


class Hub:
    """The hub's namespace, bridge and slirp4netns; leases of addresses on it."""

    def __init__(self) -> None:
        self.fd = -1
        self.rtnl: Rtnl | None = None
        self.stack: subprocess.Popen[bytes] | None = None
        self._exit_w = -1
        self.lock = threading.Lock()
        self.used: set[int] = set()  # leased, or given back and its veth not deleted yet
        self.reaping: list[tuple[int, str]] = []
        self.reaper: threading.Thread | None = None
        self.io_lock = threading.Lock()  # rtnl and fd: in use, or being closed
        self.bridge = 0

    def start(self) -> None:
        """Raises OSError with the reason when the hub cannot be made (then: slirp4netns per sandbox)."""
        libc = ctypes.CDLL(None, use_errno=True)
        own = netns.own_netns_fd()
        if libc.unshare(CLONE_NEWNET) != 0:  # this thread only, switched back below
            e = ctypes.get_errno()
            raise OSError(e, "unshare(CLONE_NEWNET): " + os.strerror(e))
        try:
            self.fd = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            write_sysctls(HUB_SYSCTLS)
            self.rtnl = open_rtnl()
            self.rtnl.new_bridge(BRIDGE, b"\x02\x42" + secrets.token_bytes(4))  # docker0's: 02:42, random
            self.bridge = socket.if_nametoindex(BRIDGE)
            self.rtnl.add_addr(self.bridge, GATEWAY, PREFIX, BROADCAST)
        finally:
            setns_function()(own, CLONE_NEWNET)
        path = netns.find_stack()[1]
        ready_r, ready_w = os.pipe()
        exit_r, self._exit_w = os.pipe()
        log = tempfile.TemporaryFile()
        try:
            cmd = [path, "--configure", "--netns-type=path", "--disable-host-loopback", "--mtu=%d" % netns.MTU]
            cmd += ["--ready-fd=%d" % ready_w, "--exit-fd=%d" % exit_r]
            # no PR_SET_PDEATHSIG (a preexec_fn): the kernel closes _exit_w when the mock dies (netns.py)
            self.stack = subprocess.Popen(
                cmd + ["/proc/self/fd/%d" % self.fd, TAP],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=log,
                pass_fds=(ready_w, exit_r, self.fd),
                start_new_session=True,
            )
            os.close(ready_w)
            os.close(exit_r)
            ready_w = exit_r = -1
            ok = bool(readable([ready_r], netns.STACK_READY_TIMEOUT)) and os.read(ready_r, 8).startswith(b"1")
            if not ok:
                log.seek(0)
                why = "; ".join(log.read(4096).decode("utf-8", "replace").split("\n")).strip("; ") or "not ready"
                raise OSError(5, "slirp4netns: " + why[:160])
            with inside(self.fd):
                write_sysctls(TAP_SYSCTLS)
        finally:
            for fd in (ready_r, ready_w, exit_r):
                if fd >= 0:
                    os.close(fd)
            log.close()

    def alive(self) -> bool:
        return self.stack is not None and self.stack.poll() is None

    def lease(self) -> "Lease":
        """The lowest free address (Docker's IPAM gives the lowest free one too). OSError when the bridge is full
        (then the sandbox gets a slirp4netns of its own)."""
        with self.lock:
            if len(self.used) >= MAX_PORTS:
                raise OSError(28, "the bridge has no free port (%d)" % MAX_PORTS)
            n = next((i for i in range(FIRST_HOST, _HOSTS + 1) if i not in self.used), 0)
            self.used.add(n)
        return Lease(self, n)

    def give_back(self, n: int, veth: str) -> None:
        """An address back, once its veth is out of the bridge. Deleting a veth waits for the kernel's RCU grace
        period (15-25 ms here): a thread does it, so a sandbox's delete does not wait, and the address is
        leased again only when nothing of the old sandbox answers for it."""
        with self.lock:
            if not veth:
                self.used.discard(n)
                return
            self.reaping.append((n, veth))
            if self.reaper is None:
                self.reaper = threading.Thread(target=self._reap, name="osb-bridge-reaper", daemon=True)
                self.reaper.start()

    def _reap(self) -> None:
        while True:
            with self.lock:
                if not self.reaping:
                    self.reaper = None
                    return
                n, veth = self.reaping.pop(0)
            with self.io_lock:
                if self.rtnl is not None:
                    try:
                        with inside(self.fd):
                            index = socket.if_nametoindex(veth)
                        self.rtnl.del_link(index)
                    except OSError:
                        pass  # gone with the sandbox's namespace already
            with self.lock:
                self.used.discard(n)

    def close(self) -> None:
        if self._exit_w >= 0:
            os.close(self._exit_w)  # --exit-fd: slirp4netns ends on its own
            self._exit_w = -1
        if self.stack is not None:
            try:
                self.stack.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                self.stack.kill()
                self.stack.wait(timeout=5)
            self.stack = None
        with self.io_lock:
            if self.rtnl is not None:
                self.rtnl.close()
                self.rtnl = None
            if self.fd >= 0:
                os.close(self.fd)  # the namespace, its bridge and any veth left go with it
                self.fd = -1


class Lease:
    """One sandbox's address on the hub; ``attach`` gives its namespace eth0, ``close`` takes it back."""

    def __init__(self, hub: Hub, n: int):
        self.hub, self.n = hub, n
        self.ip = address(n)
        self.veth = ""

    def attach(self, netns_fd: int) -> None:
        """eth0 (a veth in the bridge) up with the address and the default route. Raises OSError."""
        hub = self.hub
        with hub.io_lock:
            if hub.rtnl is None:
                raise OSError(107, "the sandboxes' bridge is gone")
            self.veth = "veth%07x" % secrets.randbits(28)  # Docker's host-side names (the hub's only)
            hub.rtnl.new_veth(self.veth, hub.bridge, "eth0", mac_of(self.ip), netns_fd, netns.MTU)
        with inside(netns_fd):
            write_sysctls(tuple(("ipv6/conf/%s/disable_ipv6" % name, "1") for name in SYSCTLS))
            inner = open_rtnl()
            eth0 = socket.if_nametoindex("eth0")
        try:
            inner.add_addr(eth0, self.ip, PREFIX, BROADCAST)
            inner.set_link(eth0, True)
            inner.add_default_route(GATEWAY, eth0)
        finally:
            inner.close()

    def close(self) -> None:
        veth, self.veth = self.veth, ""
        self.hub.give_back(self.n, veth)


_lock = threading.Lock()
_hub: Hub | None = None
_owner = 0  # the pid that made it (a forked child makes its own)
_failed = 0  # the pid whose hub could not start: it does not try again (a kernel without bridge or veth)
_users = 0


def lease() -> Lease | None:
    """An address on the hub (started on first use), or None: not wanted, the hub cannot start or the bridge is
    full (then the sandbox gets a slirp4netns of its own, contained the same way)."""
    global _hub, _owner, _failed
    if not wanted() or _failed == os.getpid():
        return None
    with _lock:
        if _hub is not None and (_owner != os.getpid() or not _hub.alive()):
            if _owner == os.getpid():
                _hub.close()
            _hub = None
        if _hub is None:
            hub = Hub()
            try:
                hub.start()
            except OSError:
                hub.close()
                _failed = os.getpid()
                return None
            _hub, _owner = hub, os.getpid()
        hub = _hub
    try:
        return hub.lease()
    except OSError:  # full
        return None


def stack_pid() -> int | None:
    """The hub's slirp4netns while it runs (one per mock process, like the zygote)."""
    hub = _hub
    return hub.stack.pid if hub is not None and _owner == os.getpid() and hub.alive() and hub.stack else None


def hold() -> None:
    global _users
    with _lock:
        _users += 1


def release() -> None:
    """A mock stopped: the last one of this process ends the hub."""
    global _users, _hub
    with _lock:
        _users = max(0, _users - 1)
        if not _users and _hub is not None:
            hub, _hub = _hub, None
            if _owner == os.getpid():
                hub.close()


def links() -> set[str]:
    """The names of the hub's network devices (br0, tap0, a veth per sandbox); empty without a hub."""
    with _lock:
        hub = _hub if _owner == os.getpid() else None
    if hub is None:
        return set()
    with hub.io_lock:
        if hub.fd < 0:
            return set()
        with inside(hub.fd):
            return {name for _, name in socket.if_nameindex()}
