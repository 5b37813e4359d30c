"""What a bench job measures with: the sides (the plugin's driver, the direct stdlib client, the official SDK:
``Clients``), their interleaving, the echo hop, the sampling profiler and its summary. Used by bench/worker.py,
in the worker process."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time

from bench import direct
from tiers.toolkit.epp import PLUGIN, Plugin

TRUE_CMD = "true"


def stream_command(nbytes: int) -> str:
    return f"head -c {nbytes} /dev/zero | tr '\\0' 'a' | fold -w 100"


# --------------------------------------------------------------------------- helpers


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def proc_cpu(pid: int) -> float:
    """User + system CPU seconds of a process (Linux /proc; 0.0 elsewhere)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return 0.0


def interleave(sides: dict, n: int, warmup: int, cpu: dict | None = None, pids: dict | None = None) -> dict:
    """Run each side's callable ``warmup`` times, then n rounds of one run each, in an order shuffled every
    round (seeded: the same order in every bench run): what one side's run leaves behind (a command's
    reaping, the server's close of its stream) falls on whichever side runs next, so in a fixed order one
    side would always pay for the same other side. Returns seconds per side.
    With ``cpu`` (a dict to fill), also the CPU seconds each run cost: this worker process (the driver or
    the direct client / SDK) and, for sides in ``pids``, the plugin process."""
    for _ in range(warmup):
        for fn in sides.values():
            fn()
    out = {name: [] for name in sides}
    names, order = list(sides), random.Random(len(sides) * 1000 + n)
    for _ in range(n):
        order.shuffle(names)
        for name in names:
            fn = sides[name]
            pid = (pids or {}).get(name)
            c0, p0 = time.process_time(), (proc_cpu(pid) if pid else 0.0)
            out[name].append(_timed(fn))
            if cpu is not None:
                rec = cpu.setdefault(name, {"client_s": [], "plugin_s": []})
                rec["client_s"].append(time.process_time() - c0)
                if pid:
                    rec["plugin_s"].append(proc_cpu(pid) - p0)
    return out


def _sdk_config(target: dict):
    os.environ.setdefault("OPENSANDBOX_DISABLE_METRICS", "1")
    from opensandbox.config.connection_sync import ConnectionConfigSync

    base = target["base_url"].split("://", 1)
    return ConnectionConfigSync(
        domain=base[1].rstrip("/"), protocol=base[0], api_key=target.get("api_key"), disable_metrics=True
    )


def _sdk_connect(target: dict, sid: str):
    from opensandbox.sync.sandbox import SandboxSync

    return SandboxSync.connect(sid, connection_config=_sdk_config(target))


def plugin_config(target: dict) -> dict:
    cfg = {"base_url": target["base_url"]}
    if target.get("api_key"):
        cfg["api_key"] = target["api_key"]
    if os.environ.get("OPENSANDBOX_IMAGE"):  # the image knob: template "base" -> the server's local image
        cfg["default_image"] = os.environ["OPENSANDBOX_IMAGE"]
    return cfg


class Clients:
    """Lazily opened clients of one job, all closed at the end."""

    def __init__(self, target: dict, tmp: str):
        self.target, self.tmp = target, tmp
        self._plugins: list[Plugin] = []
        self._closers: list = []
        self._profilers: list = []
        self.pids: dict = {}  # side -> plugin pid (for CPU accounting)

    def plugin(self, profile: str | None = None, side: str = "epp") -> Plugin:
        """side "epp": the plugin under test; "epp_b": the --compare candidate."""
        path = self.target.get("plugin_b") if side == "epp_b" else self.target.get("plugin")
        p = Plugin(
            self.target["python"],
            os.path.join(self.tmp, f"data{len(self._plugins)}"),
            plugin_config(self.target),
            plugin=path or PLUGIN,
        )
        self._plugins.append(p)
        self.pids[side] = p.proc.pid
        if profile:
            self._profilers.append(Profiler(p.proc.pid, profile))
        return p

    def stop_profilers(self) -> list:
        out = [prof.stop() for prof in self._profilers]
        self._profilers = []
        return out

    def direct(self, sid: str) -> direct.Execd:
        lc = direct.Lifecycle(self.target["base_url"], self.target.get("api_key"))
        url, headers = lc.execd(sid)
        lc.close()
        ex = direct.Execd(url, headers)
        self._closers.append(ex.close)
        return ex

    def echo(self) -> EchoHop:
        hop = EchoHop(self.target["python"])
        self._closers.append(hop.close)
        return hop

    def sdk(self, sid: str):
        sb = _sdk_connect(self.target, sid)
        self._closers.append(sb.close)
        return sb

    def close(self) -> None:
        self.stop_profilers()
        for p in self._plugins:
            p.close()
        for fn in self._closers:
            try:
                fn()
            except Exception:  # noqa: BLE001 - closing what is left; the job's result stands
                pass


# The EPP hop at its floor: a process that answers an exec.start line with the answer and the
# exec.exit notification, decoding and encoding JSON like any EPP plugin must, and nothing else.
ECHO_SRC = r"""
import base64, json, sys
r, w = sys.stdin.buffer, sys.stdout.buffer
for line in iter(r.readline, b""):
    msg = json.loads(line)
    if msg.get("method") == "files.write":      # the plugin's side of a files.write line
        base64.b64decode(msg["params"]["content_b64"], validate=True)
        w.write(b'{"ok":1}\n')
    elif "result" in msg:                        # the host's side of a files.read answer
        base64.b64decode(msg["result"]["content_b64"])
        w.write(b'{"ok":1}\n')
    else:
        rid = msg["id"]
        w.write(json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"process_id": "p"}}).encode() + b"\n")
        w.write(json.dumps({"jsonrpc": "2.0", "method": "exec.exit", "params": {"process_id": "p",
                                                                               "exit_code": 0}}).encode() + b"\n")
    w.flush()
"""


class EchoHop:
    """One EPP exchange with an echo process (``python -S``, warm): the pipe + JSON cost of EPP."""

    def __init__(self, python: str):
        self.proc = subprocess.Popen(
            [python, "-S", "-c", ECHO_SRC], stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=1 << 16
        )
        self._id = 0

    def exchange(self, sandbox_id: str) -> None:
        self._id += 1
        self.proc.stdin.write(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": self._id,
                    "method": "exec.start",
                    "params": {
                        "sandbox_id": sandbox_id,
                        "cmd": TRUE_CMD,
                        "args": [],
                        "env": {},
                        "cwd": "",
                        "user": "",
                        "timeout": 300,
                    },
                }
            ).encode()
            + b"\n"
        )
        self.proc.stdin.flush()
        for _ in range(2):
            json.loads(self.proc.stdout.readline())

    def carry(self, line: bytes) -> None:
        """One files line through the pipe to the other end, which parses it and decodes its base64."""
        self.proc.stdin.write(line + b"\n")
        self.proc.stdin.flush()
        json.loads(self.proc.stdout.readline())

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=10)
        self.proc.stdout.close()


class Profiler:
    """py-spy attached to a plugin process (``--profile``): raw collapsed stacks, then a summary."""

    def __init__(self, pid: int, path: str, rate: int = 250):
        self.path = path
        exe = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
        self.proc = subprocess.Popen(
            [
                exe,
                "record",
                "--pid",
                str(pid),
                "--format",
                "raw",
                "--nolineno",
                "--rate",
                str(rate),
                "--nonblocking",
                "--threads",
                "-o",
                path,
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        time.sleep(0.3)  # let it attach before the measured work starts

    def stop(self) -> dict:
        import signal

        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            _, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        if not os.path.exists(self.path):
            return {"path": self.path, "error": (err or b"").decode(errors="replace")[-500:]}
        return {"path": self.path, **summarise_stacks(self.path)}


def summarise_stacks(path: str, top: int = 25) -> dict:
    """Collapsed stacks ("frame;frame;... count") -> total samples, top self and inclusive frames."""
    total = 0
    self_c: dict = {}
    incl: dict = {}
    with open(path, encoding="utf-8", errors="replace") as fh:
        for line in fh:
            stack, _, count = line.rstrip("\n").rpartition(" ")
            if not count.isdigit():
                continue
            n = int(count)
            frames = [f for f in stack.split(";") if f and not f.startswith(("thread (", "process "))]
            if not frames:
                continue
            total += n
            self_c[frames[-1]] = self_c.get(frames[-1], 0) + n
            for f in set(frames):
                incl[f] = incl.get(f, 0) + n

    def pick(d):
        return [
            {"frame": k, "samples": v, "share": round(v / total, 4) if total else 0}
            for k, v in sorted(d.items(), key=lambda kv: -kv[1])[:top]
        ]

    return {"samples": total, "top_self": pick(self_c), "top_inclusive": pick(incl)}


# --------------------------------------------------------------------------- jobs
