"""t1: the mock's endpoints and its server-side proxy, with the real in-process execd: endpoint answers, both
execd prefixes, the proxy forwarding and streaming, and the execd token, gateway and execd mode options (split from
test_lifecycle.py)."""

from __future__ import annotations

import http.client
import json
import re
import socket
import uuid

import pytest

from mock_opensandbox.wire.relay import free_port
from tiers.t1.lifecycle import test_lifecycle
from tiers.t1.lifecycle.test_lifecycle import RID, Client, assert_uvicorn_headers
from tiers.toolkit.waits import wait_until

# the fixtures of test_lifecycle.py (a mock without execd's close delay, a Client of it), registered here too
osb = test_lifecycle.osb
client = test_lifecycle.client


# -- endpoints --------------------------------------------------------------------------------------
def test_endpoints(client, osb):
    sid = client.create()
    execd_port = osb.sandboxes[sid].execd_port
    r = client.call("GET", "/v1/sandboxes/%s/endpoints/44772" % sid)
    assert r.json() == {"endpoint": "127.0.0.1:%d/proxy/44772" % execd_port}
    assert_uvicorn_headers(r)
    assert client.call("GET", "/v1/sandboxes/%s/endpoints/18080?use_server_proxy=false" % sid).json() == {
        "endpoint": "127.0.0.1:%d/proxy/18080" % execd_port
    }
    ep8080 = client.call("GET", "/v1/sandboxes/%s/endpoints/8080" % sid).json()["endpoint"]
    m = re.match(r"^127\.0\.0\.1:(\d+)$", ep8080)
    assert m and int(m.group(1)) != execd_port
    assert client.call("GET", "/v1/sandboxes/%s/endpoints/8080" % sid).json()["endpoint"] == ep8080
    r = client.call("GET", "/v1/sandboxes/%s/endpoints/44772?use_server_proxy=true" % sid)
    assert r.json() == {"endpoint": "%s/v1/sandboxes/%s/proxy/44772" % (client.hostport, sid)}
    r = client.call("GET", "/sandboxes/%s/endpoints/44772?use_server_proxy=1" % sid)
    assert r.json() == {"endpoint": "%s/sandboxes/%s/proxy/44772" % (client.hostport, sid)}
    for port in (0, 70000):
        r = client.call("GET", "/v1/sandboxes/%s/endpoints/%d" % (sid, port))
        assert (r.status, r.json()) == (
            400,
            {"code": "DOCKER::INVALID_PORT", "message": "Port must be between 1 and 65535."},
        )
    r = client.call("GET", "/v1/sandboxes/%s/endpoints/abc" % sid)
    assert r.status == 422 and r.json()["detail"][0]["loc"] == ["path", "port"]
    r = client.call("GET", "/v1/sandboxes/%s/endpoints/44772?use_server_proxy=maybe" % sid)
    assert r.status == 422 and r.json()["detail"][0]["type"] == "bool_parsing"
    r = client.call("GET", "/v1/sandboxes/%s/endpoints/44772?expires=1795938427" % sid)
    assert (r.status, r.json()["code"]) == (400, "SANDBOX::API_NOT_SUPPORTED")
    r = client.call("GET", "/v1/sandboxes/%s/endpoints/44772?expires=1&use_server_proxy=true" % sid)
    assert (r.status, r.json()["code"]) == (400, "SANDBOX::INVALID_PARAMETER")
    # the published 8080 port goes away with the sandbox
    client.call("DELETE", "/v1/sandboxes/" + sid)
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", int(m.group(1))), timeout=2).close()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", execd_port), timeout=2).close()


def test_execd_reachable_at_both_prefixes(client):
    sid = client.create()
    ep = client.call("GET", "/v1/sandboxes/%s/endpoints/44772" % sid).json()["endpoint"]
    hostport = ep.split("/")[0]
    assert client.call("GET", "/proxy/44772/ping", hostport=hostport, key=False).status == 200
    assert client.call("GET", "/ping", hostport=hostport, key=False).status == 200


# -- server-side proxy ------------------------------------------------------------------------------
ECHO_APP = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
class H(BaseHTTPRequestHandler):
    def _do(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n).decode() if n else ""
        out = json.dumps({"method": self.command, "path": self.path, "body": body,
                          "headers": {k.lower(): v for k, v in self.headers.items()}}).encode()
        self.send_response(201)
        self.send_header("Content-Type", "application/json")
        self.send_header("X-App", "echo")
        self.send_header("Set-Cookie", "a=1")
        self.send_header("Set-Cookie", "b=2")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)
    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _do
    def log_message(self, *a): pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_server_proxy_forwards_method_headers_body_and_query(client, osb):
    port = free_port()
    sid = client.create(entrypoint=["python3", "-c", ECHO_APP, str(port)])
    assert wait_until(lambda: client.call("GET", "/v1/sandboxes/%s/proxy/%d/" % (sid, port)).status == 201, 20)
    r = client.call(
        "PUT",
        "/v1/sandboxes/%s/proxy/%d/a/b?x=1&x=2&y=%%20" % (sid, port),
        b"payload",
        headers={
            "X-Custom": "v",
            "Authorization": "Bearer s",
            "Cookie": "c=1",
            "X-Forwarded-For": "6.6.6.6",
            "Content-Type": "text/plain",
        },
    )
    assert r.status == 201
    seen = r.json()
    assert seen["method"] == "PUT" and seen["path"] == "/a/b?x=1&x=2&y=%20" and seen["body"] == "payload"
    h = seen["headers"]
    assert h["x-custom"] == "v" and h["content-type"] == "text/plain"
    for dropped in ("open-sandbox-api-key", "authorization", "cookie"):
        assert dropped not in h
    assert h["x-forwarded-for"].startswith("127.0.0.1") and h["x-forwarded-proto"] == "http"
    assert r.headers["x-app"] == "echo" and r.headers["server"] == "uvicorn" and RID.match(r.headers["x-request-id"])
    assert "b=2" in [v for k, v in r.raw_headers if k.lower() == "set-cookie"]
    # the direct endpoint (execd /proxy/<port>) reaches the same app
    ep = client.call("GET", "/v1/sandboxes/%s/endpoints/%d" % (sid, port)).json()["endpoint"]
    hostport, _, prefix = ep.partition("/")
    assert client.call("GET", "/%s/z" % prefix, hostport=hostport, key=False).json()["path"] == "/z"


def test_server_proxy_streams_sse_chunk_by_chunk(client, osb):
    sid = client.create()
    root = osb.sandboxes[sid].runtime
    gate = "/tmp/go-%s" % uuid.uuid4().hex[:8]
    c = http.client.HTTPConnection(client.hostport, timeout=30)
    body = json.dumps({"command": "echo first; while [ ! -e %s ]; do sleep 0.05; done; echo second" % gate})
    c.request(
        "POST",
        "/v1/sandboxes/%s/proxy/44772/command" % sid,
        body=body,
        headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
    )
    r = c.getresponse()
    assert r.status == 200 and r.getheader("content-type") == "text/event-stream"
    assert r.getheader("transfer-encoding") == "chunked" and r.getheader("server") == "uvicorn"
    buf = b""
    while b'"first"' not in buf:  # would block forever if the proxy buffered the whole response
        chunk = r.read1(65536)
        assert chunk, buf
        buf += chunk
    open(root.resolve(gate), "w").close()  # release the command only after the first event arrived
    rest = r.read()
    c.close()
    events = [json.loads(f) for f in (buf + rest).decode().split("\n\n") if f.strip()]
    assert events[0]["type"] == "init"
    assert [e["text"] for e in events if e["type"] == "stdout"] == ["first", "second"]
    assert events[-1]["type"] == "execution_complete"


@pytest.mark.spec_exempt("websocket upgrade refusal and an unknown execd route are off-spec by design")
def test_server_proxy_errors(client):
    sid = client.create()
    r = client.call("GET", "/v1/sandboxes/%s/proxy/0/x" % sid)
    assert (r.status, r.json()["code"]) == (400, "DOCKER::INVALID_PORT")
    r = client.call(
        "GET", "/v1/sandboxes/%s/proxy/44772/ws" % sid, headers={"Upgrade": "websocket", "Connection": "Upgrade"}
    )
    assert (r.status, r.json()) == (400, {"detail": "Websocket upgrade is not supported yet"})
    r = client.call("GET", "/v1/sandboxes/%s/proxy/44772/no/such/route" % sid)
    assert r.status == 404 and r.body == b"404 page not found"  # execd's own answer passes through


# -- configuration ----------------------------------------------------------------------------------
@pytest.mark.spec_exempt("execd answers 401 without its access token (QUIRKS.md, Transport, routing, auth)")
def test_execd_token_is_enforced_by_execd(opensandbox_mock_factory):
    m = opensandbox_mock_factory(execd_token="tok-123")
    c = Client(m.base_url, m.api_key)
    sid = c.create()
    hostport, _, prefix = c.call("GET", "/v1/sandboxes/%s/endpoints/44772" % sid).json()["endpoint"].partition("/")
    assert c.call("GET", "/%s/ping" % prefix, hostport=hostport).status == 401
    assert (
        c.call("GET", "/%s/ping" % prefix, hostport=hostport, headers={"X-EXECD-ACCESS-TOKEN": "tok-123"}).status == 200
    )
    assert (
        c.call("GET", "/v1/sandboxes/%s/proxy/44772/ping" % sid, headers={"X-EXECD-ACCESS-TOKEN": "tok-123"}).status
        == 200
    )


@pytest.mark.spec_exempt("requests without the gateway routing header are refused by design")
def test_gateway_mode_endpoint_headers_must_be_replayed(opensandbox_mock_factory):
    m = opensandbox_mock_factory(gateway=True)
    c = Client(m.base_url, m.api_key)
    sid = c.create()
    ep = c.call("GET", "/v1/sandboxes/%s/endpoints/44772" % sid).json()
    assert ep["headers"] == {"OpenSandbox-Ingress-To": "%s-44772" % sid}
    hostport, _, prefix = ep["endpoint"].partition("/")
    assert c.call("GET", "/%s/ping" % prefix, hostport=hostport).status != 200
    assert c.call("GET", "/%s/ping" % prefix, hostport=hostport, headers=ep["headers"]).status == 200
    proxied = c.call("GET", "/v1/sandboxes/%s/endpoints/44772?use_server_proxy=true" % sid).json()
    assert "headers" not in proxied  # the server proxy adds the routing header itself
    assert c.call("GET", "/v1/sandboxes/%s/proxy/44772/ping" % sid).status == 200


def test_execd_mode_default_and_per_sandbox_switch(opensandbox_mock_factory):
    m = opensandbox_mock_factory(execd_mode="latest", execd_close_delay=0)
    assert m.execd_mode == "latest"
    c = Client(m.base_url, m.api_key)
    sid = c.create()
    hostport, _, prefix = c.call("GET", "/v1/sandboxes/%s/endpoints/44772" % sid).json()["endpoint"].partition("/")

    def stdout(cmd):
        r = c.call("POST", "/%s/command" % prefix, {"command": cmd}, hostport=hostport)
        return [json.loads(f)["text"] for f in r.body.decode().split("\n\n") if f.strip() and '"stdout"' in f]

    assert "".join(stdout("printf 'a\\nb\\n'")) == "a\nb\n"  # latest: byte-exact
    m.set_execd_mode(sid, "v1.1.0")
    assert stdout("printf 'a\\nb\\n'") == ["a", "b"]  # v1.1.0: one event per line, endings stripped
    with pytest.raises(ValueError):
        m.set_execd_mode(sid, "v9")
