"""The live smoke flow (tiers/flows/server/smoke_flow.py, also run by t4 against a real server) against the mock.

Differential rule: the body that passes against the live server must pass here unchanged.
"""

from __future__ import annotations

from tiers.flows.server.smoke_flow import STEPS, run_smoke_flow


def test_smoke_flow_against_the_mock(opensandbox_mock):
    passed = run_smoke_flow(opensandbox_mock.base_url, opensandbox_mock.api_key)
    assert len(passed) == STEPS, passed


def test_smoke_flow_against_the_mock_with_latest_execd(opensandbox_mock_factory):
    """Same flow with the "latest" execd framing (byte-exact output chunks; QUIRKS.md, POST /command)."""
    osb = opensandbox_mock_factory(execd_mode="latest")
    passed = run_smoke_flow(osb.base_url + "/v1", osb.api_key)  # OPENSANDBOX_BASE_URL form, with /v1
    assert len(passed) == STEPS, passed
