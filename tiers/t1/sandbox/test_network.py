"""t1 (QUIRKS.md, Containment: "Network"): a mock sandbox has its own network, as a container of the server's example
config (docker ``network_mode = "bridge"``) has - loopback of its own, the host's loopback out of
reach, ports published through relays on 127.0.0.1 (execd's port, 8080, others through execd's
/proxy/<port>), two sandboxes on the same port, outbound traffic through slirp4netns when it is
installed, and ``--network host`` for the old shared network. Nothing of it (network namespace,
relay, slirp4netns) survives a delete or the mock's SIGTERM or SIGKILL."""

from __future__ import annotations

import http.client
import json
import os
import signal
import socket
import threading
import time

import pytest

from mock_opensandbox.runtime import SandboxRuntime, nethub, optional
from mock_opensandbox.runtime._util import start_time
from mock_opensandbox.runtime.probe import probe_result
from mock_opensandbox.server import MockOpenSandbox
from mock_opensandbox.wire.relay import TCPRelay
from tiers.toolkit import rest
from tiers.toolkit.marks import ISOLATED, NOTE
from tiers.toolkit.procs import alive
from tiers.toolkit.waits import poll, port_closed

pytestmark = pytest.mark.skipif(
    not (ISOLATED and probe_result()[3] is not None), reason="no per-sandbox namespaces here: " + " ".join(NOTE.split())
)
SLIRP = optional.which("slirp4netns")
BODY = {"image": {"uri": "python:3"}, "entrypoint": ["sleep", "300"], "resourceLimits": {}, "timeout": 600}
REAL_EXECD = os.environ.get("OSB_EXECD_BIN") or os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
    "..",
    "shared",
    "opensandbox",
    "execd",
)


def _call(hostport: str, method: str, path: str, body=None, key: str | None = None) -> tuple[int, bytes]:
    r = rest.call(hostport, method, path, body, {"OPEN-SANDBOX-API-KEY": key} if key else {})
    return r.status, r.body


class Mock:
    def __init__(self, osb: MockOpenSandbox):
        self.osb = osb
        self.hp = osb.base_url.split("://")[1]

    def api(self, method: str, path: str, body=None) -> tuple[int, bytes]:
        return _call(self.hp, method, path, body, self.osb.api_key)

    def create(self) -> str:
        status, body = self.api("POST", "/v1/sandboxes", BODY)
        assert status == 202, body
        return json.loads(body)["id"]

    def endpoint(self, sid: str, port: int) -> tuple[str, str]:
        status, body = self.api("GET", "/v1/sandboxes/%s/endpoints/%d" % (sid, port))
        assert status == 200, body
        hostport, _, prefix = json.loads(body)["endpoint"].partition("/")
        return hostport, ("/" + prefix if prefix else "")

    def run(self, sid: str, cmd: str) -> str:
        hp, prefix = self.endpoint(sid, 44772)
        deadline = time.monotonic() + 15
        while True:
            try:
                status, body = _call(hp, "POST", prefix + "/command", {"command": cmd})
                break
            except OSError:  # execd of a new sandbox not up yet
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert status == 200, body
        out = []
        for block in body.decode().split("\n\n"):
            if block.strip():
                ev = json.loads(block)
                if ev.get("type") in ("stdout", "stderr"):
                    out.append(ev["text"])
        return "\n".join(out)


@pytest.fixture
def mock(opensandbox_mock_factory):
    """Overrides the toolkit's ``mock`` (tiers/toolkit/fixtures.py): a factory of mocks, each wrapped in ``Mock``."""

    def make(**kw) -> Mock:
        kw.setdefault("execd_close_delay", 0)
        return Mock(opensandbox_mock_factory(**kw))

    return make


CONNECT = (
    "python3 -c \"import socket\ntry:\n socket.create_connection(('%s', %d), 3); print('CONNECTED')\n"
    "except OSError as e: print('REFUSED', e.errno)\""
)


def test_the_host_loopback_is_out_of_reach(mock):
    """Recorded live (fixtures/22_sandbox_inside.json): connecting to the host's 127.0.0.1:<server port> is refused."""
    m = mock()
    sid = m.create()
    assert m.run(sid, CONNECT % ("127.0.0.1", m.osb.port)) == "REFUSED 111"


# slirp4netns on and off (OSB_MOCK_NO, mock_opensandbox/runtime/optional.py) where it is installed; off everywhere
STACKS = (["slirp4netns"] if SLIRP else []) + ["none"]


@pytest.mark.parametrize("stack", STACKS)
def test_interfaces_hosts_and_hostname_are_a_containers(mock, monkeypatch, stack):
    """The hostname maps to the sandbox's own address, bound inside its namespace, with or without
    outbound traffic (eth0 from slirp4netns, else the address on lo), as in a container on Docker's bridge."""
    if stack == "none":
        monkeypatch.setenv("OSB_MOCK_NO", "slirp4netns")
    else:
        monkeypatch.delenv("OSB_MOCK_NO", raising=False)
    m = mock()
    sid = m.create()
    out = m.run(
        sid,
        "cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d ' ' | sort | tr '\\n' ' '; echo; "
        "cat /etc/hosts; echo ===; hostname; python3 -c 'import socket; "
        "ip = socket.gethostbyname(socket.gethostname()); s = socket.socket(); s.bind((ip, 0)); "
        "s.listen(); c = socket.create_connection(s.getsockname(), 3); print(ip, c.getpeername()[0])'",
    )
    ifaces, _, rest = out.partition("\n")
    assert ifaces.split() == (["eth0", "lo"] if stack == "slirp4netns" else ["lo"])
    hosts, _, tail = rest.partition("\n===\n")
    lines = hosts.splitlines()
    assert lines[:2] == ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
    assert len(tail.split()) == 3, out  # (what came, when it is not the hostname, the address and the peer)
    hostname, ip, peer = tail.split()
    # on the bridge (root, runtime/nethub.py) the lowest free address from 172.17.0.2, as Docker's IPAM gives;
    # a slirp4netns of its own puts 172.17.0.100 on eth0, and without one view.py binds that on lo
    # (the lowest free one of this process's bridge: other mocks of the process may hold .2)
    if stack == "slirp4netns" and nethub.wanted():
        assert ip.startswith("172.17.") and ip not in ("172.17.0.1", "172.17.0.100"), ip
    else:
        assert ip == "172.17.0.100"
    assert lines[-1] == "%s\t%s" % (ip, hostname) and peer == ip


def _serve(m: Mock, sid: str, port: int, text: str) -> None:
    m.run(
        sid,
        "mkdir -p /tmp/www%d && echo %s > /tmp/www%d/who.txt && cd /tmp/www%d && "
        "(python3 -m http.server %d >/dev/null 2>&1 &); "
        "for i in $(seq 100); do python3 -c \"import socket; socket.create_connection(('127.0.0.1', %d))\" "
        "2>/dev/null && break; sleep 0.05; done" % (port, text, port, port, port, port),
    )


def test_two_sandboxes_listen_on_the_same_port(mock):
    """Each endpoint (9000 through execd's /proxy, 8080 published) and the server proxy answer with
    their own sandbox's server."""
    m = mock()
    sids = [m.create(), m.create()]
    for i, sid in enumerate(sids):
        for port in (9000, 8080):
            _serve(m, sid, port, "sandbox%d-%d" % (i, port))
    for i, sid in enumerate(sids):
        for port in (9000, 8080):
            hp, prefix = m.endpoint(sid, port)
            assert _call(hp, "GET", prefix + "/who.txt") == (200, b"sandbox%d-%d\n" % (i, port))
            assert m.api("GET", "/v1/sandboxes/%s/proxy/%d/who.txt" % (sid, port)) == (
                200,
                b"sandbox%d-%d\n" % (i, port),
            )


@pytest.mark.skipif(
    not SLIRP, reason="slirp4netns %s: no outbound traffic from a sandbox" % optional.why_absent("slirp4netns")
)
def test_outbound_traffic_goes_through_slirp4netns(mock):
    """A sandbox reaches the host's own (non-loopback) address, as a container reaches its host."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        probe.connect(("192.0.2.1", 9))  # routing only: no packet is sent
        addr = probe.getsockname()[0]
    except OSError:
        pytest.skip("the host has no non-loopback IPv4 address")
    finally:
        probe.close()
    if addr.startswith("127."):
        pytest.skip("the host has no non-loopback IPv4 address")
    srv = socket.socket()
    srv.bind((addr, 0))
    srv.listen(1)
    srv.settimeout(20)
    got: list[str] = []

    def accept() -> None:
        try:
            c, peer = srv.accept()
            got.append(peer[0])
            c.close()
        except OSError:
            pass

    t = threading.Thread(target=accept, daemon=True)
    t.start()
    try:
        m = mock()
        sid = m.create()
        assert m.run(sid, CONNECT % (addr, srv.getsockname()[1])) == "CONNECTED"
        t.join(10)
        assert got  # the host saw the connection (from its own address: slirp4netns connects for it)
        assert m.run(sid, CONNECT % ("127.0.0.1", m.osb.port)) == "REFUSED 111"
    finally:
        srv.close()
        t.join(5)


def test_network_host_shares_the_hosts_network(mock):
    m = mock(network="host")
    sid = m.create()
    assert m.run(sid, CONNECT % ("127.0.0.1", m.osb.port)) == "CONNECTED"
    status, _ = m.api("GET", "/health")
    assert status == 200


def test_runtime_connect_reaches_only_its_own_sandbox(tmp_path):
    a = SandboxRuntime(str(tmp_path / "a"), isolate=True)
    b = SandboxRuntime(str(tmp_path / "b"), isolate=True)
    try:
        assert a.has_netns and b.has_netns
        p = a.spawn(
            [
                "python3",
                "-c",
                "import socket,time; s=socket.socket(); s.bind(('127.0.0.1', 9000)); "
                "s.listen(); c,_=s.accept(); c.sendall(b'from-a'); c.close(); time.sleep(1)",
            ]
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                s = a.connect(9000, timeout=5)
                break
            except ConnectionRefusedError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        assert s.recv(16) == b"from-a"
        s.close()
        with pytest.raises(ConnectionRefusedError):
            b.connect(9000, timeout=5)
        p.wait(10)
    finally:
        a.cleanup()
        b.cleanup()


def test_relay_drops_while_nothing_listens_then_relays():
    """docker-proxy's shape: accepted, then dropped while the backend refuses; bytes both ways after."""
    backend = socket.socket()
    backend.bind(("127.0.0.1", 0))
    port = backend.getsockname()[1]
    relay = TCPRelay(lambda: socket.create_connection(("127.0.0.1", port), timeout=5))
    try:
        c = socket.create_connection(("127.0.0.1", relay.port), timeout=5)
        assert c.recv(1) == b""  # accepted, then closed: nothing listens behind it yet
        c.close()
        backend.listen(1)
        c = socket.create_connection(("127.0.0.1", relay.port), timeout=5)
        s, _ = backend.accept()
        c.sendall(b"x" * 300000)
        c.shutdown(socket.SHUT_WR)
        got = b""
        while len(got) < 300000:
            chunk = s.recv(65536)
            assert chunk
            got += chunk
        s.sendall(b"back")
        s.close()
        assert c.recv(16) == b"back"
        c.close()
    finally:
        relay.close()
        backend.close()
    assert not [t for t in threading.enumerate() if t.name.startswith("osb-relay-%d" % relay.port)]
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", relay.port), timeout=2)


# -- nothing left behind ----------------------------------------------------------------------------
def _sandbox_parts(m: Mock, sids: list[str]) -> tuple[set[str], set[int], set[int]]:
    """(network namespaces, slirp4netns pids, published ports) of these sandboxes."""
    nets, slirps, ports = set(), set(), set()
    for sid in sids:
        sb = m.osb.sandboxes[sid]
        holder = sb.runtime.pid1.holder
        nets.add(os.readlink("/proc/%d/ns/net" % holder.pid))
        if holder.net is not None and holder.net.stack is not None:
            slirps.add(holder.net.stack.pid)
        for port in (44772, 8080):
            ports.add(int(m.endpoint(sid, port)[0].rpartition(":")[2]))
    return nets, slirps, ports


def _holders(nets: set[str]) -> set[tuple[int, int]]:
    """(pid, start time) of every process that holds one of these namespaces now, as its own or through a file."""
    pids = [int(name) for name in os.listdir("/proc") if name.isdigit()]
    return {(pid, start_time(pid)) for pid in pids if _held_by(pid) & nets}


def _gone(
    nets: set[str], slirps: set[int], ports: set[int], holders: set[tuple[int, int]], timeout: float = 5.0
) -> list[str]:
    """What is still there of the given namespaces, slirp4netns processes and ports after up to ``timeout`` s.
    A namespace counts as left while one of its ``holders`` from before (the same pid, started at the same time)
    or this process still holds one by that id: the kernel hands a freed namespace's inode number to the next
    namespace made, here by any other test or container on the machine (xdist workers, a live stack)."""

    def left() -> list[str]:
        now = _holders(nets) & holders
        mine = _netns_fds(os.getpid()) | _netns_of_my_sockets() | {os.readlink("/proc/self/ns/net")}
        still = {n for n in nets if n in mine} | {n for pid, _ in now for n in _held_by(pid) & nets}
        return (
            ["netns %s" % n for n in sorted(still)]
            + ["slirp4netns %d" % p for p in slirps if alive(p)]
            + ["port %d" % p for p in ports if not port_closed(p)]
        )

    return poll(left, lambda got: not got, timeout)


def _held_by(pid: int) -> set[str]:
    try:
        return {os.readlink("/proc/%d/ns/net" % pid)} | _netns_fds(pid)
    except OSError:
        return set()


def test_delete_leaves_no_netns_relay_or_slirp(mock):
    kw = {"execd_bin": REAL_EXECD} if os.path.isfile(REAL_EXECD) and not optional.off("execd") else {}
    m = mock(**kw)
    sids = [m.create(), m.create()]
    for sid in sids:
        _serve(m, sid, 8080, "x")
    nets, slirps, ports = _sandbox_parts(m, sids)
    hub = bool(SLIRP) and nethub.wanted()  # eth0 from the bridge: no slirp4netns of their own (runtime/nethub.py)
    assert len(nets) == 2 and len(slirps) == (0 if hub or not SLIRP else 2)
    veths = {m.osb.sandboxes[sid].runtime.pid1.holder.net.lease.veth for sid in sids} if hub else set()
    assert len(veths) == 2 and veths <= nethub.links() if hub else not veths
    held = http.client.HTTPConnection(*m.endpoint(sids[0], 8080)[0].split(":"), timeout=10)
    held.request("GET", "/who.txt")
    assert held.getresponse().read() == b"x\n"  # a keep-alive connection through the published port
    holders = _holders(nets)
    for sid in sids:
        assert m.api("DELETE", "/v1/sandboxes/" + sid)[0] == 204
    assert _gone(nets, slirps, ports, holders) == []
    assert poll(lambda: veths & nethub.links(), lambda got: not got, 5.0) == set()  # out of the bridge
    held.close()

    # the listener's threads: those in accept() end before DELETE answers; the one that served the kept-alive
    # connection ends when it reads the close
    def left() -> list:
        return [t for t in threading.enumerate() if t.name.startswith(("osb-execd-relay", "mock-osb-8080"))]

    assert poll(left, lambda got: not got, 5.0) == []


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_mock_signals_leave_no_netns_relay_or_slirp(sig):
    from tiers.toolkit.mockcli import Cli

    args = ["--execd-bin", REAL_EXECD] if os.path.isfile(REAL_EXECD) and not optional.off("execd") else []
    cli = Cli(*args)
    try:
        sids = []
        for _ in range(2):
            status, body = cli.call("POST", "/v1/sandboxes", BODY)
            assert status == 202, body
            sids.append(json.loads(body)["id"])
        pids = [int(x) for x in os.listdir("/proc") if x.isdigit()]
        kids = [p for p in pids if _ppid(p) == cli.proc.pid]
        slirps = {p for p in kids if _comm(p) == "slirp4netns"}
        # PID 1 itself (the view's zygote forks it as the mock's child), or `unshare --net` (joined it itself)
        holders = [p for p in kids if _comm(p) == "unshare" or _nspid(p)[-1:] == ["1"]]
        nets = {os.readlink("/proc/%d/ns/net" % h) for h in holders}
        ports = set()
        for sid in sids:
            for port in (44772, 8080):
                status, body = cli.call("GET", "/v1/sandboxes/%s/endpoints/%d" % (sid, port))
                ports.add(int(json.loads(body)["endpoint"].split("/")[0].rpartition(":")[2]))
        # with the bridge (root): one slirp4netns for both, in the hub's namespace, which the mock holds open
        hub = bool(SLIRP) and nethub.wanted()
        assert len(nets) == 2 and len(slirps) == (1 if hub else 2 if SLIRP else 0), (holders, kids)
        held = _netns_fds(cli.proc.pid) - nets - {os.readlink("/proc/%d/ns/net" % cli.proc.pid)}
        assert len(held) == (1 if hub else 0), held
        nets |= held
        before = _holders(nets)
        if sig == signal.SIGKILL:
            cli.proc.kill()
            cli.proc.wait(10)
        else:
            assert cli.stop(sig)[0] == 0
        assert _gone(nets, slirps, ports | {cli.port}, before) == []
    finally:
        cli.kill()


def _netns_fds(pid: int) -> set[str]:
    """The network namespaces a process holds through open files."""
    out = set()
    for fd in os.listdir("/proc/%d/fd" % pid):
        try:
            link = os.readlink("/proc/%d/fd/%s" % (pid, fd))
        except OSError:
            continue
        if link.startswith("net:["):
            out.add(link)
    return out


def _ppid(pid: int) -> int:
    try:
        with open("/proc/%d/stat" % pid, "rb") as fh:
            return int(fh.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return -1


def _nspid(pid: int) -> list[str]:
    try:
        with open("/proc/%d/status" % pid) as fh:
            return next((line.split()[1:] for line in fh if line.startswith("NSpid:")), [])
    except OSError:
        return []


def _comm(pid: int) -> str:
    try:
        with open("/proc/%d/comm" % pid) as fh:
            return fh.read().strip()
    except OSError:
        return ""


def _netns_of_my_sockets() -> set[str]:
    """The network namespace of every socket this process holds (SIOCGSKNS)."""
    import fcntl

    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            if not os.readlink("/proc/self/fd/" + fd).startswith("socket:"):
                continue
            ns = fcntl.ioctl(int(fd), 0x894C, 0)  # SIOCGSKNS: an fd of the socket's network namespace
        except OSError:
            continue
        try:
            out.add(os.readlink("/proc/self/fd/%d" % ns))
        finally:
            os.close(ns)
    return out


def test_mock_execd_listens_inside_and_the_listener_dies_with_the_sandbox(mock):
    """The mock's own execd is at 127.0.0.1:44772 inside too (execd/inside.py, fixture 22 connect_host);
    after a delete no accept thread and no socket of the mock in the sandbox's namespace is left."""
    m = mock()
    sids = [m.create(), m.create()]
    nets = set()
    for sid in sids:
        assert m.run(sid, CONNECT % ("127.0.0.1", 44772)) == "CONNECTED"
        nets.add(os.readlink("/proc/%d/ns/net" % m.osb.sandboxes[sid].runtime.pid1.holder.pid))
    if os.geteuid() == 0:
        assert nets <= _netns_of_my_sockets()
    assert len([t for t in threading.enumerate() if t.name.startswith("execd-inside")]) >= 2
    holders = _holders(nets)
    for sid in sids:
        assert m.api("DELETE", "/v1/sandboxes/" + sid)[0] == 204
    assert _gone(nets, set(), set(), holders) == []
    assert not nets & _netns_of_my_sockets()
    assert not [t for t in threading.enumerate() if t.name.startswith("execd-inside")]
