"""t1: the committed fault-proxy recordings (tiers/t4/recordings/, made against the live stack by
tiers/t4/workbench/test_proxy_live.py) replayed against the mock with ``python -m record compare``: every
difference must be explained (tiers/t4/recordings/ALLOWED_DIFFERENCES)."""

from __future__ import annotations

import io
import json
import os

import pytest

from record.compare_dir import compare_dir

pytestmark = pytest.mark.spec_exempt("replays a live recording: the SDK's POST /v1/metrics/events is not in the spec")
REC = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "t4", "recordings")


def test_sdk_flow_recording_compares_clean():
    out = io.StringIO()
    unexplained, _explained, results = compare_dir(REC, out=out)
    report = out.getvalue()
    assert unexplained == 0, report
    assert [r.scenario for r in results] == ["sdk_sync_flow_proxy"] and results[0].exchanges == 26
    assert "compare: 1 recording(s), 26 exchange(s), 0 unexplained difference(s), 0 explained" in report


def test_recording_is_scrubbed_and_as_the_upstream_saw_it():
    with open(os.path.join(REC, "sdk_sync_flow_proxy.json"), encoding="utf-8") as f:
        fx = json.load(f)
    # recorded before the fault proxy moved to mock_opensandbox.workbench.proxy; a recording keeps its tool's name
    assert fx["fixture_format"] == 1 and fx["recorded"]["tool"] == "python -m mock_opensandbox.proxy --record"
    for ex in fx["exchanges"]:
        for k, v in ex["request"]["headers"].items():
            if k.lower() == "open-sandbox-api-key":
                assert v == "<api-key>"
    assert any(ex.get("wait_before_s", 0) >= 2 for ex in fx["exchanges"])  # the flow's pause before /status
    hosts = {ex["request"]["headers"]["Host"] for ex in fx["exchanges"]}
    assert "127.0.0.1:8080" in hosts and len(hosts) == 2  # the live lifecycle and the sandbox's execd port
