"""What every bench case shares: the sizes of a full, quick and smoke run, the case list, result rows, the
target server (``Target``), the worker process (``Worker``), a run's ``Context``, and the plugin's install and
import-time helpers. The cases themselves are in bench/cases.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time

from bench import direct
from bench.stats import summary

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MiB = 1024 * 1024

# One EPP line is at most 8 MiB, so one files.read answers at most 6,000,000 bytes
# (plugin/methods/files.py MAX_READ_BYTES); "6 MB" below is that maximum. A 6 MiB (6,291,456 B) read is
# refused with a typed error: recorded as a finding (details.files_limit), not timed.
SIX_MB = 6_000_000

FULL = {
    "cold_n": 20,
    "cold_warmup": 2,
    "exec_n": 40,
    "exec_warmup": 3,
    "exec_shipped_n": 4,
    "stream_bytes": 64 * MiB,
    "stream_n": 3,
    "stream_warmup": 1,
    "files_small_n": 12,
    "files_big_n": 6,
    "flow_n": 10,
    "flow_warmup": 1,
    "flow_shipped_n": 2,
    "cap_sandboxes": 50,
    "cap_threads": 8,
    "cap_seconds": 3.0,
    "sandbox_n": 30,
    "sandbox_warmup": 2,
    "sandbox_idle_n": 5,
    "sandbox_cmd_n": 100,
    "sandbox_cmd_gap_ms": 50,
    "sandbox_settle_ms": 1000,
    "live_warmup": 2,
    "live_cmd_n": 60,
    "live_create_n": 8,
    "live_ops_n": 20,  # session command, background first log line, PTY start
    "live_files_n": 12,
    "live_stream_n": 5,
    "live_stream_bytes": 6 * MiB,
    "live_idle_n": 3,
}
QUICK = {
    "cold_n": 5,
    "cold_warmup": 1,
    "exec_n": 10,
    "exec_warmup": 2,
    "exec_shipped_n": 1,
    "stream_bytes": 4 * MiB,
    "stream_n": 2,
    "stream_warmup": 1,
    "files_small_n": 3,
    "files_big_n": 2,
    "flow_n": 2,
    "flow_warmup": 1,
    "flow_shipped_n": 0,
    "cap_sandboxes": 10,
    "cap_threads": 8,
    "cap_seconds": 1.0,
    "sandbox_n": 5,
    "sandbox_warmup": 1,
    "sandbox_idle_n": 3,
    "sandbox_cmd_n": 10,
    "sandbox_settle_ms": 1000,
    "live_warmup": 1,
    "live_cmd_n": 15,
    "live_create_n": 3,
    "live_ops_n": 5,
    "live_files_n": 4,
    "live_stream_n": 2,
    "live_stream_bytes": 6 * MiB,
    "live_idle_n": 2,
}

# --smoke (for tests of the harness itself): one repetition per side, tiny sizes. Numbers from a smoke
# run mean nothing; it only proves every case runs end to end and the results are well formed.
SMOKE = {
    "cold_n": 1,
    "cold_warmup": 0,
    "exec_n": 1,
    "exec_warmup": 0,
    "exec_shipped_n": 0,
    "stream_bytes": 256 * 1024,
    "stream_n": 1,
    "stream_warmup": 0,
    "files_small_n": 1,
    "files_big_n": 1,
    "flow_n": 1,
    "flow_warmup": 0,
    "flow_shipped_n": 0,
    "cap_sandboxes": 3,
    "cap_threads": 2,
    "cap_seconds": 0.3,
    "sandbox_n": 1,
    "sandbox_warmup": 0,
    "sandbox_idle_n": 1,
    "sandbox_cmd_n": 1,
    "sandbox_settle_ms": 100,
    "live_warmup": 0,
    "live_cmd_n": 1,
    "live_create_n": 1,
    "live_ops_n": 1,
    "live_files_n": 1,
    "live_stream_n": 1,
    "live_stream_bytes": 96 * 1024,
    "live_idle_n": 1,
}

# Case 7 "sandbox" (bench/sandbox_costs.py: what one sandbox costs the mock, A/B against another mock tree) runs
# only when asked for (--cases sandbox): it checks out a second tree and starts two more mocks.
# Case 8 "live" (bench/vs_live.py: the mock as a user starts it next to a live server, in one run) is a default
# case: without a live server (OPENSANDBOX_BASE_URL) it says so in one line and measures nothing.
CASES = ("cold", "exec", "stream", "files", "flow", "capacity", "sandbox", "live")
DEFAULT_CASES = (*CASES[:6], "live")
CASE_NUMBERS = {str(i + 1): name for i, name in enumerate(CASES)}


def fmt_bytes(n: int) -> str:
    if n % MiB == 0:
        return f"{n // MiB} MiB"
    if n % 1_000_000 == 0:
        return f"{n // 1_000_000} MB"
    if n % 1024 == 0:
        return f"{n // 1024} KiB"
    return f"{n} B"


# --------------------------------------------------------------------------- rows


def make_row(
    *,
    id: str,
    case: int,
    title: str,
    unit: str,
    ours_name: str,
    ours_s: list,
    base_name: str | None = None,
    base_s: list | None = None,
    target: float | None = None,
    nbytes: int | None = None,
    note: str = "",
) -> dict:
    better = "higher" if unit == "MB/s" else "lower"
    ours = {"name": ours_name, **summary(ours_s, unit=unit, nbytes=nbytes)}
    base = {"name": base_name, **summary(base_s, unit=unit, nbytes=nbytes)} if base_name else None
    ratio = None
    if base and ours.get("median") and base.get("median"):
        ratio = ours["median"] / base["median"]
    met = None
    target_text = None
    if target is not None:
        target_text = f"<= {target:g}x" if better == "lower" else f">= {target:g}x"
        if ratio is not None:
            met = ratio <= target if better == "lower" else ratio >= target
    return {
        "id": id,
        "case": case,
        "title": title,
        "unit": unit,
        "better": better,
        "bytes": nbytes,
        "ours": ours,
        "baseline": base,
        "median": ours.get("median"),
        "p90": ours.get("p90"),
        "ratio": ratio,
        "target": target_text,
        "target_ratio": target,
        "met": met,
        "note": note,
    }


def error_row(case_name: str, exc: BaseException) -> dict:
    number = CASES.index(case_name) + 1 if case_name in CASES else 0
    return {
        "id": f"{case_name}_error",
        "case": number,
        "title": f"{case_name}: FAILED",
        "unit": None,
        "better": None,
        "ours": None,
        "baseline": None,
        "median": None,
        "p90": None,
        "ratio": None,
        "target": None,
        "target_ratio": None,
        "met": None,
        "error": f"{type(exc).__name__}: {exc}"[:2000],
    }


# --------------------------------------------------------------------------- the server


class Target:
    """The OpenSandbox under test: the in-process mock, or a live server from the environment."""

    def __init__(self, base_url: str | None = None, api_key: str | None = None, *, nodelay: bool = True):
        self.mock = None
        self.nodelay = None
        if base_url:
            base = base_url.rstrip("/")
            base = base[:-3] if base.endswith("/v1") else base  # ./local-up.sh env gives .../v1; the SDK wants the root
            self.base_url, self.api_key, self.kind = base, api_key, "live"
        else:
            from mock_opensandbox.server import MockOpenSandbox
            from mock_opensandbox.wire import http1 as httpcore

            if nodelay:
                # Real servers answer with TCP_NODELAY (Go's net/http sets it on every connection,
                # uvicorn's asyncio transports too); the mock's http.server does not, so a small reply
                # written in two parts (headers, then body) on a reused keep-alive connection waits for
                # the client's delayed ACK: ~40 ms per request on Linux. That stall would be charged to
                # whichever client reuses connections, so this process's mock sets TCP_NODELAY like the
                # real servers. `--mock-as-is` measures the mock unchanged.
                httpcore.Handler.disable_nagle_algorithm = True
            self.nodelay = bool(nodelay)
            self.mock = MockOpenSandbox().start()  # execd_close_delay 1.0, like the real server
            self.base_url, self.api_key, self.kind = self.mock.base_url, self.mock.api_key, "mock"
        self._lc = direct.Lifecycle(self.base_url, self.api_key)
        self._lock = threading.Lock()
        self.sandboxes: list[str] = []

    def create(self) -> str:
        with self._lock:
            sid = self._lc.create()
            self.sandboxes.append(sid)
        self.wait_execd(sid)
        return sid

    def wait_execd(self, sid: str, budget: float = 60.0) -> None:
        deadline = time.monotonic() + budget
        while True:
            try:
                with self._lock:
                    url, headers = self._lc.execd(sid)
                ex = direct.Execd(url, headers)
                ex.ping()
                ex.close()
                return
            except Exception:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)

    def close_delay(self, sid: str) -> float | None:
        if self.mock is None:
            return None
        sb = self.mock.sandboxes.get(sid)
        return getattr(getattr(sb, "execd", None), "close_delay", None)

    def set_close_delay(self, sid: str, value: float) -> bool:
        """The mock only: how long this sandbox's execd keeps an SSE stream open after the last event."""
        if self.mock is None:
            return False
        sb = self.mock.sandboxes.get(sid)
        execd = getattr(sb, "execd", None)
        if execd is None or not hasattr(execd, "close_delay"):
            return False
        execd.close_delay = float(value)
        return True

    def info(self) -> dict:
        return {
            "kind": self.kind,
            "base_url": self.base_url if self.kind == "mock" else "(from OPENSANDBOX_BASE_URL)",
            "execd_mode": getattr(self.mock, "execd_mode", None),
            "execd_close_delay_default": getattr(self.mock, "execd_close_delay", None),
            "tcp_nodelay": self.nodelay,
        }

    def stop(self) -> None:
        for sid in list(self.sandboxes):
            try:
                self._lc.delete(sid)
            except Exception:  # noqa: BLE001 - clean-up of the bench's own sandboxes, best effort
                pass
        self.sandboxes.clear()
        self._lc.close()
        if self.mock is not None:
            self.mock.stop()


class Worker:
    """``python -m bench.worker``: the client-side process (see worker.py)."""

    def __init__(self):
        env = dict(os.environ)
        env["PYTHONPATH"] = REPO + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env["OPENSANDBOX_DISABLE_METRICS"] = "1"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.worker"],
            cwd=REPO,
            env=env,
            text=True,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )

    def run(self, job: dict, target: dict) -> dict:
        self.proc.stdin.write(json.dumps({**job, "target": target}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the worker exited (rc={self.proc.poll()})")
        res = json.loads(line)
        if not res.get("ok"):
            raise RuntimeError(f"{job['job']}: {res.get('error')}\n{res.get('traceback', '')}")
        return res

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()
        self.proc.stdout.close()


class Context:
    def __init__(
        self,
        target: Target,
        worker: Worker,
        params: dict,
        tmp: str,
        log=print,
        plugin_src: str | None = None,
        compare_src: str | None = None,
    ):
        self.target, self.worker, self.p, self.tmp, self.log = target, worker, params, tmp, log
        self.details: dict = {}
        self.plugin_src = os.path.abspath(plugin_src or os.path.join(REPO, "plugin"))
        if not os.path.isfile(os.path.join(self.plugin_src, "provider.py")):
            raise FileNotFoundError(f"no provider.py in {self.plugin_src}")
        self.plugin_dir = os.path.join(tmp, "plugin")
        # the installed form: no __pycache__ (a fresh install has none and the host forbids writes)
        shutil.copytree(self.plugin_src, self.plugin_dir, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        self.plugin = os.path.join(self.plugin_dir, "provider.py")
        self.plugin_info = plugin_info(self.plugin_src, self.plugin_dir)  # at copy time, not at the end
        # --compare: a candidate plugin tree measured in the same jobs (side "epp_b"), for A/B evidence
        self.compare_src = os.path.abspath(compare_src) if compare_src else None
        self.plugin_b_dir = self.plugin_b = None
        self.compare_rows: list = []
        if self.compare_src:
            if not os.path.isfile(os.path.join(self.compare_src, "provider.py")):
                raise FileNotFoundError(f"no provider.py in {self.compare_src}")
            self.plugin_b_dir = os.path.join(tmp, "plugin_b")
            shutil.copytree(self.compare_src, self.plugin_b_dir, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            self.plugin_b = os.path.join(self.plugin_b_dir, "provider.py")
        self.candidate_info = plugin_info(self.compare_src, self.plugin_b_dir) if self.compare_src else None
        self.python, self.python_on_path = resolve_python3()
        self._shared: dict = {}
        self.profile_dir: str | None = None  # --profile: py-spy the plugin in cases 2-4

    def profile(self, job: dict, name: str) -> dict:
        if self.profile_dir:
            os.makedirs(self.profile_dir, exist_ok=True)
            job["profile"] = os.path.join(self.profile_dir, f"{name}.plugin.stacks.txt")
        return job

    def keep_cpu(self, name: str, res: dict, per: str = "run", scale: float = 1.0) -> None:
        """Mean CPU per run (ms), or per MB with ``scale`` = MB per run: robust to machine load. A mean, not
        a median: /proc counts CPU in clock ticks (10 ms), coarser than one short run."""
        out = {}

        def mean(xs):
            return sum(xs) / len(xs) if xs else None

        for side, rec in (res.get("cpu") or {}).items():
            client = mean(rec["client_s"])
            plugin = mean(rec["plugin_s"]) if rec["plugin_s"] else None
            out[side] = {
                "client_ms": round(client * 1000 / scale, 3) if client is not None else None,
                "plugin_ms": round(plugin * 1000 / scale, 3) if plugin is not None else None,
            }
        if out:
            self.details.setdefault("cpu", {})[name] = {"per": per, **out}

    def keep_profiles(self, name: str, res: dict) -> None:
        for prof in res.get("profiles") or []:
            self.details.setdefault("profiles", {})[name] = prof

    def job_target(self) -> dict:
        return {
            "base_url": self.target.base_url,
            "api_key": self.target.api_key,
            "python": self.python,
            "plugin": self.plugin,
            "plugin_b": self.plugin_b,
        }

    def epp_sides(self, *others: str) -> list:
        return ["epp"] + (["epp_b"] if self.plugin_b else []) + list(others)

    def add_compare(self, base_row: dict, s_b: list, s_a: list) -> None:
        """candidate (--compare) vs the plugin under test, from the same interleaved job."""
        if not self.plugin_b or not s_b:
            return
        self.compare_rows.append(
            make_row(
                id=base_row["id"] + "__candidate",
                case=base_row["case"],
                title=base_row["title"],
                unit=base_row["unit"],
                ours_name=f"candidate {self.compare_src}",
                ours_s=s_b,
                base_name="plugin under test",
                base_s=s_a,
                nbytes=base_row.get("bytes"),
                note="same job, interleaved; ratio < 1 (ms) or > 1 (MB/s) means the candidate is faster",
            )
        )

    def run(self, job: dict) -> dict:
        return self.worker.run({"plugin": self.plugin, **job}, self.job_target())

    def sandbox(self, name: str) -> str:
        """Sandboxes shared by cases 2-4 ("a": server defaults; "sdk": close delay 0 on the mock)."""
        if name not in self._shared:
            self._shared[name] = self.target.create()
        return self._shared[name]


def tree_digest(root: str) -> str:
    """sha256 over the relative paths and contents of a tree (what exactly was measured)."""
    import hashlib

    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(filenames):
            if name.endswith(".pyc"):
                continue
            path = os.path.join(dirpath, name)
            h.update(os.path.relpath(path, root).encode() + b"\0")
            with open(path, "rb") as fh:
                h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()[:16]


def plugin_info(src: str, copy: str | None = None) -> dict:
    """Which plugin tree was measured: path, last commit touching it, uncommitted changes, and the digest
    of the copy actually run (taken when the run started)."""
    info = {"src": src}
    if copy:
        info["tree_sha256_16"] = tree_digest(copy)
    try:
        head = subprocess.run(
            ["git", "log", "-1", "--format=%h %cI", "--", "."], cwd=src, capture_output=True, text=True, timeout=10
        )
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--", "."], cwd=src, capture_output=True, text=True, timeout=10
        )
        if head.returncode == 0 and head.stdout.strip():
            info["commit"] = head.stdout.strip()
            info["uncommitted_changes"] = bool(dirty.stdout.strip())
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


def resolve_python3() -> tuple[str, str]:
    """(the real interpreter behind `python3` on PATH, what PATH names). The host runs `python3`
    from PATH; a pyenv shim is a shell script in front of the interpreter, so the interpreter
    itself is measured and the shim is reported separately."""
    on_path = shutil.which("python3") or sys.executable
    try:
        out = subprocess.run(
            [on_path, "-c", "import sys; print(sys.executable); print(sys.version_info >= (3, 10))"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.split()
        if len(out) == 2 and out[1] == "True" and os.path.exists(out[0]):
            return out[0], on_path
    except (OSError, subprocess.TimeoutExpired):
        pass
    return sys.executable, on_path


# --------------------------------------------------------------------------- case 1: cold start


def summarise_importtime(imp: dict) -> dict:
    plain = imp["floor"]
    floor, plugin = imp.get("floor_same_flags") or plain, imp["plugin"]
    extra = {name: m for name, m in plugin.items() if name not in floor}
    top = sorted(((name, m) for name, m in extra.items()), key=lambda kv: -kv[1]["cum_us"])
    roots = [(n, m) for n, m in top if m.get("depth", 0) == 0]  # imported by the plugin itself
    return {
        "floor_modules": len(floor),
        "plugin_modules": len(plugin),
        "extra_modules": len(extra),
        "extra_self_ms": round(sum(m["self_us"] for m in extra.values()) / 1000, 2),
        "site_cum_ms": round(plain.get("site", {}).get("cum_us", 0) / 1000, 2),
        "plugin_imports_site": "site" in plugin,
        "top_extra": [
            {"module": n, "cum_ms": round(m["cum_us"] / 1000, 2), "self_ms": round(m["self_us"] / 1000, 2)}
            for n, m in roots[:12]
        ],
        "compile_ms": {k: round(v, 2) for k, v in imp.get("compile_ms", {}).items()},
    }


def install_plugin(ctx: Context, home: str, source: str | None = None) -> dict:
    env = {**os.environ, "HOME": home}
    env.pop("ABX_PROVIDER", None)
    t = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-m", "agent_sandbox.providers", "install", source or ctx.plugin_dir, "--yes"],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=120,
    )
    took = time.perf_counter() - t
    if r.returncode != 0:
        raise RuntimeError(f"plugin install failed (rc={r.returncode}): {r.stdout[-800:]} {r.stderr[-800:]}")
    return {"seconds": took, "output": r.stdout.strip()[-300:]}
