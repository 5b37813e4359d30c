"""Oracle: the official JS SDK, @alibaba-group/opensandbox 0.1.11 (pinned, unchanged; npm into .cache/npm-js
on first use), drives the mock through node: lifecycle, commands, files, endpoints, metrics, egress, manager
(tiers/t2/clients/js_flow.mjs; the same flow runs live in tiers/t4/server/test_live_clients.py)."""

from __future__ import annotations

import shutil

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.t2.clients import Unavailable

pytestmark = pytest.mark.spec_exempt("the JS SDK calls PATCH metadata and the egress route (not in the June spec)")


@pytest.mark.skipif(shutil.which("node") is None, reason="node not installed: JS SDK oracle skipped")
def test_js_sdk_flow_against_the_mock():
    from tiers.t2.clients import js

    with MockOpenSandbox() as m:
        try:
            steps = js.run_flow(m.base_url.split("://", 1)[1], m.api_key, "local/python:3-slim")
        except Unavailable as e:
            pytest.skip("JS SDK unavailable: %s" % e)
    print("\n" + js.summary(steps).splitlines()[0])
    assert steps and all(s["ok"] for s in steps), js.summary(steps)
