"""The Kubernetes oracle's fixture for every test file here: one oracle process per module."""

from __future__ import annotations

import pytest

from tiers.t2.k8s.test_server_oracle_k8s import K8sOracle
from tiers.t2.server.oracle_support import started_or_skip


@pytest.fixture(scope="module")
def oracle():
    """The real server 1.1.1 app on the Kubernetes runtime (tiers/t2/clients/server_oracle_k8s_app.py), or a skip
    when its venv cannot be had."""
    yield from started_or_skip(K8sOracle)
