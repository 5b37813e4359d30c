"""Polling with a deadline (no fixed sleeps in tests: a predicate and a bound)."""
from __future__ import annotations

import time


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.05) -> bool:
    """True as soon as ``predicate()`` is; its last value after ``timeout`` seconds otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())
