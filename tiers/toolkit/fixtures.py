"""pytest fixtures shared by tiers (a tier's conftest.py imports the ones it offers).

* ``mock``: a MockOpenSandbox (execd generation "latest") per module; a test file may define its own.
* ``epp``: an EppClient initialized against ``mock``; at the end the test fails if the plugin wrote
  anything that is not a valid EPP line.
* ``sid``: a sandbox created through ``epp``, killed afterwards.
"""

from __future__ import annotations

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit.epp import EppClient


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
