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
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from tiers.toolkit.spec_guard import SESSION as _STATE  # shared with tiers/t2/server/test_spec_guard.py
from tiers.toolkit.fixtures import epp, mock, sid  # noqa: F401 - fixtures for every tier (tiers/toolkit/fixtures.py)


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


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    guard = _STATE.get("guard")
    if guard is not None and guard.violations and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    tr = terminalreporter
    results = getattr(config, "_osb_replay_results", None)
    if results:
        from record.replay import format_table

        tr.write_sep("-", "fixture replay: fidelity of the mock against the recorded server")
        for line in format_table(sorted(results, key=lambda r: r.scenario)):
            tr.write_line(line)
        explained = getattr(config, "_osb_replay_explained", 0)
        if explained:
            tr.write_line(f"  ({explained} difference(s) explained by tiers/t2/ALLOWED_DIFFERENCES)")
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
