"""results.json -> Markdown table and PNG chart (matplotlib is optional, bench-only)."""

from __future__ import annotations

import json
import os

INSTALL_HINT = (
    "matplotlib is not installed, so no chart was drawn (results.json and results.md are written). "
    "Install the bench-only dependencies with:  .venv/bin/python -m pip install -r bench/requirements.txt"
)


def _num(value, unit: str | None = None) -> str:
    if value is None:
        return "—"
    if unit == "MB/s" or abs(value) >= 100:
        return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.1f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def _ratio(row: dict) -> str:
    return "—" if row.get("ratio") is None else f"{row['ratio']:.2f}x"


def _met(row: dict) -> str:
    if row.get("error"):
        return "ERROR"
    return {True: "yes", False: "**no**", None: "—"}[row.get("met")]


def markdown_table(results: dict, key: str = "cases") -> str:
    lines = [
        "| # | case | ours: median | p90 | baseline | baseline: median | p90 | ratio | target | met |",
        "|---|---|---:|---:|---|---:|---:|---:|---|---|",
    ]
    for row in results[key]:
        if row.get("error"):
            lines.append(f"| {row['case']} | {row['title']} | — | — | — | — | — | — | — | ERROR |")
            continue
        unit = row["unit"]
        base = row.get("baseline") or {}
        title = f"{row['title']} ({unit})"
        lines.append(
            "| {c} | {t} | {m} | {p} | {bn} | {bm} | {bp} | {r} | {tg} | {met} |".format(
                c=row["case"],
                t=title,
                m=_num(row["median"], unit),
                p=_num(row["p90"], unit),
                bn=base.get("name") or "—",
                bm=_num(base.get("median"), unit),
                bp=_num(base.get("p90"), unit),
                r=_ratio(row),
                tg=row.get("target") or "—",
                met=_met(row),
            )
        )
    return "\n".join(lines)


def markdown(results: dict) -> str:
    m = results["machine"]
    out = [
        f"# Benchmark results ({results.get('mode', 'quick' if results['quick'] else 'full')} run)",
        "",
        f"* date: {results['date']}",
        f"* machine: {m['nproc']} cores, {m['cpu']}, Python {m['python']} (plugin interpreter "
        f"{m.get('plugin_python_version', '?')})",
        f"* load (uptime) before: {m['load_before']}; after: {m['load_after']}",
        f"* server: {results['server']['kind']}"
        + (
            f" (execd framing {results['server'].get('execd_mode')}, default close delay "
            f"{results['server'].get('execd_close_delay_default')} s, TCP_NODELAY "
            f"{'on, like the real servers' if results['server'].get('tcp_nodelay') else 'off (mock as is)'})"
            if results["server"]["kind"] == "mock"
            else ""
        ),
        f"* plugin: {results.get('plugin', {}).get('src', '?')} (last commit {results.get('plugin', {}).get('commit', '?')}"
        + (", with uncommitted changes" if results.get("plugin", {}).get("uncommitted_changes") else "")
        + f"; tree digest {results.get('plugin', {}).get('tree_sha256_16', '?')})",
        f"* wall time of the run: {results['wall_s']:.1f} s",
        "",
        "Ratios are ours / baseline in the row's unit: for ms lower is better, for MB/s higher is better. "
        "p90 is the slow tail (for MB/s: the rate at the 90th-percentile duration).",
        "",
        markdown_table(results),
        "",
    ]
    if results.get("compare"):
        out += [
            "Candidate plugin (--compare) vs the plugin under test, same jobs, interleaved "
            "(ratio in the row's unit: for ms < 1 is faster, for MB/s > 1 is faster):",
            "",
            markdown_table(results, "compare"),
            "",
        ]
    notes = [(r["id"], r.get("note")) for r in results["cases"] if r.get("note")]
    if notes:
        out += ["Notes:", ""] + [f"* `{i}`: {n}" for i, n in notes] + [""]
    errors = [r for r in results["cases"] if r.get("error")]
    if errors:
        out += ["Errors:", ""] + [f"* `{r['id']}`: {r['error'][:500]}" for r in errors] + [""]
    d = results.get("details", {})
    if "importtime" in d:
        it = d["importtime"]
        out += [
            "Start-up detail (case 1):",
            "",
            f"* `-X importtime`: the plugin imports {it['extra_modules']} modules beyond the interpreter floor "
            f"({it['extra_self_ms']} ms self time). `site` takes {it['site_cum_ms']} ms in `python3 -c pass` on "
            f"this machine"
            + (
                "; the plugin imports it too."
                if it.get("plugin_imports_site", True)
                else "; the plugin's command skips it (-S)."
            ),
            "* the plugin's own top-level imports beyond the floor (cumulative ms, children included): "
            + (", ".join(f"{x['module']} {x['cum_ms']}" for x in it["top_extra"][:8]) or "none"),
            "* compile() of the plugin's sources from scratch (ms; done at every start, no bytecode cache): "
            + ", ".join(f"{k} {v}" for k, v in it["compile_ms"].items()),
            "",
        ]
    if "cpu" in d:
        out += [
            "CPU cost (cases 2-4), mean CPU ms per command or per MB, from /proc and process_time: unlike "
            "wall time it does not depend on what else the machine runs. `client` is the bench worker (the "
            "EPP driver standing in for the host, or the direct client / SDK); `plugin` is the plugin process.",
            "",
            "| measurement | per | side | client CPU ms | plugin CPU ms | total |",
            "|---|---|---|---:|---:|---:|",
        ]
        for name, rec in d["cpu"].items():
            for side, v in rec.items():
                if side == "per":
                    continue
                total = (v["client_ms"] or 0) + (v["plugin_ms"] or 0)
                out.append(
                    f"| {name} | {rec['per']} | {side} | {_num(v['client_ms'])} | {_num(v['plugin_ms'])} | "
                    f"{_num(total)} |"
                )
        out.append("")
    if "files_floor" in d:
        out += [
            "Files detail (case 4), median ms per operation. The protocol floor is the direct transfer plus "
            "the base64 + JSON line EPP needs, carried through one pipe to a warm process that parses and decodes "
            "it (as case 2's floor carries one EPP echo hop), done serially: what even a perfect plugin "
            "could not avoid.",
            "",
            "| operation | plugin over EPP | protocol floor | direct | EPP above floor (plugin + pipe) | "
            "files-to-floor (goal <= 1.10x) |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for name, v in d["files_floor"].items():
            ratio = v["epp_ms"] / v["floor_ms"] if v["floor_ms"] else float("nan")
            out.append(
                f"| {name} | {v['epp_ms']:.1f} | {v['floor_ms']:.1f} | {v['direct_ms']:.1f} | "
                f"{v['epp_ms'] - v['floor_ms']:.1f} | {ratio:.2f}x |"
            )
        out.append("")
    if "files_limit" in d:
        fl = d["files_limit"]
        out += [
            f"Finding (case 4): files.read of a {fl['bytes']:,}-byte file (6 MiB): "
            + ("succeeded" if fl.get("read_ok") else f"refused — {fl.get('error', '')[:300]}"),
            "",
        ]
    if "flow" in d:
        f = d["flow"]
        out += [
            "Whole-flow detail (case 5), median ms per step:",
            "",
            "| side | " + " | ".join(next(iter(f["steps_median_ms"].values())).keys()) + " |",
            "|---|" + "---:|" * len(next(iter(f["steps_median_ms"].values()))),
        ]
        for side, steps in f["steps_median_ms"].items():
            out.append(f"| {side} | " + " | ".join(f"{v:.1f}" for v in steps.values()) + " |")
        calls = f.get("host_epp_calls_median_ms") or {}
        if calls:
            out += [
                "",
                "* inside the host flow, median ms per EPP exchange as the host saw it (plugin work + "
                "server + pipe): " + ", ".join(f"{k} {v:.1f}" for k, v in calls.items()),
            ]
        out += [
            "",
            f"* host integrity re-hash of the installed plugin (store.verify_integrity): "
            f"median {f['integrity_check_ms']['median']:.2f} ms, p90 {f['integrity_check_ms']['p90']:.2f} ms",
            f"* library import (once per process, not in the flow times): agent_sandbox "
            f"{f['import_s']['host'] * 1000:.0f} ms, opensandbox SDK {f['import_s']['sdk'] * 1000:.0f} ms",
            f"* plugin install (python -m agent_sandbox.providers install --yes): {f['install_s']:.2f} s",
            "",
        ]
    if "live" in d:
        lv = d["live"]
        if lv.get("skipped"):
            out += [f"Mock vs live (case 8): skipped: {lv['skipped']}", ""]
        else:
            out += ["Mock vs live (case 8), ratios mock / live:", ""] + [f"* {n}" for n in lv.get("notes", [])] + [""]
    if "capacity" in d:
        c = d["capacity"]
        out += [
            f"Capacity detail (case 6): {c['created']} sandboxes in {c['create_wall']:.2f} s; "
            f"/ping {c['ping']['per_s']:.0f}/s; POST /command {c['command']['per_s']:.0f}/s; "
            f"delete {c['delete_wall']:.2f} s" + (f"; errors: {c['errors']}" if c.get("errors") else ""),
            "",
        ]
    return "\n".join(out)


def slowdown(row: dict) -> float | None:
    """Every ratio as 'times slower than the baseline' (time ratio), so one axis fits all rows."""
    r = row.get("ratio")
    if r is None or not r:
        return None
    return r if row["better"] == "lower" else 1.0 / r


def chart(results: dict, path: str) -> str | None:
    """Draw the chart; returns None on success, else the reason it was not drawn."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return INSTALL_HINT
    rows = [r for r in results["cases"] if slowdown(r) is not None]
    flow = results.get("details", {}).get("flow")
    ncols = 2 if flow else 1
    fig, axes = plt.subplots(
        1,
        ncols,
        figsize=(13 if flow else 9, max(3.5, 0.42 * len(rows) + 1.5)),
        gridspec_kw={"width_ratios": [3, 2]} if flow else None,
    )
    ax = axes[0] if flow else axes
    labels = [r["id"] for r in rows][::-1]
    vals = [slowdown(r) for r in rows][::-1]
    colors = []
    for r in rows[::-1]:
        colors.append({True: "#3a9d5d", False: "#d1495b", None: "#8d99ae"}[r.get("met")])
    ax.barh(labels, vals, color=colors)
    for i, r in enumerate(rows[::-1]):
        if r.get("target_ratio") is not None:
            t = r["target_ratio"] if r["better"] == "lower" else 1.0 / r["target_ratio"]
            ax.plot([t, t], [i - 0.4, i + 0.4], color="black", linewidth=2)
        ax.text(vals[i], i, f" {vals[i]:.2f}x", va="center", fontsize=8)
    ax.axvline(1.0, color="grey", linestyle=":", linewidth=1)
    ax.set_xscale("log")
    ticks = [t for t in (0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, 20, 50) if min(vals) / 1.5 <= t <= max(vals) * 1.5]
    ax.set_xticks(ticks)
    ax.set_xticklabels([f"{t:g}x" for t in ticks])
    ax.set_xlabel(
        "time relative to the baseline (1.0 = same; black tick = target; green met, red missed, grey no target)"
    )
    ax.set_title(f"What the plugin costs ({results.get('mode', 'full')} run, {results['date'][:10]})", fontsize=10)
    ax.set_xlim(min(vals + [0.8]) / 1.3, max(vals + [1.6]) * 1.6)
    if flow:
        ax2 = axes[1]
        # sdk_shipped (the SDK waiting out the ~1 s close) would flatten the others; it is in the table
        steps = {k: v for k, v in flow["steps_median_ms"].items() if k != "sdk_shipped"}
        sides = list(steps)
        names = list(next(iter(steps.values())))
        left = [0.0] * len(sides)
        palette = ["#264653", "#2a9d8f", "#e9c46a", "#f4a261", "#e76f51", "#8d99ae"]
        for k, name in enumerate(names):
            vals2 = [steps[s].get(name, 0.0) for s in sides]
            ax2.barh(sides, vals2, left=left, label=name, color=palette[k % len(palette)])
            left = [a + b for a, b in zip(left, vals2, strict=True)]
        ax2.set_xlabel("ms (median per step)")
        ax2.set_title("Whole flow (case 5): where the time goes", fontsize=10)
        ax2.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None


def write_all(results: dict, out_dir: str) -> dict:
    os.makedirs(out_dir, exist_ok=True)
    paths = {
        "json": os.path.join(out_dir, "results.json"),
        "md": os.path.join(out_dir, "results.md"),
        "png": os.path.join(out_dir, "chart.png"),
    }
    with open(paths["md"], "w", encoding="utf-8") as fh:
        fh.write(markdown(results) + "\n")
    problem = chart(results, paths["png"])
    if problem:
        results["chart"] = None
        results["chart_problem"] = problem
        paths.pop("png")
    else:
        results["chart"] = "chart.png"
    with open(paths["json"], "w", encoding="utf-8") as fh:
        json.dump(results, fh, indent=1, sort_keys=False)
        fh.write("\n")
    return paths
