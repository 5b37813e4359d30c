"""bench/ runs end to end and writes well-formed results. No timing is asserted: a benchmark is not a test.

One `python -m bench --smoke` subprocess (every case, one repetition per side, tiny sizes) with a temporary
--out; then the JSON schema, the Markdown table and the chart-or-install-hint rule are checked.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys

import pytest

from tiers.toolkit.benchrun import env_without_live, smoke

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ROW_KEYS = ("median", "p90", "ratio", "target", "met")
CASE_IDS = {1, 2, 3, 4, 5, 6}


@pytest.fixture(scope="module")
def bench_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench-out")
    env = {k: v for k, v in os.environ.items() if k not in ("OPENSANDBOX_BASE_URL", "OPENSANDBOX_API_KEY")}
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", "--out", str(out)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    return proc, out


def test_bench_smoke_run_succeeds(bench_run):
    proc, out = bench_run
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert (out / "results.json").is_file()
    assert (out / "results.md").is_file()


def test_results_json_schema(bench_run):
    _, out = bench_run
    results = json.loads((out / "results.json").read_text())
    assert results["schema"] == 1 and results["mode"] == "smoke"
    assert results["server"]["kind"] == "mock"
    for key in ("nproc", "cpu", "python", "load_before", "load_after"):
        assert results["machine"][key] not in (None, "")
    rows = results["cases"]
    assert {r["case"] for r in rows} == CASE_IDS
    ids = [r["id"] for r in rows]
    assert len(ids) == len(set(ids))
    for row in rows:
        for key in ROW_KEYS:
            assert key in row, (row["id"], key)
        assert "error" not in row, row
        assert isinstance(row["median"], (int, float)) and row["median"] > 0, row["id"]
        assert isinstance(row["p90"], (int, float)), row["id"]
        assert row["unit"] in ("ms", "MB/s")
        if row["target"] is None:
            assert row["met"] is None
        else:
            assert isinstance(row["ratio"], float) and row["ratio"] > 0
            assert isinstance(row["met"], bool)
            limit = row["target_ratio"]
            assert row["met"] == (row["ratio"] <= limit if row["better"] == "lower" else row["ratio"] >= limit)
    # the official SDK's own sandbox on the mock gets execd's close delay 0 (ExecdServer.close_delay), so the
    # SDK rows compare like with like instead of waiting out ~1 s per command
    assert results["details"]["flow"]["sdk_close_delay_0"] is True
    targets = {r["id"] for r in rows if r["target"]}
    assert {"cold_start", "exec_roundtrip", "host_flow"} <= targets
    assert any(i.startswith("stream_") for i in targets)
    assert sum(i.startswith("files_") for i in targets) == 4


def test_markdown_and_chart(bench_run):
    proc, out = bench_run
    md = (out / "results.md").read_text()
    assert "| # | case | ours: median |" in md
    results = json.loads((out / "results.json").read_text())
    for row in results["cases"]:
        assert row["title"] in md
    if results.get("chart"):
        assert (out / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    else:  # matplotlib is bench-only: without it the run says how to get it
        assert "pip install -r bench/requirements.txt" in proc.stderr
        assert not (out / "chart.png").exists()


def test_report_without_matplotlib(tmp_path, monkeypatch):
    from bench import report

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    results = {
        "schema": 1,
        "date": "2026-01-01T00:00:00Z",
        "quick": True,
        "mode": "quick",
        "wall_s": 1.0,
        "machine": {"nproc": 2, "cpu": "x", "python": "3.11", "load_before": "-", "load_after": "-"},
        "server": {"kind": "live"},
        "details": {},
        "cases": [
            {
                "id": "r",
                "case": 2,
                "title": "T",
                "unit": "ms",
                "better": "lower",
                "median": 2.0,
                "p90": 3.0,
                "ratio": 1.05,
                "target": "<= 1.1x",
                "target_ratio": 1.1,
                "met": True,
                "baseline": {"name": "b", "median": 1.9, "p90": 2.0},
                "note": "",
            }
        ],
    }
    paths = report.write_all(results, str(tmp_path))
    assert "png" not in paths and not (tmp_path / "chart.png").exists()
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["chart"] is None and "pip install -r bench/requirements.txt" in saved["chart_problem"]
    assert (
        "| 2 | T (ms) | 2.00 | 3.00 | b | 1.90 | 2.00 | 1.05x | <= 1.1x | yes |"
        in (tmp_path / "results.md").read_text()
    )


def test_bad_case_name_is_a_usage_error():
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--cases", "nope"], cwd=REPO, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 2
    assert "unknown case 'nope'" in proc.stderr


def test_live_case_without_a_live_server_is_one_line(bench_run):
    """Case 8 (mock vs live) is a default case: without OPENSANDBOX_BASE_URL it says so in one line, measures
    nothing, and the rest of the run is as before."""
    from bench.vs_live import SKIP_LINE

    proc, out = bench_run
    assert proc.returncode == 0, proc.stderr[-4000:]
    said = [line for line in proc.stderr.splitlines() if "mock vs live" in line.lower()]
    assert len(said) == 1 and said[0].endswith(SKIP_LINE), said
    results = json.loads((out / "results.json").read_text())
    assert "live" in results["cases_selected"]
    assert not [r for r in results["cases"] if r["case"] == 8]
    assert results["details"]["live"]["skipped"].startswith("no live server")


def test_live_case_against_a_mock_as_live(opensandbox_mock, tmp_path):
    """Case 8 with a second mock (this process's) standing in for the live server: both sides measured in one
    run, the ratio rows written. An image no docker has, so the case's own mocks run the host-tools view."""
    env = env_without_live(
        OPENSANDBOX_BASE_URL=opensandbox_mock.base_url + "/v1",  # as ./local-up.sh env gives it
        OPENSANDBOX_API_KEY=opensandbox_mock.api_key or "",
        OPENSANDBOX_IMAGE="local/bench-mock-as-live:none",
    )
    results = smoke(["--cases", "live"], str(tmp_path), env)
    assert results["server"]["kind"] == "live"
    rows = {r["id"]: r for r in results["cases"]}
    ratios = {"live_command_true", "live_create_ready", "live_create_ready_faithful", "live_stream"}
    ratios |= {"live_files_upload_1mib", "live_files_download_1mib"}
    ratios |= {"live_command_true_floor", "live_command_true_mock_floor"}
    assert ratios <= set(rows), sorted(rows)
    for key in ratios:
        row = rows[key]
        assert row["case"] == 8 and "error" not in row, row
        assert row["median"] > 0 and row["baseline"]["median"] > 0 and row["ratio"] > 0, row
        assert row["rounds"] == 1, row
    assert rows["live_command_true"]["target_ratio"] == 0.5 and rows["live_create_ready"]["target_ratio"] == 0.05
    detail = results["details"]["live"]
    assert detail["views"]["mock"] == "host-tools" and not detail["image_dir"], detail
    assert "host-tools view" in rows["live_command_true"]["ours"]["name"]
    assert rows["live_command_true_floor"]["ours"]["name"] == "floor (bench/floor.py)"
    assert rows["live_command_true_mock_floor"]["baseline"]["name"] == "floor (bench/floor.py)"
    assert "Mock vs live (case 8)" in (tmp_path / "results.md").read_text()
    assert not opensandbox_mock.sandboxes  # every sandbox of the "live" side was deleted


def test_floor_server_runs_true_only_and_ends_with_its_stdin():
    """bench/floor.py, the command round trip's floor in case 8: `true` gets the event-stream head, init and
    execution_complete; any other command a 400 (it forks on the host); closing its stdin ends it."""
    from bench.vs_live import FloorProcess, command

    floor = FloorProcess()
    try:
        took, nbytes, kind = command(floor.url, {}, "true")
        assert kind == "execution_complete" and nbytes > 0 and took > 0
        host, port = floor.url.split(":")
        c = http.client.HTTPConnection(host, int(port), timeout=30)
        c.request("POST", "/command", body=json.dumps({"command": "id"}), headers={"Content-Type": "application/json"})
        assert c.getresponse().status == 400
        c.close()
    finally:
        floor.stop()
    assert floor.proc.returncode == 0


def test_a_session_run_without_its_terminal_event_is_run_again_and_counted(monkeypatch):
    """Case 8's session row: a run whose stream ended without execution_complete (the real execd does that now
    and then) is run again, up to three times in all, each one noted; the third in a row fails the case."""
    from bench import execd_ops

    results = iter([execd_ops.IncompleteSession("a"), execd_ops.IncompleteSession("b"), 0.002])

    def fake(url, headers, sid, cmd="true"):
        r = next(results)
        if isinstance(r, Exception):
            raise r
        return r

    monkeypatch.setattr(execd_ops, "session_run", fake)
    seen: list[str] = []
    assert execd_ops.session_run_retried("u", {}, "s", seen) == 0.002
    assert seen == ["a", "b"]
    results = iter([execd_ops.IncompleteSession(str(i)) for i in range(3)])
    with pytest.raises(execd_ops.IncompleteSession):
        execd_ops.session_run_retried("u", {}, "s", seen)
    assert seen == ["a", "b", "0", "1", "2"]
