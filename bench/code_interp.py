"""Code-interpreter costs: ``python -m bench.code_interp [--rounds N] [--out FILE]``.

On the in-process mock with a pip-made Jupyter env (tiers/toolkit/jupyter.py), or on a live server with
OPENSANDBOX_BASE_URL / OPENSANDBOX_API_KEY and OPENSANDBOX_CODE_INTERPRETER_IMAGE (local-up's image):

* ready: create a code-interpreter sandbox with the image's entrypoint -> ``CodeInterpreterSync.create`` ->
  a first ``print(1)`` answered;
* context create: ``POST /code/context {"language": "python"}``;
* ``print(1)`` round trip: ``POST /code`` on one context, the whole SSE stream read, against its floor: a
  direct Jupyter client on the same kernel over its channels WebSocket (connect, ``execute_request``, the
  reply and the idle status of that request, close: what execd does per run), run inside the sandbox (where
  Jupyter listens, 127.0.0.1:44771) by one command per round that times its own runs, interleaved round by
  round with the /code runs. Both with execd's default idle poll (100 ms) and with
  EXECD_JUPYTER_IDLE_POLL_INTERVAL=1ms in the sandbox's env (the poll is execd's, on the mock as on live:
  QUIRKS.md "/code with Jupyter"). ``stdout_lost`` counts runs whose stream ended before the kernel's
  ``1\n`` came (the reply's count can arrive first; a short poll makes that likelier, on execd too).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from datetime import timedelta
from typing import Any

import httpx

FLOOR = r"""
import asyncio, json, sys, time, urllib.request, uuid
from tornado.websocket import websocket_connect
TOKEN, SID, N = sys.argv[1], sys.argv[2], int(sys.argv[3])
base = "127.0.0.1:44771"
sessions = json.load(urllib.request.urlopen("http://%s/api/sessions?token=%s" % (base, TOKEN)))
kid = next(s["kernel"]["id"] for s in sessions if s["id"] == SID)
async def one():
    t = time.perf_counter()
    ws = await websocket_connect("ws://%s/api/kernels/%s/channels?token=%s" % (base, kid, TOKEN))
    mid = uuid.uuid4().hex
    await ws.write_message(json.dumps({"header": {"msg_id": mid, "username": "bench", "session": uuid.uuid4().hex,
        "msg_type": "execute_request", "version": "5.3", "date": ""}, "parent_header": {}, "metadata": {},
        "content": {"code": "print(1)", "silent": False, "store_history": True, "user_expressions": {},
        "allow_stdin": False, "stop_on_error": True}, "channel": "shell", "buffers": []}))
    reply = idle = False
    while not (reply and idle):
        m = json.loads(await ws.read_message())
        if (m.get("parent_header") or {}).get("msg_id") != mid:
            continue
        kind = m["header"]["msg_type"]
        reply = reply or kind == "execute_reply"
        idle = idle or (kind == "status" and m["content"]["execution_state"] == "idle")
    ws.close()
    return time.perf_counter() - t
async def main():
    print(json.dumps([await one() for _ in range(N)]))
asyncio.run(main())
"""
ENTRYPOINT = ["/opt/code-interpreter/code-interpreter.sh"]
TOKEN = "opensandboxcodeinterpreterjupyter"


def _ms(xs: list[float]) -> float:
    return round(statistics.median(xs) * 1000, 2)


def _sandbox(base: str, key: str, image: str, env: dict[str, str]) -> tuple[Any, Any, float]:
    from code_interpreter.sync import CodeInterpreterSync
    from opensandbox.config.connection_sync import ConnectionConfigSync
    from opensandbox.sync import SandboxSync

    cfg = ConnectionConfigSync(
        api_key=key, domain=base.split("://", 1)[-1].rstrip("/"), protocol="http", request_timeout=timedelta(seconds=60)
    )
    t = time.perf_counter()
    sb = SandboxSync.create(image, connection_config=cfg, entrypoint=ENTRYPOINT, env=env, timeout=timedelta(minutes=10))
    ci = CodeInterpreterSync.create(sb, ready_timeout=timedelta(seconds=60))
    ex = ci.codes.run("print(1)")
    assert "".join(m.text for m in ex.logs.stdout) == "1\n", ex
    return sb, ci, time.perf_counter() - t


def measure(base: str, key: str, image: str, python: str, rounds: int, per: int, poll: str | None) -> dict:
    env = {"EXECD_JUPYTER_IDLE_POLL_INTERVAL": poll} if poll else {}
    sb, _ci, ready = _sandbox(base, key, image, env)
    try:
        url = "http://" + sb.get_endpoint(44772).endpoint
        hdrs = dict(sb.get_endpoint(44772).headers or {})
        with httpx.Client(timeout=60, headers=hdrs) as c:
            creates = []
            for _ in range(per):
                t = time.perf_counter()
                r = c.post(url + "/code/context", json={"language": "python"})
                creates.append(time.perf_counter() - t)
                c.delete(url + "/code/contexts/" + r.json()["id"])
            cid = c.post(url + "/code/context", json={"language": "python"}).json()["id"]
            body = {"code": "print(1)", "context": {"id": cid, "language": "python"}}
            ours: list[float] = []
            floor: list[float] = []
            lost = 0
            for _ in range(rounds):
                ex = sb.commands.run("%s -c '%s' %s %s %d" % (python, FLOOR.replace("'", "'\\''"), TOKEN, cid, per))
                out = "".join(m.text for m in ex.logs.stdout).strip()
                floor += json.loads(out.splitlines()[-1]) if out else []
                for _ in range(per):
                    time.sleep(0.02)  # past execd's lock release after the previous stream
                    t = time.perf_counter()
                    with c.stream("POST", url + "/code", json=body) as r:
                        raw = b"".join(r.iter_bytes())
                    ours.append(time.perf_counter() - t)
                    lost += b'"text":"1\\n"' not in raw  # the stream ended before the kernel's stream message
        return {
            "idle_poll": poll or "100ms (default)",
            "ready_s": round(ready, 2),
            "context_create_ms": _ms(creates),
            "code_ms": _ms(ours),
            "floor_ms": _ms(floor) if floor else None,
            "ratio": round(_ms(ours) / _ms(floor), 2) if floor else None,
            "n": len(ours),
            "stdout_lost": lost,
        }
    finally:
        sb.kill()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.code_interp")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--per", type=int, default=10)
    p.add_argument("--out")
    a = p.parse_args(argv)
    base, key = os.environ.get("OPENSANDBOX_BASE_URL"), os.environ.get("OPENSANDBOX_API_KEY", "")
    image = os.environ.get("OPENSANDBOX_CODE_INTERPRETER_IMAGE", "local/code-interpreter:py-bash")
    osb = None
    if base:
        target, python = "live " + base, "python3"
        base = base[:-3] if base.rstrip("/").endswith("/v1") else base
    else:
        sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        from mock_opensandbox import MockOpenSandbox
        from tiers.toolkit.jupyter import jupyter_env_or_skip

        env = jupyter_env_or_skip()
        osb = MockOpenSandbox(jupyter_env=env, execd_close_delay=0.0).start()
        base, key, target, python = osb.base_url, osb.api_key or "", "mock", os.path.join(env, "bin", "python")
    try:
        rows = [measure(base, key, image, python, a.rounds, a.per, poll) for poll in (None, "1ms")]
    finally:
        if osb is not None:
            osb.stop()
    res = {"target": target, "image": image, "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "rows": rows}
    print(json.dumps(res, indent=1))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
