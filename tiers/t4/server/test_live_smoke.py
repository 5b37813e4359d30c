"""The live smoke flow (tiers/flows/server/smoke_flow.py) against a real server. The same body runs against the mock in
tiers/t1/lifecycle/test_smoke_flow_mock.py and against mock + execd processes in tiers/t3."""

from __future__ import annotations

import pytest

from tiers.flows.server.smoke_flow import STEPS, request, run_smoke_flow

pytestmark = pytest.mark.live


def test_live_health_and_version(live_server):
    r = request("GET", live_server.root, "/version")
    assert r.status == 200, r
    version = r.json().get("version")
    assert isinstance(version, str) and version, r  # 01_health_version: {"version":"1.1.1"}


def test_live_smoke_flow(live_server):
    passed = run_smoke_flow(live_server.base_url, live_server.api_key, image=live_server.image, log=print)
    assert len(passed) == STEPS, passed
