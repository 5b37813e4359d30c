"""Error mapping: the four OpenSandbox error-body shapes, EPP codes and sdk_codes, suggestions,
no exception ever escapes the mapper, and no secret value ever reaches a protocol line."""

from __future__ import annotations

import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import epp
import errors
import failures
from config import Config
from osb import transport

CANARY = "abx-canary-0123456789abcdef"


def http_error(status, body, *, plane="lifecycle", what="get sandbox", headers=None):
    return transport.HttpError(
        status,
        "Reason",
        body if isinstance(body, bytes) else body.encode(),
        headers or {"x-request-id": "0219402ac38f4446a1609bb1257b2cdf"},
        what,
        plane,
    )


# ---- the four shapes (bodies copied from the recordings / QUIRKS.md) ------------------------------------


def test_error_response_shape_sandbox_not_found():  # recording 04
    err = failures.map_osb_error(
        http_error(
            404,
            '{"code":"DOCKER::SANDBOX_NOT_FOUND","message":"Sandbox 00000000-0000-0000-0000-000000000000 not found."}',
        ),
        op="sandbox",
    )
    assert err.code == -32002 and err.data["sdk_code"] == "E2009"
    assert "Sandbox 00000000-0000-0000-0000-000000000000 not found." in err.message
    assert err.data["suggestion"] and err.data["request_id"] == "0219402ac38f4446a1609bb1257b2cdf"


def test_validation_422_shape():  # recording 03
    body = (
        '{"detail":[{"type":"greater_than_equal","loc":["body","timeout"],"msg":"Input should be greater '
        'than or equal to 60","input":10,"ctx":{"ge":60}}]}'
    )
    err = failures.map_osb_error(http_error(422, body, what="create sandbox"), op="create")
    assert err.code == -32000 and "timeout: Input should be greater than or equal to 60" in err.message
    assert err.data["suggestion"]


def test_execd_error_shape_token():  # QUIRKS.md, Transport, routing, auth
    body = '{"error":"Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"}'
    err = failures.map_osb_error(http_error(401, body, plane="execd", what="run command"), op="exec")
    assert err.code == -32001 and err.data["sdk_code"] == "E1001"
    assert "X-EXECD-ACCESS-TOKEN" in err.message and "execd_access_token" in err.data["suggestion"]


def test_html_502_shape():
    body = (
        "<html><head><title>502 Bad Gateway</title></head><body><center><h1>502 Bad Gateway</h1></center>"
        "<hr><center>nginx</center></body></html>"
    )
    err = failures.map_osb_error(http_error(502, body, headers={"content-type": "text/html"}), op="sandbox")
    assert err.code == -32000 and "502 Bad Gateway" in err.message and "<" not in err.message
    assert err.data.get("retryable") is True and err.data["suggestion"]


@pytest.mark.parametrize(
    "status,body,plane,op,code,sdk",
    [
        (
            401,
            '{"code":"MISSING_API_KEY","message":"Authentication credentials are missing."}',
            "lifecycle",
            "list",
            -32001,
            "E1001",
        ),
        (
            401,
            '{"code":"INVALID_API_KEY","message":"Authentication credentials are invalid."}',
            "lifecycle",
            "create",
            -32001,
            "E1001",
        ),
        (
            404,
            '{"code":"FILE_NOT_FOUND","message":"file not found. open /x: no such file or directory"}',
            "execd",
            "files",
            -32002,
            "E4001",
        ),
        (404, '{"code":"INVALID_REQUEST_BODY","message":"command not found: nope"}', "execd", "process", -32002, None),
        (404, "404 page not found", "execd", "exec", -32000, None),
        (
            409,
            '{"code":"DOCKER::SANDBOX_NOT_RUNNING","message":"Sandbox is not in a running state."}',
            "lifecycle",
            "sandbox",
            -32000,
            None,
        ),
        (
            400,
            '{"code":"DOCKER::INVALID_PORT","message":"Port must be between 1 and 65535."}',
            "lifecycle",
            "ports",
            -32000,
            None,
        ),
        (
            500,
            '{"code":"DOCKER::SANDBOX_IMAGE_PULL_FAILED","message":"Failed to pull image local/x:1"}',
            "lifecycle",
            "create",
            -32000,
            "E2001",
        ),
        (501, '{"code":"FSB::API_NOT_SUPPORTED","message":"not supported"}', "lifecycle", "sandbox", -32003, None),
        (429, '{"code":"KUBERNETES::QUOTA_EXCEEDED","message":"quota"}', "lifecycle", "create", -32004, None),
        (403, '{"code":"FORBIDDEN","message":"no"}', "execd", "files", -32000, "E4002"),
    ],
)
def test_status_table(status, body, plane, op, code, sdk):
    err = failures.map_osb_error(http_error(status, body, plane=plane), op=op)
    assert err.code == code
    assert err.data.get("sdk_code") == sdk
    assert err.data.get("suggestion"), "every mapped error tells the user what to do"


@pytest.mark.parametrize(
    "kind,sdk",
    [
        ("refused", "E5001"),
        ("reset", "E5001"),
        ("dns", "E5001"),
        ("timeout", "E3001"),
        ("tls", "E5000"),
        ("network", "E5000"),
    ],
)
def test_network_errors(kind, sdk):
    err = failures.map_osb_error(
        transport.NetError(kind, "get sandbox", "http://127.0.0.1:9/v1/sandboxes", "boom"),
        op="sandbox",
        cfg=Config({"base_url": "http://127.0.0.1:9"}),
    )
    assert err.code == -32000 and err.data["sdk_code"] == sdk and err.data["suggestion"]


def test_safe_url_drops_userinfo_and_query():
    assert transport.safe_url("https://user:pw@h:8443/v1/x?token=abc") == "https://h:8443/v1/x"


# ---- properties -----------------------------------------------------------------------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=30) | st.just(CANARY),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
shaped = st.one_of(
    st.builds(
        lambda c, m: json.dumps({"code": c, "message": m}),
        st.text(max_size=20) | st.just(CANARY),
        st.text(max_size=40) | st.just(CANARY),
    ),
    st.builds(lambda d: json.dumps({"detail": d}), json_values),
    st.builds(lambda e: json.dumps({"error": e}), json_values),
    st.builds(lambda v: json.dumps(v), json_values),
    st.text(max_size=200).map(lambda t: f"<html><body>{t}</body></html>"),
)
bodies = st.one_of(st.binary(max_size=300), shaped.map(lambda s: s.encode("utf-8", "surrogatepass")))


def _wire(err: errors.EppError, secrets: dict) -> bytes:
    """The answer line, from a server whose configuration holds ``secrets``."""
    out = io.BytesIO()
    srv = epp.Server(io.BytesIO(), out, initialize=lambda p: {}, find=lambda name: None)
    Config(secrets)  # registers its secret fields
    srv.respond(7, error=err)
    return out.getvalue()


@settings(max_examples=300, deadline=None)
@given(
    st.integers(100, 599),
    bodies,
    st.sampled_from(["lifecycle", "execd"]),
    st.sampled_from(["sandbox", "create", "list", "files", "exec", "process", "ports"]),
)
def test_mapper_never_raises_and_never_leaks(status, body, plane, op):
    err = failures.map_osb_error(http_error(status, body, plane=plane), op=op)
    assert isinstance(err, errors.EppError)
    assert err.code in (-32000, -32001, -32002, -32003, -32004, -32006)
    assert isinstance(err.message, str) and err.message
    line = _wire(
        err, {"api_key": CANARY, "registry_password": "pw-" + CANARY[::-1], "execd_access_token": "tok" + CANARY}
    )
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    msg = json.loads(line)
    assert msg["id"] == 7 and msg["error"]["code"] == err.code
    assert CANARY.encode() not in line and CANARY[::-1].encode() not in line


@given(st.integers(100, 599), st.binary(max_size=500))
def test_parse_error_body_total(status, body):
    code, message = transport.parse_error_body(status, body, "Reason")
    assert code is None or isinstance(code, str)
    assert isinstance(message, str) and message and len(message) <= 400


def test_unexpected_exceptions_become_answers():
    err = failures.map_osb_error(KeyError("x"), op="sandbox")
    assert err.code == -32603 and "KeyError" in err.message


def test_config_errors_never_echo_secret_values():
    with pytest.raises(errors.EppError) as info:
        Config({"api_key": CANARY, "base_url": "ftp://" + CANARY})
    assert info.value.code == -32006 and info.value.data["field"] == "base_url"
    assert CANARY not in _wire(info.value, {"api_key": CANARY}).decode()


def test_redaction_covers_escaped_forms():
    secret = 'p@ss"w/rd'
    text = f"raw {secret} json {json.dumps(secret)} url p%40ss%22w%2Frd"
    registry = errors.Secrets()
    registry.add(secret)
    out = registry.redact(text)
    assert "p@ss" not in out and "p%40ss" not in out and out.count("***") == 3


@pytest.mark.parametrize(
    "status, body, code",
    [
        (404, b"404 page not found", -32003),  # an execd without /pty (Gin's plain 404)
        (501, b'{"code":"NOT_SUPPORTED","message":"no pty"}', -32003),
        (404, b'{"code":"SESSION_NOT_FOUND","message":"gone"}', -32002),
        (401, b'{"error":"Unauthorized"}', -32001),
        (500, b'{"error":"boom"}', -32000),
    ],
)
def test_terminal_errors_come_from_the_client(status, body, code):
    """methods/pty.py maps the client's HttpError/NetError like every method, plus execd's missing PTY API."""
    import methods.pty as terminal

    err = terminal._error(
        http_error(status, body.decode(), plane="execd", what="POST /pty"), "pty.open", no_pty_api=True
    )
    assert err.code == code and err.message.startswith("pty.open: ")
    if code == -32003:
        assert err.to_json()["data"]["details"]["feature"] == "pty"
    net = terminal._error(transport.NetError("refused", "POST /pty", "http://127.0.0.1:9/pty", "refused"), "pty.open")
    assert net.code == -32000 and net.data["sdk_code"] == "E5001"
