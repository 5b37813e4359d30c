"""tiers/toolkit/session_report.py and SpecGuard.export/absorb: what pytest-xdist workers report reaches one summary."""

from __future__ import annotations

import pytest

from tiers.toolkit import session_report
from tiers.toolkit.spec_guard import SpecGuard, Violation


@pytest.fixture
def fresh():
    saved = session_report.dump()
    session_report.clear()
    yield
    session_report.clear()
    session_report.merge(saved)


def test_workers_lines_merge_once_in_order(fresh):
    session_report.add_lines("t4", ["SKIPPED tiers/t4: offline"])
    session_report.add_result("diff", "report A")
    worker = session_report.dump()
    session_report.clear()
    session_report.add_lines("t3", ["t3 ran against X"])
    session_report.merge(worker)
    session_report.merge(worker)  # a second worker with the same line
    assert session_report.keys() == ["t3", "t4"]
    assert session_report.lines("t4") == ["SKIPPED tiers/t4: offline"]
    assert session_report.results("diff") == ["report A", "report A"]  # results are kept per worker


def test_spec_guard_counts_add_up_across_workers():
    a, b, controller = SpecGuard(allow=[]), SpecGuard(allow=[]), SpecGuard(allow=[])
    a.checked, b.checked = 3, 4
    a.violations.append(Violation("response", "execd", "GET", "/ping", 500, "E", "detail", "t::x"))
    a.allowed_hits[2] = 1
    b.allowed_hits[2] = 2
    b.exempt_hits["t::y"] = 5
    for g in (a, b):
        controller.absorb(g.export())
    assert controller.checked == 7
    assert controller.violations == a.violations
    assert controller.allowed_hits == {2: 3}
    assert controller.exempt_hits == {"t::y": 5}
    assert controller.summary()[0].startswith(
        "spec guard: 7 exchanges validated, 1 unexplained violation(s), 3 allowed"
    )
