"""t1: the networkPolicy steps of tiers/flows/docker/egress_steps.py on the mock ([egress] mode dns, a stub resolver on
loopback with the names the live sandboxes resolve) answer what the live server with the real sidecar answers
(tiers/t4/docker/test_live_egress.py runs the same steps there). The literal-address step needs two sandboxes on one
bridge, which the mock has not: test_egress_nft.py checks dns+nft's drop on a veth pair instead."""

from __future__ import annotations

import pytest

from mock_opensandbox.docker.egress import mode_problem
from mock_opensandbox.runtime.probe import probe_result
from mock_opensandbox.server import MockOpenSandbox
from tiers.flows.docker import egress_steps as E
from tiers.toolkit.dnsserver import StubResolver
from tiers.toolkit.marks import ISOLATED

pytestmark = pytest.mark.skipif(
    not (ISOLATED and probe_result()[3] is not None) or bool(mode_problem("dns", "bridge")),
    reason="no per-sandbox network namespaces or no root here",
)


@pytest.mark.slow
@pytest.mark.spec_exempt(
    "an unknown defaultAction is accepted (202), measured live with the egress image; the spec's enum says allow|deny"
)
def test_the_sdk_steps_answer_as_live(request):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("the step table on the mock (about 10 s): run with `make test-slow` (-m slow)")
    pytest.importorskip("opensandbox")
    with StubResolver(E.RECORDS) as dns:
        with MockOpenSandbox(egress_dns_upstream=dns.address, egress_ready_timeout=1.0, execd_close_delay=0) as m:
            got = E.run(m.base_url, m.api_key, "python:3", slow=True, literal=False)
    assert E.differences(got, "dns", ready_s=1.0) == []
    assert "debian.org" not in dns.asked  # a denied name never leaves the sandbox
