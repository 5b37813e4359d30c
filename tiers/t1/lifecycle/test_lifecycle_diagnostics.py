"""t1: what the mock says about a sandbox beyond its lifecycle: entrypoint outcomes (failed, not found, clean
exit), the diagnostics and metrics routes of server 1.1.1 and the route families it does not implement (split
from test_lifecycle.py)."""

from __future__ import annotations

import re

import pytest

from tiers.t1.lifecycle import test_lifecycle
from tiers.t1.lifecycle.test_lifecycle import CREATE, _status
from tiers.toolkit.waits import poll, wait_until

# the fixtures of test_lifecycle.py (a mock without execd's close delay, a Client of it), registered here too
osb = test_lifecycle.osb
client = test_lifecycle.client


@pytest.mark.spec_exempt(
    "a stopped container's execd is unreachable: the server proxy answers 502 (server api/proxy.py)"
)
def test_failed_entrypoint(client):
    r = client.call("POST", "/v1/sandboxes", dict(CREATE, entrypoint=["sh", "-c", "exit 1"], timeout=600))
    assert r.status == 202 and r.json()["status"]["state"] == "Running"  # recording 15
    sid = r.json()["id"]
    st = poll(lambda: _status(client, sid), lambda s: s["state"] == "Failed")
    assert (st["state"], st["reason"], st["message"]) == (
        "Failed",
        "CONTAINER_EXITED_ERROR",
        "Sandbox container exited with code 1.",
    )
    assert client.call("GET", "/v1/sandboxes/%s/endpoints/44772" % sid).status == 200
    r = client.call("GET", "/v1/sandboxes/%s/proxy/44772/ping" % sid)
    assert r.status == 502 and r.json()["code"] == "BACKEND_CONNECTION_FAILED"
    assert client.call("POST", "/v1/sandboxes/%s/pause" % sid).status == 409
    assert client.call("DELETE", "/v1/sandboxes/" + sid).status == 204


def test_entrypoint_not_found_fails_with_127(client):
    sid = client.create(entrypoint=["/no/such/binary"])
    st = poll(lambda: _status(client, sid), lambda s: s["state"] == "Failed")
    assert st["state"] == "Failed" and st["message"] in (
        "Sandbox container exited with code 127.",
        "Sandbox container exited with code 126.",
    )


def test_clean_exit_is_terminated(client):
    sid = client.create(entrypoint=["true"])
    st = poll(lambda: _status(client, sid), lambda s: s["state"] != "Running")
    assert (st["state"], st["reason"]) == ("Terminated", "CONTAINER_EXITED")


# -- unimplemented route families -------------------------------------------------------------------
@pytest.mark.spec_exempt("unimplemented route families answer 501 [choice]")
@pytest.mark.spec_exempt("server 1.1.1 routes the June spec does not have (snapshots, templates, pools, egress)")
def test_snapshot_template_and_egress_routes(client):
    """Snapshots themselves: tiers/t1/docker/test_snapshots.py (here only their unknown ids)."""
    sid = client.create()
    for method, path, status, code in (
        ("POST", "/v1/sandboxes/nope/snapshots", 404, "DOCKER::SANDBOX_NOT_FOUND"),
        ("GET", "/v1/snapshots/snap-1", 404, "SNAPSHOT::NOT_FOUND"),
        ("DELETE", "/v1/snapshots/snap-1", 404, "SNAPSHOT::NOT_FOUND"),
        ("GET", "/v1/templates", 501, "FSB::API_NOT_SUPPORTED"),
        ("DELETE", "/templates/t1", 501, "FSB::API_NOT_SUPPORTED"),
        ("GET", "/v1/pools", 501, "KUBERNETES::POOL_NOT_SUPPORTED"),
        ("GET", "/v1/sandboxes/nope/networkpolicy", 404, "DOCKER::SANDBOX_NOT_FOUND"),
        ("GET", "/v1/sandboxes/fsb-x/networkpolicy", 404, "GENERAL::UNKNOWN_ERROR"),
    ):
        r = client.call(method, path)
        assert (r.status, set(r.json()), r.json()["code"]) == (status, {"code", "message"}, code), path
    r = client.call("GET", "/v1/snapshots")
    assert (r.status, r.json()) == (
        200,
        {
            "items": [],
            "pagination": {"page": 1, "pageSize": 20, "totalItems": 0, "totalPages": 0, "hasNextPage": False},
        },
    )
    # no egress sidecar: the server proxies to port 18080 through execd, where nothing listens
    assert client.call("GET", "/v1/sandboxes/%s/networkpolicy" % sid).status == 502
    r = client.call("PUT", "/v1/sandboxes/%s/networkpolicy" % sid, {"egress": [{"action": "allow"}]})
    assert r.status == 422 and r.json()["detail"][0]["loc"] == ["body", "egress", 0, "target"]


@pytest.mark.spec_exempt("diagnostics and metrics routes of server 1.1.1 are not in the June spec")
def test_diagnostics_show_entrypoint_output_and_lifecycle(client):
    sid = client.create(entrypoint=["sh", "-c", "echo out-line; echo err-line >&2; exec sleep 600"])
    r = poll(
        lambda: client.call("GET", "/v1/sandboxes/%s/diagnostics/logs?scope=container" % sid),
        lambda r: "err-line" in r.json()["content"],
        10,
    )
    doc = r.json()
    assert (r.status, doc["kind"], doc["scope"], doc["delivery"], doc["truncated"]) == (
        200,
        "logs",
        "container",
        "inline",
        False,
    )
    lines = doc["content"].splitlines()
    texts = [ln.split(" ", 1)[1] for ln in lines]
    assert texts[0] == "starting OpenSandbox Execd daemon at /opt/opensandbox/execd."  # bootstrap.sh (live)
    assert " Version     : v1.0.19" in texts and texts[-2:] == ["out-line", "err-line"]
    assert all(re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z ", ln) for ln in lines)
    assert doc["contentLength"] == len(doc["content"].encode())
    r = client.call("GET", "/v1/sandboxes/%s/diagnostics/logs?scope=ALL" % sid)
    assert r.json()["scope"] == "all" and r.json()["warnings"]
    r = client.call("GET", "/v1/sandboxes/%s/diagnostics/logs?scope=pod" % sid)
    assert (r.status, r.json()) == (
        400,
        {
            "code": "DIAGNOSTICS_SCOPE_UNSUPPORTED",
            "message": "Unsupported logs diagnostics scope 'pod'. Supported scopes: container, all.",
        },
    )
    r = client.call("GET", "/v1/sandboxes/%s/diagnostics/logs?tail=1" % sid)  # deprecated plain text
    assert r.headers.get("deprecation") == "true" and r.body.decode().endswith("err-line\n")
    client.call("POST", "/v1/sandboxes/%s/pause" % sid)
    ev = client.call("GET", "/v1/sandboxes/%s/diagnostics/events?scope=runtime" % sid).json()["content"]
    assert "Status:     paused" in ev and "Created:    " in ev
    client.call("POST", "/v1/sandboxes/%s/resume" % sid)
    text = client.call("GET", "/v1/sandboxes/%s/diagnostics/inspect" % sid).body.decode()
    assert "Status:         running" in text and "opensandbox.io/id=%s" % sid in text
    summary = client.call("GET", "/v1/sandboxes/%s/diagnostics/summary" % sid).body.decode()
    assert (
        summary.startswith("=" * 72 + "\nSANDBOX DIAGNOSTICS SUMMARY\nSandbox ID: %s" % sid) and "out-line" in summary
    )
    # the entrypoint exits: events say how
    sid2 = client.create(entrypoint=["sh", "-c", "exit 3"])
    assert wait_until(lambda: _status(client, sid2)["state"] == "Failed", 10)
    ev = client.call("GET", "/v1/sandboxes/%s/diagnostics/events?scope=runtime" % sid2).json()["content"]
    assert "Status:     exited" in ev and "Event:      Exited with code 3" in ev and "Finished:   " in ev


@pytest.mark.spec_exempt("diagnostics routes of server 1.1.1 are not in the June spec")
def test_the_hostname_is_the_containers_short_id(client):
    """Docker names a container's host by its short id, the 12 hex digits the server's diagnostics show as its
    "Container ID" (QUIRKS.md, "Hostname"): two sandboxes, two names."""
    seen = set()
    for _ in range(2):
        sid = client.create(entrypoint=["sh", "-c", "cat /proc/sys/kernel/hostname; exec sleep 600"])
        r = poll(
            lambda sid=sid: client.call("GET", "/v1/sandboxes/%s/diagnostics/logs?scope=container" % sid),
            lambda r: re.search(r" [0-9a-f]{12}$", r.json()["content"], re.M),
            10,
        )
        hostname = r.json()["content"].splitlines()[-1].split(" ", 1)[1]
        inspect = client.call("GET", "/v1/sandboxes/%s/diagnostics/inspect" % sid).body.decode()
        assert "\nContainer ID:   %s\n" % hostname in "\n" + inspect, inspect
        events = client.call("GET", "/v1/sandboxes/%s/diagnostics/events?scope=runtime" % sid).json()["content"]
        assert "Container:  %s (sandbox-%s)" % (hostname, sid) in events
        seen.add(hostname)
        assert client.call("DELETE", "/v1/sandboxes/" + sid).status == 204
    assert len(seen) == 2


@pytest.mark.spec_exempt("POST /v1/metrics/events (server 1.1.1 api/metrics.py) is not in the June spec")
def test_metrics_events_and_renew_state_machine(client):
    ok = {"eventType": "sandbox.create", "createDurationMs": 5, "success": True}
    assert client.call("POST", "/v1/metrics/events", ok).status == 204
    assert client.call("POST", "/metrics/events", ok).status == 404  # the metrics router is /v1 only
    r = client.call("POST", "/v1/metrics/events", dict(ok, createDurationMs=-1))
    assert r.status == 422 and r.json()["detail"][0]["loc"] == ["body", "createDurationMs"]
    sid = client.create(timeout=None)  # manual cleanup: no expiry to renew
    r = client.call("POST", "/v1/sandboxes/%s/renew-expiration" % sid, {"expiresAt": "2999-01-01T00:00:00Z"})
    assert (r.status, r.json()["code"]) == (409, "DOCKER::INVALID_EXPIRATION")
    r = client.call("PUT", "/v1/sandboxes")
    assert (r.status, r.headers.get("allow"), r.json()) == (405, "POST", {"detail": "Method Not Allowed"})
