"""model.Metrics of the sandbox's host as execd's /metrics reports it, no HTTP (execd/metrics_routes.py is its
HTTP side): CPU from /proc/stat (sampled), memory from /proc/meminfo."""

from __future__ import annotations

import os
import time
from typing import Any

__all__ = ["CPU_SAMPLE_S", "sample"]

CPU_SAMPLE_S = 0.2  # [choice] execd samples CPU for 1 s (gopsutil cpu.Percent(time.Second)); shorter here


def _cpu_times() -> tuple[int, int] | None:
    try:
        with open("/proc/stat", "rb") as fh:
            vals = [int(x) for x in fh.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = vals[3] + (vals[4] if len(vals) > 4 else 0)
    return sum(vals), idle


def sample() -> dict[str, Any]:
    """model.Metrics: cpu_count, cpu_used_pct, mem_total_mib, mem_used_mib, timestamp (spec Metrics)."""
    a = _cpu_times()
    time.sleep(CPU_SAMPLE_S)
    b = _cpu_times()
    pct = 0.0
    if a and b and b[0] > a[0]:
        pct = 100.0 * (1 - (b[1] - a[1]) / (b[0] - a[0]))
    total = avail = 0
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                k, _, v = line.partition(":")
                if k == "MemTotal":
                    total = int(v.split()[0]) * 1024
                elif k == "MemAvailable":
                    avail = int(v.split()[0]) * 1024
    except (OSError, ValueError):
        pass
    return {
        "cpu_count": float(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1),
        "cpu_used_pct": round(max(0.0, pct), 6),
        "mem_total_mib": total / 1048576,
        "mem_used_mib": max(0, total - avail) / 1048576,
        "timestamp": int(time.time() * 1000),  # sse.now_ms(), without the HTTP layer
    }
