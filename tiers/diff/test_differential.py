"""The fixed corpus (every route of router.go, every method + HEAD/OPTIONS/an unaccepted one, the
validation branches and error paths) against the real execd and the mock; any difference not listed
in QUIRKS.md's "Accepted differences" fails. The coverage report is printed at the end of the run."""

from __future__ import annotations

import pytest

from differential import report, run_corpus
from differential.corpus import CASES, ROUTES
from differential.runner import REPORTS
from mock_opensandbox.execd.server import ROUTES as MOCK_ROUTES
from tiers.diff.conftest import binary


def test_corpus_covers_the_route_table():
    """The corpus's route list is the router.go table, and the mock serves exactly those routes."""
    mock = {f"{m} {p}".replace("{", ":").replace("}", "") for m, p, _ in MOCK_ROUTES}
    assert mock == set(ROUTES)
    covered = {r for c in CASES for r in c.routes}
    assert set(ROUTES) <= covered, sorted(set(ROUTES) - covered)


@pytest.mark.spec_exempt("differential corpus: deliberately malformed requests")
def test_corpus_agrees_with_the_real_execd():
    results = run_corpus(binary())
    text = report(results, binary="../shared/opensandbox/execd")
    REPORTS.append(text)
    bad = [r for r in results if r.unexplained or r.error]
    assert not bad, "\n" + text
