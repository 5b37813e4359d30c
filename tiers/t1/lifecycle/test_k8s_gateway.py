"""The mock's ingress gateway (mock_opensandbox/docker/gateway.py) with ``runtime="kubernetes"``: a client that does
what the official SDKs do (take the endpoint and its headers from ``GET /sandboxes/{id}/endpoints/44772``, replay
the headers on every execd request) reaches execd through it in both route modes; requests without a route, with a
wrong access token or with an expired signature are refused as OpenSandbox's gateway refuses them (its answers:
components/ingress/pkg/proxy/ at 3bb6fad; QUIRKS.md, "Kubernetes runtime: gateway and secure access").
"""

from __future__ import annotations

import http.client
import json
import time
from typing import Any

import pytest

from mock_opensandbox.lifecycle.signing import canonical, encode_expires_b36, hex8
from mock_opensandbox.server import MockOpenSandbox
from mock_opensandbox.wire.formdata import encode

pytestmark = pytest.mark.spec_exempt("the ingress gateway's own answers (components/ingress at 3bb6fad), not execd's")

CREATE = {
    "image": {"uri": "python:3-slim"},
    "entrypoint": ["sleep", "1000"],
    "timeout": 600,
    "resourceLimits": {"cpu": "500m", "memory": "512Mi"},
}


@pytest.fixture(scope="module", params=["header", "uri"])
def osb(request):
    with MockOpenSandbox(
        runtime="kubernetes", gateway=True, gateway_route=request.param, egress_mode="off", timing="fast"
    ) as m:
        yield m


def call(hostport: str, method: str, path: str, body: Any = None, headers: dict | None = None) -> tuple:
    host, _, port = hostport.partition(":")
    c = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        raw = json.dumps(body).encode() if isinstance(body, (dict, list)) else body
        c.request(method, path, raw, dict({"Content-Type": "application/json"}, **(headers or {})))
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


def api(m: MockOpenSandbox, method: str, path: str, body: Any = None) -> Any:
    st, _, raw = call(m.base_url.split("//")[1], method, path, body, {"OPEN-SANDBOX-API-KEY": m.api_key})
    assert st in (200, 202), raw
    return json.loads(raw)


def sandbox(m: MockOpenSandbox, secure: bool) -> str:
    return api(m, "POST", "/v1/sandboxes", dict(CREATE, secureAccess=secure))["id"]


def via(m: MockOpenSandbox, ep: dict, method: str, path: str, body: Any = None, headers: dict | None = None):
    """A request the SDK way: to the endpoint (host:port plus the uri route's path) with its headers."""
    hostport, _, prefix = ep["endpoint"].partition("/")
    return call(
        hostport,
        method,
        ("/" + prefix if prefix else "") + path,
        body,
        dict(ep.get("headers") or {}, **(headers or {})),
    )


def endpoint(m: MockOpenSandbox, sid: str, query: str = "") -> dict:
    return api(m, "GET", "/v1/sandboxes/%s/endpoints/44772%s" % (sid, query))


def test_command_and_files_through_the_gateway(osb):
    """POST /command (SSE) and a file upload then download through the gateway, with the endpoint's headers."""
    sid = sandbox(osb, secure=True)
    ep = endpoint(osb, sid)
    st, hdrs, raw = via(osb, ep, "POST", "/command", {"command": "echo through-gateway"})
    assert st == 200 and b"through-gateway" in raw, raw
    assert hdrs["reverse-proxy-server-powerby"] == "OpenSandbox-ingress"
    body, ctype = encode(
        [
            ("metadata", "metadata", "application/json", json.dumps({"path": "/tmp/gw.txt"}).encode()),
            ("file", "file", "application/octet-stream", b"payload-42"),
        ]
    )
    st, _, raw = via(osb, ep, "POST", "/files/upload", body, {"Content-Type": ctype})
    assert st == 200, raw
    st, _, raw = via(osb, ep, "GET", "/files/download?path=/tmp/gw.txt")
    assert (st, raw) == (200, b"payload-42")


def test_refusals_without_route_or_with_wrong_token(osb):
    """No route: 400; an unknown sandbox: 404; a secure sandbox without its token or with a wrong one: 401;
    a plain sandbox needs none. Text answers as Go's http.Error writes them."""
    gw = osb.ingress.address
    sid = sandbox(osb, secure=True)
    ep = endpoint(osb, sid)
    if osb.ingress.route == "header":
        st, hdrs, raw = call(gw, "GET", "/ping")
        assert (st, raw) == (400, b"OpenSandbox Ingress: invalid ingress route: invalid host: %s\n" % gw.encode())
        assert hdrs["content-type"] == "text/plain; charset=utf-8" and hdrs["x-content-type-options"] == "nosniff"
        st, _, raw = call(gw, "GET", "/ping", headers={"OpenSandbox-Ingress-To": "nosuch-44772"})
    else:
        st, _, raw = call(gw, "GET", "/ping")
        assert st == 400 and raw.startswith(b"OpenSandbox Ingress: invalid ingress route: invalid URI path format")
        st, _, raw = call(gw, "GET", "/nosuch/44772/ping")
    assert (st, raw) == (404, b"OpenSandbox Ingress: sandbox not found: nosuch\n")
    without = dict(ep, headers={k: v for k, v in ep["headers"].items() if k != "OpenSandbox-Secure-Access"})
    st, _, raw = via(osb, without, "GET", "/ping")
    assert (st, raw) == (401, b"OpenSandbox Ingress: signature: signature required for this sandbox\n")
    st, _, raw = via(osb, ep, "GET", "/ping", headers={"OpenSandbox-Secure-Access": "wrong"})
    assert (st, raw) == (401, b"OpenSandbox Ingress: signature: secure access header mismatch\n")
    assert via(osb, ep, "GET", "/ping")[0] == 200
    assert via(osb, endpoint(osb, sandbox(osb, secure=False)), "GET", "/ping")[0] == 200


def test_signed_route_and_expired_signature(osb):
    """A signed route (``?expires=``) opens a secure sandbox without its token; one past its expiry (signed with
    the mock's key) is 401 access expired, a forged one 401 signature mismatch."""
    sid = sandbox(osb, secure=True)
    signed = endpoint(osb, sid, "?expires=%d" % (int(time.time()) + 600))
    assert "OpenSandbox-Secure-Access" not in (signed.get("headers") or {})
    assert via(osb, signed, "GET", "/ping")[0] == 200
    keys = osb.ingress.keys
    past = encode_expires_b36(int(time.time()) - 5)
    sig = hex8(keys.keys[keys.active], canonical(sid, 44772, past)) + keys.active
    forged = "00000000" + keys.active
    for s, want in ((sig, b"signature: access expired"), (forged, b"signature: unauthorized: signature mismatch")):
        if osb.ingress.route == "header":
            ep = {
                "endpoint": osb.ingress.address,
                "headers": {
                    "OpenSandbox-Ingress-To": "%s-44772-%s-%s"
                    % (sid, past if s == sig else encode_expires_b36(int(time.time()) + 60), s)
                },
            }
        else:
            exp = past if s == sig else encode_expires_b36(int(time.time()) + 60)
            ep = {"endpoint": "%s/%s/44772/%s/%s" % (osb.ingress.address, sid, exp, s)}
        st, _, raw = via(osb, ep, "GET", "/ping")
        assert (st, raw) == (401, b"OpenSandbox Ingress: " + want + b"\n")


def test_sse_stream_arrives_incrementally(osb):
    """A command printing a line every 0.4 s: its first event reaches the client through the gateway long before
    the command ends (the gateway does not buffer the stream)."""
    sid = sandbox(osb, secure=False)
    ep = endpoint(osb, sid)
    hostport, _, prefix = ep["endpoint"].partition("/")
    host, _, port = hostport.partition(":")
    c = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        body = json.dumps({"command": "for i in 1 2 3 4 5; do echo tick$i; sleep 0.4; done"})
        hdrs = dict(ep.get("headers") or {}, **{"Content-Type": "application/json"})
        t0 = time.monotonic()
        c.request("POST", ("/" + prefix if prefix else "") + "/command", body, hdrs)
        r = c.getresponse()
        assert r.status == 200
        seen = b""
        while b"tick1" not in seen:
            chunk = r.read1(65536)
            assert chunk, seen
            seen += chunk
        first = time.monotonic() - t0
        rest = r.read()
        total = time.monotonic() - t0
    finally:
        c.close()
    assert b"tick5" in seen + rest
    assert first < 1.0 and total - first > 1.0, (first, total)
