"""`python -m bench --smoke ...` as the bench tests run it (tiers/t1/tools): the repository as cwd, no live server
in the environment unless the caller gives one, the results.json of a run that exited 0. Standard library only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
LIVE_ENV = ("OPENSANDBOX_BASE_URL", "OPENSANDBOX_API_KEY")


def env_without_live(**extra: str) -> dict[str, str]:
    """This process's environment less the live server's variables, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in LIVE_ENV}
    env.update(extra)
    return env


def smoke(args: list[str], out: str, env: dict[str, str] | None = None, timeout: float = 240) -> dict[str, Any]:
    """results.json of `python -m bench --smoke ARGS --out OUT`; fails the test with the run's output otherwise."""
    proc = subprocess.run(
        [sys.executable, "-m", "bench", "--smoke", *args, "--out", out],
        cwd=REPO,
        env=env if env is not None else env_without_live(),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    with open(os.path.join(out, "results.json")) as fh:
        return json.load(fh)
