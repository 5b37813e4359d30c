"""t1: every lifecycle route of the mock over HTTP: status codes, body key sets, headers, auth,
validation, the Host/Origin guards, pause/resume/renew and expiry. Endpoints and the server-side proxy (with the
real in-process execd): test_lifecycle_proxy.py; entrypoint outcomes, diagnostics, metrics and unimplemented
routes: test_lifecycle_diagnostics.py."""

from __future__ import annotations

import json
import os
import re
import threading
import uuid

import pytest

from mock_opensandbox.lifecycle.model import FakeClock
from tiers.toolkit import rest
from tiers.toolkit.waits import wait_until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXCHANGES = os.path.normpath(os.path.join(REPO, "..", "shared", "live", "exchanges"))
RID = re.compile(r"^[0-9a-f]{32}$")
CREATE = {
    "image": {"uri": "local/python:3-slim"},
    "entrypoint": ["tail", "-f", "/dev/null"],
    "timeout": 1800,
    "resourceLimits": {"cpu": "500m", "memory": "512Mi"},
    "metadata": {"purpose": "live-recording"},
}


class Client:
    def __init__(self, base_url: str, api_key: str | None):
        self.hostport = base_url.split("://", 1)[1]
        self.api_key = api_key

    def call(self, method, path, body=None, headers=None, key=True, hostport=None, timeout=30) -> rest.Reply:
        """One request on its own connection. ``Connection: close`` and waiting for the server's EOF
        make sure the server finished the exchange (and reported it to the spec guard) on return."""
        h = {"OPEN-SANDBOX-API-KEY": self.api_key} if key and self.api_key else {}
        h.update(headers or {})
        # (a caller's own Connection header keeps the connection open: no wait for the server's EOF then)
        return rest.call(
            hostport or self.hostport,
            method,
            path,
            body,
            h,
            timeout=timeout,
            wait_eof="connection" not in {k.lower() for k in h},
        )

    def create(self, **over):
        body = dict(CREATE)
        body.update(over)
        r = self.call("POST", "/v1/sandboxes", body)
        assert r.status == 202, r.body
        return r.json()["id"]


@pytest.fixture
def osb(opensandbox_mock_factory):
    # execd keeps a finished command stream open ~1 s (recorded); not needed to test the lifecycle half
    return opensandbox_mock_factory(execd_close_delay=0)


def test_the_default_fixture(opensandbox_mock):
    m = opensandbox_mock
    assert m.base_url.startswith("http://127.0.0.1:") and m.api_key and m.execd_mode == "v1.1.0"
    assert Client(m.base_url, m.api_key).call("GET", "/v1/sandboxes").status == 200


@pytest.fixture
def client(osb):
    return Client(osb.base_url, osb.api_key)


def assert_uvicorn_headers(r: rest.Reply, json_body=True):
    assert r.headers["server"] == "uvicorn"
    assert r.headers["vary"] == "Origin"
    assert RID.match(r.headers["x-request-id"])
    assert "date" in r.headers
    if json_body:
        assert r.headers["content-type"] == "application/json"
        assert int(r.headers["content-length"]) == len(r.body)
    for k, _ in r.raw_headers:
        assert k == k.lower(), k  # uvicorn writes lower-case names (recording 01)


def _status(client, sid: str) -> dict:
    return client.call("GET", "/v1/sandboxes/" + sid).json()["status"]


# -- static routes and auth -------------------------------------------------------------------------
def test_health_and_version_need_no_key(client):
    for path, body in (("/health", b'{"status":"healthy"}'), ("/version", b'{"version":"1.1.1"}')):
        for key in (False, True):
            r = client.call("GET", path, key=key)
            assert (r.status, r.body) == (200, body)
            assert_uvicorn_headers(r)


def test_health_reports_isolation_in_a_header_only(client, opensandbox_mock_factory):
    r = client.call("GET", "/health")
    assert r.body == b'{"status":"healthy"}'
    iso = r.headers["x-mock-isolation"]
    # "isolated", or "isolated; <what is not contained>" (no slirp4netns, no cgroups), or "host; <why>"
    assert iso == "isolated" or iso.startswith(("isolated; ", "host; ")), iso
    m = opensandbox_mock_factory(isolate=False)
    r = Client(m.base_url, None).call("GET", "/health")
    assert r.headers["x-mock-isolation"].startswith("host; isolation disabled")


@pytest.mark.spec_exempt("unknown routes and bodies without a key: 401 before routing (server middleware/auth.py)")
def test_missing_and_invalid_api_key_bodies(client):
    r = client.call("GET", "/v1/sandboxes", key=False)
    assert r.status == 401 and r.json() == {
        "code": "MISSING_API_KEY",
        "message": "Authentication credentials are missing. Provide API key via OPEN-SANDBOX-API-KEY header.",
    }
    assert_uvicorn_headers(r)
    r = client.call("GET", "/v1/sandboxes", headers={"OPEN-SANDBOX-API-KEY": "wrong-key"}, key=False)
    assert r.status == 401 and r.json() == {
        "code": "INVALID_API_KEY",
        "message": "Authentication credentials are invalid. Check your API key and try again.",
    }
    for method, path in (
        ("POST", "/v1/sandboxes"),
        ("GET", "/v1/sandboxes/00000000-0000-0000-0000-000000000000"),
        ("GET", "/no/such/route"),
        ("DELETE", "/sandboxes/x"),
        ("GET", "/v1/snapshots"),
    ):
        assert client.call(method, path, key=False).json()["code"] == "MISSING_API_KEY"


@pytest.mark.spec_exempt("malformed proxy paths are not in the spec; auth answers first")
def test_proxy_routes_skip_auth_but_not_path_tricks(client):
    r = client.call("GET", "/v1/sandboxes/nope/proxy/44772/ping", key=False)
    assert r.status == 404 and r.json()["code"] == "DOCKER::SANDBOX_NOT_FOUND"
    r = client.call("GET", "/v1/sandboxes/nope/proxy/abc/ping", key=False)
    assert r.status == 401
    r = client.call("GET", "/v1/sandboxes/nope/proxy/1/../../x", key=False)
    assert r.status == 401


@pytest.mark.spec_exempt("--insecure mock accepts requests without OPEN-SANDBOX-API-KEY")
def test_api_key_is_generated_per_instance_and_insecure_disables_auth(opensandbox_mock_factory):
    a = opensandbox_mock_factory()
    b = opensandbox_mock_factory()
    assert a.api_key and b.api_key and a.api_key != b.api_key and len(a.api_key) >= 24
    c = opensandbox_mock_factory(insecure=True)
    assert c.api_key is None
    assert Client(c.base_url, None).call("GET", "/v1/sandboxes").status == 200
    d = opensandbox_mock_factory(api_key="given-key")
    assert Client(d.base_url, "given-key").call("GET", "/v1/sandboxes").status == 200
    assert Client(d.base_url, "other").call("GET", "/v1/sandboxes").status == 401


def test_request_id_is_echoed_when_given(client):
    r = client.call("GET", "/health", headers={"X-Request-ID": "  trace-123 "})
    assert r.headers["x-request-id"] == "trace-123"
    ids = {client.call("GET", "/health").headers["x-request-id"] for _ in range(3)}
    assert len(ids) == 3


@pytest.mark.parametrize("host", ["evil.example", "evil.example:80", "127.0.0.1.nip.io", "10.1.2.3"])
@pytest.mark.spec_exempt("the mock's DNS-rebinding guard answers 403 [choice]")
def test_foreign_host_header_is_rejected(client, host):
    r = client.call("GET", "/health", headers={"Host": host})
    assert r.status == 403
    assert set(r.json()) == {"code", "message"} and r.json()["code"] == "MOCK::HOST_NOT_ALLOWED"
    assert_uvicorn_headers(r)


@pytest.mark.parametrize("host", ["localhost", "127.0.0.1", "[::1]:1234", "foo.localhost:99", "127.0.0.2"])
def test_loopback_host_headers_are_accepted(client, osb, host):
    assert client.call("GET", "/health", headers={"Host": host}).status == 200


@pytest.mark.spec_exempt("the mock's Origin guard answers 403 [choice]")
def test_browser_origin_is_rejected(client):
    r = client.call("GET", "/v1/sandboxes", headers={"Origin": "http://127.0.0.1:3000"})
    assert r.status == 403 and r.json()["code"] == "MOCK::ORIGIN_NOT_ALLOWED"


@pytest.mark.spec_exempt("FastAPI's own 404/405 for routes the spec does not have")
def test_unknown_route_and_method(client):
    r = client.call("GET", "/v1/nothing")
    assert (r.status, r.json()) == (404, {"detail": "Not Found"})
    r = client.call("PUT", "/v1/sandboxes")
    assert (r.status, r.json()) == (405, {"detail": "Method Not Allowed"})


# -- recorded exchanges that do not depend on ids (01-04) -------------------------------------------
def _recorded(name):
    path = os.path.join(EXCHANGES, name)
    if not os.path.exists(path):
        pytest.skip("recordings not available: %s" % path)
    with open(path) as fh:
        return json.load(fh)


@pytest.mark.parametrize(
    "name", ["01_health_version.json", "02_auth_failures.json", "03_validation_422.json", "04_unknown_sandbox_404.json"]
)
def test_replay_id_independent_recordings(client, name):
    for ex in _recorded(name):
        rq, rs = ex["request"], ex["response"]
        headers = {k: v for k, v in rq["headers"].items() if k.lower() not in ("host", "content-length")}
        if headers.get("OPEN-SANDBOX-API-KEY") == "<api-key>":
            headers["OPEN-SANDBOX-API-KEY"] = client.api_key
        r = client.call(rq["method"], rq["path"], body=rq["body"], headers=headers, key=False)
        assert r.status == rs["status"], (rq["path"], r.body)
        assert r.body.decode() == rs["body"], rq["path"]
        assert set(r.headers) >= {k.lower() for k in rs["headers"]} - {"content-type"} | {"x-request-id"}


# -- create / get / list / delete -------------------------------------------------------------------
def test_create_get_list_delete_flow(client, osb):
    r = client.call("POST", "/v1/sandboxes", CREATE)
    assert r.status == 202
    assert_uvicorn_headers(r)
    created = r.json()
    assert list(created) == ["id", "status", "metadata", "expiresAt", "createdAt", "entrypoint"]
    sid = created["id"]
    uuid.UUID(sid, version=4)
    assert created["status"]["state"] == "Running" and created["status"]["reason"] == "CONTAINER_RUNNING"
    assert created["status"]["message"] == "Sandbox container started successfully."
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{6})?Z$", created["createdAt"])
    r = client.call("GET", "/v1/sandboxes/" + sid)
    got = r.json()
    assert list(got) == ["id", "image", "status", "metadata", "entrypoint", "expiresAt", "createdAt"]
    assert got["image"] == {"uri": "local/python:3-slim"} and got["expiresAt"] == created["expiresAt"]
    assert got["status"]["message"] == "Sandbox container is running."
    r = client.call("GET", "/v1/sandboxes")
    assert r.json()["pagination"] == {"page": 1, "pageSize": 20, "totalItems": 1, "totalPages": 1, "hasNextPage": False}
    assert r.json()["items"] == [got]
    r = client.call("GET", "/v1/sandboxes?state=Running&metadata=purpose%3Dlive-recording&page=1&pageSize=10")
    assert [i["id"] for i in r.json()["items"]] == [sid] and r.json()["pagination"]["pageSize"] == 10
    assert client.call("GET", "/v1/sandboxes?state=Paused").json()["items"] == []
    assert client.call("GET", "/sandboxes/" + sid).status == 200  # also served without /v1
    assert sid in osb.sandboxes
    r = client.call("DELETE", "/v1/sandboxes/" + sid)
    assert (r.status, r.body) == (204, b"")
    assert "content-type" not in r.headers and RID.match(r.headers["x-request-id"])
    r = client.call("DELETE", "/v1/sandboxes/" + sid)
    assert r.status == 404 and r.json() == {
        "code": "DOCKER::SANDBOX_NOT_FOUND",
        "message": "Sandbox %s not found." % sid,
    }
    assert client.call("GET", "/v1/sandboxes/" + sid).status == 404
    assert sid not in osb.sandboxes


def test_create_without_timeout_or_metadata(client):
    r = client.call(
        "POST",
        "/v1/sandboxes",
        {
            "image": {"uri": "local/busybox:latest"},
            "entrypoint": ["tail", "-f", "/dev/null"],
            "resourceLimits": {"cpu": "250m", "memory": "128Mi"},
            "env": {"HELLO": "world"},
        },
    )
    assert r.status == 202
    assert list(r.json()) == ["id", "status", "createdAt", "entrypoint"]  # recording 15
    got = client.call("GET", "/v1/sandboxes/" + r.json()["id"]).json()
    assert list(got) == ["id", "image", "status", "entrypoint", "createdAt"]


@pytest.mark.spec_exempt("env values may be null: server api/schema.py env: Dict[str, Optional[str]]")
def test_env_reaches_commands(client, osb):
    sid = client.create(env={"HELLO": "world", "DROPPED": None})
    ep = client.call("GET", "/v1/sandboxes/%s/endpoints/44772" % sid).json()["endpoint"]
    hostport, _, prefix = ep.partition("/")
    r = client.call(
        "POST", "/%s/command" % prefix, {"command": "echo $HELLO; echo ${DROPPED-unset}"}, hostport=hostport
    )
    texts = [json.loads(f)["text"] for f in r.body.decode().split("\n\n") if f.strip() and '"stdout"' in f]
    assert texts == ["world", "unset"]


def test_image_pull_failure(client):
    r = client.call("POST", "/v1/sandboxes", dict(CREATE, image={"uri": "local/does-not-exist:1"}))
    assert r.status == 500
    assert r.json()["code"] == "DOCKER::SANDBOX_IMAGE_PULL_FAILED"
    assert r.json()["message"].startswith("Failed to pull image local/does-not-exist:1: ")
    assert client.call("GET", "/v1/sandboxes").json()["items"] == []


def test_configurable_pull_failures(opensandbox_mock_factory):
    m = opensandbox_mock_factory(pull_fails={"private/"})
    c = Client(m.base_url, m.api_key)
    assert c.call("POST", "/v1/sandboxes", dict(CREATE, image={"uri": "private/app:1"})).status == 500
    assert c.call("POST", "/v1/sandboxes", dict(CREATE, image={"uri": "local/does-not-exist:1"})).status == 202


@pytest.mark.parametrize(
    "metadata,needle",
    [
        ({"Bad Key": "ok"}, "Metadata key 'Bad Key' is invalid"),
        ({"ok": "https://x"}, "Metadata value 'https://x' is invalid"),
        ({"opensandbox.io/id": "x"}, "reserved prefix"),
    ],
)
def test_invalid_metadata_label(client, metadata, needle):
    r = client.call("POST", "/v1/sandboxes", dict(CREATE, metadata=metadata))
    assert r.status == 400 and r.json()["code"] == "SANDBOX::INVALID_METADATA_LABEL"
    assert needle in r.json()["message"]


@pytest.mark.parametrize(
    "extra,code",
    [
        ({"secureAccess": True}, "SANDBOX::INVALID_PARAMETER"),
        ({"volumes": [{"name": "v", "mountPath": "/v", "host": {"path": "/data"}}]}, "VOLUME::HOST_PATH_NOT_ALLOWED"),
        (
            {"volumes": [{"name": "v", "mountPath": "/v", "pvc": {"claimName": "c", "createIfNotExists": False}}]},
            "VOLUME::PVC_NOT_FOUND",
        ),
        ({"lifecycle": {"preStart": {"command": ["echo"]}}}, "SANDBOX::INVALID_PARAMETER"),
        ({"extensions": {"poolRef": "p"}}, "SANDBOX::UNSUPPORTED_POOL_REF"),
        ({"resourceLimits": {"cpu": "0"}}, "SANDBOX::INVALID_PARAMETER"),
        ({"platform": {"os": "plan9", "arch": "amd64"}}, "SANDBOX::INVALID_PARAMETER"),
    ],
)
def test_unsupported_create_options_are_refused(client, extra, code):
    r = client.call("POST", "/v1/sandboxes", dict(CREATE, **extra))
    assert r.status == 400 and r.json()["code"] == code


def test_sdk_style_create_with_secure_access_false(client):
    body = {
        "image": {"uri": "local/python:3-slim"},
        "timeout": 600,
        "resourceLimits": {"cpu": "500m"},
        "metadata": {"via": "sdk"},
        "entrypoint": ["tail", "-f", "/dev/null"],
        "secureAccess": False,
    }
    assert client.call("POST", "/v1/sandboxes", body).status == 202  # recording 18


@pytest.mark.spec_exempt("snapshotId create answers 404 SNAPSHOT::NOT_FOUND (server 1.1.1; the spec has no 404)")
def test_create_validation_details(client):
    r = client.call("POST", "/v1/sandboxes", b"", headers={"Content-Type": "application/json"})
    assert (r.status, r.json()) == (
        422,
        {"detail": [{"type": "missing", "loc": ["body"], "msg": "Field required", "input": None}]},
    )
    r = client.call("POST", "/v1/sandboxes", [1])  # FastAPI validates with from_attributes=True (oracle)
    assert r.json()["detail"][0]["type"] == "model_attributes_type"
    r = client.call("POST", "/v1/sandboxes", {"image": {"uri": "x"}, "entrypoint": ["x"]})
    assert r.json()["detail"][0]["msg"] == "Value error, resourceLimits is required when poolRef is not provided."
    r = client.call("POST", "/v1/sandboxes", {"snapshotId": "snap", "resourceLimits": {}})
    assert (r.status, r.json()) == (404, {"code": "SNAPSHOT::NOT_FOUND", "message": "Snapshot snap not found"})


# -- list query validation --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "query,detail",
    [
        (
            "pageSize=201",
            {
                "type": "less_than_equal",
                "loc": ["query", "pageSize"],
                "msg": "Input should be less than or equal to 200",
                "input": "201",
                "ctx": {"le": 200},
            },
        ),
        (
            "pageSize=0",
            {
                "type": "greater_than_equal",
                "loc": ["query", "pageSize"],
                "msg": "Input should be greater than or equal to 1",
                "input": "0",
                "ctx": {"ge": 1},
            },
        ),
        (
            "page=0",
            {
                "type": "greater_than_equal",
                "loc": ["query", "page"],
                "msg": "Input should be greater than or equal to 1",
                "input": "0",
                "ctx": {"ge": 1},
            },
        ),
        (
            "page=abc",
            {
                "type": "int_parsing",
                "loc": ["query", "page"],
                "msg": "Input should be a valid integer, unable to parse string as an integer",
                "input": "abc",
            },
        ),
    ],
)
def test_list_query_validation(client, query, detail):
    r = client.call("GET", "/v1/sandboxes?" + query)
    assert (r.status, r.json()) == (422, {"detail": [detail]})


def test_list_filters_pagination_and_bad_metadata_filter(client):
    ids = [client.create(metadata={"team": "a" if i % 2 else "b", "i": str(i)}, timeout=None) for i in range(5)]
    client.call("POST", "/v1/sandboxes/%s/pause" % ids[1])
    r = client.call("GET", "/v1/sandboxes?pageSize=2&page=2")
    assert r.json()["pagination"] == {"page": 2, "pageSize": 2, "totalItems": 5, "totalPages": 3, "hasNextPage": True}
    assert [i["id"] for i in r.json()["items"]] == [ids[2], ids[1]]  # newest first
    r = client.call("GET", "/v1/sandboxes?state=Paused&state=running")
    assert r.json()["pagination"]["totalItems"] == 5
    r = client.call("GET", "/v1/sandboxes?metadata=team%3Da%26i%3D3")
    assert [i["id"] for i in r.json()["items"]] == [ids[3]]
    r = client.call("GET", "/v1/sandboxes?metadata=team%3Da&state=Paused")
    assert [i["id"] for i in r.json()["items"]] == [ids[1]]
    r = client.call("GET", "/v1/sandboxes?metadata=team%3Da%26broken")
    assert r.status == 400 and r.json() == {
        "code": "INVALID_METADATA_FORMAT",
        "message": "Invalid metadata format: bad query field: 'broken'",
    }


def test_patch_metadata_merge(client):
    sid = client.create()
    r = client.call("PATCH", "/v1/sandboxes/%s/metadata" % sid, {"team": "x", "purpose": None})
    assert r.status == 200 and r.json()["metadata"] == {"team": "x"}
    r = client.call("PATCH", "/v1/sandboxes/%s/metadata" % sid, {"bad key": "x"})
    assert r.status == 400 and r.json()["code"] == "SANDBOX::INVALID_METADATA_LABEL"
    assert client.call("GET", "/v1/sandboxes/" + sid).json()["metadata"] == {"team": "x"}


# -- pause / resume / renew -------------------------------------------------------------------------
def test_pause_resume_and_frozen_execd(client, osb):
    sid = client.create()
    ep = client.call("GET", "/v1/sandboxes/%s/endpoints/44772" % sid).json()["endpoint"]
    hostport, _, prefix = ep.partition("/")
    r = client.call("POST", "/v1/sandboxes/%s/pause" % sid)
    assert (r.status, r.body, r.headers.get("content-length")) == (202, b"", "0")
    assert "content-type" not in r.headers
    assert client.call("GET", "/v1/sandboxes/" + sid).json()["status"]["state"] == "Paused"
    r = client.call("POST", "/v1/sandboxes/%s/pause" % sid)
    assert (r.status, r.json()["code"]) == (409, "DOCKER::SANDBOX_NOT_RUNNING")
    answered = []
    t = threading.Thread(
        target=lambda: answered.append(client.call("GET", "/%s/ping" % prefix, hostport=hostport).status)
    )
    t.start()
    t.join(0.3)
    assert answered == []  # a frozen sandbox does not answer (QUIRKS.md, "Paused sandbox")
    assert client.call("POST", "/v1/sandboxes/%s/resume" % sid).status == 202
    t.join(10)
    assert answered == [200]
    r = client.call("POST", "/v1/sandboxes/%s/resume" % sid)
    assert (r.status, r.json()["code"]) == (409, "DOCKER::SANDBOX_NOT_PAUSED")
    assert client.call("GET", "/v1/sandboxes/" + sid).json()["status"]["state"] == "Running"


def test_renew_expiration(client):
    sid = client.create()
    r = client.call("POST", "/v1/sandboxes/%s/renew-expiration" % sid, {"expiresAt": "2099-11-29T09:47:06Z"})
    assert (r.status, r.body) == (200, b'{"expiresAt":"2099-11-29T09:47:06Z"}')
    assert client.call("GET", "/v1/sandboxes/" + sid).json()["expiresAt"] == "2099-11-29T09:47:06Z"
    r = client.call("POST", "/v1/sandboxes/%s/renew-expiration" % sid, {"expiresAt": "2099-11-29T11:47:06.5+02:00"})
    assert r.json() == {"expiresAt": "2099-11-29T09:47:06.500000Z"}
    r = client.call("POST", "/v1/sandboxes/%s/renew-expiration" % sid, {"expiresAt": "2020-01-01T00:00:00Z"})
    assert (r.status, r.json()["code"]) == (400, "DOCKER::INVALID_EXPIRATION")
    r = client.call("POST", "/v1/sandboxes/%s/renew-expiration" % sid, {})
    assert r.status == 422 and r.json()["detail"][0]["loc"] == ["body", "expiresAt"]


def test_date_header_follows_the_mock_clock(opensandbox_mock_factory):
    from datetime import datetime, timezone
    from email.utils import parsedate_to_datetime

    clock = FakeClock(datetime(2031, 5, 6, 7, 8, 9, tzinfo=timezone.utc))
    m = opensandbox_mock_factory(clock=clock)
    r = Client(m.base_url, m.api_key).call("GET", "/health")
    assert parsedate_to_datetime(r.headers["date"]) == datetime(2031, 5, 6, 7, 8, 9, tzinfo=timezone.utc)


def test_ttl_expiry_removes_the_sandbox(opensandbox_mock_factory):
    clock = FakeClock()
    m = opensandbox_mock_factory(clock=clock, reap_interval=0.02)
    c = Client(m.base_url, m.api_key)
    sid = c.create(timeout=60)
    keep = c.create(timeout=3600)
    root = m.sandboxes[sid].runtime.root
    clock.advance(61)
    assert wait_until(lambda: c.call("GET", "/v1/sandboxes/" + sid).status == 404)
    assert wait_until(lambda: not os.path.exists(root))  # removed right after it disappears from the table
    assert c.call("GET", "/v1/sandboxes/" + keep).status == 200


def test_constructor_rejects_bad_arguments():
    from mock_opensandbox.server import MockOpenSandbox

    for kw in ({"execd_mode": "v2"}, {"port": 70000}, {"api_key": ""}, {"api_key": "a\nb"}):
        with pytest.raises(ValueError):
            MockOpenSandbox(**kw)


def test_non_loopback_bind_warns_before_binding():
    """A non-loopback address gets a loud warning (checked with an unassigned TEST-NET address, so nothing
    listens off loopback); a failed start leaves no temp dir behind."""
    from mock_opensandbox.server import MockOpenSandbox, is_loopback_host

    msgs = []
    m = MockOpenSandbox(host="192.0.2.1", warn=msgs.append)
    with pytest.raises(OSError):
        m.start()
    assert msgs and msgs[0].startswith("WARNING") and "192.0.2.1" in msgs[0]
    assert m.root and not os.path.exists(m.root)
    m.stop()
    for host, ok in (
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("localhost", True),
        ("::1", True),
        ("[::1]", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.1", False),
        ("example.com", False),
    ):
        assert is_loopback_host(host) is ok, host


def test_max_sandbox_timeout_like_the_server_config(opensandbox_mock_factory):
    """[server] max_sandbox_timeout_seconds (services/validators.py ensure_timeout_within_limit); renew is
    not limited by it (api/lifecycle.py renew docstring)."""
    m = opensandbox_mock_factory(max_sandbox_timeout=600)
    c = Client(m.base_url, m.api_key)
    r = c.call("POST", "/v1/sandboxes", dict(CREATE, timeout=601))
    assert (r.status, r.json()) == (
        400,
        {"code": "SANDBOX::INVALID_PARAMETER", "message": "Sandbox timeout 601s exceeds configured maximum of 600s."},
    )
    sid = c.create(timeout=600)
    r = c.call("POST", "/v1/sandboxes/%s/renew-expiration" % sid, {"expiresAt": "2999-01-01T00:00:00Z"})
    assert r.status == 200
    with pytest.raises(ValueError):
        opensandbox_mock_factory(max_sandbox_timeout=10)
