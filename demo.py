#!/usr/bin/env python3
"""`make demo`: the OpenSandbox provider end to end, offline.

1. starts the embedded mock OpenSandbox (mock_opensandbox.server.MockOpenSandbox) on 127.0.0.1;
2. installs ./plugin with the real Agent Sandbox host into a throw-away HOME
   (`python -m agent_sandbox.providers install <copy of plugin> --yes`) and runs `doctor`;
3. runs create -> run -> stream -> files write/read -> pause/resume -> ports -> terminal -> kill through
   agent_sandbox.ProviderSandbox, printing each step;
4. removes everything it made (sandboxes, HOME, the mock's root).

The host reads ~ once, at import time, so step 3 runs in a child process whose HOME is the
temporary one (`python demo.py --flow`).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.abspath(__file__))
PROVIDER = "opensandbox"


def host_env(home: str) -> dict:
    """A clean environment for the host: the temporary HOME, no ABX_* / provider variables."""
    keep = ("PATH", "LANG", "LC_ALL", "TMPDIR", "SYSTEMROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update({"HOME": home, "USERPROFILE": home, "PYTHONDONTWRITEBYTECODE": "1"})
    return env


def host(home: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    """Run `python -m agent_sandbox.providers <args>` as a user with this HOME would."""
    proc = subprocess.run(
        [sys.executable, "-m", "agent_sandbox.providers", *args],
        env=host_env(home),
        cwd=home,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if check and proc.returncode != 0:
        raise RuntimeError(f"`{' '.join(args[:2])}` failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc


def install_plugin(home: str) -> str:
    """Install a copy of ./plugin (the installer refuses symlinks and a top-level data/)."""
    src = os.path.join(home, "opensandbox-plugin")
    shutil.copytree(os.path.join(REPO, "plugin"), src, ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "data"))
    return host(home, "install", src, "--yes").stdout.strip()


async def flow(base_url: str, api_key: str | None, say=print) -> None:
    from agent_sandbox import ProviderSandbox as Sandbox

    options = {"base_url": base_url}
    if api_key:
        options["api_key"] = api_key
    started = time.monotonic()
    sb = await Sandbox.create(provider=PROVIDER, provider_options=options, metadata={"demo": "make-demo"})
    try:
        say(
            f"create    {sb.id}  status={sb.status.value}  template={sb.info.template}  "
            f"({time.monotonic() - started:.2f}s)"
        )
        res = await sb.commands.run("echo hello from OpenSandbox")
        say(f"run       exit={res.exit_code}  stdout={res.stdout!r}")
        res = await sb.commands.run("echo oops >&2; exit 3", shell=True)
        say(f"run       exit={res.exit_code}  stderr={res.stderr!r}")
        say("stream    for i in 1 2 3; do echo tick $i; sleep 0.2; done; exit 4")
        async for chunk in sb.commands.stream("for i in 1 2 3; do echo tick $i; sleep 0.2; done; exit 4"):
            if chunk.type.value == "exit":
                say(f"            exit {chunk.exit_code}")
            else:
                say(f"            {chunk.type.value}: {chunk.data!r}")
        await sb.files.write("/tmp/demo.txt", "h\u00e9llo \u4e16\u754c\n")
        say(f"files     wrote /tmp/demo.txt, read back {await sb.files.read('/tmp/demo.txt')!r}")
        blob = bytes(range(256)) * 16
        await sb.files.write("/tmp/demo.bin", blob)
        same = await sb.files.read_bytes("/tmp/demo.bin") == blob
        names = sorted(e.name for e in await sb.files.list("/tmp") if e.name.startswith("demo"))
        say(f"files     4 KiB binary round trip identical={same}; /tmp has {names}")
        await sb.pause()
        await sb.refresh_info()
        say(f"pause     status={sb.status.value}")
        await sb.resume()
        await sb.refresh_info()
        res = await sb.commands.run("echo back after resume")
        say(f"resume    status={sb.status.value}  run: {res.stdout.strip()!r}")
        url = await sb.network.resolve_url(8080)
        say(f"ports     port 8080 -> {url}")
        term = await sb.get_terminal(cols=100, rows=30)  # execd's PTY over its WebSocket
        await term.send("stty size; echo answer=$((6*7))\n")
        seen = b""
        loop = asyncio.get_running_loop()
        end = loop.time() + 15
        while b"answer=42" not in seen and loop.time() < end:
            seen += await term.receive(timeout=max(0.1, end - loop.time()))
        await term.send("exit\n")
        size = "30 100" if b"30 100" in seen else "?"
        say(f"terminal  stty size -> {size}; echo $((6*7)) -> {'42' if b'answer=42' in seen else '?'}")
    finally:
        sandbox_id = sb.id
        await sb.kill()
    listed = await Sandbox.list(provider=PROVIDER, provider_options=options)
    say(f"kill      {sandbox_id} gone={sandbox_id not in {i.sandbox_id for i in listed}}")


def main() -> int:
    if sys.argv[1:2] == ["--flow"]:
        asyncio.run(flow(os.environ["DEMO_BASE_URL"], os.environ.get("DEMO_API_KEY")))
        return 0

    sys.path.insert(0, REPO)
    from mock_opensandbox.server import MockOpenSandbox

    home = tempfile.mkdtemp(prefix="osb-demo-home-")
    try:
        with MockOpenSandbox() as osb:
            print(f"mock      OpenSandbox mock listening on {osb.base_url} (execd {osb.execd_mode})")
            print(f"install   {install_plugin(home)}  (HOME={home})")
            doctor = host(home, "doctor", PROVIDER).stdout.strip().splitlines()
            print("doctor    " + " | ".join(line.strip() for line in doctor))
            env = {**host_env(home), "DEMO_BASE_URL": osb.base_url, "DEMO_API_KEY": osb.api_key or ""}
            sys.stdout.flush()
            rc = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--flow"], env=env, cwd=home, timeout=600
            ).returncode
            if rc != 0:
                print(f"demo      FAILED (exit {rc})", file=sys.stderr)
                return rc
            left = [sid for sid, sb in osb.sandboxes.items() if not getattr(sb, "deleted", False)]
            print(f"cleanup   sandboxes left on the mock: {len(left)}")
    finally:
        shutil.rmtree(home, ignore_errors=True)
    print("demo      OK")
    return 0


if __name__ == "__main__":
    sys.exit(main())
