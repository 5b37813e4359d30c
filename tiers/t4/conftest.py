"""Tier t4: a live OpenSandbox server (./local-up.sh up; eval "$(./local-up.sh env)").

The whole tier skips, with one reason line in the summary, unless OPENSANDBOX_LIVE=1 and OPENSANDBOX_BASE_URL /
OPENSANDBOX_API_KEY are set. When they are set and the server does not answer /health, the tier fails: a live run
that silently tests nothing would hide a broken server.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import NamedTuple, Optional

import pytest

from tiers.flows.server.smoke_flow import request, server_root
from tiers.toolkit import session_report


class LiveServer(NamedTuple):
    base_url: str  # as given (OPENSANDBOX_BASE_URL, usually http://127.0.0.1:8080/v1)
    root: str  # without the /v1 suffix
    api_key: str
    image: str  # image sandboxes are created from (OPENSANDBOX_IMAGE, default python:3.12-slim)


def _skip_reason() -> Optional[str]:
    if os.environ.get("OPENSANDBOX_LIVE") != "1":
        return 'live tier: set OPENSANDBOX_LIVE=1 with OPENSANDBOX_BASE_URL and OPENSANDBOX_API_KEY (./local-up.sh up; eval "$(./local-up.sh env)")'
    missing = [name for name in ("OPENSANDBOX_BASE_URL", "OPENSANDBOX_API_KEY") if not os.environ.get(name)]
    if missing:
        return f'live tier: OPENSANDBOX_LIVE=1 but {" and ".join(missing)} not set (eval "$(./local-up.sh env)")'
    return None


HERE = Path(__file__).resolve().parent


_SKIPPED = pytest.StashKey[str]()


def pytest_ignore_collect(collection_path, config):
    """Offline, the tier is not collected at all; pytest_terminal_summary says so in one line."""
    reason = _skip_reason()
    if (
        reason
        and collection_path.suffix == ".py"
        and collection_path.name.startswith("test_")
        and HERE in collection_path.resolve().parents
    ):
        config.stash[_SKIPPED] = reason
        session_report.add_lines("t4", [f"SKIPPED tiers/t4 (the live tier): {reason}"])  # printed at the end
        return True
    return None


def pytest_sessionfinish(session, exitstatus):
    if exitstatus == 5 and session.config.stash.get(_SKIPPED, None):  # `pytest tiers/t4` alone, offline
        session.exitstatus = 0


def pytest_collection_modifyitems(config, items):
    """Live: tests that build or inspect mocks themselves (marker mock_only) are not re-run here."""
    mock_only = pytest.mark.skip(reason="mock_only: builds or inspects mocks itself (t1 covers it)")
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents and item.get_closest_marker("mock_only"):
            item.add_marker(mock_only)


@pytest.fixture(scope="session")
def live_server() -> LiveServer:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)  # normally unreachable: pytest_collection_modifyitems already skipped the test
    base_url = os.environ["OPENSANDBOX_BASE_URL"]
    root = server_root(base_url)
    try:
        reply = request("GET", root, "/health", timeout=10)
    except (OSError, ValueError) as exc:
        pytest.fail(
            f"OPENSANDBOX_LIVE=1 but {root}/health is unreachable: {exc!r} (./local-up.sh status)", pytrace=False
        )
    if reply.status != 200:
        pytest.fail(
            f"OPENSANDBOX_LIVE=1 but {root}/health answered {reply.status}: {reply.body[:200]!r}", pytrace=False
        )
    return LiveServer(
        base_url, root, os.environ["OPENSANDBOX_API_KEY"], os.environ.get("OPENSANDBOX_IMAGE") or "python:3.12-slim"
    )


@pytest.fixture(autouse=True)
def _require_live(live_server):
    """Every test in tiers/t4 needs the live server (and so skips or fails with it)."""
    return live_server
