"""Fixture replay: how faithfully the mock answers what the real server 1.1.1 answered.

Every fixture scenario whose outcome does not depend on timing is replayed against a fresh mock
(``record.replay``): the recorded requests in order, placeholders bound to the ids/ports the mock
returns, each answer compared with the recording (``record.compare``: status, content type, the
headers that matter, JSON key sets/types and semantic values, SSE framing/event types/output).
A per-scenario score and the total are printed at the end of the session (tiers/conftest.py).
A difference fails its scenario unless a ``replay`` entry of tiers/t2/ALLOWED_DIFFERENCES explains it.

Also here: the recorder against the mock as a stand-in live server (record, ``--check``: zero drift;
replay of those recordings: 100 %).
"""

from __future__ import annotations

import io
import os
import re
import types

import pytest

from mock_opensandbox.workbench import fixturefile as fixture
from record.replay import ScenarioResult, replay_fixture
from tiers.toolkit import spec_guard as sg

FIXTURES = os.path.join(sg.REPO, "fixtures")
ALL = fixture.load_dir(FIXTURES) if os.path.isdir(FIXTURES) else {}
REPLAY_ALLOW = sg.load_allow_list()[1]
MOCK_KW = {"execd_close_delay": 0.0}  # the real server keeps streams open ~1 s; nothing here depends on it
CODE_FIXTURES = ("27_code_interpreter",)  # record/scenarios_code.py


def _report(config: pytest.Config, result: ScenarioResult, explained: int = 0) -> None:
    results = config.__dict__.setdefault("_osb_replay_results", [])
    results[:] = [r for r in results if r.scenario != result.scenario] + [result]
    config._osb_replay_explained = getattr(config, "_osb_replay_explained", 0) + explained
    config.__dict__.setdefault("_osb_replay_allow_used", set())


def _explain(scenario: str, index: int, text: str) -> sg.ReplayAllow | None:
    for entry in REPLAY_ALLOW:
        if entry.matches(scenario, index, text):
            return entry
    return None


def test_fixtures_exist_and_are_well_formed():
    assert len(ALL) >= 18, f"expected the 18 converted live scenarios in {FIXTURES}"
    for name, fx in ALL.items():
        rec = fx["recorded"]
        for key in ("where", "when", "server_version", "execd_version", "execd_commit", "source"):
            assert rec.get(key), f"{name}: recorded.{key} missing"
        assert fx["exchanges"], name
        for i, ex in enumerate(fx["exchanges"]):
            for k, v in ex["request"]["headers"].items():
                if k.lower() == "open-sandbox-api-key":
                    assert v in ("<api-key>", "wrong-key"), f"{name} #{i}: an API key value survived"
            body = ex["response"].get("body") or ""
            ct = next((v for k, v in ex["response"]["headers"].items() if k.lower() == "content-type"), "")
            if ct.startswith("text/event-stream"):
                assert body.endswith("}\n\n") and "data:" not in body.split("\n", 1)[0], f"{name} #{i}: framing"


def test_fixture_file_is_its_own_canonical_form():
    """fixture.dumps is deterministic and the committed files are exactly its output."""
    for name in ALL:
        path = os.path.join(FIXTURES, name + ".json")
        with open(path, encoding="utf-8") as f:
            assert f.read() == fixture.dumps(fixture.load(path)), name


@pytest.mark.parametrize("name", sorted(ALL))
def test_replay(name, opensandbox_mock_factory, request):
    fx = ALL[name]
    if not fx["replay"].get("replayable", True):
        _report(request.config, ScenarioResult(name, [], len(fx["exchanges"]), fx["replay"].get("reason", "")))
        pytest.skip(fx["replay"].get("reason", "not replayable"))
    kw = dict(MOCK_KW)
    if name in CODE_FIXTURES:  # a code-interpreter image: the mock's sandboxes get a pip-made Jupyter env
        from tiers.toolkit.jupyter import jupyter_env_or_skip

        kw["jupyter_env"] = jupyter_env_or_skip()
    mock = opensandbox_mock_factory(**kw)
    result = replay_fixture(fx, mock.base_url, mock.api_key)
    unexplained, explained = [], 0
    used = request.config.__dict__.setdefault("_osb_replay_allow_used", set())
    for c in result.differences():
        entry = _explain(name, c.index, f"{c.aspect}: {c.detail}")
        if entry is None:
            unexplained.append(c.text())
        else:
            explained += 1
            used.add(entry.line)
    _report(request.config, result, explained)
    assert not unexplained, (
        f"{name}: {len(unexplained)} unexplained difference(s) between the mock and the "
        f"recording:\n  " + "\n  ".join(unexplained)
    )


def test_replay_allow_list_has_no_stale_entries(request):
    """Runs after the replays (file order): every replay entry must still explain something."""
    ran = {r.scenario for r in getattr(request.config, "_osb_replay_results", [])}
    if ran != set(ALL):
        pytest.skip("only meaningful when every fixture scenario was replayed in this session")
    used = request.config.__dict__.get("_osb_replay_allow_used", set())
    stale = [
        f"ALLOWED_DIFFERENCES:{e.line} ({e.reason})"
        for e in REPLAY_ALLOW
        if e.line not in used and not e.reason.startswith("(race)")
    ]  # a race may go either way in a run
    assert not stale, "replay allow-list entries that no longer match any difference:\n  " + "\n  ".join(stale)


# -- the recorder against the mock as a stand-in live server -----------------------------------------
# Fast scenarios covering lifecycle, SSE, background logs, files and the SDK flow (the sleep-heavy
# 09/12/17 add wall-clock time without new recorder code paths).
RECORD_SUBSET = ["02", "05", "07", "13", "14", "18", "20"]


def _args(**kw):
    base = dict(
        list=False,
        scenario=RECORD_SUBSET,
        image="python:3.12-slim",
        busybox_image="busybox:latest",
        missing_image="local/does-not-exist:1",
        mode="all",
        check=False,
        execd_version="mock",
        execd_commit=None,
        timeout=30.0,
    )
    base.update(kw)
    return types.SimpleNamespace(**base)


def test_record_from_the_mock_then_check_shows_no_drift_and_replays_fully(tmp_path, opensandbox_mock_factory):
    from record.recorder import run

    out = str(tmp_path / "fx")
    first = opensandbox_mock_factory(**MOCK_KW)
    buf = io.StringIO()
    assert run(_args(base_url=first.base_url, api_key=first.api_key, out=out), buf) == 0, buf.getvalue()
    recorded = fixture.load_dir(out)
    assert sorted(n.split("_", 1)[0] for n in recorded) == sorted(RECORD_SUBSET)
    for fx in recorded.values():  # the key never reaches a fixture
        assert first.api_key not in fixture.dumps(fx)

    second = opensandbox_mock_factory(**MOCK_KW)
    buf = io.StringIO()
    rc = run(_args(base_url=second.base_url, api_key=second.api_key, out=out, check=True), buf)
    assert rc == 0, buf.getvalue()
    assert "0 scenario(s) drifted" in buf.getvalue()

    for name, fx in recorded.items():
        if not fx["replay"].get("replayable", True):
            continue
        third = opensandbox_mock_factory(**MOCK_KW)
        res = replay_fixture(fx, third.base_url, third.api_key)
        assert res.differences() == [], (name, [c.text() for c in res.differences()])
        third.stop()


def test_check_reports_drift_against_the_live_fixtures(tmp_path, opensandbox_mock_factory):
    """--check against the committed live fixtures: the mock differs only where it is explained
    (scenario 15: no busybox image), so exactly that scenario drifts and the exit status says so."""
    from record.recorder import run

    mock = opensandbox_mock_factory(**MOCK_KW)
    buf = io.StringIO()
    rc = run(
        _args(
            base_url=mock.base_url,
            api_key=mock.api_key,
            out=FIXTURES,
            check=True,
            keep_dir=str(tmp_path),
            scenario=["01", "15"],
            image="local/python:3-slim",
        ),
        buf,
    )
    text = buf.getvalue()
    assert "01_health_version: no drift" in text, text
    assert "15_create_variants: DRIFT" in text and "sse-output" in text, text
    assert rc == 1
    kept = re.search(r"the fresh recordings are kept in (\S+) ", text)  # on drift, in --keep-dir
    assert kept and os.path.dirname(kept[1]) == str(tmp_path), text
