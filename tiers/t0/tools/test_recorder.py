"""Offline tests of record/: scrubber, converter, comparator and replay (respx, no server); the recorder itself
and the record CLI: test_recorder_runs.py."""

from __future__ import annotations

import copy
import json
import os

import pytest
import respx

from mock_opensandbox.workbench import fixturefile as fixture
from record.compare import Bindings, Comparer, materialize
from record.convert import ConvertError, convert_dir, parse_versions
from record.replay import Replayer
from record.scenarios import BY_NAME, SCENARIOS
from record.scrub import scrub_exchanges

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
LIVE = os.path.normpath(os.path.join(REPO, "..", "shared", "live", "exchanges"))
SID = "15795f29-605c-4208-81d7-7bc9a4a8f280"
SID2 = "c3c6b39d-072a-4e91-9c1e-cdf35fe493dc"
CID = "2b3c60a922a2481a883c814283e1bc37"
RID = "6cd089dc4d75461d984ae6d760dd3a7c"
DATE = "Sun, 29 Nov 2026 07:46:43 GMT"
KEY = "s3cr3t-key-value"
BASE = "http://osb.test:8080"  # the server respx stands in for


def ex(method, path, host, status, body="", req_headers=None, resp_headers=None, req_body=None):
    h = {"Host": host}
    h.update(req_headers or {})
    rh = {"Date": DATE}
    rh.update(resp_headers or {})
    return {
        "request": {"method": method, "path": path, "headers": h, "body": req_body},
        "response": {"status": status, "headers": rh, "body": body},
    }


SSE = (
    '{"type":"init","text":"%s","timestamp":1795938403468}\n\n'
    '{"type":"ping","text":"pong","timestamp":1795938403468}\n\n'
    '{"type":"stdout","text":"out","timestamp":1795938403469}\n\n'
    '{"type":"error","timestamp":1795938403469,"error":{"ename":"CommandExecError","evalue":"3",'
    '"traceback":["exit status 3"]}}\n\n' % CID
)


def sample():
    return [
        ex(
            "POST",
            "/v1/sandboxes",
            "127.0.0.1:8080",
            202,
            '{"id":"%s","status":{"state":"Running","lastTransitionAt":"2026-11-29T07:46:42.558200Z"}}' % SID,
            {"OPEN-SANDBOX-API-KEY": KEY},
            {"x-request-id": RID},
            req_body='{"env": {"TOKEN": "%s"}}' % KEY,
        ),
        ex("GET", "/v1/sandboxes", "127.0.0.1:8080", 401, "{}", {"OPEN-SANDBOX-API-KEY": "wrong-key"}),
        ex(
            "GET",
            f"/v1/sandboxes/{SID}/endpoints/44772",
            "127.0.0.1:8080",
            200,
            '{"endpoint":"127.0.0.1:46264/proxy/44772"}',
            {"OPEN-SANDBOX-API-KEY": KEY},
            {"x-request-id": RID},
        ),
        ex("GET", f"/v1/sandboxes/{SID}/endpoints/8080", "127.0.0.1:8080", 200, '{"endpoint":"127.0.0.1:57633"}'),
        ex(
            "POST",
            "/proxy/44772/command",
            "127.0.0.1:46264",
            200,
            SSE,
            resp_headers={"Content-Type": "text/event-stream"},
            req_body='{"command": "x"}',
        ),
        ex(
            "GET",
            f"/proxy/44772/command/status/{CID}",
            "127.0.0.1:46264",
            200,
            '{"id":"%s","started_at":"2026-11-29T07:46:43.466167594Z"}' % CID,
        ),
        ex(
            "POST",
            f"/v1/sandboxes/{SID}/renew-expiration",
            "127.0.0.1:8080",
            200,
            '{"expiresAt":"2026-11-29T08:46:43Z"}',
            req_body='{"expiresAt": "2026-11-29T08:46:43Z"}',
        ),
        ex("GET", "/v1/sandboxes/00000000-0000-0000-0000-000000000000", "127.0.0.1:8080", 404, "{}"),
        ex("GET", f"/v1/sandboxes/{SID2}", "127.0.0.1:8080", 404, '{"message":"Sandbox %s not found."}' % SID2),
    ]


# -- scrubber ----------------------------------------------------------------------------------------
def test_scrubber_placeholders_and_secrets():
    raw = sample()
    before = copy.deepcopy(raw)
    out = scrub_exchanges(raw, secrets=[KEY])
    assert raw == before, "the scrubber must not mutate its input"
    text = json.dumps(out)
    assert KEY not in text
    assert out[0]["request"]["headers"]["OPEN-SANDBOX-API-KEY"] == "<api-key>"
    assert out[0]["request"]["body"] == '{"env": {"TOKEN": "<api-key>"}}'
    assert out[1]["request"]["headers"]["OPEN-SANDBOX-API-KEY"] == "wrong-key"  # deliberate, kept
    assert out[0]["response"]["headers"] == {"Date": "{{http_date}}", "x-request-id": "{{request_id}}"}
    assert json.loads(out[0]["response"]["body"])["id"] == "{{sandbox_id:1}}"
    assert out[0]["request"]["headers"]["Host"] == "127.0.0.1:{{lifecycle_port}}"
    assert out[2]["request"]["path"] == "/v1/sandboxes/{{sandbox_id:1}}/endpoints/44772"  # container port kept
    assert out[2]["response"]["body"] == '{"endpoint":"127.0.0.1:{{execd_port}}/proxy/44772"}'
    assert out[3]["request"]["path"].endswith("/endpoints/8080")
    assert out[3]["response"]["body"] == '{"endpoint":"127.0.0.1:{{port:1}}"}'
    assert out[4]["request"]["headers"]["Host"] == "127.0.0.1:{{execd_port}}"
    assert out[5]["request"]["path"] == "/proxy/44772/command/status/{{command_id:1}}"
    assert '"started_at":"{{datetime}}"' in out[5]["response"]["body"]
    # a request time keeps its distance to the server's clock: 1 h after the Date header
    assert out[6]["request"]["body"] == '{"expiresAt": "{{datetime:+3600}}"}'
    assert out[6]["response"]["body"] == '{"expiresAt":"{{datetime}}"}'
    assert out[7]["request"]["path"].endswith("00000000-0000-0000-0000-000000000000")  # not a server id
    assert out[8]["request"]["path"] == "/v1/sandboxes/{{sandbox_id:2}}"
    assert out[8]["response"]["body"] == '{"message":"Sandbox {{sandbox_id:2}} not found."}'


def test_scrubber_keeps_sse_framing_exactly():
    out = scrub_exchanges(sample())[4]["response"]["body"]
    assert out.count("\n\n") == SSE.count("\n\n") and out.endswith("}\n\n")
    assert '"text":"{{command_id:1}}"' in out and '"timestamp":{{epoch_ms}}' in out
    # materialising the template gives back a stream with the same shape
    mat = materialize(out)
    assert [json.loads(f)["type"] for f in mat[:-2].split("\n\n")] == ["init", "ping", "stdout", "error"]


def test_scrubber_is_deterministic():
    a = json.dumps(scrub_exchanges(sample(), secrets=[KEY]))
    b = json.dumps(scrub_exchanges(sample(), secrets=[KEY]))
    assert a == b


def test_execd_token_and_authorization_are_redacted():
    raw = [
        ex(
            "GET",
            "/proxy/44772/ping",
            "127.0.0.1:46264",
            200,
            "",
            {"X-EXECD-ACCESS-TOKEN": "tok-123456", "Authorization": "Bearer abc"},
        )
    ]
    h = scrub_exchanges(raw)[0]["request"]["headers"]
    assert h["X-EXECD-ACCESS-TOKEN"] == "<execd-token>" and h["Authorization"] == "<redacted>"


# -- converter ---------------------------------------------------------------------------------------
VERSIONS = """Recorded on 2026-11-29 (machine clock)
- Runtime `docker` (Docker Engine 20.10.24+dfsg1, API 1.41)
- `opensandbox-server` 1.1.1 (PyPI).
- Source: OpenSandbox repository snapshot, HEAD
  `3bb6fad3d8b60bca70384c75a1f061c7514e248b`, committed
- The binary reports Version `v1.0.19`, Git Commit
"""


def test_parse_versions():
    v = parse_versions(VERSIONS)
    assert v == {
        "when": "2026-11-29",
        "server_version": "1.1.1",
        "execd_version": "v1.0.19",
        "execd_commit": "3bb6fad3d8b60bca70384c75a1f061c7514e248b",
        "runtime": "docker",
    }
    with pytest.raises(ConvertError, match="execd version"):
        parse_versions(VERSIONS.replace("Version `v1.0.19`", ""))


def test_convert_writes_one_fixture_per_file(tmp_path):
    src = tmp_path / "live" / "exchanges"
    src.mkdir(parents=True)
    (tmp_path / "live" / "VERSIONS.md").write_text(VERSIONS)
    (src / "07_command_exit3_sse.json").write_text(json.dumps(sample()[4:6]))
    out = tmp_path / "fx"
    paths = convert_dir(str(src), str(out))
    fx = fixture.load(paths[0])
    assert fx["scenario"] == "07_command_exit3_sse"
    assert fx["recorded"]["execd_commit"].startswith("3bb6fad") and fx["recorded"]["server_version"] == "1.1.1"
    assert fx["replay"] == {"replayable": True, "setup": "sandbox"}
    first = open(paths[0], "rb").read()
    convert_dir(str(src), str(out))
    assert open(paths[0], "rb").read() == first
    (src / "bad.json").write_text('{"not": "a list"}')
    with pytest.raises(ConvertError, match="list of exchanges"):
        convert_dir(str(src), str(out))


@pytest.mark.skipif(not os.path.isdir(LIVE), reason=f"live recordings not found in {LIVE}")
def test_committed_fixtures_are_the_conversion_of_the_live_recordings(tmp_path):
    """A fixture that says it is a conversion (recorded.tool) is byte-for-byte what the converter makes of
    ../shared/live; one re-recorded by `make record-fixtures` says so and is held to the server by --check."""
    convert_dir(LIVE, str(tmp_path))
    fixtures = os.path.join(REPO, "fixtures")
    converted = 0
    for name in sorted(os.listdir(tmp_path)):
        committed = fixture.load(os.path.join(fixtures, name))
        if committed["recorded"].get("tool") != "python -m record convert":
            assert committed["recorded"]["source"] == "python -m record", name
            assert committed["recorded"]["server_version"] != "unknown", name  # versions in the header
            assert committed["recorded"]["execd_version"] != "unknown", name
            continue
        converted += 1
        with open(tmp_path / name, "rb") as a, open(os.path.join(fixtures, name), "rb") as b:
            assert a.read() == b.read(), f"fixtures/{name} is not what 'python -m record convert' produces"
    assert converted >= 1  # the converter's output is still checked against at least one committed file


def test_every_live_recording_has_a_scenario():
    if os.path.isdir(LIVE):
        names = {os.path.splitext(n)[0] for n in os.listdir(LIVE) if n.endswith(".json")}
        assert names <= set(BY_NAME)
    assert "20_smoke_flow" in BY_NAME and len(SCENARIOS) == len(BY_NAME)


# -- comparator --------------------------------------------------------------------------------------
def test_bindings_bind_and_refuse_conflicts():
    b = Bindings()
    assert b.match("127.0.0.1:{{execd_port}}/proxy/44772", "127.0.0.1:41234/proxy/44772") is None
    assert b["{{execd_port}}"] == "41234"
    assert b.match("127.0.0.1:{{execd_port}}/proxy/44772", "127.0.0.1:5/proxy/44772") is not None
    assert b.match("http://{{execd_port}}", "http://41234") is None
    assert b.match("{{datetime}}", "2026-01-01T00:00:00.123Z") is None
    assert b.match("{{datetime}}", "yesterday") is not None
    assert b.match("{{sandbox_id:1}}", "3f1c1a52-6f43-4d0e-9d7c-1c1f0c6e2a10") is None
    assert "already" in b.match("{{sandbox_id:2}}", "3f1c1a52-6f43-4d0e-9d7c-1c1f0c6e2a10")


def _cmp(expected_body, actual_body, ct="application/json", status=200, headers=None):
    exp = {"status": 200, "headers": {"Content-Type": ct}, "body": expected_body}
    h = {"Content-Type": ct}
    h.update(headers or {})
    return {c.aspect: c for c in Comparer().compare(0, exp, status, h, actual_body.encode())}


def test_json_comparison_catches_shape_and_semantic_values():
    base = '{"code":"X","message":"m","n":1,"when":"{{datetime}}"}'
    ok = _cmp(base, '{"code":"X","message":"m","n":2,"when":"2026-01-01T00:00:00Z"}')
    assert all(c.ok for c in ok.values())  # n is not a semantic key: only its type counts
    r = _cmp(base, '{"code":"Y","message":"m","n":"2","when":"2026-01-01T00:00:00Z","extra":1}')
    assert not r["body-shape"].ok and "unexpected keys ['extra']" in r["body-shape"].detail
    assert "expected integer, got string" in r["body-shape"].detail
    assert not r["body-values"].ok and "'X'" in r["body-values"].detail
    r = _cmp(base, "not json")
    assert not r["body-shape"].ok
    r = _cmp(base, base.replace("{{datetime}}", "soon"))
    assert not r["body-values"].ok
    assert not _cmp("{}", "{}", status=404)["status"].ok


def test_sse_comparison():
    tmpl = scrub_exchanges(sample())[4]["response"]["body"]
    good = SSE.replace(
        '"stdout","text":"out","timestamp":1795938403469}\n\n', '"stdout","text":"out","timestamp":1}\n\n'
    )
    assert all(c.ok for c in _cmp(tmpl, good, "text/event-stream").values())
    data_framed = "".join(f"data: {f}\n\n" for f in SSE[:-2].split("\n\n"))
    r = _cmp(tmpl, data_framed, "text/event-stream")
    assert not r["sse-framing"].ok and "bare JSON" in r["sse-framing"].detail
    r = _cmp(tmpl, SSE.replace('"text":"out"', '"text":"out\\n"'), "text/event-stream")
    assert not r["sse-output"].ok and r["sse-framing"].ok
    r = _cmp(tmpl, SSE.replace('{"type":"ping","text":"pong","timestamp":1795938403468}\n\n', ""), "text/event-stream")
    assert not r["sse-events"].ok and "ping missing" in r["sse-events"].detail
    r = _cmp(tmpl, SSE.replace('"evalue":"3"', '"evalue":"4"'), "text/event-stream")
    assert not r["sse-values"].ok
    r = _cmp(tmpl, SSE.replace(CID, "not-hex"), "text/event-stream")
    assert not r["sse-values"].ok and "init text" in r["sse-values"].detail


def test_headers_that_matter():
    exp = {
        "status": 200,
        "headers": {"Content-Type": "text/plain; charset=utf-8", "Execd-Commands-Tail-Cursor": "25"},
        "body": "x",
    }
    checks = {
        c.aspect: c
        for c in Comparer().compare(
            0, exp, 200, [("content-type", "text/plain; charset=utf-8"), ("x-request-id", RID)], b"x"
        )
    }
    assert checks["content-type"].ok
    assert not checks["headers"].ok
    assert "x-request-id unexpected" in checks["headers"].detail and "Tail-Cursor" in checks["headers"].detail


# -- replay (respx stands in for the mock) -----------------------------------------------------------
def test_replay_binds_ids_and_scores():
    fx = fixture.make("t", "", {}, {}, scrub_exchanges(sample()[:3], secrets=[KEY]))
    new_id = "3f1c1a52-6f43-4d0e-9d7c-1c1f0c6e2a10"
    with respx.mock(assert_all_called=False) as mock:
        rid = {"x-request-id": RID}
        mock.post(f"{BASE}/v1/sandboxes").respond(
            202,
            content=b'{"id":"%s","status":{"state":"Running","lastTransitionAt":"2030-01-01T00:00:00Z"}}'
            % new_id.encode(),
            headers=rid,
        )
        mock.get(f"{BASE}/v1/sandboxes").respond(401, content=b"{}")
        ep = mock.get(f"{BASE}/v1/sandboxes/{new_id}/endpoints/44772").respond(
            200, content=b'{"endpoint":"127.0.0.1:40404/proxy/44772"}', headers=rid
        )
        mock.route(method="DELETE").respond(204)  # the replay's teardown
        r = Replayer(BASE, KEY)
        try:
            res = r.replay(fx)
        finally:
            r.close()
        assert ep.called, "the replay must use the id the server returned"
        sent = mock.calls[0].request
        assert sent.headers["OPEN-SANDBOX-API-KEY"] == KEY and b"<api-key>" not in sent.content
    assert res.differences() == [], [c.text() for c in res.differences()]
    assert res.percent == 100.0
    with respx.mock(assert_all_called=False) as mock:  # a server that answers differently scores lower
        mock.post(f"{BASE}/v1/sandboxes").respond(500, json={"code": "BOOM"})
        mock.get(f"{BASE}/v1/sandboxes").respond(401, content=b"{}")
        mock.route(method="DELETE").respond(204)
        r = Replayer(BASE, KEY)
        try:
            res = r.replay(fixture.make("t", "", {}, {}, scrub_exchanges(sample()[:2], secrets=[KEY])))
        finally:
            r.close()
    assert 0 < res.percent < 100 and any(c.aspect == "status" for c in res.differences())


def test_the_fault_proxy_appends_each_exchange_and_the_file_stays_a_whole_fixture(tmp_path):
    """The proxy's recording grows in place, one exchange at a time (no rewrite of what is
    already there), and after every exchange it is the fixture fixturefile.dumps writes, readable by
    fixturefile.load (record compare, replay), credentials scrubbed as before."""
    from mock_opensandbox.workbench.proxy_recording import Recorder

    rec = Recorder(str(tmp_path), "rec", "http://127.0.0.1:1")
    assert not os.path.exists(rec.path)  # nothing before the first exchange
    inode = None
    for i in range(3):
        rec.add(
            {
                "method": "POST",
                "path": "/v1/sandboxes?k=" + KEY,
                "body": '{"env": {"API_TOKEN": "t0ps3cret"}}',
                "headers": {"OPEN-SANDBOX-API-KEY": KEY, "X-EXECD-ACCESS-TOKEN": "tok-" + KEY},
            },
            {"status": 200, "headers": {"X-Echo": KEY}, "body": "échange %d %s" % (i, KEY)},
        )
        st = os.stat(rec.path)
        assert inode in (None, st.st_ino), "the recording was rewritten, not appended to"
        inode = st.st_ino
        fx = fixture.load(rec.path)
        assert len(fx["exchanges"]) == i + 1
        with open(rec.path, encoding="utf-8") as f:
            assert f.read() == fixture.dumps(fx)
    text = open(rec.path, encoding="utf-8").read()
    assert KEY not in text and "t0ps3cret" not in text
    ex = fx["exchanges"][0]
    assert ex["request"]["headers"] == {"OPEN-SANDBOX-API-KEY": "<api-key>", "X-EXECD-ACCESS-TOKEN": "<execd-token>"}
    assert ex["request"]["path"] == "/v1/sandboxes?k=<api-key>"
    assert ex["request"]["body"] == '{"env": {"API_TOKEN": "<redacted>"}}'
    assert ex["response"] == {"status": 200, "headers": {"X-Echo": "<api-key>"}, "body": "échange 0 <api-key>"}


def test_one_secret_scrubber_and_one_fixture_writer():
    """record/, the journal and the proxy scrub with mock_opensandbox/workbench/scrub.py and write
    fixtures with mock_opensandbox/workbench/fixturefile.py; none keeps a table of credential headers, a
    credential pattern or a JSON fixture writer of its own."""
    import ast

    own = {
        os.path.join("mock_opensandbox", "workbench/scrub.py"),
        os.path.join("mock_opensandbox", "workbench/fixturefile.py"),
    }
    offenders = []
    for top in ("mock_opensandbox", "record"):
        for d, _, files in os.walk(os.path.join(REPO, top)):
            for f in files:
                path = os.path.join(d, f)
                rel = os.path.relpath(path, REPO)
                if not f.endswith(".py") or rel in own:
                    continue
                tree = ast.parse(open(path, encoding="utf-8").read())
                for n in ast.walk(tree):
                    if isinstance(n, ast.Constant) and n.value in ("x-execd-access-token", "set-cookie"):
                        offenders.append((rel, n.value))
                    if isinstance(n, ast.Constant) and isinstance(n.value, str) and "api[_-]?key" in n.value:
                        offenders.append((rel, "credential pattern"))
                    if isinstance(n, ast.Constant) and n.value == "fixture_format":
                        offenders.append((rel, "fixture writer"))
    # lower-case header names sent on purpose by the differential corpus are requests, not tables
    offenders = [o for o in offenders if not o[0].startswith("differential")]
    assert offenders == []
