"""Run tiers/t2/clients/js_flow.mjs with the pinned JS SDK (installed on first use under .cache/npm-js)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

from . import node_modules

PACKAGE = "@alibaba-group/opensandbox@0.1.11"
FLOW = os.path.join(os.path.dirname(os.path.abspath(__file__)), "js_flow.mjs")


def run_flow(domain: str, api_key: str, image: str, *, flow: str = FLOW, args: tuple = ()) -> list[dict]:
    """One of the .mjs flows here (default js_flow.mjs) with the pinned SDK: its JSON steps."""
    d = node_modules("js", [PACKAGE])
    r = subprocess.run(
        [shutil.which("node") or "node", flow, domain, api_key, image, *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, OSB_JS_DIR=d),
    )
    steps = [json.loads(line) for line in r.stdout.splitlines() if line.startswith("{")]
    if r.returncode != 0 or not steps:
        steps.append({"name": "node exit", "ok": False, "detail": "rc=%s %s" % (r.returncode, r.stderr[-1500:])})
    return steps


def summary(steps: list[dict]) -> str:
    bad = [s for s in steps if not s["ok"]]
    return "%d/%d JS SDK steps passed%s" % (
        len(steps) - len(bad),
        len(steps),
        "".join("\n--- %s: %s" % (s["name"], s["detail"]) for s in bad),
    )
