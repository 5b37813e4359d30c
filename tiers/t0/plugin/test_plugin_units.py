"""Plugin logic with fake clients: create body, metadata labels, records and status mapping,
set_timeout from the server clock, list paging, result size limits, file entries, modes."""

from __future__ import annotations

import base64
import datetime as dt
import email.utils
import io
import json
import os
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import epp
import methods.exec as commands
import methods.files as files
import methods.sandbox as sandbox
import provider
from config import Config
from epp import MAX_LINE_BYTES, Request
from errors import EppError
from osb import execd, transport

HOST_DEFAULTS = {
    "template": "base",
    "timeout": 300,
    "metadata": {},
    "envs": {},
    "cpu": None,
    "memory": None,
    "disk": None,
    "gpu": None,
    "request_timeout": None,
}  # epp-host-reference §3.2


def test_create_body_defaults():
    body = sandbox.create_body(Config({}), dict(HOST_DEFAULTS), "python:3.12-slim")
    assert body == {
        "image": {"uri": "python:3.12-slim"},
        "resourceLimits": {"cpu": "500m", "memory": "512Mi"},
        "entrypoint": ["tail", "-f", "/dev/null"],
        "timeout": 300,
    }


def test_create_body_everything():
    cfg = Config(
        {
            "registry_username": "u",
            "registry_password": "p",
            "network_policy": '{"defaultAction":"deny"}',
            "platform": "linux/arm64",
            "entrypoint": "python3 -m http.server 9000",
        }
    )
    p = {
        **HOST_DEFAULTS,
        "timeout": 10,
        "cpu": 2,
        "memory": 1024,
        "gpu": "1",
        "envs": {"E1": "v1"},
        "metadata": {"team": "ml", "example.com/owner": "a_b.c-d"},
        "secure": True,
    }
    body = sandbox.create_body(cfg, p, "ghcr.io/x/y:1")
    assert body["timeout"] == 60  # clamped to OpenSandbox's minimum
    assert body["resourceLimits"] == {"cpu": "2000m", "memory": "1024Mi", "gpu": "1"}
    assert body["env"] == {"E1": "v1"} and body["metadata"]["team"] == "ml"
    assert body["image"]["auth"] == {"username": "u", "password": "p"}
    assert body["networkPolicy"] == {"defaultAction": "deny"} and body["platform"] == {"os": "linux", "arch": "arm64"}
    assert body["secureAccess"] is True and body["entrypoint"] == ["python3", "-m", "http.server", "9000"]


def test_create_body_special_cases():
    p = dict(HOST_DEFAULTS)
    code = sandbox.create_body(Config({}), p, "opensandbox/code-interpreter:v1.1.0")
    assert code["entrypoint"] == ["/opt/code-interpreter/code-interpreter.sh"]
    assert "timeout" not in sandbox.create_body(Config({}), {**p, "timeout": None}, "x")
    assert sandbox.create_body(Config({}), {**p, "cpu": 0.25, "memory": "2Gi"}, "x")["resourceLimits"] == {
        "cpu": "250m",
        "memory": "2Gi",
    }
    assert "secureAccess" not in sandbox.create_body(Config({"secure_access": "true"}), {**p, "secure": False}, "x")
    with pytest.raises(EppError) as e:
        sandbox.create_body(Config({}), {**p, "disk": 1024}, "x")
    assert e.value.code == -32003 and e.value.data["details"]["feature"] == "disk"
    with pytest.raises(EppError) as e:
        sandbox.create_body(Config({}), {**p, "gpu": "A10"}, "x")
    assert e.value.code == -32003
    for bad in ({"envs": {"A=B": "x"}}, {"envs": {"A": "x\0y"}}, {"envs": ["x"]}, {"cpu": "lots"}, {"timeout": "soon"}):
        with pytest.raises(EppError) as e:
            sandbox.create_body(Config({}), {**p, **bad}, "x")
        assert e.value.code == -32000


@pytest.mark.parametrize(
    "key", ["-bad", "bad-", "a" * 64, "has space", "UPPER.example.com/x", "opensandbox.io/x", "x/", "/x", "a/b/c", "é"]
)
def test_metadata_rejection_names_the_key(key):
    with pytest.raises(EppError) as e:
        sandbox.check_metadata({key: "v"})
    assert repr(key) in e.value.message and e.value.data["suggestion"]


@pytest.mark.parametrize("value", ["x" * 64, "-v", "v-", "a b", "ünï"])
def test_metadata_value_rejection_names_the_key(value):
    with pytest.raises(EppError) as e:
        sandbox.check_metadata({"purpose": value})
    assert "'purpose'" in e.value.message


_dns_label = st.from_regex(r"[a-z0-9]([a-z0-9-]{0,8}[a-z0-9])?", fullmatch=True)
_name = st.from_regex(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,40}[A-Za-z0-9])?", fullmatch=True)


@given(st.lists(_dns_label, max_size=3).map(".".join), _name, st.one_of(st.just(""), _name))
def test_valid_labels_pass(prefix, name, value):
    key = f"{prefix}/{name}" if prefix and prefix != "opensandbox.io" else name
    assert sandbox.check_metadata({key: value}) == {key: value}


@pytest.mark.parametrize(
    "state,status",
    [
        ("Pending", "creating"),
        ("Running", "running"),
        ("Pausing", "paused"),
        ("Paused", "paused"),
        ("Resuming", "creating"),
        ("Stopping", "stopping"),
        ("Terminated", "stopped"),
        ("Failed", "error"),
        ("Exploded", "error"),
        ("", "error"),
    ],
)
def test_status_mapping(state, status):  # the lifecycle API's status.state -> EPP status
    rec = sandbox.to_record({"id": "s1", "status": {"state": state}})
    assert rec["status"] == status


def test_record_from_recorded_get():  # recording 05 (GET)
    sb = json.loads(
        '{"id":"15795f29-605c-4208-81d7-7bc9a4a8f280","image":{"uri":"local/python:3-slim"},"status":'
        '{"state":"Running","reason":"CONTAINER_RUNNING","message":"Sandbox container is running.",'
        '"lastTransitionAt":"2026-11-29T07:46:42.568961Z"},"metadata":{"purpose":"live-recording"},'
        '"entrypoint":["tail","-f","/dev/null"],"expiresAt":"2026-11-29T08:16:42.558200Z",'
        '"createdAt":"2026-11-29T07:46:42.568961Z"}'
    )
    rec = sandbox.to_record(sb)
    assert rec["sandbox_id"] == sb["id"] and rec["template"] == "local/python:3-slim" and rec["status"] == "running"
    assert rec["metadata"] == {"purpose": "live-recording"} and rec["region"] == ""
    assert rec["created_at"] == "2026-11-29T07:46:42.568961Z" and rec["expires_at"] == "2026-11-29T08:16:42.558200Z"
    assert "url" not in rec and "envd_url" not in rec  # epp-host-reference §7.9
    assert "expires_at" not in sandbox.to_record({"id": "x", "status": {"state": "Running"}})


# ---- fakes -----------------------------------------------------------------------------------------------


class FakeOSB:
    def __init__(self, server_now: dt.datetime | None = None, pages: int = 0, per_page: int = 200):
        self.server_now, self.renewed, self.pages, self.per_page, self.list_calls = server_now, [], pages, per_page, []

    def get(self, sid):
        headers = {"date": email.utils.format_datetime(self.server_now, usegmt=True)} if self.server_now else {}
        return transport.Reply(
            200, "OK", headers, json.dumps({"id": sid, "status": {"state": "Running"}}).encode(), time.monotonic()
        )

    def renew(self, sid, stamp):
        self.renewed.append(stamp)

    def list_page(self, *, page, page_size, states=(), metadata=""):
        self.list_calls.append((page, page_size, tuple(states)))
        n = self.per_page if page < self.pages else (5 if page == self.pages else 0)
        items = [{"id": f"p{page}-{i}", "status": {"state": "Running"}} for i in range(n)]
        return {"items": items, "pagination": {"page": page, "pageSize": page_size, "hasNextPage": page < self.pages}}


def fake_server(fake):
    ctx = provider.new_context(io.BytesIO(), io.BytesIO())
    ctx.cfg = Config({})
    ctx.osb = fake
    return ctx


@pytest.mark.parametrize("skew_hours", [-5, 0, 3])
def test_set_timeout_uses_the_server_clock(skew_hours):
    server_now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) + dt.timedelta(hours=skew_hours)
    fake = FakeOSB(server_now)
    res = sandbox.m_sandbox_set_timeout(fake_server(fake), Request(1), {"sandbox_id": "s", "timeout": 600})
    (stamp,) = fake.renewed
    assert res["expires_at"] == stamp and stamp.endswith("Z")
    got = dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
    assert abs((got - (server_now + dt.timedelta(seconds=600))).total_seconds()) <= 2


def test_set_timeout_clamps_and_validates():
    fake = FakeOSB(dt.datetime.now(dt.timezone.utc))
    sandbox.m_sandbox_set_timeout(fake_server(fake), Request(1), {"sandbox_id": "s", "timeout": 5})
    got = dt.datetime.strptime(fake.renewed[0], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc)
    assert 57 <= (got - dt.datetime.now(dt.timezone.utc)).total_seconds() <= 62
    for bad in (0, -1, "600", True, None):
        with pytest.raises(EppError):
            sandbox.m_sandbox_set_timeout(fake_server(fake), Request(1), {"sandbox_id": "s", "timeout": bad})


def test_list_pages_of_200_until_the_limit():
    fake = FakeOSB(pages=3)  # 200 + 200 + 5 sandboxes
    srv = fake_server(fake)
    first = sandbox.m_sandbox_list(srv, Request(1), {"limit": 100})
    assert len(first["sandboxes"]) == 200 and first["next"] == "2" and fake.list_calls == [(1, 200, ())]
    every = sandbox.m_sandbox_list(srv, Request(2), {"limit": 1000, "status": "paused"})
    assert len(every["sandboxes"]) == 405 and every["next"] is None
    assert fake.list_calls[1:] == [
        (1, 200, ("Paused", "Pausing")),
        (2, 200, ("Paused", "Pausing")),
        (3, 200, ("Paused", "Pausing")),
    ]
    rest = sandbox.m_sandbox_list(srv, Request(3), {"limit": 300, "cursor": "2"})
    assert len(rest["sandboxes"]) == 205 and rest["next"] is None
    with pytest.raises(EppError):
        sandbox.m_sandbox_list(srv, Request(4), {"status": "sleeping"})


def test_exec_run_result_stays_under_the_line_limit():
    big = "é\u0001" * 3_000_000
    res = commands._fit_result(big, "err", 0)
    line = json.dumps({"jsonrpc": "2.0", "id": 1, "result": res}, ensure_ascii=False).encode()
    assert len(line) < MAX_LINE_BYTES and res["truncated"] and "dropped" in res["stderr"]
    assert res["stdout"] == big[: len(res["stdout"])]
    assert commands._fit_result("x", "y", 3) == {"stdout": "x", "stderr": "y", "exit_code": 3}


def test_oversized_answers_become_errors_not_violations():
    out = io.BytesIO()
    srv = provider.new_context(io.BytesIO(), out).server
    srv.respond(5, {"content_b64": "A" * MAX_LINE_BYTES})
    srv.notify("exec.output", {"process_id": "p", "stream": "stdout", "data": "B" * MAX_LINE_BYTES})
    srv.respond(6, {"content_b64": epp.Base64(b"C" * (MAX_LINE_BYTES // 4 * 3))})  # files.read's bytes
    srv.respond(7, {"content_b64": epp.Base64(b"ABC")})
    data = os.urandom(3 * epp.Base64.PIECE + 7)  # written as base64 piece by piece
    srv.respond(8, {"content_b64": epp.Base64(bytearray(data))})
    lines = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [m["id"] for m in lines] == [5, 6, 7, 8]
    assert lines[0]["error"]["code"] == -32000 and lines[1]["error"]["code"] == -32000  # never an empty {}
    assert lines[2]["result"] == {"content_b64": "QUJD"}
    assert base64.b64decode(lines[3]["result"]["content_b64"], validate=True) == data


def test_file_entry_and_modes():
    info = {
        "path": "/tmp/livework/sub",
        "type": "directory",
        "size": 4096,
        "modified_at": "2026-11-29T07:47:06.919336794Z",
        "owner": "root",
        "group": "root",
        "mode": 755,
    }  # recording 13
    assert files.file_entry(info) == {
        "name": "sub",
        "path": "/tmp/livework/sub",
        "type": "dir",
        "size": 4096,
        "mtime": "2026-11-29T07:47:06.919336794Z",
        "mode": 755,
        "owner": "root",
        "group": "root",
    }
    assert files.file_entry({"path": "/a/l", "type": "symlink"})["type"] == "file"
    assert files.file_entry({"path": "/a/l", "type": "symlink"})["kind"] == "symlink"
    assert files.file_entry({"path": "/a/b", "type": "other", "size": None})["type"] == "file"
    assert files._octal_mode("644") == 644 and files._octal_mode("0o755") == 755
    assert files._octal_mode(0o644) == 644 and files._octal_mode(None) is None
    for bad in ("9", "rwx", 0o17777, True):
        with pytest.raises(EppError):
            files._octal_mode(bad)


def test_exec_spec_validation():
    spec = commands.ExecSpec(
        {"sandbox_id": "s", "cmd": "echo", "args": ["a b"], "env": {"K": "v"}, "cwd": "", "user": "", "timeout": 60}
    )
    assert spec.argv == ["echo", "a b"] and spec.timeout == 60.0 and not spec.detached
    assert commands.ExecSpec({"sandbox_id": "s", "cmd": "x", "detached": True}).detached
    for bad in ({"cmd": ""}, {"cmd": "x", "args": "y"}, {"cmd": "x", "timeout": -1}, {"cmd": "x", "args": [1]}):
        with pytest.raises(EppError):
            commands.ExecSpec({"sandbox_id": "s", **bad})
    with pytest.raises(EppError) as e:
        commands.ExecSpec({"cmd": "x"})
    assert e.value.code == -32602


def test_argv_rejection_detection_matches_the_recording():
    # recording 11: execd v1.1.0 answers {"argv": [...]} with this 400
    msg = (
        "invalid request, validation error Key: 'RunCommandRequest.Command' Error:Field validation for "
        "'Command' failed on the 'required' tag"
    )
    assert execd._is_argv_rejection(msg)
    assert not execd._is_argv_rejection("invalid request, validation error working directory does not exist: /x")


class _Lifecycle:
    server, api_key, execd_token = "http://osb.test:8080", "k", ""


@pytest.mark.parametrize(
    "base,sent",
    [
        ("http://osb.test:8080/sandboxes/s1/proxy/44772", True),  # use_server_proxy: the server's origin
        ("HTTP://OSB.test/x", False),  # port 80, not 8080
        ("http://10.0.0.7:44772", False),  # the sandbox's own endpoint
    ],
)
def test_the_api_key_goes_to_execd_only_through_the_server(base, sent):
    ex = execd.Execd(_Lifecycle(), "s1", base, {"X-Gw": "1"})
    assert ("OPEN-SANDBOX-API-KEY" in ex.headers()) is sent
    ex.base = "http://osb.test:8080/p" if not sent else "http://10.0.0.8:44772"  # re-resolved (Execd._fresh)
    assert ("OPEN-SANDBOX-API-KEY" in ex.headers()) is not sent
    assert ex.headers()["X-Gw"] == "1"


label_chars = st.text(st.sampled_from("aZ09-_./é "), max_size=70)


@given(label_chars, label_chars)
def test_metadata_check_agrees_with_the_mock_server_validator(key, value):
    """The plugin refuses exactly what the server would refuse (mock model = server validators.py)."""
    from mock_opensandbox.lifecycle import model

    try:
        model.validate_metadata({key: value})
        server_ok = True
    except Exception:  # noqa: BLE001 - MockError
        server_ok = False
    try:
        sandbox.check_metadata({key: value})
        plugin_ok = True
    except EppError:
        plugin_ok = False
    assert plugin_ok == server_ok


any_json = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


@given(
    st.dictionaries(
        st.sampled_from(
            ["template", "timeout", "metadata", "envs", "cpu", "memory", "disk", "gpu", "secure", "request_timeout"]
        ),
        any_json,
    )
)
def test_create_params_fuzz_typed_errors_only(params):
    """Whatever the params (NaN and Infinity included: Python's json accepts them), create_body either
    builds a body or raises a typed EppError."""
    try:
        body = sandbox.create_body(
            Config({}),
            params,
            sandbox.resolve_image(
                Config({}), params.get("template") if isinstance(params.get("template"), str) else None
            ),
        )
    except EppError as exc:
        assert exc.code in (-32000, -32003)
    else:
        json.dumps(body, allow_nan=False)  # what goes to the server is strict JSON


@given(
    st.dictionaries(
        st.sampled_from(["sandbox_id", "cmd", "args", "env", "cwd", "user", "timeout", "detached", "command"]), any_json
    )
)
def test_exec_params_fuzz_typed_errors_only(params):
    try:
        spec = commands.ExecSpec(params)
    except EppError as exc:
        assert exc.code in (-32000, -32602)
    else:
        assert spec.timeout >= 0 and spec.timeout == spec.timeout


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CLOSED = f"http://127.0.0.1:{_closed_port()}"
PARAM_KEYS = [
    "sandbox_id",
    "template",
    "timeout",
    "limit",
    "cursor",
    "status",
    "cmd",
    "args",
    "env",
    "cwd",
    "user",
    "pid",
    "signal",
    "data",
    "path",
    "content_b64",
    "offset",
    "length",
    "mode",
    "depth",
    "source",
    "destination",
    "overwrite",
    "pattern",
    "port",
    "options",
    "metadata",
    "envs",
    "detached",
]


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(sorted(provider.METHODS)),
    st.dictionaries(st.sampled_from(PARAM_KEYS), any_json | st.just("s-1") | st.just("/tmp/x"), max_size=8),
)
def test_every_method_answers_bad_params_with_a_typed_error(method, params):
    """Any params: one JSON answer, never an internal error (-32603) or a traceback. The server is
    unreachable, so whatever passes validation ends as E5001."""
    out = io.BytesIO()
    ctx = provider.new_context(io.BytesIO(), out)
    ctx.raw_config = {"base_url": CLOSED}
    srv = ctx.server
    req = Request(3)
    srv.requests[3] = req
    srv._run(req, method, params)
    (line,) = out.getvalue().splitlines()
    msg = json.loads(line)
    assert msg["id"] == 3 and ("result" in msg) != ("error" in msg)
    if "error" in msg:
        assert msg["error"]["code"] in (-32000, -32001, -32002, -32003, -32006, -32602), msg
        assert msg["error"]["message"]
