"""Small statistics helpers (no numpy: the bench core is standard library only)."""

from __future__ import annotations

import math


def quantile(values, q: float) -> float | None:
    """Linear-interpolated quantile (q in [0, 1]); None for no values."""
    xs = sorted(v for v in values if v is not None and not math.isnan(v))
    if not xs:
        return None
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def median(values) -> float | None:
    return quantile(values, 0.5)


def p90(values) -> float | None:
    return quantile(values, 0.9)


def summary(seconds: list, *, unit: str = "ms", nbytes: int | None = None) -> dict:
    """Median and p90 of a list of durations, in the row's unit.

    For throughput units (MB/s, lower time = higher rate) "p90" is the slow tail: the rate at the
    90th-percentile duration, so it is never better than the median.
    """
    med_s, p90_s = median(seconds), p90(seconds)
    out = {"n": len(seconds), "samples_s": [round(x, 6) for x in seconds]}
    if med_s is None:
        out.update(median=None, p90=None)
        return out
    if unit == "MB/s":
        mb = (nbytes or 0) / 1e6
        out.update(median=mb / med_s if med_s else None, p90=mb / p90_s if p90_s else None, median_s=med_s, p90_s=p90_s)
    elif unit == "ms":
        out.update(median=med_s * 1000, p90=p90_s * 1000)
    else:
        out.update(median=med_s, p90=p90_s)
    return out
