"""The Kubernetes server oracle's controller stand-in (tiers/t2/clients/server_oracle_k8s_controller.py) alone, in
this process, on its FakeApiServer: what its writes let the server's informer see, event by event.

The server's create waits on the BatchSandbox's watch events and reads each event's object
(``_wait_for_sandbox_ready`` in opensandbox-server 1.1.1 services/k8s/kubernetes_service.py): an object with an
endpoint IP in ``sandbox.opensandbox.io/endpoints`` and no status phase is "Allocated" there
(batchsandbox_provider.py ``get_status``), and the create answers 202 at once. OpenSandbox's controller writes the
endpoints before the status in one reconcile (``persistRuntimeView``, kubernetes/internal/controller/
batchsandbox_status.go at 3bb6fad); on a cluster the BatchSandbox has had its Pending phase since the pod was
created, long before a kubelet gives the pod an IP. A stand-in whose kubelet moved a pod in the pass that created
it made the first phase and the first IP land together, one event apart: the server, reading the first, answered
202 Running for a pod that failed (the t2 k8s oracle's ``test_failed_pod_fails_the_create`` under load).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from types import ModuleType

import pytest

from tiers.t2.clients import REPO
from tiers.toolkit.waits import poll


def _load(name: str) -> ModuleType:
    """One of the app's modules by its file, under the top-level name the others import it by (the app runs with
    its own folder first on sys.path)."""
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, "%s/tiers/t2/clients/%s.py" % (REPO, name))
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod
        spec.loader.exec_module(mod)
    return sys.modules[name]


api_mod = _load("server_oracle_k8s_api")
ctl_mod = _load("server_oracle_k8s_controller")

ENDPOINTS = "sandbox.opensandbox.io/endpoints"


@pytest.fixture
def cluster():
    api = api_mod.FakeApiServer()
    controller = ctl_mod.Controller(api)
    yield api, controller
    controller.stop()


def _box(api, name: str, case: str) -> None:
    template = {"metadata": {"labels": {"app": "oracle"}}, "spec": {"containers": [{"name": "sandbox", "image": "x"}]}}
    body = {"metadata": {"name": name, "labels": {ctl_mod.CASE: case}}, "spec": {"replicas": 1, "template": template}}
    status, doc = api.create(api_mod.CRD, "batchsandboxes", api_mod.NS, body)
    assert status == 201, doc


def _events(api, name: str) -> list[dict]:
    with api.lock:
        return [obj for _, coll, _, obj in api.log if coll[1] == "batchsandboxes" and obj["metadata"]["name"] == name]


def _until_phase(api, name: str, phase: str) -> list[dict]:
    events = poll(lambda: _events(api, name), lambda ev: ev and (ev[-1].get("status") or {}).get("phase") == phase)
    assert events and (events[-1].get("status") or {}).get("phase") == phase, json.dumps(events)[:2000]
    return events


@pytest.mark.parametrize("to, phase", [("failed", "Failed"), ("ready", "Succeed")])
def test_no_event_shows_an_endpoint_before_a_phase(cluster, to, phase):
    """A create's pod told beforehand to fail (or to become Ready): every event of its BatchSandbox that carries an
    endpoint IP has a phase already, so no event reads as "Allocated" to the server."""
    api, controller = cluster
    controller.pods_op("", to, "ImagePullBackOff" if to == "failed" else "", False, case="c-" + to)
    _box(api, "sb-" + to, "c-" + to)
    events = _until_phase(api, "sb-" + to, phase)
    with_ip = [e for e in events if any(json.loads((e["metadata"].get("annotations") or {}).get(ENDPOINTS) or "[]"))]
    assert with_ip, "the pod's IP never reached the endpoints annotation"
    early = [e for e in with_ip if not (e.get("status") or {}).get("phase")]
    assert not early, "an event with an endpoint IP and no phase: %s" % json.dumps(early[0])[:1500]
    assert (events[0].get("status") or {}).get("phase") is None  # the create itself: nothing yet
    first_phase = next(e["status"]["phase"] for e in events if (e.get("status") or {}).get("phase"))
    assert first_phase == "Pending"  # as on a cluster: the pod is Pending before it has an IP
