"""The official code-interpreter SDK (opensandbox-code-interpreter, unchanged) on the mock with a pip-made
Jupyter env (--jupyter-env, mock_opensandbox/runtime/jupyterenv.py): the step flow of tiers/flows/execd/code_flow.py, the raw
/code event stream in execd's order (QUIRKS.md part 2, "/code with Jupyter"), the per-context lock, the
bounded create of an unknown language, and a plain image that stays plain."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
from datetime import timedelta

import httpx
import pytest

pytest.importorskip("code_interpreter")

from mock_opensandbox import MockOpenSandbox
from mock_opensandbox.execd import code as execd_code
from mock_opensandbox.wire.sse import parse_stream
from tiers.flows.execd.code_flow import STEPS, run_code_flow
from tiers.toolkit.jupyter import jupyter_env_or_skip
from tiers.toolkit.sdk import sdk_config
from tiers.toolkit.waits import wait_until

IMAGE = "opensandbox/code-interpreter:v1.0.2"


@pytest.fixture(scope="module")
def osb():
    env = jupyter_env_or_skip()
    with MockOpenSandbox(execd_close_delay=0.05, jupyter_env=env) as mock:
        yield mock


@pytest.fixture(scope="module")
def ci(osb):
    from code_interpreter.sync import CodeInterpreterSync
    from opensandbox.sync import SandboxSync

    sb = SandboxSync.create(IMAGE, connection_config=sdk_config(osb, sync=True, timeout=60))
    try:
        yield CodeInterpreterSync.create(sb, ready_timeout=timedelta(seconds=60))
    finally:
        sb.kill()


def _execd(osb, sid: str) -> str:
    r = httpx.get(
        osb.base_url + "/v1/sandboxes/%s/endpoints/44772" % sid, headers={"OPEN-SANDBOX-API-KEY": osb.api_key}
    )
    return "http://" + r.json()["endpoint"]


def _events(url: str, body: dict) -> tuple[int, list[dict], bytes]:
    with httpx.stream("POST", url + "/code", json=body, timeout=60) as r:
        raw = b"".join(r.iter_bytes())
    return r.status_code, list(parse_stream([raw])), raw


def test_the_sdk_flow_passes_every_step(osb):
    table = run_code_flow(osb.base_url, osb.api_key, IMAGE)
    failed = {k: v for k, v in table.items() if v != "ok"}
    assert failed == {} and len(table) == STEPS, failed


def test_the_event_stream_is_execds(osb, ci):
    url = _execd(osb, ci.id)
    for _ in range(3):  # a reply's count can end the stream before the kernel's output, as on the real execd
        status, evs, _ = _events(url, {"code": "print('a'); 6*7", "context": {"language": "python"}})
        kinds = [e["type"] for e in evs if e["type"] != "ping"]
        if status != 200 or kinds != ["init", "execution_complete"]:  # (QUIRKS.md "/code run with Jupyter")
            break
    # execution_complete at the first idle of any parent (mostly before the output, as in fixture
    # 27_code_interpreter), the rest in the kernel's order
    assert status == 200 and kinds[0] == "init" and kinds.count("execution_complete") == 1, evs
    assert [k for k in kinds if k != "execution_complete"] == ["init", "stdout", "execution_count", "result"], evs
    res = next(e for e in evs if e["type"] == "result")
    assert res["results"] == {"text": "42"} and list(res) == ["type", "timestamp", "results"]
    assert next(e for e in evs if e["type"] == "execution_count")["execution_count"] > 0
    status, evs, _ = _events(url, {"code": "raise KeyError('k')", "context": {"language": "python"}})
    kinds = [e["type"] for e in evs if e["type"] not in ("ping", "execution_complete")]
    assert kinds[:3] == ["init", "status", "error"], evs
    err = next(e for e in evs if e["type"] == "error")["error"]
    assert err["ename"] == "KeyError" and err["evalue"] == "'k'" and isinstance(err["traceback"], list)


def test_unknown_context_and_contexts_routes(osb, ci):
    url = _execd(osb, ci.id)
    r = httpx.post(url + "/code", json={"code": "1", "context": {"id": "nope", "language": "python"}})
    assert r.status_code == 500 and r.json() == {
        "code": "RUNTIME_ERROR",
        "message": "error running codes context not found",
    }
    r = httpx.get(url + "/code/contexts/nope")
    assert r.status_code == 404 and r.json()["code"] == "CONTEXT_NOT_FOUND"
    r = httpx.post(url + "/code/context", json={"language": "python", "cwd": "/tmp/ctxdir"}, timeout=60)
    assert r.status_code == 200 and r.json()["language"] == "python" and r.json()["cwd"] == "/tmp/ctxdir"
    cid = r.json()["id"]
    _, evs, _ = _events(url, {"code": "import os; print(os.getcwd())", "context": {"id": cid, "language": "python"}})
    # execd's setWorkingDir is a no-op: Jupyter puts the kernel in its root dir (/workspace) when the
    # notebook path's directory is not under it (runtime/jupyter.go; notebook 6 session manager)
    assert [e["text"] for e in evs if e["type"] == "stdout"] == ["/workspace\n"], [e.get("text") for e in evs]
    assert httpx.get(url + "/code/contexts/" + cid).json() == {"id": cid, "language": "python"}
    assert httpx.delete(url + "/code/contexts/" + cid).status_code == 200
    assert httpx.delete(url + "/code/contexts/" + cid).status_code == 404


def test_a_busy_context_answers_session_is_busy(osb, ci):
    url = _execd(osb, ci.id)
    cid = httpx.post(url + "/code/context", json={"language": "python"}, timeout=60).json()["id"]
    started = threading.Event()
    out: list = []

    def slow() -> None:
        with httpx.stream(
            "POST",
            url + "/code",
            json={
                "code": "import time; print('go', flush=True); time.sleep(20)",
                "context": {"id": cid, "language": "python"},
            },
            timeout=60,
        ) as r:
            for chunk in r.iter_bytes():
                out.append(chunk)
                if b'"go' in b"".join(out):
                    started.set()  # the kernel runs the code

    t = threading.Thread(target=slow)
    t.start()
    try:
        assert started.wait(30)
        status, evs, raw = _events(url, {"code": "1", "context": {"id": cid, "language": "python"}})
        assert status == 200 and evs[0]["type"] == "init"
        assert raw.rstrip().endswith(
            json.dumps(
                {"code": "RUNTIME_ERROR", "message": "error running codes session is busy"}, separators=(",", ":")
            ).encode()
        ), raw
        # interrupt ends the slow run (KeyboardInterrupt in the kernel)
        assert httpx.delete(url + "/code", params={"id": cid}).status_code == 200
    finally:
        t.join(30)
    assert b"KeyboardInterrupt" in b"".join(out), out


def _creating() -> int:
    """Threads of this process retrying a context's kernel start (JupyterContexts._create)."""
    return sum(
        1
        for frame in sys._current_frames().values()
        for f in traceback.walk_stack(frame)
        if f[0].f_code is execd_code.JupyterContexts._create.__code__
    )


def test_an_unknown_language_context_never_answers_until_the_client_leaves(osb, ci):
    """As execd's kernelWaitingBackoff: no answer while the client waits; its thread ends when the client leaves."""
    with pytest.raises(httpx.ReadTimeout):
        httpx.post(_execd(osb, ci.id) + "/code/context", json={"language": "cobol"}, timeout=1.5)
    assert wait_until(lambda: _creating() == 0, 3.0), "the retrying thread outlived its client"


def test_an_unknown_language_context_fails_after_code_context_wait(osb, ci, monkeypatch):
    # MockOptions.code_context_wait, as the sandbox's execd passed it on to its Jupyter client (made at first use)
    monkeypatch.setattr(osb.sandboxes[ci.id].execd.code.jupyter(), "create_wait", 1.0)
    r = httpx.post(_execd(osb, ci.id) + "/code/context", json={"language": "cobol"}, timeout=30)
    assert r.status_code == 500 and r.json() == {
        "code": "RUNTIME_ERROR",
        "message": "error creating code context. no kernel specs found",
    }


def test_an_unknown_language_fails_at_once_with_the_fast_timing_and_a_known_one_still_waits(osb, ci, monkeypatch):
    # MockOptions.code_unknown_language_wait (0 with --timing fast): only "no spec of that language" is final
    jupyter = osb.sandboxes[ci.id].execd.code.jupyter()
    monkeypatch.setattr(jupyter, "unknown_language_wait", 0.0)
    calls = []
    real = jupyter.client.kernelspecs
    monkeypatch.setattr(jupyter.client, "kernelspecs", lambda: calls.append(1) or real())
    r = httpx.post(_execd(osb, ci.id) + "/code/context", json={"language": "cobol"}, timeout=30)
    assert r.status_code == 500 and r.json() == {
        "code": "RUNTIME_ERROR",
        "message": "error creating code context. no kernel specs found",
    }
    assert len(calls) == 1  # asked once, not retried
    calls.clear()
    monkeypatch.setattr(jupyter.client, "kernelspecs", lambda: calls.append(1) or ({} if len(calls) < 2 else real()))
    r = httpx.post(_execd(osb, ci.id) + "/code/context", json={"language": "python"}, timeout=30)
    assert r.status_code == 200 and len(calls) == 2, (r.text, calls)  # a server with no specs yet is retried


def test_a_plain_image_gets_no_jupyter(osb):
    from opensandbox.sync import SandboxSync

    sb = SandboxSync.create("python:3.12-slim", connection_config=sdk_config(osb, sync=True, timeout=60))
    try:
        r = httpx.post(_execd(osb, sb.id) + "/code", json={"code": "1", "context": {"language": "python"}})
        assert r.status_code == 500 and "language runtime server not configured" in r.json()["message"]
    finally:
        sb.kill()


_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
REAL_EXECD = os.environ.get("OSB_EXECD_BIN") or os.path.normpath(
    os.path.join(_REPO, "..", "shared", "opensandbox", "execd")
)

# the same codes on both execds; event types compared without pings (their count depends on time)
_CODES = [
    "print('a'); 6*7",
    "x = 1",
    "import sys; sys.stderr.write('e\\n')",
    "raise KeyError('k')",
    "def (:",
    "from IPython.display import display, HTML; display(HTML('<b>x</b>')); 'v'",
]


def _shapes(url: str) -> list:
    out = []
    for code in _CODES:
        status, evs, _ = _events(url, {"code": code, "context": {"language": "python"}})
        # execution_complete's keys are not compared: see the race below
        out.append(
            (
                status,
                [
                    (e["type"], [] if e["type"] == "execution_complete" else sorted(e))
                    for e in evs
                    if e["type"] != "ping"
                ],
            )
        )
    return out


def _real_or_skip() -> None:
    if not os.access(REAL_EXECD, os.X_OK) or os.path.basename(REAL_EXECD) == "mock":
        pytest.skip("code interpreter differential: no real execd binary (%s)" % REAL_EXECD)


@pytest.mark.slow
def test_the_real_execd_passes_the_same_sdk_flow(osb, request):
    """Differential: the real execd binary (--execd-bin) in the same kind of sandbox with the same Jupyter env
    (about 30 s: `make test-slow`)."""
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("code interpreter: the SDK flow on the real execd runs with `make test-slow` (-m slow)")
    _real_or_skip()
    with MockOpenSandbox(execd_close_delay=0.05, jupyter_env=osb.jupyter_env, execd_bin=REAL_EXECD) as real:
        table = run_code_flow(real.base_url, real.api_key, IMAGE)
    assert {k: v for k, v in table.items() if v != "ok"} == {} and len(table) == STEPS


def test_the_real_execd_gives_the_same_events(osb, ci):
    """Differential: the /code events of the same codes on the real execd with the same Jupyter env."""
    _real_or_skip()
    from opensandbox.sync import SandboxSync

    with MockOpenSandbox(execd_close_delay=0.05, jupyter_env=osb.jupyter_env, execd_bin=REAL_EXECD) as real:
        sb = SandboxSync.create(IMAGE, connection_config=sdk_config(real, sync=True, timeout=60))
        try:
            from code_interpreter.sync import CodeInterpreterSync

            CodeInterpreterSync.create(sb, ready_timeout=timedelta(seconds=60))
            theirs = _shapes(_execd(real, sb.id))
        finally:
            sb.kill()
    ours = _shapes(_execd(osb, ci.id))
    # execd finalizes on any idle status, also one of another parent (the server's kernel_info on connect):
    # then its execution_complete comes first; the mock does the same (QUIRKS.md), so where it lands is a race
    # on both sides and only the sorted events are compared
    assert [(st, sorted(evs)) for st, evs in ours] == [(st, sorted(evs)) for st, evs in theirs]
    assert all(evs[0][0] == "init" for _, evs in ours + theirs)


def test_an_unreachable_jupyter_fails_the_create_after_the_bounded_wait(osb, monkeypatch):
    """JUPYTER_HOST from the request's env, nothing listening there (a server still starting, or none)."""
    from opensandbox.sync import SandboxSync

    sb = SandboxSync.create(
        "python:3.12-slim",
        connection_config=sdk_config(osb, sync=True, timeout=60),
        env={"JUPYTER_HOST": "http://127.0.0.1:9", "JUPYTER_TOKEN": "t"},
    )
    monkeypatch.setattr(osb.sandboxes[sb.id].execd, "context_wait", 1.0)  # MockOptions.code_context_wait
    assert osb.sandboxes[sb.id].execd.code.jupyter().create_wait == 1.0  # passed on at first use
    try:
        r = httpx.post(_execd(osb, sb.id) + "/code/context", json={"language": "python"}, timeout=30)
        assert r.status_code == 500 and r.json()["message"] == (
            'error creating code context. Get "http://127.0.0.1:9/api/kernelspecs": '
            "dial tcp 127.0.0.1:9: connect: connection refused"
        ), r.text
    finally:
        sb.kill()


def test_jupyter_dying_mid_run_keeps_the_stream_open_until_the_client_leaves(osb):
    from code_interpreter.sync import CodeInterpreterSync
    from opensandbox.sync import SandboxSync

    sb = SandboxSync.create(IMAGE, connection_config=sdk_config(osb, sync=True, timeout=60))
    try:
        CodeInterpreterSync.create(sb, ready_timeout=timedelta(seconds=60))
        url = _execd(osb, sb.id)
        got: list = []
        with httpx.stream(
            "POST",
            url + "/code",
            json={"code": "import time; print('go', flush=True); time.sleep(60)", "context": {"language": "python"}},
            timeout=30,
        ) as r:
            it = r.iter_bytes()
            for chunk in it:
                got.append(chunk)
                if b'"go' in b"".join(got):
                    break
            kill = sb.commands.run(
                "for p in /proc/[0-9]*; do grep -qx 'jupyter-noteboo' $p/comm 2>/dev/null && "
                "kill -9 ${p#/proc/}; done; echo done"
            )
            assert "done" in "".join(m.text for m in kill.logs.stdout)
            for chunk in it:  # pings keep coming (3 s apart); no completion: execd's receiver just stopped
                got.append(chunk)
                if b"".join(got).count(b'"ping"') >= 3:
                    break
        evs = list(parse_stream([b"".join(got)]))
        kinds = [e["type"] for e in evs]  # (an execution_complete may come first: the early idle, QUIRKS.md)
        assert "error" not in kinds and kinds[-2:] == ["ping", "ping"] and kinds.count("execution_complete") <= 1, evs
        for _ in range(50):  # the lock is released once the mock saw the client leave (ctx.Done in execd)
            r = httpx.post(url + "/code", json={"code": "1", "context": {"language": "python"}}, timeout=30)
            if "session is busy" not in r.text:
                break
            time.sleep(0.1)
        assert r.text.rstrip().endswith(
            '"message":"error running codes failed to connect to kernel: dial tcp '
            '127.0.0.1:44771: connect: connection refused"}'
        ), r.text
    finally:
        sb.kill()


def test_a_flow_run_that_never_ends_fails_its_step_after_the_deadline(monkeypatch):
    """code_flow's bound on one run (a kernel reply that never comes streams heartbeats forever, on execd as on the
    mock): past RUN_DEADLINE_S the step fails instead of hanging; a value or an error inside comes back as is."""
    from tiers.flows.execd import code_flow

    monkeypatch.setattr(code_flow, "RUN_DEADLINE_S", 0.2)
    release = threading.Event()
    t0 = time.monotonic()
    with pytest.raises(AssertionError, match="did not end in 0 s"):
        code_flow._bounded(release.wait, 30)
    assert time.monotonic() - t0 < 5
    release.set()
    assert code_flow._bounded(lambda x: x + 1, 1) == 2
    with pytest.raises(KeyError):
        code_flow._bounded({}.__getitem__, "k")
