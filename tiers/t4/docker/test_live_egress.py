"""t4: networkPolicy on the live server with the egress image (``OSB_WITH_EGRESS=1 OSB_LOCAL_IMAGES=1
./local-up.sh up``; OSB_EGRESS_MODE dns or dns+nft): the steps of tiers/flows/docker/egress_steps.py through the official
SDK, answered as the mock answers them (tiers/t1/docker/test_egress_steps.py). Skips unless the server at
OPENSANDBOX_BASE_URL is the local-up one with an ``[egress] image`` (tiers/t4/liveconfig.py), or
OPENSANDBOX_EGRESS_IMAGE says so. The invalid-action create waits out the server's 30 s: -m slow."""

from __future__ import annotations

import pytest

from tiers.flows.docker import egress_steps as E
from tiers.t4.liveconfig import egress_config

EGRESS = egress_config()
pytestmark = pytest.mark.skipif(
    EGRESS is None,
    reason="the live server has no [egress] image "
    "(OSB_WITH_EGRESS=1 ./local-up.sh up; or export OPENSANDBOX_EGRESS_IMAGE)",
)


@pytest.fixture(scope="module")
def steps(live_server):
    pytest.importorskip("opensandbox")
    return E.run(live_server.root, live_server.api_key, live_server.image, slow=False)


def test_the_sdk_steps_answer_as_the_mock_does(steps):
    assert E.differences(steps, EGRESS["mode"]) == []


def test_a_change_shows_inside_within_two_seconds(steps):
    assert all(steps[k]["s"] <= 2.0 for k in ("patch_allow", "patch_same_target_other_case", "delete")), steps


@pytest.mark.slow
def test_a_policy_the_sidecar_refuses_fails_after_the_ready_wait(live_server, request):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("waits out the server's 30 s: run with -m slow")
    got = E.validation(live_server.root, live_server.api_key, live_server.image, slow=True)["invalid_action"]
    assert got["status"] == 500 and got["code"] == "DOCKER::SANDBOX_START_FAILED", got
    assert got["message"].startswith("Egress sidecar did not become ready within 30s"), got
    assert got["message"].endswith(": [Errno 104] Connection reset by peer"), got
    assert 29 <= got["s"] <= 40


def test_the_plugins_network_policy_through_the_host(live_server, tmp_path):
    from tiers.flows.host import host_network_policy as H

    seen = H.run(H.install(str(tmp_path)), live_server.root, live_server.api_key, live_server.image, slow=False)
    assert {k: seen[k] for k in H.EXPECTED} == H.EXPECTED, seen
    assert seen["empty_target"]["code"] == "E8000" and "HTTP 422" in seen["empty_target"]["message"], seen
    assert seen["not_json"]["code"] == "E8002", seen
