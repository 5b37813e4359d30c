"""Live: the lifecycle corpus of tiers/t2/server/test_server_oracle.py (fixed cases, malformed bodies, auth and
X-Request-ID) sent to the live server and to a fresh mock; same status and error bodies, the same explained
differences. A create the live server accepts is deleted at once."""

from __future__ import annotations

import json
import os
import re

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.t2.server import oracle_support as support
from tiers.t2.server import test_server_oracle as corpus
from tiers.t4.liveconfig import allowed_host_paths

pytestmark = pytest.mark.spec_exempt("server 1.1.1 behaviours the June OpenAPI spec does not document")


class Live:
    def __init__(self, root: str, api_key: str):
        self.root, self.api_key = root.rstrip("/"), api_key

    def request(self, method, path, headers, body, keep=False):
        h = {k: v for k, v in dict(headers).items() if v is not None}
        h.setdefault("OPEN-SANDBOX-API-KEY", self.api_key)
        out = support.urllib_exchange(self.root + path, method, h, body, 60)
        if not keep and method == "POST" and path.rstrip("/").endswith("/sandboxes") and out[0] == 202:
            sid = json.loads(out[2]).get("id")
            if sid:  # never leave a sandbox behind on the shared stack
                self.request("DELETE", "/v1/sandboxes/" + sid, {}, None)
        return out


@pytest.fixture(scope="module")
def live(live_server):
    return Live(live_server.root, live_server.api_key)


@pytest.fixture(scope="module")
def mock():
    """Overrides the toolkit's ``mock`` (tiers/toolkit/fixtures.py): the default execd generation, with the
    live server's ``[storage] allowed_host_paths`` (``./local-up.sh env`` exports them), which its
    VOLUME::HOST_PATH_NOT_ALLOWED message lists."""
    # the live stack's [egress] (./local-up.sh env: OSB_EGRESS_MODE; off = no egress image, as before)
    with MockOpenSandbox(
        allowed_host_paths=allowed_host_paths(), egress_mode=os.environ.get("OSB_EGRESS_MODE") or "off"
    ) as m:
        yield m


@pytest.mark.parametrize(
    "method,path,body", corpus.FIXED, ids=["%s %s %s" % (m, p, json.dumps(b)[:40]) for m, p, b in corpus.FIXED]
)
def test_fixed_corpus_live(mock, live, method, path, body):
    support.compare(mock, live, method, path, body)


@pytest.mark.parametrize("raw,ctype", corpus.RAW, ids=[repr(r[:20]) + str(c) for r, c in corpus.RAW])
def test_malformed_bodies_live(mock, live, raw, ctype):
    support.compare(mock, live, "POST", "/v1/sandboxes", headers={"Content-Type": ctype} if ctype else {}, raw=raw)


@pytest.mark.parametrize(
    "headers", [{"OPEN-SANDBOX-API-KEY": ""}, {"OPEN-SANDBOX-API-KEY": "wrong-key"}, {"x-request-id": "my-trace-1"}, {}]
)
def test_auth_and_request_id_live(mock, live, headers):
    support.compare(mock, live, "GET", "/v1/sandboxes/00000000-0000-0000-0000-000000000000", headers=headers)


def _create(target_request, body):
    st, _, raw = target_request(
        "POST", "/v1/sandboxes", {"Content-Type": "application/json"}, json.dumps(body).encode(), keep=True
    )
    assert st == 202, raw
    return json.loads(raw)["id"]


def _shape(status, headers, body, sid):
    """Status + the answer with the sandbox id, timestamps and ports taken out."""
    import re

    text = body.decode("utf-8", "replace").replace(sid, "<id>")
    ctype = headers.get("content-type", "")
    if "json" in ctype:
        doc = json.loads(text)
        if isinstance(doc, dict) and "code" in doc:
            return status, doc
        if isinstance(doc, dict):
            return status, sorted(doc)
        return status, type(doc).__name__
    lines = [re.split(r":\s", ln, maxsplit=1)[0] for ln in text.splitlines()]
    return status, ctype.split(";")[0], lines[:3]


def test_state_machine_and_diagnostics_live(mock, live):
    """One sandbox on each side, the same requests: same statuses, error bodies, JSON keys, text layouts."""
    body = {
        "image": {"uri": "local/python:3-slim"},
        "timeout": 600,
        "resourceLimits": {"cpu": "500m"},
        "entrypoint": ["sh", "-c", "echo out-line host=$(cat /proc/sys/kernel/hostname); exec sleep 600"],
        "metadata": {"team": "t4"},
    }
    lsid = _create(live.request, body)
    msid = _create(lambda *a, keep=True: support.mock_request(mock, *a), body)
    future = "2999-01-01T00:00:00Z"
    steps = [
        ("GET", "/v1/sandboxes/{id}", None),
        ("GET", "/v1/sandboxes/{id}/endpoints/44772", None),
        ("GET", "/v1/sandboxes/{id}/endpoints/8080", None),
        ("GET", "/v1/sandboxes/{id}/diagnostics/logs?scope=container", None),
        ("GET", "/v1/sandboxes/{id}/diagnostics/events?scope=all", None),
        ("GET", "/v1/sandboxes/{id}/diagnostics/inspect", None),
        ("GET", "/v1/sandboxes/{id}/diagnostics/summary", None),
        ("GET", "/v1/sandboxes/{id}/diagnostics/logs?scope=nope", None),
        ("GET", "/v1/sandboxes/{id}/networkpolicy", None),
        ("PATCH", "/v1/sandboxes/{id}/networkpolicy", [{"action": "allow", "target": "a.com"}]),
        ("POST", "/v1/sandboxes/{id}/renew-expiration", {"expiresAt": "2001-01-01T00:00:00Z"}),
        ("POST", "/v1/sandboxes/{id}/renew-expiration", {"expiresAt": future}),
        ("PATCH", "/v1/sandboxes/{id}/metadata", {"team": None, "x": "1"}),
        ("PATCH", "/v1/sandboxes/{id}/metadata", {"opensandbox.io/id": "x"}),
        ("POST", "/v1/sandboxes/{id}/pause", None),
        ("POST", "/v1/sandboxes/{id}/pause", None),
        ("GET", "/v1/sandboxes/{id}/diagnostics/events?scope=runtime", None),
        ("POST", "/v1/sandboxes/{id}/snapshots", None),  # paused: 409 before any snapshot is taken
        ("POST", "/v1/sandboxes/{id}/resume", None),
        ("POST", "/v1/sandboxes/{id}/resume", None),
        ("DELETE", "/v1/sandboxes/{id}", None),
        ("DELETE", "/v1/sandboxes/{id}", None),
        ("GET", "/v1/sandboxes/{id}/diagnostics/logs?scope=container", None),
    ]
    try:
        import time

        time.sleep(2)  # both entrypoints printed their line
        # the hostname inside is the container's short id, the diagnostics' "Container ID" (QUIRKS.md, "Hostname")
        for request, sid in ((live.request, lsid), (lambda *a: support.mock_request(mock, *a), msid)):
            logs = json.loads(request("GET", "/v1/sandboxes/%s/diagnostics/logs?scope=container" % sid, {}, None)[2])
            inspect = request("GET", "/v1/sandboxes/%s/diagnostics/inspect" % sid, {}, None)[2].decode()
            host = re.findall(r"host=(\S+)", logs["content"])
            assert host and re.search(r"^Container ID: +%s$" % re.escape(host[0]), inspect, re.M), (host, inspect)
        for method, path, b in steps:
            raw = json.dumps(b).encode() if b is not None else None
            hdrs = {"Content-Type": "application/json"} if b is not None else {}
            want = _shape(*live.request(method, path.format(id=lsid), hdrs, raw), lsid)
            got = _shape(*support.mock_request(mock, method, path.format(id=msid), hdrs, raw), msid)
            assert got == want, (method, path)
    finally:
        live.request("DELETE", "/v1/sandboxes/" + lsid, {}, None)
        support.mock_request(mock, "DELETE", "/v1/sandboxes/" + msid, {}, None)
