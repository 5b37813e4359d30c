"""Session-level hooks for every tier: the spec guard and the fidelity report.

* The spec guard (tiers/toolkit/spec_guard.py) is installed ONCE per session into
  ``mock_opensandbox.wire.http1.OBSERVERS``: every exchange any test has with any mock listener is
  validated against the OpenAPI specs in ``<repo>/../shared/specs`` (or ``$OSB_SPECS_DIR``).
  The observer never raises into the mock; violations not covered by tiers/t2/ALLOWED_DIFFERENCES
  are printed in the terminal summary and turn a passing session into a failing one (exit 1), so a
  violation fails ``make test``. Without the specs (a fresh clone) the guard is not installed and
  the spec tests skip with the reason.
* ``@pytest.mark.spec_exempt("reason")`` exempts the traffic of one test (deliberately broken
  traffic, fault injection); it is counted and reported, not hidden.
* Fixture replay scores (tiers/t2/server/test_fixture_replay.py) are printed at the end of the session.
* ``OSB_SPEC_GUARD=0`` switches the guard off (e.g. to profile the suite).
* The toolkit's fixtures (``mock``, ``epp``, ``sid``: tiers/toolkit/fixtures.py) reach every tier.
* Every test gets the marker of its tier (``t0`` ... ``t4``, ``diff``: the first folder under tiers/), which
  ``make test`` selects by (``-m``).
* Under pytest-xdist (``make test``) the workers' end-of-session reports (the spec guard's counts, the replay
  table, what t3, t4 and the differential tier print) reach the controller through tiers/toolkit/session_report.py.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tiers.toolkit import session_report
from tiers.toolkit.fixtures import epp, mock, sid  # noqa: F401 - fixtures for every tier (tiers/toolkit/fixtures.py)
from tiers.toolkit.spec_guard import SESSION as _STATE  # shared with tiers/t2/server/test_spec_guard.py


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spec_exempt(reason): the spec guard does not count this test's traffic")
    from tiers.toolkit import spec_guard as sg

    if os.environ.get("OSB_SPEC_GUARD", "1") == "0":
        _STATE["skip_reason"] = "spec guard switched off (OSB_SPEC_GUARD=0)"
        return
    if not sg.specs_available():
        _STATE["skip_reason"] = f"OpenAPI specs not found in {sg.spec_dir()} (expected <repo>/../shared/specs)"
        return
    from mock_opensandbox.wire import http1 as httpcore

    guard = sg.SpecGuard()
    _STATE["guard"] = guard
    _STATE["observer"] = guard.observe
    httpcore.OBSERVERS.append(guard.observe)


def pytest_unconfigure(config: pytest.Config) -> None:
    obs = _STATE.get("observer")
    if obs is not None:
        from mock_opensandbox.wire import http1 as httpcore

        try:
            httpcore.OBSERVERS.remove(obs)
        except ValueError:
            pass
        _STATE["observer"] = None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    guard = _STATE.get("guard")
    if guard is not None:
        mark = item.get_closest_marker("spec_exempt")
        guard.current_test = item.nodeid
        guard.exempt_reason = (mark.args[0] if mark and mark.args else "exempt") if mark else ""
    try:
        yield
    finally:
        if guard is not None:
            guard.current_test = ""
            guard.exempt_reason = ""


TIERS = ("t0", "t1", "t2", "t3", "t4", "diff")
_HERE = os.path.dirname(os.path.abspath(__file__))


def tier_of(path: str) -> str | None:
    """The tier of a test file: the first folder under tiers/ (None outside a tier)."""
    rel = os.path.relpath(os.path.abspath(path), _HERE)
    first = rel.split(os.sep, 1)[0]
    return first if first in TIERS else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        tier = tier_of(str(item.path))
        if tier is not None:
            item.add_marker(getattr(pytest.mark, tier))


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    guard = _STATE.get("guard")
    results = getattr(config, "_osb_replay_results", None)
    if results:
        from record.replay import format_table

        lines = format_table(sorted(results, key=lambda r: r.scenario))
        explained = getattr(config, "_osb_replay_explained", 0)
        if explained:
            lines.append(f"  ({explained} difference(s) explained by tiers/t2/ALLOWED_DIFFERENCES)")
        session_report.add_result("replay", lines)
    if _is_worker(config):  # the controller prints it (pytest_testnodedown below)
        if guard is not None:
            session_report.add_result("spec_guard", guard.export())
        config.workeroutput[session_report.KEY] = session_report.dump()  # type: ignore[attr-defined]
        return
    if guard is not None and guard.violations and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """pytest-xdist, on the controller: a worker ended; its report joins the controller's."""
    report = getattr(node, "workeroutput", {}).get(session_report.KEY)
    if not report:
        return
    guard = _STATE.get("guard")
    for data in report.get("results", {}).pop("spec_guard", []):
        if guard is not None:
            guard.absorb(data)
    session_report.merge(report)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    tr = terminalreporter
    if _is_worker(config):
        return
    for table in session_report.results("replay"):
        tr.write_sep("-", "fixture replay: fidelity of the mock against the recorded server")
        for line in table:
            tr.write_line(line)
    for key in session_report.keys():
        for line in session_report.lines(key):
            tr.write_line(line)
    for text in session_report.results("diff"):
        tr.write_line("")
        for line in text.rstrip().splitlines():
            tr.write_line(line)
    guard = _STATE.get("guard")
    if guard is None:
        if _STATE.get("skip_reason"):
            tr.write_line(f"spec guard: not installed: {_STATE['skip_reason']}")
        return
    lines = guard.summary()
    if guard.violations:
        tr.write_sep("=", "spec guard: unexplained OpenAPI violations (session fails)", red=True)
        for line in lines:
            tr.write_line(line, red=True)
        tr.write_line("Fix the mock/plugin, or add an explained 'spec' entry to tiers/t2/ALLOWED_DIFFERENCES.")
    else:
        for line in lines:
            tr.write_line(line)
    if guard.exempt_hits:
        tr.write_line(
            f"spec guard: {sum(guard.exempt_hits.values())} violation(s) in spec_exempt tests: "
            + ", ".join(sorted(guard.exempt_hits))
        )
