"""The sandboxes' bridge (mock_opensandbox/runtime/nethub.py, QUIRKS "Outbound traffic and the bridge"): what a
sandbox sees of it is asserted against live in tiers/flows/sandbox/sandbox_inside.py (``eth0_facts``, ``bridge_peers``); here, the
mock's side: addresses given back, and the way without it (a slirp4netns of the sandbox's own) when it is off or
full."""

from __future__ import annotations

import pytest

from mock_opensandbox.runtime import nethub
from tiers.t1.sandbox.test_network import CONNECT, SLIRP, Mock
from tiers.toolkit.waits import poll

pytestmark = pytest.mark.skipif(
    not (SLIRP and nethub.wanted()), reason="the sandboxes' bridge needs root and slirp4netns (runtime/nethub.py)"
)


@pytest.fixture
def mock(opensandbox_mock_factory):
    """Overrides the toolkit's ``mock`` (tiers/toolkit/fixtures.py): a factory of mocks wrapped in ``Mock``."""
    return lambda **kw: Mock(opensandbox_mock_factory(execd_close_delay=0, **kw))


def _net(m: Mock, sid: str):
    return m.osb.sandboxes[sid].runtime.pid1.holder.net


def test_an_address_is_leased_again_once_its_veth_is_gone(mock):
    m = mock()
    a, b = m.create(), m.create()
    ip_a, veth_a = _net(m, a).lease.ip, _net(m, a).lease.veth
    assert _net(m, b).lease.ip != ip_a and veth_a in nethub.links()
    assert m.api("DELETE", "/v1/sandboxes/" + a)[0] == 204
    assert poll(lambda: veth_a in nethub.links(), lambda left: not left, 5.0) is False
    c = m.create()
    assert _net(m, c).lease.ip == ip_a  # the lowest free address, as Docker's IPAM gives
    assert m.run(c, "tail -1 /etc/hosts | cut -f1") == ip_a


@pytest.mark.parametrize("way", ["switched off", "bridge full"])
def test_without_the_bridge_a_sandbox_has_a_slirp4netns_of_its_own(mock, monkeypatch, way):
    if way == "switched off":
        monkeypatch.setenv(nethub.HUB_ENV, "0")
    else:
        monkeypatch.setattr(nethub, "MAX_PORTS", 0)
    m = mock()
    sid = m.create()
    net = _net(m, sid)
    assert net.lease is None and net.stack is not None and net.stack.poll() is None
    assert m.run(sid, "tail -1 /etc/hosts | cut -f1") == "172.17.0.100"
    assert m.run(sid, CONNECT % ("127.0.0.1", m.osb.port)) == "REFUSED 111"
