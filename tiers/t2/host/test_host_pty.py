"""Terminals through the real host: agent_sandbox.ProviderSandbox(...).get_terminal() with the plugin
installed into a temporary HOME, against the mock's execd PTY."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import demo
from mock_opensandbox.server import MockOpenSandbox

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

FLOW = r"""
import asyncio, json, os
from agent_sandbox import ProviderSandbox as Sandbox

OPTS = {"base_url": os.environ["OSB_URL"], "api_key": os.environ["OSB_KEY"]}
seen = {}

async def until(term, needle, limit=15.0):
    buf = b""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit
    while needle not in buf:
        left = end - loop.time()
        if left <= 0:
            raise AssertionError("%r not seen in %r" % (needle, buf[-300:]))
        buf += await term.receive(timeout=left)
    return buf

async def main():
    sb = await Sandbox.create(provider="opensandbox", provider_options=OPTS, timeout=600)
    try:
        term = await sb.get_terminal(cols=100, rows=30)
        await term.send("echo $((6*7))\n")
        await until(term, b"42")
        await term.resize(120, 40)
        await term.send("stty size\n")
        await until(term, b"40 120")
        await term.send("sleep 100\n")
        await asyncio.sleep(0.5)
        await term.send("\x03")  # SIGINT ignored in the shell's jobs, as live (QUIRKS "SIGINT of a PTY shell ...")
        await until(term, b"^C")
        await asyncio.sleep(0.3)
        await term.send("\x1c")  # Ctrl-\: SIGQUIT stops it, 128 + 3
        await term.send("echo rc=$?\n")
        await until(term, b"rc=131")
        await term.send("exit 3\n")
        closed = False
        try:
            while True:
                await term.receive(timeout=10)
        except Exception as exc:
            seen["end"] = type(exc).__name__
        seen["connected_after_exit"] = term.is_connected
        seen["ok"] = True
    finally:
        await sb.kill()
    print(json.dumps(seen))

asyncio.run(main())
"""


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    home = tmp_path_factory.mktemp("pty-home")
    demo.install_plugin(str(home))
    return str(home)


def test_get_terminal_through_the_host(home):
    with MockOpenSandbox(execd_mode="latest", execd_close_delay=0.0) as osb:
        env = {**demo.host_env(home), "OSB_URL": osb.base_url, "OSB_KEY": osb.api_key}
        proc = subprocess.run(
            [sys.executable, "-c", FLOW], env=env, cwd=home, capture_output=True, text=True, timeout=180
        )
    assert proc.returncode == 0, proc.stderr[-4000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["ok"] is True
    assert seen["connected_after_exit"] is False  # pty.exit ended the host's terminal stream
