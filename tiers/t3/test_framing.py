"""tiers/t3/framing.py learns the execd framing the way the plugin does; OSB_EXECD_MODE overrides it."""

from __future__ import annotations

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.flows.server.smoke_flow import request
from tiers.t3 import framing


@pytest.mark.parametrize("mode", framing.MODES)
def test_detect_learns_each_generation_from_a_throwaway_sandbox(mode, monkeypatch):
    monkeypatch.delenv("OSB_EXECD_MODE", raising=False)
    with MockOpenSandbox(execd_mode=mode) as osb:
        assert framing.detect(osb.base_url, osb.api_key, "python:3.12-slim") == mode
        listed = request("GET", osb.base_url, "/v1/sandboxes", headers={"OPEN-SANDBOX-API-KEY": osb.api_key})
        assert listed.json()["items"] == []  # the probe deletes its sandbox


def test_osb_execd_mode_wins_and_a_bad_value_is_named(monkeypatch):
    monkeypatch.setenv("OSB_EXECD_MODE", "v1.1.0")
    assert framing.detect("http://127.0.0.1:9", "k", "img") == "v1.1.0"  # nothing is contacted
    monkeypatch.setenv("OSB_EXECD_MODE", "v9")
    with pytest.raises(framing.FramingError, match="OSB_EXECD_MODE='v9'"):
        framing.detect("http://127.0.0.1:9", "k", "img")


def test_a_failed_create_is_one_clear_line(monkeypatch):
    monkeypatch.delenv("OSB_EXECD_MODE", raising=False)
    with MockOpenSandbox() as osb:
        with pytest.raises(framing.FramingError, match="creating a sandbox from .* answered 401"):
            framing.detect(osb.base_url, "wrong-key", "python:3.12-slim")
