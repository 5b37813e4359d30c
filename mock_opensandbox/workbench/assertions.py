"""WireMock's verify over the request journal: ``assert_requested`` (MockOpenSandbox and the fault proxy
delegate to it)."""

from __future__ import annotations

from typing import Any

from mock_opensandbox.workbench.journal import Journal


def assert_requested(
    journal: Journal, *, count: int | None = None, at_least: int | None = None, **filters: Any
) -> list[dict[str, Any]]:
    """WireMock's verify: the journal holds requests matching ``filters`` (exactly ``count`` of them,
    or at least ``at_least``, default 1). Returns the matches; raises AssertionError saying what was seen."""
    found = journal.entries(**filters)
    if count is not None:
        ok = len(found) == count
        want = "exactly %d" % count
    else:
        n = 1 if at_least is None else at_least
        ok = len(found) >= n
        want = "at least %d" % n
    if ok:
        return found
    recent = journal.entries(limit=15)
    seen = (
        "\n".join(
            "  #%d %s %s -> %s [%s%s]"
            % (
                e["seq"],
                e["method"],
                e["path"][:120],
                e["status"] or e["error"],
                e["listener"],
                (" " + e["sandbox"][:8]) if e["sandbox"] else "",
            )
            for e in recent
        )
        or "  (the journal is empty)"
    )
    crit = ", ".join("%s=%r" % kv for kv in filters.items()) or "any request"
    raise AssertionError(
        "expected %s request(s) matching %s, found %d. Most recent requests:\n%s" % (want, crit, len(found), seen)
    )
