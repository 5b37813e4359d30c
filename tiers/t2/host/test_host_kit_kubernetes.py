"""The real host (agent-sandbox-client 0.4.0a6) runs its contract kit through the installed plugin against the
mock in Kubernetes mode (``runtime="kubernetes"``) behind its ingress gateway, in both route modes, with secure
access on (the plugin's ``secure_access`` option): 18 passed, 0 failed, nothing skipped. Every sandbox of the kit
is created with ``secureAccess``, and every execd request goes through the gateway with its access token.
The Docker mode's run is tiers/t2/host/test_host_contract.py."""

from __future__ import annotations

import pytest

import demo  # (install_plugin)
from mock_opensandbox.server import MockOpenSandbox
from tiers.flows.host.host_kit import assert_18_of_18

SECURE = "OpenSandbox-Secure-Access"


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    home = tmp_path_factory.mktemp("home")
    assert "Installed opensandbox 0.1.0" in demo.install_plugin(str(home))
    return str(home)


@pytest.mark.parametrize("route", ["header", "uri"])
def test_contract_kit_18_of_18_kubernetes_gateway_secure(home, route):
    with MockOpenSandbox(runtime="kubernetes", gateway=True, gateway_route=route) as osb:
        granted: list = []
        grant, app = osb.ingress.grant, osb._gateway.server.app
        route_of, seen = app.route, []

        def spy_grant(sid):
            granted.append(sid)
            return grant(sid)

        def spy_route(req):
            seen.append(bool(req.headers.get(SECURE)))
            return route_of(req)

        osb.ingress.grant, app.route = spy_grant, spy_route
        assert_18_of_18(home, osb.base_url, osb.api_key, "secure_access=true")
        left = [sid for sid, sb in osb.sandboxes.items() if not getattr(sb, "deleted", False)]
    assert left == [], "the kit's sandboxes were all deleted"
    assert len(set(granted)) >= 10, granted  # the kit's creates asked for secureAccess: each got a token
    assert len(seen) > 30 and all(seen), (len(seen), seen.count(False))  # execd only through the gateway, with it
