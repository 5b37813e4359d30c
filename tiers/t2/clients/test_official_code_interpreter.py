"""Oracle: opensandbox-code-interpreter 1.1.1 (pinned, unchanged) on a plain image (no Jupyter) against the
mock: each step must end exactly as it ended on the live stack (code_interpreter_flow.EXPECTED; the same flow
is compared live in tiers/t4/server/test_live_clients.py)."""

from __future__ import annotations

import logging

import pytest

from mock_opensandbox.server import MockOpenSandbox

pytest.importorskip("code_interpreter")
from tiers.t2.clients.code_interpreter_flow import EXPECTED, run_flow

pytestmark = pytest.mark.spec_exempt("code API calls on a plain image fail by design (execd has no Jupyter)")

# execd routes whose outcome may still differ from live (the mock's execd)
PENDING = {"delete_context": "the mock's execd answered DELETE /code/contexts/{id} unlike live"}


@pytest.fixture(scope="module")
def outcomes():
    logging.disable(logging.CRITICAL)  # the SDK logs every failed call with a traceback
    try:
        with MockOpenSandbox() as m:
            return run_flow(m.base_url.split("://", 1)[1], m.api_key, "local/python:3-slim")
    finally:
        logging.disable(logging.NOTSET)


@pytest.mark.parametrize("step,want", EXPECTED, ids=[s for s, _ in EXPECTED])
def test_same_outcome_as_live(outcomes, step, want):
    got = dict(outcomes)[step]
    if got != want and step in PENDING:
        pytest.xfail(PENDING[step])
    assert got == want
