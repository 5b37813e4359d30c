"""The client side of every measurement, in its own process.

The mock runs in the orchestrator's process (``python -m bench``). Every client -- the plugin's
driver, the direct stdlib client, the official SDK -- runs here, so no client shares a GIL with the
server it measures and all of them are in the same position. Jobs arrive as JSON lines on stdin,
results leave as JSON lines on stdout (nothing else is printed there).

Within a job the sides are interleaved (A B C A B C ...), so a change in machine load hits every
side alike.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback

from bench import direct
from bench.sides import TRUE_CMD, Clients, interleave, plugin_config, stream_command
from tiers.toolkit.epp import PLUGIN, host_env, init_params, interpreter_flags, plugin_argv


def job_cold_start(job: dict, target: dict, tmp: str) -> dict:
    """Spawn the plugin + initialize -> answer, versus `python -c pass`, same interpreter and env."""
    python, n, warmup = job["python"], job["n"], job["warmup"]
    data_dir = os.path.join(tmp, "cold")
    os.makedirs(data_dir, exist_ok=True)
    env = host_env(data_dir)
    init = (
        json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init_params(data_dir, plugin_config(target))}
        )
        + "\n"
    ).encode()

    flags = interpreter_flags(job.get("plugin") or PLUGIN)

    def plugin(path=None) -> None:
        p = subprocess.Popen(
            plugin_argv(python, path or job.get("plugin") or PLUGIN),
            cwd=data_dir,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        p.stdin.write(init)
        p.stdin.flush()
        line = p.stdout.readline()
        if b'"protocol"' not in line:
            raise RuntimeError(f"no initialize answer: {line[:200]!r}")
        p.stdin.close()  # the process exits on EOF; reaping is not part of the cold start
        p.stdout.close()
        _reap.append(p)

    def floor() -> None:
        subprocess.run([python, "-c", "pass"], cwd=data_dir, env=env, check=True, start_new_session=True)

    def floor_line() -> None:
        # stricter floor: the interpreter's first output line, without its exit (like the plugin side)
        p = subprocess.Popen(
            [python, *flags, "-c", "import sys; sys.stdout.write('x\\n'); sys.stdout.flush(); sys.stdin.read()"],
            cwd=data_dir,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            start_new_session=True,
        )
        p.stdout.readline()
        p.stdin.close()
        p.stdout.close()
        _reap.append(p)

    _reap: list = []
    sides = {"plugin": plugin, "floor": floor, "floor_line": floor_line}
    if target.get("plugin_b"):
        # its own data dir: a candidate may keep a bytecode cache there
        sides["plugin_b"] = lambda: plugin(target["plugin_b"])
    res = interleave(sides, n, warmup)
    for p in _reap:
        p.wait()
    return {"samples": res, "argv": plugin_argv(python, job.get("plugin") or PLUGIN), "flags": flags}


def job_importtime(job: dict, target: dict, tmp: str) -> dict:
    """python -X importtime of the plugin's start (initialize answered, then EOF) vs of `-c pass`."""
    python = job["python"]
    data_dir = os.path.join(tmp, "imp")
    os.makedirs(data_dir, exist_ok=True)
    env = host_env(data_dir)
    init = (
        json.dumps(
            {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init_params(data_dir, plugin_config(target))}
        )
        + "\n"
    ).encode()

    def run(argv, stdin=b""):
        r = subprocess.run(
            [python, "-X", "importtime", *argv], input=stdin, cwd=data_dir, env=env, capture_output=True, timeout=60
        )
        return parse_importtime(r.stderr.decode(errors="replace"))

    plugin = job.get("plugin") or PLUGIN
    plugin_args = plugin_argv(python, plugin)[1:]
    # compile() cost of the plugin's own sources: the host sets PYTHONDONTWRITEBYTECODE and the
    # installed tree has no __pycache__, so every module the plugin imports is compiled from source
    # at every start (provider.py, being __main__, never has a cached form anyway).
    code = (
        "import json,os,sys,time\nout={}\nroot=sys.argv[1]\n"
        "for d,_,files in sorted(os.walk(root)):\n"
        "  for f in sorted(files):\n"
        "    if not f.endswith('.py'): continue\n"
        "    p=os.path.join(d,f); src=open(p).read(); v=[]\n"
        "    for _ in range(5):\n"
        "        t=time.perf_counter(); compile(src,f,'exec'); v.append((time.perf_counter()-t)*1000)\n"
        "    out[os.path.relpath(p,root)]=sorted(v)[2]\n"
        "print(json.dumps(out))"
    )
    r = subprocess.run([python, "-c", code, os.path.dirname(plugin)], capture_output=True, text=True, timeout=120)
    compile_ms = json.loads(r.stdout) if r.returncode == 0 else {}
    return {
        "floor": run(["-c", "pass"]),
        "plugin": run(plugin_args, init),
        "compile_ms": compile_ms,
        "floor_same_flags": run([*interpreter_flags(plugin), "-c", "pass"]),
    }


def parse_importtime(text: str) -> dict:
    """`-X importtime` lines ("import time: self | cumulative | <indent>name") -> {name: {...}}."""
    mods = {}
    for line in text.splitlines():
        if not line.startswith("import time:"):
            continue
        parts = line[len("import time:") :].split("|")
        if len(parts) != 3 or not parts[0].strip().isdigit():
            continue
        name = parts[2].rstrip()
        depth = (len(name) - len(name.lstrip(" "))) // 2
        mods[name.strip()] = {"self_us": int(parts[0]), "cum_us": int(parts[1]), "depth": depth}
    return mods


def job_exec_rt(job: dict, target: dict, tmp: str) -> dict:
    sid, n, warmup = job["sandbox_id"], job["n"], job["warmup"]
    cl = Clients(target, tmp)
    try:
        sides = {}
        for side in job["sides"]:
            if side in ("epp", "epp_b"):
                p = cl.plugin(job.get("profile") if side == "epp" else None, side)
                sides[side] = lambda p=p: _check(p.exec(sid, TRUE_CMD), 0)
            elif side == "direct":
                ex = cl.direct(sid)
                sides[side] = lambda ex=ex: _check(ex.run(TRUE_CMD), 0)
            elif side == "floor":  # the direct client plus one EPP exchange at its floor
                ex, hop = cl.direct(sid), cl.echo()
                sides[side] = lambda ex=ex, hop=hop: (_check(ex.run(TRUE_CMD), 0), hop.exchange(sid))
            elif side.startswith("sdk"):
                sb = cl.sdk(job.get("sdk_sandbox_id", {}).get(side, sid))
                sides[side] = lambda sb=sb: _check(sb.commands.run(TRUE_CMD).exit_code, 0)
        cpu: dict = {}
        res = interleave(sides, n, warmup, cpu, cl.pids)
        return {"samples": res, "cpu": cpu, "profiles": cl.stop_profilers()}
    finally:
        cl.close()


def _check(got, want) -> None:
    if got != want:
        raise RuntimeError(f"expected {want!r}, got {got!r}")


def job_stream(job: dict, target: dict, tmp: str) -> dict:
    """Warm-up rounds stream 1 MiB (they warm code paths, not sizes); measured rounds stream the full size."""
    sid, n, warmup, nbytes = job["sandbox_id"], job["n"], job["warmup"], job["bytes"]
    cl = Clients(target, tmp)
    counts: dict = {}

    def counter(name):
        def on_output(kind, text):
            counts[name] += len(text) - text.count("\n")

        return on_output

    def make_sides(size: int) -> dict:
        cmd = stream_command(size)
        command = "sh -c '" + cmd.replace("'", "'\"'\"'") + "'"  # what the plugin sends (v1.1.0 execd)
        sides = {}
        for side in job["sides"]:
            if side in ("epp", "epp_b"):
                p = plugins[side]

                def run_epp(p=p, side=side):
                    counts[side] = 0
                    _check(p.exec(sid, "sh", ["-c", cmd], on_output=counter(side)), 0)
                    _check(counts[side], size)

                sides[side] = run_epp
            elif side == "direct":

                def run_direct(ex=ex):
                    counts["direct"] = 0
                    _check(ex.run(command, on_output=counter("direct")), 0)
                    _check(counts["direct"], size)

                sides[side] = run_direct
        return sides

    try:
        plugins = {}
        for side in job["sides"]:
            if side in ("epp", "epp_b"):
                plugins[side] = cl.plugin(job.get("profile") if side == "epp" else None, side)
                plugins[side].exec(sid, "true")  # endpoint resolved, execd framing known
        ex = cl.direct(sid)
        interleave(make_sides(min(nbytes, 1 << 20)), 0, warmup)
        cpu: dict = {}
        res = interleave(make_sides(nbytes), n, 0, cpu, cl.pids)
        return {"samples": res, "cpu": cpu, "profiles": cl.stop_profilers()}
    finally:
        cl.close()


def job_files(job: dict, target: dict, tmp: str) -> dict:
    sid, n, warmup, size, op = job["sandbox_id"], job["n"], job["warmup"], job["bytes"], job["op"]
    data = os.urandom(size)
    cl = Clients(target, tmp)
    try:
        sides = {}
        ex0 = cl.direct(sid)
        src = f"/tmp/bench-read-{size}.bin"
        if op == "read":
            ex0.upload(src, data)
        for side in job["sides"]:
            if side in ("epp", "epp_b"):
                p = cl.plugin(job.get("profile") if side == "epp" else None, side)
                if op == "write":

                    def w_epp(p=p, side=side):
                        # the host base64-encodes the whole file into one JSON line (EPP files.write)
                        p.call(
                            "files.write",
                            {
                                "sandbox_id": sid,
                                "path": f"/tmp/bench-w-{side}-{size}.bin",
                                "content_b64": base64.b64encode(data).decode(),
                            },
                        )

                    sides[side] = w_epp
                else:

                    def r_epp(p=p):
                        got = base64.b64decode(p.call("files.read", {"sandbox_id": sid, "path": src})["content_b64"])
                        _check(len(got), size)

                    sides[side] = r_epp
            elif side == "direct":
                ex = cl.direct(sid)
                if op == "write":
                    sides[side] = lambda ex=ex: ex.upload(f"/tmp/bench-w-direct-{size}.bin", data)
                else:
                    sides[side] = lambda ex=ex: _check(len(ex.download(src)), size)
            elif side == "floor":
                # The protocol floor: the direct transfer plus what EPP makes unavoidable: base64 + one JSON
                # line, carried through one pipe to a warm process that parses and decodes it (the plugin's
                # side of a write, the host's side of a read), as case 2's floor carries one EPP echo hop.
                ex, hop = cl.direct(sid), cl.echo()
                if op == "write":

                    def w_floor(ex=ex, hop=hop):
                        hop.carry(
                            json.dumps(
                                {
                                    "jsonrpc": "2.0",
                                    "id": 1,
                                    "method": "files.write",
                                    "params": {
                                        "sandbox_id": sid,
                                        "path": f"/tmp/bench-w-floor-{size}.bin",
                                        "content_b64": base64.b64encode(data).decode(),
                                    },
                                }
                            ).encode()
                        )  # host -> plugin
                        ex.upload(f"/tmp/bench-w-floor-{size}.bin", data)

                    sides[side] = w_floor
                else:

                    def r_floor(ex=ex, hop=hop):
                        raw = ex.download(src)
                        _check(len(raw), size)
                        hop.carry(
                            b'{"jsonrpc":"2.0","id":1,"result":{"content_b64":"' + base64.b64encode(raw) + b'"}}'
                        )  # plugin -> host

                    sides[side] = r_floor
        cpu: dict = {}
        res = interleave(sides, n, warmup, cpu, cl.pids)
        profiles = cl.stop_profilers()
        if op == "write":  # what was written is what was sent
            for side in job["sides"]:
                if side == "floor":
                    continue
                _check(ex0.download(f"/tmp/bench-w-{side}-{size}.bin") == data, True)
        return {"samples": res, "cpu": cpu, "profiles": profiles}
    finally:
        cl.close()


def job_files_limit(job: dict, target: dict, tmp: str) -> dict:
    """What files.read answers for a file just over the one-line limit (a finding, not a timing)."""
    sid, size = job["sandbox_id"], job["bytes"]
    cl = Clients(target, tmp)
    try:
        ex = cl.direct(sid)
        ex.upload(f"/tmp/bench-limit-{size}.bin", os.urandom(size))
        p = cl.plugin()
        try:
            p.call("files.read", {"sandbox_id": sid, "path": f"/tmp/bench-limit-{size}.bin"})
            return {"read_ok": True}
        except Exception as exc:  # noqa: BLE001 - the refusal is the finding
            return {"read_ok": False, "error": str(exc)[:400]}
    finally:
        cl.close()


def job_capacity(job: dict, target: dict, tmp: str) -> dict:
    """N sandboxes created concurrently, then /ping and POST /command throughput from T threads."""
    count, threads, seconds = job["sandboxes"], job["threads"], job["seconds"]
    created: list = [None] * count
    errors: list = []
    lat: list = [None] * count

    def create(i):
        lc = direct.Lifecycle(target["base_url"], target.get("api_key"))
        t = time.perf_counter()
        try:
            created[i] = lc.create()
            lat[i] = time.perf_counter() - t
        except Exception as exc:  # noqa: BLE001 - counted as a failed create
            errors.append(f"create: {exc}")
        finally:
            lc.close()

    t0 = time.perf_counter()
    ts = [threading.Thread(target=create, args=(i,)) for i in range(count)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    create_wall = time.perf_counter() - t0
    sids = [s for s in created if s]
    lc = direct.Lifecycle(target["base_url"], target.get("api_key"))
    endpoints = []
    try:
        # execd of a new sandbox may need a moment; resolve + ping each once before measuring
        for sid in sids:
            url, headers = lc.execd(sid)
            ex = direct.Execd(url, headers)
            deadline = time.monotonic() + 20
            while True:
                try:
                    ex.ping()
                    break
                except Exception:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.05)
            ex.close()
            endpoints.append((url, headers))

        def load(op: str) -> dict:
            stop = time.perf_counter() + seconds
            counts = [0] * threads
            lats: list = [[] for _ in range(threads)]

            def loop(k):
                url, headers = endpoints[k % len(endpoints)]
                ex = direct.Execd(url, headers)
                i = k
                while time.perf_counter() < stop:
                    if op == "command":  # spread commands over the sandboxes
                        url, headers = endpoints[i % len(endpoints)]
                        ex = direct.Execd(url, headers)
                        i += threads
                    t = time.perf_counter()
                    if op == "ping":
                        ex.ping()
                    else:
                        _check(ex.run(TRUE_CMD), 0)
                    lats[k].append(time.perf_counter() - t)
                    counts[k] += 1
                ex.close()

            tt = [threading.Thread(target=loop, args=(k,)) for k in range(threads)]
            t1 = time.perf_counter()
            for t in tt:
                t.start()
            for t in tt:
                t.join()
            wall = time.perf_counter() - t1
            return {
                "requests": sum(counts),
                "seconds": wall,
                "per_s": sum(counts) / wall,
                "latencies": [x for each in lats for x in each],
            }

        ping = load("ping")
        command = load("command")
    finally:
        t2 = time.perf_counter()
        for sid in sids:
            try:
                lc.delete(sid)
            except Exception as exc:  # noqa: BLE001 - counted as a failed delete
                errors.append(f"delete: {exc}")
        delete_wall = time.perf_counter() - t2
        lc.close()
    return {
        "created": len(sids),
        "create_wall": create_wall,
        "create_latencies": [x for x in lat if x],
        "delete_wall": delete_wall,
        "ping": ping,
        "command": command,
        "errors": errors[:5],
    }


JOBS = {
    "cold_start": job_cold_start,
    "importtime": job_importtime,
    "exec_rt": job_exec_rt,
    "stream": job_stream,
    "files": job_files,
    "files_limit": job_files_limit,
    "capacity": job_capacity,
}


def main() -> int:
    out = sys.stdout
    sys.stdout = sys.stderr
    tmp = tempfile.mkdtemp(prefix="bench-worker-")
    try:
        for line in sys.stdin:
            if not line.strip():
                continue
            msg = json.loads(line)
            try:
                result = {"ok": True, **JOBS[msg["job"]](msg, msg["target"], tmp)}
            except Exception as exc:  # noqa: BLE001 - a failing job is reported, the worker goes on
                result = {
                    "ok": False,
                    "error": f"{type(exc).__name__}: {exc}",
                    "traceback": traceback.format_exc()[-3000:],
                }
            out.write(json.dumps(result) + "\n")
            out.flush()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
