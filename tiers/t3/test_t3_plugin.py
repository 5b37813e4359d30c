"""Tier t3: the t1 plugin contract bodies (tiers/t1/plugin/test_plugin_contract.py), unchanged, and the host's contract kit,
against the mock lifecycle with one execd *process* per sandbox ($OSB_EXECD_BIN, else the mock's stand-alone execd)."""

from __future__ import annotations

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.flows.host.host_kit import assert_18_of_18
from tiers.t1.plugin.test_plugin_contract import *  # noqa: F403  (the same test functions, run here again)
from tiers.t3 import framing


@pytest.fixture(scope="module")
def mock(execd_bin):
    """Overrides t1's ``mock`` (tiers/t1/plugin/test_plugin_contract.py): the server under test is the mock with execd processes. Which framing that execd
    speaks (the real v1.0.19 and the stand-alone one: v1.1.0; a newer real one: latest) is learned the way the
    plugin learns it, or given by OSB_EXECD_MODE (tiers/t3/framing.py); t1's assertions read mock.execd_mode."""
    osb = MockOpenSandbox(execd_bin=execd_bin.path, isolate=False, execd_mode=framing.mode_from_env() or "v1.1.0")
    osb.start()
    try:
        osb.execd_mode = framing.detect(osb.base_url, osb.api_key, "python:3.12-slim")
        yield osb
    finally:
        osb.stop()


def test_host_contract_kit_against_execd_processes(mock, tmp_path):
    import demo

    home = tmp_path / "home"
    home.mkdir()
    demo.install_plugin(str(home))
    assert_18_of_18(str(home), mock.base_url, mock.api_key)
