"""Differential tier: the real execd binary (``../shared/opensandbox/execd``, or ``$OSB_DIFF_EXECD_BIN``)
against the mock's execd in ``v1.1.0`` mode, on the corpus of differential/corpus.py.

The binary runs ONLY inside an isolated throw-away sandbox view (differential/targets.py).
Without the binary, or without isolation, the tier skips with one line.
"""

from __future__ import annotations

import os
from typing import Any, Iterator

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEFAULT_BIN = os.path.join(os.path.dirname(REPO), "shared", "opensandbox", "execd")


def binary() -> str | None:
    from mock_opensandbox.runtime import optional

    if optional.off("execd"):  # OSB_MOCK_NO=execd: as without the binary
        return None
    path = os.environ.get("OSB_DIFF_EXECD_BIN") or DEFAULT_BIN
    return path if os.path.isfile(path) and os.access(path, os.X_OK) else None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = os.path.dirname(os.path.abspath(__file__))
    mine = [i for i in items if str(i.fspath).startswith(here)]
    if not mine:
        return
    reason = None
    if binary() is None:
        reason = "differential tier: no real execd binary at ../shared/opensandbox/execd (or $OSB_DIFF_EXECD_BIN)"
    else:
        from mock_opensandbox.runtime import probe_isolation

        ok, note = probe_isolation()
        if not ok:
            reason = f"differential tier: the real execd may only run in an isolated sandbox view ({note})"
    if reason:
        mark = pytest.mark.skip(reason=reason)
        for i in mine:
            i.add_marker(mark)


@pytest.fixture(scope="module")
def pair() -> Iterator[Any]:
    from differential import Pair

    with Pair(binary()) as p:  # both stopped in __exit__ (finally)
        yield p


@pytest.fixture(scope="module")
def accepted() -> list[Any]:
    from differential import load_accepted
    from differential.runner import QUIRKS_MD

    return load_accepted(QUIRKS_MD)


def pytest_sessionfinish(session: pytest.Session) -> None:
    """The runs' reports, printed at the end by tiers/conftest.py (across pytest-xdist workers)."""
    from differential.runner import REPORTS  # a stable module (conftests load under importlib names)
    from tiers.toolkit import session_report

    for text in REPORTS:
        session_report.add_result("diff", text)
