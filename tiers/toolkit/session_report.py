"""What a test session reports at its end, gathered across pytest-xdist workers.

``make test`` runs the tiers in pytest-xdist workers (``-n``, ``--dist loadfile``). A worker's terminal summary
is never shown, and the controller collects no test, so the conftests of t3, t4 and the differential tier are not
even loaded there. Whatever a tier prints at the end therefore goes through here:

* ``add_lines(key, lines)``: lines printed once at the end under ``key`` (the same line from several workers is
  printed once, in the order first seen);
* ``add_result(key, value)``: a JSON-able value kept per key (the caller's ``render`` turns the values of every
  worker into lines: the spec guard's counts, the fixture replay table);
* tiers/conftest.py sends a worker's report to the controller (``config.workeroutput``), merges the reports there
  (``pytest_testnodedown``) and prints them. Without xdist (``pytest tiers/t1/execd``) the same process does both.
"""

from __future__ import annotations

from typing import Any

KEY = "osb_session_report"
_LINES: dict[str, list[str]] = {}
_RESULTS: dict[str, list[Any]] = {}


def add_lines(key: str, lines: list[str]) -> None:
    seen = _LINES.setdefault(key, [])
    seen.extend(line for line in lines if line not in seen)


def add_result(key: str, value: Any) -> None:
    _RESULTS.setdefault(key, []).append(value)


def lines(key: str) -> list[str]:
    return list(_LINES.get(key, []))


def results(key: str) -> list[Any]:
    return list(_RESULTS.get(key, []))


def keys() -> list[str]:
    return list(_LINES)


def dump() -> dict[str, Any]:
    """This process's report, for config.workeroutput (execnet sends dicts, lists, strings and numbers)."""
    return {"lines": {k: list(v) for k, v in _LINES.items()}, "results": {k: list(v) for k, v in _RESULTS.items()}}


def merge(report: dict[str, Any]) -> None:
    """A worker's dump() into this process's report."""
    for key, got in (report.get("lines") or {}).items():
        add_lines(key, list(got))
    for key, values in (report.get("results") or {}).items():
        _RESULTS.setdefault(key, []).extend(values)


def clear() -> None:
    _LINES.clear()
    _RESULTS.clear()
