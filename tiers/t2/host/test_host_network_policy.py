"""The host's Sandbox.create with the plugin's ``network_policy`` (config and per create) on a mock that runs
an egress image ([egress] mode dns; a stub resolver on loopback): the policy reaches the sandbox's resolver,
and the server's and the sidecar's refusals come back as typed errors (tiers/flows/host/host_network_policy.py; the same
flow runs live in tiers/t4/docker/test_live_egress.py)."""

from __future__ import annotations

import pytest

from mock_opensandbox.docker.egress import mode_problem
from mock_opensandbox.server import MockOpenSandbox
from tiers.flows.docker.egress_steps import RECORDS
from tiers.flows.host import host_network_policy as H
from tiers.toolkit.dnsserver import StubResolver
from tiers.toolkit.marks import needs_isolation

pytestmark = [
    needs_isolation,
    pytest.mark.skipif(bool(mode_problem("dns", "bridge")), reason=mode_problem("dns", "bridge") or "-"),
]
EXPECTED = H.EXPECTED


def test_network_policy_from_config_and_per_create_through_the_host(tmp_path):
    home = H.install(str(tmp_path))
    with (
        StubResolver(RECORDS) as dns,
        MockOpenSandbox(egress_dns_upstream=dns.address, egress_ready_timeout=1, execd_close_delay=0.05) as osb,
    ):
        seen = H.run(home, osb.base_url, osb.api_key, "python:3")
    assert {k: seen[k] for k in EXPECTED} == EXPECTED, seen
    assert seen["empty_target"]["code"] == "E8000" and "HTTP 422" in seen["empty_target"]["message"]
    assert "networkPolicy.egress.0.target: String should have at least 1 character" in seen["empty_target"]["message"]
    assert (seen["not_json"]["error"], seen["not_json"]["code"]) == ("ProviderConfigError", "E8002")
    assert "network_policy: is not valid JSON" in seen["not_json"]["message"]
    refused = seen["refused_by_sidecar"]
    assert refused["code"] == "E8000" and "HTTP 500" in refused["message"]
    assert "Egress sidecar did not become ready within 1s" in refused["message"]
