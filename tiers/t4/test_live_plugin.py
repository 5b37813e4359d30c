"""Tier t4, the differential rule (seed 000 §5.4): the t1 plugin contract bodies run unchanged against a live
server, and so does the host's contract kit. Tests marked ``mock_only`` (they build their own mocks or
inspect mock internals) are skipped here by tiers/t4/conftest.py."""
from __future__ import annotations

import pytest

from tiers.host_kit import assert_18_of_18
from tiers.t1.test_plugin_contract import *  # noqa: F401,F403  (the same test functions, run here again)
from tiers.t4.live_target import LiveTarget


@pytest.fixture(scope="module")
def mock(live_server):
    """Replaces t1's `mock`: the server under test is the live one."""
    return LiveTarget(live_server)


def test_host_contract_kit_against_the_live_server(live_server, tmp_path):
    import demo

    home = tmp_path / "home"
    home.mkdir()
    demo.install_plugin(str(home))
    assert_18_of_18(str(home), live_server.root, live_server.api_key)
