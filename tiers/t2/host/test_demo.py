"""`make demo` (the README's first command) runs end to end: the embedded mock, the plugin installed into a
throw-away HOME by the real host, every step of the flow, and nothing left behind."""

from __future__ import annotations

import os
import subprocess
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_demo_runs_every_step_and_cleans_up():
    proc = subprocess.run([sys.executable, "demo.py"], cwd=REPO, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    steps = [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]
    for step in (
        "mock",
        "install",
        "doctor",
        "create",
        "run",
        "stream",
        "files",
        "pause",
        "resume",
        "ports",
        "terminal",
        "kill",
        "cleanup",
    ):
        assert step in steps, proc.stdout
    assert "terminal  stty size -> 30 100; echo $((6*7)) -> 42" in proc.stdout
    assert "sandboxes left on the mock: 0" in proc.stdout and proc.stdout.rstrip().endswith("demo      OK")
