"""The mock with ``runtime="kubernetes"`` and its gateway (``gateway=True``) against the Kubernetes oracle
(tiers/t2/clients/server_oracle_k8s_app.py, ``[ingress] mode = "gateway"`` with ``[ingress.secure_access]``), in both
route modes (``header``, ``uri``): the same endpoint requests to both, compared on status and body. Normalised only
what must differ: sandbox ids, the gateway address and the server's host, the per-sandbox access token (random on
both) and the route signature (the keys differ; the mock's is checked against its own key instead).
"""

from __future__ import annotations

import base64
import re
import time
from typing import Any

import pytest

from mock_opensandbox.lifecycle.signing import canonical, hex8
from mock_opensandbox.server import MockOpenSandbox
from tiers.t2.clients import Unavailable
from tiers.t2.k8s.test_server_oracle_k8s import CREATE, K8sOracle, pending_create
from tiers.t2.k8s.test_server_oracle_k8s_pools import mock_call

pytestmark = pytest.mark.spec_exempt("server 1.1.1 Kubernetes-runtime gateway endpoints the June OpenAPI spec omits")


@pytest.fixture(scope="module", params=["header", "uri"])
def pair(request):
    route = request.param
    try:
        o = K8sOracle(route=route)
    except Unavailable as e:
        pytest.skip("server oracle unavailable: %s" % e)
    try:
        with MockOpenSandbox(
            runtime="kubernetes", gateway=True, gateway_route=route, egress_mode="off", timing="fast"
        ) as m:
            yield o, m
    finally:
        o.close()


def _sandboxes(o: K8sOracle, m: MockOpenSandbox, case: str, body: dict) -> tuple[str, str]:
    fut, osid = pending_create(o, body, case + "-" + o.hello["route"], to="ready")
    assert fut.result(timeout=10)[0] == 202
    st, doc = mock_call(m, "POST", "/v1/sandboxes", dict(body, metadata={"case": case}))
    assert st == 202, doc
    return osid, doc["id"]


def _norm(doc: Any, sid: str, gateway: str, secret: bytes | None = None) -> Any:
    """Ids, the gateway address, the server's host and tokens; a signature is checked with ``secret`` first."""
    if isinstance(doc, dict):
        return {k: _norm(v, sid, gateway, secret) for k, v in doc.items()}
    if not isinstance(doc, str):
        return doc
    if secret is not None:  # a signed route: <id>-<port>-<b36>-<sig> or /<id>/<port>/<b36>/<sig>
        m = re.search(r"%s[-/](\d+)[-/]([0-9a-z]+)[-/]([0-9a-f]{8})([0-9a-z])$" % re.escape(sid), doc)
        if m:
            assert m.group(3) == hex8(secret, canonical(sid, int(m.group(1)), m.group(2))), doc
            doc = doc[: m.start(3)] + "<sig>"
    doc = doc.replace(sid, "<id>").replace(gateway, "<gateway>")
    doc = re.sub(r"^[^/]*(/v1)?/sandboxes/", r"<host>\1/sandboxes/", doc)
    doc = re.sub(r"\(\d{10}\)", "(<now>)", doc)
    return "<token>" if re.fullmatch(r"[A-Za-z0-9_-]{32}", doc) else doc


def both(o: K8sOracle, m: MockOpenSandbox, osid: str, msid: str, path: str) -> Any:
    ost, _, odoc = o.request("GET", path % osid)
    mst, mdoc = mock_call(m, "GET", path % msid)
    osecret = base64.b64decode(o.hello["secure_access"]["key"])
    want = (ost, _norm(odoc, osid, o.hello["gateway"], osecret))
    got = (mst, _norm(mdoc, msid, m.ingress.address, m.ingress.keys.keys[m.ingress.keys.active]))
    assert got == want, "%s\n oracle: %r\n mock:   %r" % (path, want, got)
    return mdoc


def test_gateway_endpoints_plain_sandbox(pair):
    """A sandbox without secureAccess: the gateway route of each port, the server-proxy URL (routing header
    dropped), signed routes, and the 400s of expires (past, with use_server_proxy) and of a bad port."""
    o, m = pair
    osid, msid = _sandboxes(o, m, "plain", CREATE)
    later = int(time.time()) + 600
    for path in (
        "/v1/sandboxes/%s/endpoints/44772",
        "/v1/sandboxes/%s/endpoints/8080",
        "/v1/sandboxes/%s/endpoints/44772?use_server_proxy=true",
        "/v1/sandboxes/%%s/endpoints/44772?expires=%d" % later,
        "/v1/sandboxes/%%s/endpoints/8080?expires=%d" % later,
        "/v1/sandboxes/%s/endpoints/44772?expires=1",
        "/v1/sandboxes/%s/endpoints/44772?expires=-1",
        "/v1/sandboxes/%%s/endpoints/44772?expires=%d&use_server_proxy=true" % later,
        "/v1/sandboxes/%s/endpoints/0",
    ):
        both(o, m, osid, msid, path)
    assert o.request("DELETE", "/v1/sandboxes/" + osid)[0] == 204


def test_gateway_endpoints_secure_access_sandbox(pair):
    """``secureAccess: true`` is accepted; its endpoint carries ``OpenSandbox-Secure-Access`` (kept with
    use_server_proxy), a signed route carries no token header."""
    o, m = pair
    osid, msid = _sandboxes(o, m, "secure", dict(CREATE, secureAccess=True))
    later = int(time.time()) + 600
    doc = both(o, m, osid, msid, "/v1/sandboxes/%s/endpoints/44772")
    assert doc["headers"]["OpenSandbox-Secure-Access"] == m.ingress.token(msid)
    both(o, m, osid, msid, "/v1/sandboxes/%s/endpoints/44772?use_server_proxy=true")
    both(o, m, osid, msid, "/v1/sandboxes/%%s/endpoints/44772?expires=%d" % later)
    assert o.request("DELETE", "/v1/sandboxes/" + osid)[0] == 204
