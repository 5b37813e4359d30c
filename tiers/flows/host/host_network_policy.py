"""networkPolicy through the host (agent-sandbox-client 0.4.0a6 with the plugin installed): the plugin's
``network_policy`` from its configuration (``ABX_OPENSANDBOX_NETWORK_POLICY``) and per create
(``provider_options``), which names resolve inside, and the errors of a policy the server or the sidecar
refuses. ``run(home, url, key, image)`` answers one dict; t2 runs it on the mock, t4 on the live server
with the egress image. Names: tiers/flows/docker/egress_steps.py (the mock's stub resolver has them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict

import demo
from tiers.flows.docker.egress_steps import ALLOWED, OTHER

EXPECTED = {"from_config": {ALLOWED: True, OTHER: False}, "per_create": {ALLOWED: False, OTHER: True}}
CONFIG_POLICY = {"defaultAction": "deny", "egress": [{"action": "allow", "target": ALLOWED}]}
FLOW = r"""
import asyncio, json, os, sys
from agent_sandbox import ProviderSandbox as Sandbox
OPTS = {"base_url": os.environ["OSB_URL"], "api_key": os.environ["OSB_KEY"], "default_image": os.environ["OSB_IMAGE"]}
ALLOWED, OTHER = sys.argv[1], sys.argv[2]
seen = {}

async def resolves(sb):
    out = {}
    for name in (ALLOWED, OTHER):
        r = await sb.commands.run("getent hosts %s >/dev/null && echo yes || echo no" % name, shell=True)
        out[name] = r.stdout.strip() == "yes"
    return out

async def attempt(key, **opts):
    try:
        sb = await Sandbox.create(provider="opensandbox", provider_options=dict(OPTS, **opts), timeout=600)
    except Exception as exc:
        seen[key] = {"error": type(exc).__name__, "code": getattr(exc, "code", None), "message": str(exc)[:400]}
        return
    try:
        seen[key] = await resolves(sb)
    finally:
        await sb.kill()

async def main():
    await attempt("from_config")
    await attempt("per_create", network_policy=json.dumps({"defaultAction": "allow",
                                                           "egress": [{"action": "deny", "target": ALLOWED}]}))
    await attempt("empty_target", network_policy=json.dumps({"egress": [{"action": "allow", "target": ""}]}))
    await attempt("not_json", network_policy="deny all")
    if sys.argv[3] == "slow":
        await attempt("refused_by_sidecar",
                      network_policy=json.dumps({"egress": [{"action": "maybe", "target": "x.test"}]}))
    print(json.dumps(seen))

asyncio.run(main())
"""


def run(home: str, url: str, key: str, image: str, slow: bool = True) -> Dict[str, Any]:
    """``slow``: also the policy the sidecar refuses (the server's whole ready wait: 30 s live)."""
    env = {
        **demo.host_env(home),
        "OSB_URL": url,
        "OSB_KEY": key,
        "OSB_IMAGE": image,
        "ABX_OPENSANDBOX_NETWORK_POLICY": json.dumps(CONFIG_POLICY),
    }
    proc = subprocess.run(
        [sys.executable, "-c", FLOW, ALLOWED, OTHER, "slow" if slow else "-"],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0:
        raise AssertionError(proc.stderr[-4000:])
    return json.loads(proc.stdout.strip().splitlines()[-1])


def install(tmp: str) -> str:
    home = os.path.join(tmp, "home")
    os.makedirs(home)
    demo.install_plugin(home)
    return home
