"""The real host (agent-sandbox-client 0.4.0a6) installs ./plugin into a temporary HOME and runs its
own contract kit against the mock: 18 passed, 0 failed, nothing skipped; doctor all ok.

The host reads ~ at import time, so it always runs in a subprocess with HOME set
(epp-host-reference §5.4); the mock runs in this process.
"""

from __future__ import annotations

import json
import os
import re
import sys

import pytest

import demo  # (host_env / host / install_plugin helpers)
from mock_opensandbox.server import MockOpenSandbox
from tiers.flows.host.host_kit import assert_18_of_18

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


@pytest.fixture
def home(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    out = demo.install_plugin(str(home))
    assert "Installed opensandbox 0.1.0" in out
    return str(home)


def test_install_list_doctor(home):
    listed = demo.host(home, "list").stdout
    assert re.search(
        r"opensandbox\s+0\.1\.0\s+exec\s+local\s+sandbox\(lifecycle,timeout,pause\) exec\(run,stream\) "
        r"process\(manage\) pty files\(rw\) ports\(url\) sessions",
        listed,
    ), listed
    doctor = demo.host(home, "doctor", "opensandbox")
    lines = [ln.split() for ln in doctor.stdout.strip().splitlines()]
    assert [(ln[0], ln[1].rstrip(":")) for ln in lines] == [
        ("ok", "installed"),
        ("ok", "integrity"),
        ("ok", "config"),
        ("ok", "handshake"),
    ], doctor.stdout
    as_json = json.loads(demo.host(home, "--json", "doctor", "opensandbox").stdout)
    assert (
        as_json["ok"] is True
        and [c["name"] for c in as_json["checks"]] == ["installed", "integrity", "config", "handshake"]
        and all(c["ok"] for c in as_json["checks"])
    )
    # the installed tree is untouched by running the plugin (integrity is re-hashed at every start)
    assert not os.path.exists(os.path.join(home, ".abx", "providers", "opensandbox", "__pycache__"))


@pytest.mark.parametrize("mode", ["v1.1.0", "latest"])
def test_contract_kit_18_of_18(home, mode):
    with MockOpenSandbox(execd_mode=mode) as osb:
        assert_18_of_18(home, osb.base_url, osb.api_key)
        left = [sid for sid, sb in osb.sandboxes.items() if not getattr(sb, "deleted", False)]
    assert left == [], "the kit's sandboxes were all deleted"


def test_config_from_env_and_aliases(home, tmp_path):
    """Configuration the way users set it: the OpenSandbox-native env alias for the API key and the
    canonical ABX_OPENSANDBOX_* variable, coerced by the host, then by the plugin."""
    script = (
        "import asyncio, sys\n"
        "from agent_sandbox import ProviderSandbox as S\n"
        "async def main():\n"
        "    sb = await S.create(provider='opensandbox', timeout=120)\n"
        "    r = await sb.commands.run('echo env-configured')\n"
        "    print(sb.info.template, r.stdout.strip())\n"
        "    await sb.kill()\n"
        "asyncio.run(main())\n"
    )
    with MockOpenSandbox() as osb:
        env = {
            **demo.host_env(home),
            "OPEN_SANDBOX_API_KEY": osb.api_key,
            "ABX_OPENSANDBOX_BASE_URL": osb.base_url,
            "ABX_OPENSANDBOX_DEFAULT_IMAGE": "python:3.11-slim",
        }
        import subprocess

        proc = subprocess.run(
            [sys.executable, "-c", script], env=env, cwd=home, capture_output=True, text=True, timeout=120
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split() == ["python:3.11-slim", "env-configured"]


def test_code_alias_from_local_up_env_and_run_code(home, tmp_path):
    """The `code` template through the host with local-up's env line (OSB_WITH_CODE_INTERPRETER=1 prints
    ABX_OPENSANDBOX_IMAGE_ALIASES=code=<its image>): the sandbox gets that image with its entrypoint (its
    Jupyter answers; the mock plays it with a pip-made env), commands run in it, and the
    host's run_code stops at the host for an exec provider (E8004 code.execute; epp-host-reference §4)."""
    script = (
        "import asyncio\n"
        "from agent_sandbox import ProviderSandbox as S\n"
        "async def main():\n"
        "    sb = await S.create(provider='opensandbox', template='code', timeout=120)\n"
        "    try:\n"
        "        r = await sb.commands.run('for i in $(seq 100); do c=$(curl -s -o /dev/null -w %{http_code} '\n"
        "                                  '\"$JUPYTER_HOST/api\"); [ $c = 200 ] && break; sleep 0.1; done; echo in-code $c')\n"
        "        print(sb.info.template, r.stdout.strip())\n"
        "        try:\n"
        "            await sb.run_code('print(1)')\n"
        "        except Exception as exc:\n"
        "            print(type(exc).__name__, getattr(exc, 'code', ''), 'code.execute' in str(exc))\n"
        "    finally:\n"
        "        await sb.kill()\n"
        "asyncio.run(main())\n"
    )
    import subprocess

    work = tmp_path / "local-up"
    work.mkdir()
    (work / "api-key").write_text("k\n")
    line = subprocess.run(
        ["./local-up.sh", "env"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": os.environ["PATH"],
            "HOME": str(tmp_path),
            "OSB_WORKDIR": str(work),
            "OSB_LOCAL_IMAGES": "1",
            "OSB_WITH_CODE_INTERPRETER": "1",
        },
    ).stdout
    aliases = next(
        ln.split("=", 1)[1] for ln in line.splitlines() if ln.startswith("export ABX_OPENSANDBOX_IMAGE_ALIASES=")
    )
    assert aliases == "code=local/code-interpreter:py-bash", line
    from tiers.toolkit.jupyter import jupyter_env_or_skip

    # the plugin creates a code-interpreter image with its entrypoint (plugin/methods/sandbox.py): the env plays it here
    with MockOpenSandbox(jupyter_env=jupyter_env_or_skip()) as osb:
        env = {
            **demo.host_env(home),
            "OPEN_SANDBOX_API_KEY": osb.api_key,
            "ABX_OPENSANDBOX_BASE_URL": osb.base_url,
            "ABX_OPENSANDBOX_IMAGE_ALIASES": aliases,
        }
        proc = subprocess.run(
            [sys.executable, "-c", script], env=env, cwd=home, capture_output=True, text=True, timeout=120
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    first, second = proc.stdout.strip().splitlines()
    assert first.split() == ["local/code-interpreter:py-bash", "in-code", "200"]  # the image's Jupyter answers
    assert second.split()[1:] == ["E8004", "True"], second
