"""t1: dns+nft drops what the policy does not allow, measured with a real connection. A mock sandbox has no
route out without slirp4netns, so the test gives it one of its own: a veth pair made inside the sandbox's
network namespace whose other end is in a throw-away namespace of the test (nothing in the host's), with a
listener there on 10.199.0.2 (the "host address" of a Docker bridge, as live: a listener on the bridge
address). The stub resolver names it ``peer.test``. Checked with the mock's sidecar and, when it can run here,
the real one (--egress-bin, -m slow: tiers/diff compares it by default); ``dns`` mode is the control (addresses are not filtered).
Everything made here dies with the peer process and the sandbox."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import threading

import pytest

from mock_opensandbox.docker.egress import mode_problem
from mock_opensandbox.docker.egress.realbin import binary_problem
from mock_opensandbox.runtime.probe import probe_result
from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit.dnsserver import StubResolver
from tiers.toolkit.marks import ISOLATED
from tiers.toolkit.sdk import sdk_config

PEER, MINE, PORT = "10.199.0.2", "10.199.0.1", 8099
BIN = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))),
    "shared",
    "opensandbox",
    "egress",
    "egress",
)
WHY = (
    "no per-sandbox network namespaces here"
    if not (ISOLATED and probe_result()[3] is not None)
    else mode_problem("dns+nft", "bridge") or ("" if shutil.which("ip") else "no ip (iproute2)")
)
pytestmark = pytest.mark.skipif(bool(WHY), reason=WHY or "-")
REAL_WHY = binary_problem(BIN, "dns+nft") if os.path.exists(BIN) else "no egress binary at " + BIN


class Peer:
    """A network namespace of the test's own (``unshare --net sleep``) with a TCP listener on PEER:PORT."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(["unshare", "--net", "sleep", "120"])
        self.ns = "/proc/%d/ns/net" % self.proc.pid
        for _ in range(100):
            if os.readlink(self.ns) != os.readlink("/proc/self/ns/net"):
                break
            threading.Event().wait(0.02)
        self.sock: socket.socket | None = None

    def link(self, holder_pid: int) -> None:
        inside = ["nsenter", "--net=/proc/%d/ns/net" % holder_pid]
        subprocess.run(
            inside
            + ["ip", "link", "add", "osbt0", "type", "veth", "peer", "name", "osbt1", "netns", str(self.proc.pid)],
            check=True,
            timeout=10,
        )
        subprocess.run(inside + ["ip", "addr", "add", MINE + "/24", "dev", "osbt0"], check=True, timeout=10)
        subprocess.run(inside + ["ip", "link", "set", "osbt0", "up"], check=True, timeout=10)
        there = ["nsenter", "--net=" + self.ns]
        subprocess.run(there + ["ip", "addr", "add", PEER + "/24", "dev", "osbt1"], check=True, timeout=10)
        subprocess.run(there + ["ip", "link", "set", "osbt1", "up"], check=True, timeout=10)
        from mock_opensandbox.runtime.holder import setns_function
        from mock_opensandbox.runtime.netns import CLONE_NEWNET, own_netns_fd

        setns, fd = setns_function(), os.open(self.ns, os.O_RDONLY | os.O_CLOEXEC)
        try:
            setns(fd, CLONE_NEWNET)
            try:
                self.sock = socket.socket()
                self.sock.bind((PEER, PORT))
                self.sock.listen(8)
            finally:
                setns(own_netns_fd(), CLONE_NEWNET)
        finally:
            os.close(fd)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                c, _ = self.sock.accept()  # type: ignore[union-attr]
            except OSError:
                return
            c.sendall(b"hi")
            c.close()

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
        self.proc.kill()
        self.proc.wait(timeout=10)


PROBE = (
    'python3 -c "import socket; s=socket.socket(); s.settimeout(1.5)\n'
    "try: s.connect(('%s', %d)); print(s.recv(2).decode())\nexcept OSError as e: print('dropped')\"" % (PEER, PORT)
)


def reach(sb) -> str:
    return "".join(m.text for m in sb.commands.run(PROBE).logs.stdout).strip()


@pytest.mark.parametrize(
    "mode,real",
    [
        ("dns", False),
        ("dns+nft", False),
        pytest.param(
            "dns+nft", True, marks=[pytest.mark.slow, pytest.mark.skipif(bool(REAL_WHY), reason=REAL_WHY or "-")]
        ),
    ],
)
def test_an_address_is_reachable_only_when_the_policy_allows_it(mode, real, request):
    if real and "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("the real sidecar's drop: run with `make test-slow` (-m slow)")
    pytest.importorskip("opensandbox")
    from opensandbox.models.sandboxes import NetworkPolicy, NetworkRule
    from opensandbox.sync.sandbox import SandboxSync

    peer = Peer()
    try:
        with (
            StubResolver({"peer.test": PEER}) as dns,
            MockOpenSandbox(
                egress_mode=mode,
                egress_dns_upstream=dns.address,
                execd_close_delay=0,
                egress_ready_timeout=5,
                egress_bin=BIN if real else None,
            ) as m,
        ):
            pol = NetworkPolicy(default_action="deny", egress=[NetworkRule(action="allow", target="peer.test")])
            sb = SandboxSync.create("python:3", connection_config=sdk_config(m, sync=True), network_policy=pol)
            try:
                peer.link(m.store.get(sb.id).runtime.pid1.holder.pid)
                if mode == "dns":
                    assert reach(sb) == "hi"  # dns: a literal address is not filtered (live: the same)
                    return
                assert reach(sb) == "dropped"  # not resolved yet: not in the allowed addresses
                sb.commands.run("getent hosts peer.test")
                assert reach(sb) == "hi"  # its A record, through the resolver: allowed
                sb.patch_egress_rules([NetworkRule(action="deny", target=PEER)])
                assert reach(sb) == "dropped"  # a literal deny goes before the resolved addresses
            finally:
                sb.kill()
    finally:
        peer.close()
