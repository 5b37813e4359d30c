"""langchain-tests' SandboxIntegrationTests through both published OpenSandbox backends of LangChain deepagents
(tiers/flows/clients/agent_suites.py: their own test files, unchanged, in .venv-agents) against the mock: the same outcome as on
the live stack, test by test, and so does every tool of OpenSandbox's MCP server through an MCP client
(tiers/flows/clients/mcp_flow.py) (tiers/flows/clients/agent_suites_live.json, recorded live; t4 holds live to the same file).
Skips with one line without a Python >= 3.12, the packages (requirements-agents.txt) or a Jupyter env."""

from __future__ import annotations

import re

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.flows.clients import agent_suites
from tiers.t2.clients import Unavailable
from tiers.toolkit.jupyter import jupyter_env_or_skip


def test_the_agent_suites_and_the_mcp_tools_give_the_live_outcomes_on_the_mock():
    try:
        agent_suites.prepare()
    except Unavailable as exc:
        pytest.skip("agent suites: %s" % exc)
    env = jupyter_env_or_skip()  # deepagents' code-interpreter image: its Jupyter
    with MockOpenSandbox(timing="fast", jupyter_env=env) as osb:
        domain = re.sub(r"^https?://", "", osb.base_url).rstrip("/")
        got = agent_suites.results(domain, osb.api_key or "", {})
        mcp = agent_suites.mcp_outcomes(domain, osb.api_key or "", agent_suites.MCP_IMAGE)
    assert len(got) > 150 and agent_suites.differences(got) == []
    assert len(mcp) > 35 and agent_suites.differences(mcp, "mcp") == []  # every tool, good and bad input
