"""bench case 7 ("sandbox": what one sandbox costs the mock, A/B against another tree) runs end to end. No
timing is asserted: a benchmark is not a test. The baseline tree is this repository itself
(--sandbox-baseline-tree), so the test needs no git checkout; the counts it checks are of this mock."""

from __future__ import annotations

import os

from tiers.toolkit.benchrun import smoke
from tiers.toolkit.waits import poll

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _start_time(pid: int):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return int(fh.read().rsplit(")", 1)[1].split()[19])
    except (OSError, ValueError, IndexError):
        return None


def test_sandbox_case_ab_smoke(tmp_path):
    results = smoke(["--cases", "sandbox", "--sandbox-baseline-tree", REPO], str(tmp_path))
    rows = {r["id"]: r for r in results["cases"]}
    assert {
        "sandbox_create_ready",
        "sandbox_command_true",
        "sandbox_idle_rss_kb",
        "sandbox_idle_processes",
        "sandbox_idle_server_fds",
    } <= set(rows), sorted(rows)
    for row in rows.values():
        assert row["case"] == 7 and "error" not in row, row
        assert row["median"] is not None and row["baseline"]["median"] is not None, row
    detail = results["details"]["sandbox"]
    assert detail["A"]["package"] == detail["B"]["package"] == os.path.join(REPO, "mock_opensandbox")
    idle = detail["idle"]["B"]
    assert idle["processes"] >= 1 and idle["rss_kb"] > 0, idle  # the sandbox's own processes were found
    assert idle["server_fds"] is not None and idle["server_fds"] >= 1, idle  # the mock's fds per sandbox
    assert rows["sandbox_create_ready"]["target"] == "<= 1.5x"
    md = (tmp_path / "results.md").read_text()
    assert "Sandbox create -> execd /ping answers" in md
    # the case starts two mocks of its own and stops them: none of the sandbox processes it counted is left
    assert idle["one_sandbox"], idle
    # a killed sandbox's PID 1 goes with its holder, asynchronously
    left = poll(
        lambda: [p for p in idle["one_sandbox"] if _start_time(p["pid"]) == p["start"]], lambda got: not got, 2.0
    )
    assert not left, left
