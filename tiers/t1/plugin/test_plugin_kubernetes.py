"""The plugin against the mock in Kubernetes mode (``runtime="kubernetes"``) with the ingress gateway and secure
access (QUIRKS.md, "Kubernetes runtime: ..."): commands, files and a port through the gateway's ``uri`` route with
the access token replayed and masked, the server's ``KUBERNETES::*`` create failures as EPP errors, and pools.
One mock per module (its creates time out after 2 s, ``sandbox_create_timeout``; Pool capacity after 1 s)."""

from __future__ import annotations

import base64
import json
import urllib.request

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit.epp import EppClient, RpcError
from tiers.toolkit.plugin import importable

SECURE = "OpenSandbox-Secure-Access"


@pytest.fixture(scope="module")
def k8s():
    with MockOpenSandbox(
        runtime="kubernetes", gateway=True, gateway_route="uri", sandbox_create_timeout=2, pool_acquisition_timeout=1
    ) as osb:
        yield osb


@pytest.fixture
def cfg(k8s):
    k8s.faults.clear()
    yield {"base_url": k8s.base_url, "api_key": k8s.api_key}
    k8s.faults.clear()


def _gateway_seen(osb):
    """Record (path, whether the secure-access header came) of every request the gateway routes."""
    app = osb._gateway.server.app
    seen: list = []
    route = app.route

    def spy(req):
        seen.append((req.path, bool(req.headers.get(SECURE))))
        return route(req)

    app.route = spy
    return seen, lambda: setattr(app, "route", route)


def test_uri_route_secure_access_exec_files_port(tmp_path, k8s, cfg):
    seen, restore = _gateway_seen(k8s)
    try:
        with EppClient(str(tmp_path), {**cfg, "secure_access": "true"}) as epp:
            sid = epp.call("sandbox.create", {"template": "base", "timeout": 300})["sandbox_id"]
            assert k8s.ingress.token(sid), "created with secureAccess: the server granted a token"
            run = epp.call(
                "exec.run",
                {
                    "sandbox_id": sid,
                    "cmd": "sh",
                    "args": ["-c", "echo via-uri; hostname; [ -e /.dockerenv ] || echo no-dockerenv; exit 3"],
                    "timeout": 30,
                },
                timeout=40,
            )
            # a pod's hostname is its name, the BatchSandbox's pod <id>-0 (QUIRKS.md, "Hostname"), and its
            # container runtime makes no /.dockerenv (QUIRKS.md, "/.dockerenv")
            assert (run["stdout"], run["exit_code"]) == ("via-uri\n%s-0\nno-dockerenv\n" % sid, 3)
            data = base64.b64encode(b"k8s \x00\xff round trip").decode()
            epp.call("files.write", {"sandbox_id": sid, "path": "/tmp/k.bin", "content_b64": data})
            assert epp.call("files.read", {"sandbox_id": sid, "path": "/tmp/k.bin"}) == {"content_b64": data}
            port = epp.call("ports.url", {"sandbox_id": sid, "port": 44772})
            host = k8s.ingress.address
            assert port["url"] == f"http://{host}/{sid}/44772", port  # the uri route: a path after host:port
            token = port["headers"][SECURE]
            assert token == k8s.ingress.token(sid)
            # the URL and headers the plugin hands out reach execd through the gateway
            ping = urllib.request.Request(port["url"] + "/ping", headers=port["headers"])
            with urllib.request.urlopen(ping, timeout=10) as resp:
                assert resp.status == 200
            # the token is a secret: masked in errors like the API key, whether the endpoint was just resolved or
            # comes from the cache of an earlier plugin process
            importable()
            from errors import SECRETS
            from osb import OpenSandbox

            SECRETS.__init__()
            client = OpenSandbox(k8s.base_url, api_key=k8s.api_key, data_dir=str(tmp_path))
            assert client.endpoint(sid, 44772)[1][SECURE] == token
            assert SECRETS.redact(f"echo {SECURE}: {token}") == f"echo {SECURE}: ***"
            SECRETS.__init__()
            assert client.execd(sid).endpoint_headers[SECURE] == token  # from the data dir's cache
            assert SECRETS.redact(token) == "***"
            SECRETS.__init__()
            epp.call("sandbox.kill", {"sandbox_id": sid})
            with_token = [ln for ln in epp.lines if token.encode() in ln]
            assert len(with_token) == 1 and b"authentication_audience" in with_token[0]  # only ports.url's answer
            assert token.encode() not in epp.stderr
    finally:
        restore()
    execd = [(p, s) for p, s in seen if p.startswith(f"/{sid}/44772/")]
    assert execd and all(s for _, s in execd), seen  # every execd request went through the gateway with the token


@pytest.mark.spec_exempt("the lifecycle spec lists no 504 for a create; the Kubernetes runtime answers one")
def test_pod_ready_timeout_is_the_servers_answer(tmp_path, k8s, cfg):
    """A pod that never becomes Ready: the server answers 504 KUBERNETES::POD_READY_TIMEOUT after its 2 s."""
    k8s.faults.add(kind="pod", pod="unschedulable", count=1)
    with EppClient(str(tmp_path), cfg) as epp:
        with pytest.raises(RpcError) as info:
            epp.call("sandbox.create", {"template": "base", "timeout": 300, "options": {"ready_timeout": "10"}})
    err = info.value
    assert err.code == -32000 and err.sdk_code == "E3001", err.data
    assert err.data["osb_code"] == "KUBERNETES::POD_READY_TIMEOUT" and err.data["retryable"] is True
    assert "sandbox_create_timeout_seconds" in err.data["suggestion"]
    assert all(sb.deleted for sb in k8s.sandboxes.values() if sb.id not in _live(k8s))


@pytest.mark.spec_exempt("the lifecycle spec lists no 403 or 429 for a create; the Kubernetes runtime answers them")
@pytest.mark.parametrize(
    ("pod", "osb_code", "text"),
    [
        ("quota", "KUBERNETES::QUOTA_EXCEEDED", "exceeded quota"),
        ("capacity", "KUBERNETES::POOL_CAPACITY_EXHAUSTED", ""),
    ],
)
def test_quota_and_pool_capacity_are_the_quota_error(tmp_path, k8s, cfg, pod, osb_code, text):
    """A namespace ResourceQuota that admits no more workloads (the server's 403) and no Pool capacity within the
    acquisition timeout (429 with Retry-After): the EPP quota error (-32004), not a permission error, and no sandbox
    is left."""
    k8s.faults.add(kind="pod", pod=pod, count=1)
    before = _live(k8s)
    with EppClient(str(tmp_path), cfg) as epp:
        with pytest.raises(RpcError) as info:
            epp.call("sandbox.create", {"template": "base", "timeout": 300})
    err = info.value
    assert err.code == -32004 and err.data["osb_code"] == osb_code, err.data
    assert text in err.message and _live(k8s) == before


def _live(osb):
    return {sid for sid, sb in osb.sandboxes.items() if not getattr(sb, "deleted", False)}


@pytest.mark.parametrize(
    ("reason", "sdk_code"), [("ImagePullBackOff", "E2001"), ("CrashLoopBackOff", None)], ids=["image", "crash"]
)
def test_pod_failed(tmp_path, k8s, cfg, reason, sdk_code):
    k8s.faults.add(kind="pod", pod="failed", reason=reason, count=1)
    with EppClient(str(tmp_path), cfg) as epp:
        with pytest.raises(RpcError) as info:
            epp.call("sandbox.create", {"template": "base", "timeout": 300})
    err = info.value
    assert err.data["osb_code"] == "KUBERNETES::POD_FAILED" and reason in err.message
    assert err.code == -32000 and err.sdk_code == sdk_code, err.data
    assert ("registry" in err.data["suggestion"]) == (sdk_code == "E2001")
    assert "server log" not in err.data["suggestion"]


@pytest.mark.spec_exempt("the lifecycle spec has no /v1/pools; the Kubernetes runtime serves it (server api/pool.py)")
def test_pool_ref(tmp_path, k8s, cfg):
    spec = {"containers": [{"name": "sandbox", "image": "python:3.12-slim"}]}
    body = {
        "name": "warm",
        "template": {"spec": spec},
        "capacitySpec": {"bufferMin": 1, "bufferMax": 1, "poolMin": 0, "poolMax": 2},
    }
    req = urllib.request.Request(
        k8s.base_url + "/v1/pools",
        data=json.dumps(body).encode(),
        headers={"OPEN-SANDBOX-API-KEY": k8s.api_key, "Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(req, timeout=10) as resp:
        assert resp.status == 201
    with EppClient(str(tmp_path), {**cfg, "pool": "warm"}) as epp:
        sid = epp.call("sandbox.create", {"template": "base", "timeout": 300})["sandbox_id"]
        run = epp.call("exec.run", {"sandbox_id": sid, "cmd": "echo", "args": ["pooled"], "timeout": 30}, timeout=40)
        assert run["stdout"] == "pooled\n"
        epp.call("sandbox.kill", {"sandbox_id": sid})
        with pytest.raises(RpcError) as info:
            epp.call("sandbox.create", {"template": "base", "timeout": 300, "options": {"pool": "cold"}})
    err = info.value
    assert (err.code, err.sdk_code, err.data["osb_code"]) == (-32002, "E2001", "KUBERNETES::POOL_NOT_FOUND")
    assert "pool setting" in err.data["suggestion"]
