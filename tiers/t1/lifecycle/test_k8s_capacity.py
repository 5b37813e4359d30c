"""Exhausted Pool capacity on the mock's Kubernetes runtime (a fault rule ``{"kind": "pod", "pod": "capacity"}``;
QUIRKS.md, "Kubernetes runtime: sandboxes"): which of the server's two waits ends the create. The 429 itself is
compared with the Kubernetes oracle in tiers/t2/k8s; this is the other branch, which the oracle's one configuration
does not reach: with ``pool_acquisition_timeout_seconds`` not below ``sandbox_create_timeout_seconds`` the create
timeout ends the wait first, 504 POD_READY_TIMEOUT (server services/k8s/kubernetes_service.py
_wait_for_sandbox_ready: the loop's own bound is checked before the capacity one)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.t1.lifecycle.test_k8s_gateway import CREATE

pytestmark = pytest.mark.spec_exempt("the Kubernetes runtime answers a create 429 or 504; the June spec lists neither")


def _create(osb: MockOpenSandbox) -> tuple[int, dict, dict]:
    headers = {"OPEN-SANDBOX-API-KEY": osb.api_key, "Content-Type": "application/json"}
    req = urllib.request.Request(osb.base_url + "/v1/sandboxes", json.dumps(CREATE).encode(), headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, dict(r.headers), json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), json.loads(e.read())


@pytest.mark.parametrize(
    ("pool_timeout", "status", "code", "retry_after"),
    [(0.4, 429, "KUBERNETES::POOL_CAPACITY_EXHAUSTED", "1"), (1.0, 504, "KUBERNETES::POD_READY_TIMEOUT", None)],
    ids=["acquisition-timeout-first", "create-timeout-first"],
)
def test_which_wait_ends_a_create_without_pool_capacity(pool_timeout, status, code, retry_after):
    with MockOpenSandbox(
        runtime="kubernetes",
        egress_mode="off",
        timing="fast",
        sandbox_create_timeout=1,
        pool_acquisition_timeout=pool_timeout,
    ) as osb:
        osb.faults.add(kind="pod", pod="capacity", count=1)
        got, headers, body = _create(osb)
        assert (got, body["code"], headers.get("Retry-After")) == (status, code, retry_after), body
        assert not [sb for sb in osb.sandboxes.values() if not sb.deleted]  # the workload is deleted either way
