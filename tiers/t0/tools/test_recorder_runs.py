"""Offline tests of record/recorder.py and the record CLI against a respx stand-in for the server: record_one,
the run modes (all, new, --check), drift and its probe noise, and the failure modes of a real server (a failed
create, an execd that is not ready, an unreachable server); split from test_recorder.py."""

from __future__ import annotations

import copy
import io
import os
import re
import types

import httpx
import pytest
import respx

from mock_opensandbox.workbench import fixturefile as fixture
from record.recorder import drift, record_one, run
from record.scenarios import BY_NAME
from record.scrub import scrub_exchanges
from tiers.t0.tools.test_recorder import BASE, KEY, RID, ex, sample


# -- recorder (respx stands in for the server) -------------------------------------------------------
def _lifecycle_routes(mock, version_status=200):
    rid = {"x-request-id": RID}
    mock.get(f"{BASE}/health").respond(200, json={"status": "healthy"}, headers=rid)
    mock.get(f"{BASE}/version").respond(version_status, json={"version": "1.1.1"}, headers=rid)

    def sandboxes(request):
        if request.headers.get("OPEN-SANDBOX-API-KEY") != KEY:
            return httpx.Response(401, json={"code": "MISSING_API_KEY", "message": "missing"}, headers=rid)
        return httpx.Response(200, json={"items": []}, headers=rid)

    mock.route(url__regex=rf"{BASE}/v1/sandboxes.*").mock(side_effect=sandboxes)


def _args(tmp_path, **kw):
    a = dict(
        list=False,
        scenario=["01", "02"],
        image="img",
        busybox_image="bb",
        missing_image="missing",
        mode="all",
        check=False,
        execd_version=None,
        execd_commit=None,
        timeout=5.0,
        base_url=BASE + "/v1",
        api_key=KEY,
        out=str(tmp_path / "fx"),
    )
    a.update(kw)
    return types.SimpleNamespace(**a)


def test_record_one_scrubs_and_records_every_exchange(tmp_path):
    from record.client import Session

    with respx.mock(assert_all_called=False) as mock:
        _lifecycle_routes(mock)
        with Session(BASE, KEY) as s:
            fx = record_one(
                s,
                BY_NAME["01_health_version"],
                image="i",
                busybox_image="b",
                missing_image="m",
                meta={"where": "osb.test:8080"},
            )
    assert [e["request"]["path"] for e in fx["exchanges"]] == ["/health", "/version", "/health", "/version"]
    assert "OPEN-SANDBOX-API-KEY" not in fx["exchanges"][0]["request"]["headers"]
    assert fx["exchanges"][2]["request"]["headers"]["OPEN-SANDBOX-API-KEY"] == "<api-key>"
    assert fx["exchanges"][0]["response"]["headers"]["x-request-id"] == "{{request_id}}"
    assert fx["exchanges"][0]["request"]["headers"]["Host"] == "osb.test:{{lifecycle_port}}"
    assert KEY not in fixture.dumps(fx)


def test_run_modes_all_new_and_check(tmp_path):
    with respx.mock(assert_all_called=False) as mock:
        _lifecycle_routes(mock)
        out = io.StringIO()
        assert run(_args(tmp_path), out) == 0
        files = sorted(os.listdir(tmp_path / "fx"))
        assert files == ["01_health_version.json", "02_auth_failures.json"]
        assert fixture.load(str(tmp_path / "fx" / files[0]))["recorded"]["server_version"] == "1.1.1"
        out = io.StringIO()
        assert run(_args(tmp_path, mode="new"), out) == 0
        assert "fixture exists, kept" in out.getvalue() and "recorded 0 scenario(s)" in out.getvalue()
        out = io.StringIO()
        assert run(_args(tmp_path, check=True), out) == 0, out.getvalue()
        assert "0 scenario(s) drifted" in out.getvalue()
    with respx.mock(assert_all_called=False) as mock:  # the server changed: /version now fails
        _lifecycle_routes(mock, version_status=500)
        out = io.StringIO()
        assert run(_args(tmp_path, check=True, keep_dir=str(tmp_path)), out) == 1
        report = out.getvalue()
        assert "01_health_version: DRIFT" in report and "#1 status: expected 200, got 500" in report
        assert "02_auth_failures: no drift" in report
        kept = re.search(r"the fresh recordings are kept in (\S+) ", report)  # on drift, in --keep-dir
        assert kept and os.path.dirname(kept[1]) == str(tmp_path), report
    assert sorted(os.listdir(tmp_path / "fx")) == files  # --check never touches the fixtures


def test_only_a_recording_asks_execd_for_its_version(tmp_path):
    """Without --execd-version a recording reads the banner in a throw-away sandbox (an authenticated
    POST /v1/sandboxes before the scenarios); --check compares exchanges only and creates none."""

    def version_creates(mock):
        return [
            c
            for c in mock.calls
            if c.request.method == "POST"
            and c.request.url.path == "/v1/sandboxes"
            and c.request.headers.get("OPEN-SANDBOX-API-KEY") == KEY
        ]

    for check, expected in ((False, 1), (True, 0)):
        with respx.mock(assert_all_called=False) as mock:
            _lifecycle_routes(mock)
            if check:
                assert run(_args(tmp_path), io.StringIO()) == 0  # the fixtures to check against
            before = len(version_creates(mock))
            assert run(_args(tmp_path, check=check, scenario=["01"]), io.StringIO()) == 0
            assert len(version_creates(mock)) - before == expected, check


def test_drift_detects_changed_requests_and_counts():
    old = fixture.make("x", "", {}, {}, scrub_exchanges(sample()[:3]))
    new = copy.deepcopy(old)
    assert drift(old, new) == []
    new["exchanges"].pop()
    assert drift(old, new) == ["exchange count: 3 recorded, 2 now"]
    new = copy.deepcopy(old)
    new["exchanges"][1]["request"]["path"] = "/v1/other"
    assert any("#1 request" in d for d in drift(old, new))


def test_unreachable_server_is_a_clean_error(tmp_path, capsys):
    from record.__main__ import main

    with respx.mock(assert_all_called=False) as mock:
        mock.route(url__startswith=BASE).mock(side_effect=httpx.ConnectError("refused"))
        rc = main(
            ["--base-url", BASE, "--api-key", KEY, "--out", str(tmp_path / "fx"), "--scenario", "01", "--mode", "all"]
        )
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("error: ") and "ConnectError" in err
    assert KEY not in err
    assert main(["--base-url", "ftp://nowhere", "--api-key", "k"]) == 2
    assert main(["--scenario", "99_nope", "--base-url", BASE, "--api-key", "k"]) == 2


# -- the recorder against a real server's failure modes ---------------------------------------------------------
@pytest.mark.parametrize(
    "status, body, needle, fix",
    [
        (
            500,
            {"code": "DOCKER_ERROR", "message": "Failed to pull image local/none:1"},
            "POST /v1/sandboxes answered HTTP 500: Failed to pull image local/none:1",
            "fix: use images the server has",
        ),
        (202, {"status": {"state": "Pending"}}, "POST /v1/sandboxes answered HTTP 202 without an id", ""),
        (
            401,
            {"code": "INVALID_API_KEY", "message": "bad key"},
            "answered HTTP 401: bad key",
            "fix: pass the server's API key",
        ),
    ],
)
def test_a_failed_create_is_one_line_naming_scenario_request_and_fix(tmp_path, capsys, status, body, needle, fix):
    from record.__main__ import main

    with respx.mock(assert_all_called=False) as mock:
        mock.post(f"{BASE}/v1/sandboxes").respond(status, json=body)  # before the catch-all of _lifecycle_routes
        _lifecycle_routes(mock)
        rc = main(
            [
                "--base-url",
                BASE,
                "--api-key",
                KEY,
                "--out",
                str(tmp_path / "fx"),
                "--scenario",
                "05",
                "--scenario",
                "01",
                "--mode",
                "all",
                "--execd-version",
                "v1.0.19",
            ]
        )
    captured = capsys.readouterr()
    lines = captured.err.splitlines()
    assert rc == 2 and len(lines) == 1, captured.err
    assert lines[0].startswith("error: 05_create_get_list_endpoints: ") and needle in lines[0], lines[0]
    assert fix in lines[0]
    assert "Traceback" not in captured.err and "KeyError" not in captured.err and KEY not in captured.err
    assert "01_health_version: 4 exchanges" in captured.out  # the other scenarios still run
    assert "recorded 1 scenario(s), 1 failed" in captured.out
    assert sorted(os.listdir(tmp_path / "fx")) == ["01_health_version.json"]  # nothing written for the failure


def test_wait_ready_retries_refused_and_dropped_connections_until_200():
    from record.client import Execd, Session

    with respx.mock(assert_all_called=False) as mock:
        ping = mock.get("http://127.0.0.1:41543/proxy/44772/ping")
        ping.side_effect = [
            httpx.ConnectError("refused"),
            httpx.RemoteProtocolError("Server disconnected without sending a response."),
            httpx.Response(200),
        ]
        with Session(BASE, KEY) as s:
            s.wait_ready(Execd(s, "127.0.0.1:41543/proxy/44772", {}))
            assert ping.call_count == 3 and s.exchanges == []  # unrecorded


def test_wait_ready_gives_up_at_its_deadline_with_one_line():
    from record.client import FIX_EXECD, Execd, RecorderError, Session

    with respx.mock(assert_all_called=False) as mock:
        mock.get("http://127.0.0.1:41543/proxy/44772/ping").mock(
            side_effect=httpx.RemoteProtocolError("Server disconnected without sending a response.")
        )
        with Session(BASE, KEY, ready_timeout=0.3) as s:
            with pytest.raises(RecorderError) as info:
                s.wait_ready(Execd(s, "127.0.0.1:41543/proxy/44772", {}))
    msg = str(info.value)
    assert msg.startswith("GET http://127.0.0.1:41543/proxy/44772/ping: no 200 within 0.3 s (last: ")
    assert "Server disconnected" in msg and "\n" not in msg and info.value.fix == FIX_EXECD


def test_image_knobs_default_to_the_environment(monkeypatch):
    from record.__main__ import _record_parser

    monkeypatch.setenv("OPENSANDBOX_IMAGE", "local/python:3-slim")
    monkeypatch.setenv("OPENSANDBOX_BUSYBOX_IMAGE", "local/busybox:latest")
    a = _record_parser().parse_args([])
    assert (a.image, a.busybox_image) == ("local/python:3-slim", "local/busybox:latest")
    monkeypatch.delenv("OPENSANDBOX_IMAGE")
    monkeypatch.delenv("OPENSANDBOX_BUSYBOX_IMAGE")
    a = _record_parser().parse_args([])
    assert (a.image, a.busybox_image) == ("python:3.12-slim", "busybox:latest")


def test_drift_noise_blanks_per_sandbox_values_but_not_real_changes():
    from record.scenarios import PROBE_NOISE

    def probe(text):
        body = '{"type":"stdout","text":"%s","timestamp":1}\n\n' % text
        return fixture.make(
            "21",
            "",
            {},
            {},
            [ex("POST", "/proxy/44772/command", "h", 200, body, resp_headers={"Content-Type": "text/event-stream"})],
        )

    a = probe(
        "197 173 0:42 / / rw master:2 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/ABC:"
        "/x/%s Dec  1 06:42 41631cca87d2" % ("a" * 64)
    )
    b = probe(
        "515 479 0:55 / / rw master:23 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/XYZ:"
        "/x/%s Dec 11 17:05 5d58ab97d956" % ("b" * 64)
    )
    assert drift(a, b) and drift(a, b, PROBE_NOISE) == []
    c = probe(
        "515 479 0:55 / / ro master:23 - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/XYZ:"
        "/x/%s Dec 11 17:05 5d58ab97d956" % ("b" * 64)
    )
    assert drift(a, c, PROBE_NOISE)  # rw -> ro is a real change


def test_the_pending_signals_ulimit_is_the_hosts_not_drift():
    """`ulimit -a` in scenario 21: RLIMIT_SIGPENDING and RLIMIT_NPROC follow the host's memory (96369, then 96367)."""
    from record.scenarios import PROBE_NOISE

    def probe(n):
        body = '{"type":"stdout","text":"pending signals                     (-i) %d","timestamp":1}\n\n' % n
        body += '{"type":"stdout","text":"max user processes                  (-u) %d","timestamp":1}\n\n' % n
        hdr = {"Content-Type": "text/event-stream"}
        return fixture.make("21", "", {}, {}, [ex("POST", "/proxy/44772/command", "h", 200, body, resp_headers=hdr)])

    assert drift(probe(96369), probe(96367)) and drift(probe(96369), probe(96367), PROBE_NOISE) == []


def test_a_race_recorded_live_is_explained_and_a_planted_change_is_not():
    """--check applies the replay rules of tiers/t2/ALLOWED_DIFFERENCES: scenario 27's execution_complete race is
    explained there (with its reason); a field renamed in a recorded answer is still drift."""
    from record.compare_dir import DEFAULT_ALLOW, load_allow
    from record.recorder import drift_checks, explain

    def code_run(order, key="code"):
        events = {
            "init": '{"type":"init","text":"x","timestamp":1}',
            "stdout": '{"type":"stdout","text":"1\\n","timestamp":1}',
            "done": '{"type":"execution_complete","execution_time":1,"timestamp":1}',
        }
        body = "".join(events[e] + "\n\n" for e in order)
        hdr = {"Content-Type": "text/event-stream"}
        exs = [ex("GET", "/v1/sandboxes/x", "h", 200, '{"%s": 1}' % key) for _ in range(3)]
        exs.append(ex("POST", "/proxy/44772/code", "h", 200, body, resp_headers=hdr))
        return fixture.make("27_code_interpreter", "", {}, {}, exs)

    allow = load_allow([DEFAULT_ALLOW])
    recorded = code_run(["init", "stdout", "done"])
    raced = explain("27_code_interpreter", drift_checks(recorded, code_run(["init", "done", "stdout"])), allow)
    assert raced[0] == [] and len(raced[1]) == 1 and "(race)" in raced[1][0], raced
    renamed = code_run(["init", "stdout", "done"], key="codes")
    unexplained, _ = explain("27_code_interpreter", drift_checks(recorded, renamed), allow)
    assert unexplained and all(line.startswith("#") for line in unexplained), unexplained
    assert explain("26_network_policy", drift_checks(recorded, code_run(["init", "done", "stdout"])), allow)[0]
