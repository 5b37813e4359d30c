"""The whole flow, create -> run -> write -> read -> kill, through the real host and through the SDK.

Run by ``python -m bench`` in a subprocess whose HOME holds the installed plugin:

    HOME=<tmp> ABX_OPENSANDBOX_BASE_URL=... python -m bench.flow --n 5 --warmup 1 [--sdk-shipped 2]

Sides, interleaved round by round:

* ``host``: ``agent_sandbox.ProviderSandbox`` with provider "opensandbox" (one plugin process per
  Sandbox object; the host re-hashes the installed tree before starting it).
* ``sdk``: the official ``opensandbox`` SDK (``SandboxSync``). Its foreground ``commands.run`` reads
  the SSE body to its end, so against a server that keeps the stream open ~1 s after the last event
  it waits that second. For a like-for-like number this side asks the orchestrator (a line on
  stdout, answered on stdin) to set the close delay of ITS sandbox's execd to 0; the plugin stops at
  the terminal event and never waits for it.
* ``sdk_shipped`` (optional): the SDK against the server's default close delay, what an SDK user
  really waits.
* ``host_shim`` (optional): the host with the caller's original PATH, when `python3` there is not the
  interpreter itself (a pyenv shim costs ~0.1-0.25 s per plugin start on this machine).

Prints JSON lines on stdout: control requests ``{"control": ...}`` and finally ``{"result": ...}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time

PAYLOAD = (b"bench flow payload \xe2\x9c\x93\n" * 200)[:4096]
IMAGE = os.environ.get("OPENSANDBOX_IMAGE") or "python:3.12-slim"  # the image knob (./local-up.sh env)
_OUT = sys.stdout


def emit(obj: dict) -> None:
    _OUT.write(json.dumps(obj) + "\n")
    _OUT.flush()


def control(request: dict) -> str:
    """Ask the orchestrator for something (outside the timed span); returns its one-line answer."""
    emit({"control": request})
    return sys.stdin.readline().strip()


class Steps:
    def __init__(self) -> None:
        self.t = time.perf_counter()
        self.start = self.t
        self.steps: dict = {}
        self.paused = 0.0

    def mark(self, name: str) -> None:
        now = time.perf_counter()
        self.steps[name] = now - self.t
        self.t = now

    def pause(self, fn):
        t = time.perf_counter()
        try:
            return fn()
        finally:
            d = time.perf_counter() - t
            self.paused += d
            self.t += d

    def total(self) -> float:
        return time.perf_counter() - self.start - self.paused


EPP_CALLS: list = []


def instrument_host() -> None:
    """Time the host's EPP client calls (spawn + initialize, each request, close) and its integrity
    check, so each flow step splits into plugin round trips and the host's own work."""
    from agent_sandbox.providers import epp, store

    def timed(label_of, fn, is_async=True):
        if is_async:

            async def wrapper(*a, **k):
                t = time.perf_counter()
                try:
                    return await fn(*a, **k)
                finally:
                    EPP_CALLS.append((label_of(a, k), time.perf_counter() - t))
        else:

            def wrapper(*a, **k):
                t = time.perf_counter()
                try:
                    return fn(*a, **k)
                finally:
                    EPP_CALLS.append((label_of(a, k), time.perf_counter() - t))

        return wrapper

    epp.EppClient.start = timed(lambda a, k: "spawn+initialize", epp.EppClient.start)
    epp.EppClient.close = timed(lambda a, k: "close (shutdown, exit)", epp.EppClient.close)
    epp.EppClient.call = timed(lambda a, k: str(a[1] if len(a) > 1 else k.get("method")), epp.EppClient.call)
    store.verify_integrity = timed(lambda a, k: "verify_integrity", store.verify_integrity, is_async=False)


async def host_flow() -> dict:
    from agent_sandbox import ProviderSandbox

    EPP_CALLS.clear()
    s = Steps()
    sbx = await ProviderSandbox.create(provider="opensandbox", timeout=600)
    s.mark("create")
    try:
        res = await sbx.commands.run("true")
        if getattr(res, "exit_code", None) != 0:
            raise RuntimeError(f"run: {res!r}")
        s.mark("run")
        await sbx.files.write("/tmp/flow.bin", PAYLOAD)
        s.mark("write")
        got = await sbx.files.read_bytes("/tmp/flow.bin")
        if got != PAYLOAD:
            raise RuntimeError("read back different bytes")
        s.mark("read")
    finally:
        await sbx.kill()
    s.mark("kill")
    calls: dict = {}
    for label, took in EPP_CALLS:
        if label in ("initialize", "shutdown"):
            continue  # inside spawn+initialize / close
        calls[label] = calls.get(label, 0.0) + took
    return {"total": s.total(), "steps": s.steps, "epp_calls": calls}


def sdk_config():
    os.environ.setdefault("OPENSANDBOX_DISABLE_METRICS", "1")
    from opensandbox.config.connection_sync import ConnectionConfigSync

    scheme, rest = os.environ["ABX_OPENSANDBOX_BASE_URL"].split("://", 1)
    return ConnectionConfigSync(
        domain=rest.rstrip("/"),
        protocol=scheme,
        api_key=os.environ.get("ABX_OPENSANDBOX_API_KEY") or None,
        disable_metrics=True,
    )


def sdk_flow(fair: bool) -> dict:
    from datetime import timedelta

    from opensandbox.sync.sandbox import SandboxSync

    s = Steps()
    sb = SandboxSync.create(IMAGE, connection_config=sdk_config(), timeout=timedelta(minutes=10))
    s.mark("create")
    try:
        if fair:
            s.pause(lambda: control({"close_delay": 0.0, "sandbox_id": sb.id}))
        ex = sb.commands.run("true")
        if ex.exit_code != 0:
            raise RuntimeError(f"run: exit {ex.exit_code}")
        s.mark("run")
        sb.files.write_file("/tmp/flow.bin", PAYLOAD)
        s.mark("write")
        if sb.files.read_bytes("/tmp/flow.bin") != PAYLOAD:
            raise RuntimeError("read back different bytes")
        s.mark("read")
    finally:
        sb.kill()
        sb.close()
    s.mark("kill")
    return {"total": s.total(), "steps": s.steps}


def import_times() -> dict:
    t = time.perf_counter()
    import agent_sandbox  # noqa: F401 - imported to time the import
    from agent_sandbox import ProviderSandbox  # noqa: F401 - imported to time the import
    from agent_sandbox.providers import registry  # noqa: F401 - imported to time the import

    host = time.perf_counter() - t
    t = time.perf_counter()
    from opensandbox.sync.sandbox import SandboxSync  # noqa: F401 - imported to time the import

    sdk = time.perf_counter() - t
    return {"host": host, "sdk": sdk}


def integrity_times(n: int = 10) -> list:
    from agent_sandbox.providers import store

    out = []
    for _ in range(n):
        t = time.perf_counter()
        store.verify_integrity("opensandbox")
        out.append(time.perf_counter() - t)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--sdk-shipped", type=int, default=0)
    ap.add_argument(
        "--shim-n",
        type=int,
        default=0,
        help="extra host flows with PATH set to --shim-path (python3 there is e.g. a pyenv shim)",
    )
    ap.add_argument("--shim-path", default="")
    ap.add_argument("--home-b", default="", help="HOME with a candidate plugin installed (bench --compare)")
    args = ap.parse_args()
    sys.stdout = sys.stderr
    imports = import_times()
    instrument_host()
    sides = {"host": lambda: asyncio.run(host_flow()), "sdk": lambda: sdk_flow(True)}
    if args.home_b:

        def host_b() -> dict:
            # the host finds installed providers under $HOME at every call (nothing is cached)
            os.environ["HOME"], saved = args.home_b, os.environ["HOME"]
            try:
                return asyncio.run(host_flow())
            finally:
                os.environ["HOME"] = saved

        sides["host_b"] = host_b
    for _ in range(args.warmup):
        for fn in sides.values():
            fn()
    runs: dict = {name: [] for name in sides}
    for _ in range(args.n):
        for name, fn in sides.items():
            runs[name].append(fn())
    if args.sdk_shipped:
        runs["sdk_shipped"] = [sdk_flow(False) for _ in range(args.sdk_shipped)]
    if args.shim_n and args.shim_path:
        # the host resolves `python3` on PATH at every plugin start (scrubbed_env reads os.environ)
        os.environ["PATH"], saved = args.shim_path, os.environ["PATH"]
        try:
            runs["host_shim"] = [asyncio.run(host_flow()) for _ in range(args.shim_n)]
        finally:
            os.environ["PATH"] = saved
    emit({"result": {"runs": runs, "imports": imports, "integrity": integrity_times()}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
