"""Tier t4, the differential rule (what passes on the mock must pass live, unchanged): the t1 plugin contract bodies run
unchanged against a live server, and so does the host's contract kit. Tests marked ``mock_only`` (they build their own
mocks or inspect mock internals) are skipped here by tiers/t4/conftest.py.

One image knob: the plugin's ``default_image`` (t1 bodies create ``template: base``) and the kit's
``--option default_image=`` are OPENSANDBOX_IMAGE (live_server.image), so a server whose images are local
(OSB_LOCAL_IMAGES=1 ./local-up.sh up) needs no registry."""

from __future__ import annotations

import pytest

from tiers.flows.host.host_kit import assert_18_of_18
from tiers.t1.plugin.test_plugin_contract import *  # noqa: F403  (the same test functions, run here again)
from tiers.t1.plugin.test_plugin_contract import EppClient
from tiers.t4.live_target import LiveTarget


@pytest.fixture(scope="module")
def mock(live_server):
    """Overrides t1's ``mock`` (tiers/t1/plugin/test_plugin_contract.py): the server under test is the live one."""
    return LiveTarget(live_server)


@pytest.fixture
def epp(mock, tmp_path):
    """Overrides the toolkit's ``epp`` (tiers/toolkit/fixtures.py): the same plugin, with default_image = OPENSANDBOX_IMAGE."""
    client = EppClient(
        str(tmp_path / "data"), {"base_url": mock.base_url, "api_key": mock.api_key, "default_image": mock.image}
    )
    yield client
    assert client.violations == []
    client.close()


def test_host_contract_kit_against_the_live_server(live_server, tmp_path):
    import demo

    home = tmp_path / "home"
    home.mkdir()
    demo.install_plugin(str(home))
    assert_18_of_18(str(home), live_server.root, live_server.api_key, f"default_image={live_server.image}")
