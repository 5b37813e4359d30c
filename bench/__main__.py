"""python -m bench [--quick] [--out bench/out] [--cases cold,exec,stream,files,flow,capacity,live]

Starts the mock OpenSandbox in this process (or uses OPENSANDBOX_BASE_URL + OPENSANDBOX_API_KEY
when OPENSANDBOX_BASE_URL is set), runs the selected cases with every client in one worker process,
and writes results.json, results.md and chart.png (when matplotlib is installed) to --out. The case
"live" measures the mock (its own `python -m mock_opensandbox` processes) next to that live server and
is skipped, with one line saying so, when OPENSANDBOX_BASE_URL is not set.

Exit status: 0 when every selected case ran (targets met or not: this is a measurement, not a test),
1 when a case failed to run, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

from bench import cases as C
from bench import context as K
from bench import report

DEFAULT_OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "out")


def parse_cases(text: str | None) -> list[str]:
    if not text:
        return list(K.DEFAULT_CASES)
    out = []
    for item in text.split(","):
        item = item.strip().lower()
        if not item:
            continue
        name = K.CASE_NUMBERS.get(item, item)
        if name not in K.CASES:
            raise argparse.ArgumentTypeError(
                f"unknown case {item!r}; choose from {', '.join(K.CASES)} (or 1-{len(K.CASES)})"
            )
        if name not in out:
            out.append(name)
    return out


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        try:
            with open("/proc/loadavg") as fh:
                return "loadavg " + fh.read().strip()
        except OSError:
            return "unknown"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(python: str) -> dict:
    try:
        pv = subprocess.run(
            [python, "-c", "import platform; print(platform.python_version())"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pv = "?"
    return {
        "nproc": os.cpu_count(),
        "cpu": cpu_model(),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "plugin_python": python,
        "plugin_python_version": pv,
        "platform": platform.platform(),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[1])
    ap.add_argument("--quick", action="store_true", help="small sizes and few repetitions (well under a minute)")
    ap.add_argument(
        "--smoke",
        action="store_true",
        help="one repetition per side and tiny sizes: checks the harness, the numbers mean nothing",
    )
    ap.add_argument("--out", default=DEFAULT_OUT, help="output directory (default: bench/out)")
    ap.add_argument(
        "--cases",
        default=None,
        help="comma-separated subset: " + ",".join(K.CASES) + " (or numbers 1-8); default 1-6 and 8 "
        "(7, sandbox: what one sandbox costs the mock, A/B; see bench/sandbox_costs.py; 8, live: the mock "
        "next to the live server of OPENSANDBOX_BASE_URL, skipped without one; see bench/vs_live.py)",
    )
    ap.add_argument(
        "--sandbox-baseline-rev",
        default=None,
        metavar="REV",
        help="case 7: the baseline mock A, checked out at REV into a temporary git worktree that is "
        "removed afterwards (default 5f292ba, an earlier mock)",
    )
    ap.add_argument(
        "--sandbox-baseline-tree",
        default=None,
        metavar="DIR",
        help="case 7: use this tree as the baseline mock A instead of a checkout",
    )
    ap.add_argument(
        "--mock-as-is",
        action="store_true",
        help="do not give the in-process mock TCP_NODELAY (see bench/README.md, 'TCP_NODELAY')",
    )
    ap.add_argument(
        "--plugin",
        default=None,
        metavar="DIR",
        help="benchmark this plugin tree instead of the repository's plugin/ (e.g. a patched copy)",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=INT",
        help="override one repetition/size parameter, e.g. --set stream_bytes=16777216 --set exec_n=80 "
        "(keys: see FULL in bench/context.py)",
    )
    ap.add_argument(
        "--compare",
        default=None,
        metavar="DIR",
        help="also measure this candidate plugin tree in the same interleaved jobs (cases 1-5) and "
        "report candidate / current ratios: A/B evidence for a proposed change",
    )
    ap.add_argument(
        "--profile",
        action="store_true",
        help="attach py-spy to the plugin in cases 2-4; collapsed stacks go to <out>/profiles/ "
        "and a summary into results.json (numbers taken under a profiler are slower)",
    )
    args = ap.parse_args(argv)
    try:
        selected = parse_cases(args.cases)
    except argparse.ArgumentTypeError as exc:
        ap.error(str(exc))
    params = dict(K.SMOKE if args.smoke else K.QUICK if args.quick else K.FULL)
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or key not in params:
            ap.error(f"--set {item!r}: use KEY=NUMBER with KEY one of {', '.join(sorted(params))}")
        try:
            params[key] = type(params[key])(float(value)) if isinstance(params[key], float) else int(value)
        except ValueError:
            ap.error(f"--set {item!r}: {value!r} is not a number")

    def log(msg: str) -> None:
        print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    started = time.perf_counter()
    load_before = uptime()
    base_url = os.environ.get("OPENSANDBOX_BASE_URL", "").strip()
    target = K.Target(base_url or None, os.environ.get("OPENSANDBOX_API_KEY") or None, nodelay=not args.mock_as_is)
    log(f"server: {target.kind} ({target.base_url if target.kind == 'mock' else 'OPENSANDBOX_BASE_URL'})")
    tmp = tempfile.mkdtemp(prefix="bench-")
    worker = K.Worker()
    rows: list = []
    failed = False
    ctx = None
    try:
        ctx = K.Context(target, worker, params, tmp, log, plugin_src=args.plugin, compare_src=args.compare)
        ctx.sandbox_baseline_rev = args.sandbox_baseline_rev
        ctx.sandbox_baseline_tree = os.path.abspath(args.sandbox_baseline_tree) if args.sandbox_baseline_tree else None
        if args.profile:
            ctx.profile_dir = os.path.join(os.path.abspath(args.out), "profiles")
        for name in selected:
            log(f"case {K.CASES.index(name) + 1}: {name}")
            t = time.perf_counter()
            try:
                got = C.FUNCS[name](ctx)
            except Exception as exc:  # noqa: BLE001 - a failed case is reported, the others still run
                log(f"case {name} FAILED: {type(exc).__name__}: {exc}")
                got = [K.error_row(name, exc)]
                failed = True
                if worker.proc.poll() is not None:
                    worker = K.Worker()
                    ctx.worker = worker
            rows += got
            log(f"case {name}: {time.perf_counter() - t:.1f} s")
    finally:
        worker.close()
        target.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    results = {
        "schema": 1,
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "quick": args.quick or args.smoke,
        "mode": "smoke" if args.smoke else "quick" if args.quick else "full",
        "cases_selected": selected,
        "params": params,
        "machine": {
            **machine_info(ctx.python if ctx else sys.executable),
            "load_before": load_before,
            "load_after": uptime(),
        },
        "server": target.info(),
        "plugin": ctx.plugin_info if ctx else {},
        "candidate": ctx.candidate_info if ctx else None,
        "wall_s": time.perf_counter() - started,
        "profiled": bool(args.profile),
        "cases": rows,
        "compare": ctx.compare_rows if ctx else [],
        "details": ctx.details if ctx else {},
    }
    paths = report.write_all(results, args.out)
    print(report.markdown_table(results))
    if results.get("chart_problem"):
        print("\n" + results["chart_problem"], file=sys.stderr)
    log("wrote " + ", ".join(paths.values()) + f" in {results['wall_s']:.1f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
