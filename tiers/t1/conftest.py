"""t1 (the plugin over EPP against the mock, and the mock's parts): fixtures every t1 file can use.

* ``mock``: a MockOpenSandbox (execd generation "latest") per module; a file may define its own.
* ``epp``: an EppClient (tiers/toolkit/epp.py) initialized against ``mock``; at the end the test
  fails if the plugin wrote anything that is not a valid EPP line.
* ``sid``: a sandbox created through ``epp``, killed afterwards.
* ``sandbox_root``, ``runtime``, ``make_execd``: a bare execd over a SandboxRuntime (conftest_execd.py).

The plugin's modules are importable by their own names here too (``from osb import transport``).
"""
from __future__ import annotations

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.t1.conftest_execd import make_execd, runtime, sandbox_root  # noqa: F401 - fixtures for t1
from tiers.toolkit.epp import EppClient
from tiers.toolkit.plugin import importable

importable()


@pytest.fixture(scope="module")
def mock():
    with MockOpenSandbox(execd_mode="latest") as osb:
        yield osb


@pytest.fixture
def epp(mock, tmp_path):
    client = EppClient(str(tmp_path / "data"), {"base_url": mock.base_url, "api_key": mock.api_key})
    yield client
    assert client.violations == []
    client.close()


@pytest.fixture
def sid(epp):
    sandbox_id = epp.call("sandbox.create", {"template": "base", "timeout": 300})["sandbox_id"]
    yield sandbox_id
    epp.call("sandbox.kill", {"sandbox_id": sandbox_id})
