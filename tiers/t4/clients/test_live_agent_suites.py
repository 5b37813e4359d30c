"""Live: langchain-tests' SandboxIntegrationTests through both published OpenSandbox backends (tiers/flows/clients/agent_suites.py)
give the outcomes recorded in tiers/flows/clients/agent_suites_live.json, the file t2 holds the mock to. About 9 minutes (every
command waits out execd's 1 s stream linger)."""

from __future__ import annotations

import os
import re

import pytest

from tiers.flows.clients import agent_suites
from tiers.t2.clients import Unavailable


def test_the_agent_suites_give_the_recorded_outcomes_live(live_server):
    try:
        agent_suites.prepare()
    except Unavailable as exc:
        pytest.skip("agent suites: %s" % exc)
    local = (os.environ.get("OPENSANDBOX_IMAGE"), os.environ.get("OPENSANDBOX_CODE_INTERPRETER_IMAGE"))
    images = {pub: loc for pub, loc in zip(agent_suites.PUBLIC_IMAGES, local, strict=True) if loc}
    domain = re.sub(r"^https?://", "", live_server.root).rstrip("/")
    got = agent_suites.results(domain, live_server.api_key, images)
    assert agent_suites.differences(got) == []


def test_the_mcp_tools_give_the_recorded_outcomes_live(live_server):
    try:
        agent_suites.prepare()
    except Unavailable as exc:
        pytest.skip("agent suites: %s" % exc)
    domain = re.sub(r"^https?://", "", live_server.root).rstrip("/")
    image = os.environ.get("OPENSANDBOX_IMAGE") or agent_suites.MCP_IMAGE
    assert agent_suites.differences(agent_suites.mcp_outcomes(domain, live_server.api_key, image), "mcp") == []
