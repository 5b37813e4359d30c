"""Run groups of tiers as concurrent pytest processes (``make test``): most tests wait on sockets and
subprocesses, so a few groups on this 2-core machine take little more than the longest one.

    python tiers/run_tiers.py "tiers/t1" "tiers/t0 tiers/t2 tiers/t3 tiers/t4" [-- extra pytest args]

The first group's output is streamed live; the others are buffered and printed, whole, after it. The
last line sums every group (``total: N passed, N failed, N skipped``). The exit status is 0 only when
every group passed (a group that collected no test counts as a failure).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile

COUNT = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed|deselected)")


def _counts(text: str) -> dict[str, int]:
    """Counts from the last pytest summary line of one group's output."""
    for line in reversed(text.splitlines()):
        found = COUNT.findall(line)
        if found and (" in " in line or line.startswith("=")):
            out: dict[str, int] = {}
            for n, kind in found:
                kind = "error" if kind.startswith("error") else kind
                out[kind] = out.get(kind, 0) + int(n)
            return out
    return {}


def main(argv: list[str]) -> int:
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1 :]
    groups = [shlex.split(g) for g in argv if g.strip()]
    if not groups:
        print(__doc__, file=sys.stderr)
        return 2
    cmd = [sys.executable, "-m", "pytest", "-q"]
    procs: list[subprocess.Popen] = []
    logs: list[tempfile._TemporaryFileWrapper | None] = []
    try:
        for n, paths in enumerate(groups):
            if n == 0:
                procs.append(subprocess.Popen(cmd + extra + paths, stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
                logs.append(None)
            else:
                log = tempfile.TemporaryFile()
                procs.append(subprocess.Popen(cmd + extra + paths, stdout=log, stderr=subprocess.STDOUT))
                logs.append(log)
        print(
            f"== group 1/{len(groups)}: {' '.join(groups[0])} (live); "
            + "; ".join(f"group {i + 1}: {' '.join(g)} (printed when it ends)" for i, g in enumerate(groups) if i),
            flush=True,
        )
        first = bytearray()
        assert procs[0].stdout is not None
        for line in procs[0].stdout:
            first += line
            sys.stdout.buffer.write(line)
            sys.stdout.buffer.flush()
        outputs = [first.decode("utf-8", "replace")]
        codes = [procs[0].wait()]
        for n in range(1, len(groups)):
            codes.append(procs[n].wait())
            log = logs[n]
            assert log is not None
            log.seek(0)
            text = log.read().decode("utf-8", "replace")
            outputs.append(text)
            print(f"\n== group {n + 1}/{len(groups)}: {' '.join(groups[n])}", flush=True)
            sys.stdout.write(text)
            sys.stdout.flush()
    except KeyboardInterrupt:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in procs:
            p.wait()
        return 130
    finally:
        for log in logs:
            if log is not None:
                log.close()
    total: dict[str, int] = {}
    for text in outputs:
        for kind, n in _counts(text).items():
            total[kind] = total.get(kind, 0) + n
    failed = total.get("failed", 0) + total.get("error", 0)
    bad = [f"group {i + 1} exited {rc}" for i, rc in enumerate(codes) if rc != 0]
    print()
    if bad:
        print("make test: " + "; ".join(bad) + (" (no tests collected)" if 5 in codes else ""))
    print(f"total: {total.get('passed', 0)} passed, {failed} failed, {total.get('skipped', 0)} skipped")
    return 0 if not bad else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main(sys.argv[1:]))
