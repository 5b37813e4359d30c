"""Polling with a deadline (no fixed sleeps in tests: a predicate and a bound), and the predicates tests poll."""

from __future__ import annotations

import socket
import time


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.05) -> bool:
    """True as soon as ``predicate()`` is; its last value after ``timeout`` seconds otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return bool(predicate())


def poll(get, until, timeout: float = 10.0, interval: float = 0.05):
    """``wait_until`` for a value: the first ``get()`` that ``until`` accepts; the last one got after ``timeout``."""
    last = [None]

    def ready() -> bool:
        last[0] = get()
        return bool(until(last[0]))

    wait_until(ready, timeout, interval)
    return last[0]


def port_closed(port: int, timeout: float = 2.0) -> bool:
    """Nothing accepts a TCP connection on 127.0.0.1:``port`` (a listener the mock should have closed)."""
    try:
        socket.create_connection(("127.0.0.1", port), timeout=timeout).close()
        return False
    except OSError:
        return True
