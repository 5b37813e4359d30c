"""The host's Sandbox.create (agent-sandbox-client 0.4.0a6) with the plugin installed: volumes pass through
provider_options (QUIRKS.md, Volumes) and reach the mock; the host's own volume_mounts= is refused for an exec
provider."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import demo
from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit.marks import needs_isolation

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

pytestmark = needs_isolation

FLOW = r"""
import asyncio, json, os
from agent_sandbox import ProviderSandbox as Sandbox
from agent_sandbox.models import errors as E

VOLS = json.dumps([{"name": "work", "pvc": {"claimName": "host-work"}, "mountPath": "/workspace/work"},
                   {"name": "ro", "pvc": {"claimName": "host-work"}, "mountPath": "/ro", "readOnly": True}])
OPTS = {"base_url": os.environ["OSB_URL"], "api_key": os.environ["OSB_KEY"]}
seen = {}

async def main():
    sb = await Sandbox.create(provider="opensandbox", provider_options=dict(OPTS, volumes=VOLS), timeout=600)
    try:
        r = await sb.commands.run("echo kept > /workspace/work/f; cat /ro/f; echo x > /ro/g", shell=True)
        seen["run"] = [r.exit_code, r.stdout, r.stderr]
    finally:
        await sb.kill()
    try:
        await Sandbox.create(provider="opensandbox", provider_options=OPTS, timeout=600,
                             volume_mounts={"/workspace/work": "host-work"})
        seen["volume_mounts"] = None
    except E.SandboxError as exc:
        seen["volume_mounts"] = [type(exc).__name__, exc.code]
    print(json.dumps(seen))

asyncio.run(main())
"""


def test_host_create_passes_volumes_through_provider_options(tmp_path):
    home = str(tmp_path / "home")
    os.makedirs(home)
    demo.install_plugin(home)
    with MockOpenSandbox(execd_close_delay=0.05) as osb:
        env = {**demo.host_env(home), "OSB_URL": osb.base_url, "OSB_KEY": osb.api_key}
        proc = subprocess.run(
            [sys.executable, "-c", FLOW], env=env, cwd=home, capture_output=True, text=True, timeout=300
        )
        with open(os.path.join(osb.volumes.dir, "host-work", "f")) as fh:
            kept = fh.read()
    assert proc.returncode == 0, proc.stderr[-4000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    code, out, err = seen["run"]
    assert code != 0 and out == "kept\n" and "Read-only file system" in err, seen
    assert kept == "kept\n"
    assert seen["volume_mounts"] == ["ProviderFeatureNotSupportedError", "E8004"], seen
