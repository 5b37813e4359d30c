"""Runs the corpus against a real execd binary and the mock, and writes the coverage report."""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from typing import Any, Iterable

from differential.corpus import CASES, MIDDLEWARE, ROUTES
from differential.harness import Accepted, Case, CaseResult, load_accepted, run_case
from differential.targets import MockExecd, RealExecd, Target

__all__ = ["Pair", "run_corpus", "report", "QUIRKS_MD", "TOKEN"]

QUIRKS_MD = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "mock_opensandbox", "QUIRKS.md")
TOKEN = "diff-token-0123456789"
REPORTS: list[str] = []  # reports of this process's runs (the pytest tier prints them at the end)


class Pair:
    """A real execd and a mock execd, started together, stopped together (always)."""

    def __init__(self, binary: str, access_token: str | None = None):
        self.real: Target = RealExecd(binary, access_token)
        self.mock: Target = MockExecd(access_token)

    def __enter__(self) -> "Pair":
        try:
            self.real.start()
            self.mock.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        try:
            self.real.stop()
        finally:
            self.mock.stop()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


def run_corpus(
    binary: str, cases: Iterable[Case] | None = None, accepted: list[Accepted] | None = None, progress: Any = None
) -> list[CaseResult]:
    cases = list(CASES if cases is None else cases)
    accepted = load_accepted(QUIRKS_MD) if accepted is None else accepted
    results: list[CaseResult] = []
    plain = [c for c in cases if not c.token]
    tok = [c for c in cases if c.token]
    for group, token in ((plain, None), (tok, TOKEN)):
        if not group:
            continue
        with Pair(binary, token) as pair:
            for cs in group:
                t0 = time.monotonic()
                res = run_case(cs, pair.real, pair.mock, accepted)
                res.elapsed = time.monotonic() - t0
                results.append(res)
                if progress:
                    progress(res)
    return results


def coverage(results: list[CaseResult]) -> dict[str, dict[str, int]]:
    """Per router.go route: the cases that exercise it and its observations by outcome."""
    table: dict[str, dict[str, int]] = {r: defaultdict(int) for r in ROUTES + MIDDLEWARE}
    for res in results:
        seen: set[str] = set(res.case.routes)
        for label, st in res.obs_status.items():
            route = res.obs_routes.get(label) or (res.case.routes[0] if res.case.routes else "* unknown path")
            seen.add(route)
            row = table.setdefault(route, defaultdict(int))
            row["observations"] += 1
            row[st] += 1
        for route in seen:
            row = table.setdefault(route, defaultdict(int))
            row["cases"] += 1
            if res.error:
                row["errors"] += 1
    return table


def _fmt(v: Any, n: int = 90) -> str:
    s = json.dumps(v, ensure_ascii=False) if not isinstance(v, str) else repr(v)
    return s if len(s) <= n else s[: n - 3] + "..."


def report(results: list[CaseResult], *, markdown: bool = True, binary: str = "") -> str:
    table = coverage(results)
    lines = []
    total = sum(len(r.obs_status) for r in results)
    agree = sum(1 for r in results for s in r.obs_status.values() if s == "agree")
    acc = sum(1 for r in results for s in r.obs_status.values() if s == "accepted")
    differ = sum(1 for r in results for s in r.obs_status.values() if s == "differ")
    errors = sum(1 for r in results if r.error)
    pct = (100.0 * agree / total) if total else 0.0
    lines.append(
        f"Differential check: {len(results)} cases, {total} observations: {agree} agree ({pct:.1f} %), "
        f"{acc} differ only in accepted ways, {differ} differ unexplained, {errors} case errors"
        + (f" (real execd: {binary})" if binary else "")
    )
    lines.append("")
    lines.append("| route (router.go) | cases | observations | agree | accepted | unexplained | agreement |")
    lines.append("|---|---:|---:|---:|---:|---:|---:|")
    for route, row in table.items():
        obs = row.get("observations", 0)
        a = row.get("agree", 0)
        lines.append(
            f"| `{route}` | {row.get('cases', 0)} | {obs} | {a} | {row.get('accepted', 0)} | "
            f"{row.get('differ', 0)} | {(100.0 * a / obs) if obs else 0:.1f} % |"
        )
    uncovered = [r for r, row in table.items() if not row.get("cases")]
    if uncovered:
        lines.append("")
        lines.append("Routes without a case: " + ", ".join(uncovered))
    rows = [r for r in table.values() if r.get("observations")]
    lines.append(f"| **all** | {len(results)} | {total} | {agree} | {acc} | {differ} | {pct:.1f} % |")
    del rows
    used: dict[str, tuple[Accepted, list[str]]] = {}
    for r in results:
        for d in r.differences:
            if d.accepted is not None:
                key = d.accepted.case + " " + d.accepted.field
                used.setdefault(key, (d.accepted, []))[1].append(f"{r.case.name}: {d.field}")
    if used:
        lines.append("")
        lines.append("Accepted differences (QUIRKS.md):")
        lines.append("")
        lines.append("| case | field | seen | reason |")
        lines.append("|---|---|---:|---|")
        for acc_row, seen in used.values():
            lines.append(f"| `{acc_row.case}` | `{acc_row.field}` | {len(seen)} | {acc_row.reason} |")
    bad = [(r, d) for r in results for d in r.unexplained]
    if bad or errors:
        lines.append("")
        lines.append("Unexplained differences:")
        for r, d in bad:
            lines.append(f"- {r.case.name}: {d.field}: real={_fmt(d.real)} mock={_fmt(d.mock)}")
        for r in results:
            if r.error:
                lines.append(f"- {r.case.name}: case error: {r.error.strip().splitlines()[-1]}")
    return "\n".join(lines) + "\n"


DOC_MARK = "## Latest report"


def write_doc(path: str, text: str) -> None:
    """Replace everything after the "## Latest report" heading of path (keep the text above it)."""
    try:
        head = open(path, encoding="utf-8").read()
    except OSError:
        head = "# Differential check\n\n" + DOC_MARK + "\n"
    i = head.find(DOC_MARK)
    head = (head[:i] if i >= 0 else head.rstrip() + "\n\n") + DOC_MARK + "\n\n"
    import datetime

    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    with open(path, "w", encoding="utf-8") as fh:
        fh.write(
            head + f"Written by `python -m differential --execd-bin ../shared/opensandbox/execd "
            f"--write-doc docs/DIFFERENTIAL.md` ({stamp}).\n\n" + text
        )
