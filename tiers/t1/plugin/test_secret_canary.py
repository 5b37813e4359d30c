"""t1: secret canaries. A distinct ``abx-canary-<hex>`` value sits in every secret field (api_key,
registry_password, execd_access_token); the plugin is driven through its error paths, including
faults whose bodies echo the request's headers and body back (a debugging proxy, a validation error
that quotes its input). The canaries must never show up in the plugin's stdout (answers, error
messages, notifications), its stderr, its data dir, the mock's verbose log, or fixtures the recorder
writes against the mock (record/ scrubber).

A clipped error message could carry a *piece* of a secret, so the check is for the common prefix
"abx-canary" and for any 10-character piece of each canary's random part."""

from __future__ import annotations

import os
import pathlib
import secrets
import subprocess
import sys
import time

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit.epp import EppClient, RpcError

pytestmark = pytest.mark.spec_exempt("fault injection and deliberately wrong credentials")

REPO = pathlib.Path(__file__).resolve().parents[3]
API_KEY = "abx-canary-" + secrets.token_hex(16)
REGISTRY_PASSWORD = "abx-canary-" + secrets.token_hex(16)
EXECD_TOKEN = "abx-canary-" + secrets.token_hex(16)
WRONG_KEY = "abx-canary-" + secrets.token_hex(16)
CANARIES = (API_KEY, REGISTRY_PASSWORD, EXECD_TOKEN, WRONG_KEY)


def leaks(blob: bytes) -> list[str]:
    found = []
    if b"abx-canary" in blob or b"canary-" in blob:
        found.append("abx-canary prefix")
    for canary in CANARIES:
        tail = canary.split("abx-canary-", 1)[1]
        for i in range(0, len(tail) - 9):
            if tail[i : i + 10].encode() in blob:
                found.append(f"a piece of {canary[:14]}...")
                break
    return found


class FullStderrClient(EppClient):
    """EppClient that keeps all of the plugin's stderr (the base class keeps the last 64 KiB)."""

    def _read_err(self) -> None:
        self.all_stderr = b""
        for chunk in iter(lambda: self.proc.stderr.read1(65536), b""):
            self.all_stderr += chunk
            self.stderr = self.all_stderr[-65536:]


# every EPP method that reaches OpenSandbox, with params for the sandbox under test
def operations(sid: str, cid: str) -> list[tuple[str, dict]]:
    f = "/work/canary.txt"
    return [
        ("sandbox.create", {"template": "base", "timeout": 300, "options": {"ready_timeout": "2"}}),
        ("sandbox.get", {"sandbox_id": sid}),
        ("sandbox.connect", {"sandbox_id": sid}),
        ("sandbox.list", {"limit": 10}),
        ("sandbox.set_timeout", {"sandbox_id": sid, "timeout": 900}),
        ("ports.url", {"sandbox_id": sid, "port": 9000}),
        ("exec.run", {"sandbox_id": sid, "cmd": "echo", "args": ["hi"], "timeout": 10}),
        ("exec.start", {"sandbox_id": sid, "cmd": "echo", "args": ["hi"], "timeout": 10}),
        ("exec.start", {"sandbox_id": sid, "cmd": "echo", "args": ["bg"], "timeout": 10, "detached": True}),
        ("process.list", {"sandbox_id": sid}),
        ("process.signal", {"sandbox_id": sid, "pid": cid, "signal": 9}),
        ("files.write", {"sandbox_id": sid, "path": f, "content_b64": "aGk="}),
        ("files.read", {"sandbox_id": sid, "path": f}),
        ("files.stat", {"sandbox_id": sid, "path": f}),
        ("files.list", {"sandbox_id": sid, "path": "/work"}),
        ("files.search", {"sandbox_id": sid, "path": "/work", "pattern": "*.txt"}),
        ("files.move", {"sandbox_id": sid, "source": f, "destination": f + ".2"}),
        ("files.mkdir", {"sandbox_id": sid, "path": "/work/d"}),
        ("files.chmod", {"sandbox_id": sid, "path": f, "mode": "600"}),
        ("files.remove", {"sandbox_id": sid, "path": f}),
        ("pty.open", {"sandbox_id": sid, "cols": 80, "rows": 24}),
        ("sandbox.kill", {"sandbox_id": "00000000-0000-0000-0000-000000000000"}),
    ]


# rounds of faults: every route answers with one of these (all echo what they were sent)
ROUNDS = [
    {"kind": "status", "status": 500, "echo_headers": True, "echo_body": True},  # HTML page
    {"kind": "status", "status": 400, "echo_headers": True, "echo_body": True, "content_type": "application/json"},
    {"kind": "status", "status": 404, "echo_headers": True, "content_type": "application/json"},
    {"kind": "status", "status": 403, "echo_headers": True},
    {"kind": "status", "status": 401, "echo_headers": True, "content_type": "application/json"},
    {"kind": "status", "status": 429, "retry_after": 3600, "echo_headers": True, "echo_body": True},
    {"kind": "status", "status": 502, "echo_headers": True, "echo_body": True, "content_type": "application/json"},
    {"kind": "reset_body", "after_bytes": 7},
    {"kind": "truncate", "after_bytes": 7},
]


def drive(epp: EppClient, ops: list[tuple[str, dict]], sid: str, wait: float = 20.0) -> list:
    """All operations at once, then pause and resume one after the other (a paused sandbox's execd
    answers nothing, so pausing must not race the others)."""
    pending = [(m, epp.request(m, p)) for m, p in ops]
    out = []
    for method, (rid, q) in pending:
        try:
            out.append((method, epp.wait(rid, q, timeout=wait)))
        except RpcError as e:
            out.append((method, e))
    for method in ("sandbox.pause", "sandbox.resume"):
        try:
            out.append((method, epp.call(method, {"sandbox_id": sid}, timeout=wait)))
        except RpcError as e:
            out.append((method, e))
    return out


def test_canaries_never_leave_through_any_error_path(tmp_path, capfd):
    with MockOpenSandbox(
        api_key=API_KEY, execd_token=EXECD_TOKEN, execd_mode="latest", verbose=True, execd_close_delay=0.1
    ) as mock:
        cfg = {
            "base_url": mock.base_url,
            "api_key": API_KEY,
            "execd_access_token": EXECD_TOKEN,
            "registry_username": "robot",
            "registry_password": REGISTRY_PASSWORD,
        }
        data = tmp_path / "data"
        epp = FullStderrClient(str(data), cfg, core={"http_timeout": 1.0})
        wrong = FullStderrClient(
            str(tmp_path / "wrong"),
            {**cfg, "api_key": WRONG_KEY, "execd_access_token": WRONG_KEY},
            core={"http_timeout": 1.0},
        )
        try:
            sid = epp.call("sandbox.create", {"template": "base", "timeout": 600})["sandbox_id"]
            cid = epp.call(
                "exec.start", {"sandbox_id": sid, "cmd": "sleep", "args": ["30"], "detached": True, "timeout": 60}
            )["process_id"]
            ops = operations(sid, cid)
            errors = redacted = 0
            for rule in ROUNDS:
                mock.faults.clear()
                mock.faults.add(dict(rule))
                results = drive(epp, ops, sid)
                errors += sum(isinstance(r, RpcError) for _, r in results)
                redacted += sum(isinstance(r, RpcError) and "***" in r.message for _, r in results)
                if mock.store.get(sid).paused:  # paused, then the resume failed: next round needs it running
                    mock.store.resume(sid)
            mock.faults.clear()
            assert mock.faults.wait_idle(10)
            # one route stalled: a timeout message; and wrong credentials everywhere
            mock.faults.add(kind="stall", method="GET", path=r"^/v1/sandboxes/[^/]+$")
            with pytest.raises(RpcError) as info:
                epp.call("sandbox.get", {"sandbox_id": sid}, timeout=20)
            assert info.value.sdk_code == "E3001"
            mock.faults.clear()
            assert mock.faults.wait_idle(10)
            wrong_results = drive(wrong, operations(sid, cid), sid)
            assert sum(isinstance(r, RpcError) for _, r in wrong_results) >= len(ops) - 2
            assert errors >= len(ROUNDS) * (len(ops) - 4), "the faults reached the plugin"
            assert redacted >= 20, "echoed secrets reached the plugin and were masked (***) in its messages"
            try:
                epp.call("sandbox.kill", {"sandbox_id": sid})
            except RpcError as exc:  # http_timeout is 1 s (the rounds need it short); a loaded machine's delete
                assert exc.sdk_code == "E3001", exc.message  # can take longer: a timeout, leak-checked below
                mock.store.delete(sid)
            time.sleep(0.3)  # let detached followers write their last lines
        finally:
            epp.close()
            wrong.close()
        for client in (epp, wrong):
            assert client.violations == []
            assert leaks(b"".join(client.lines)) == [], "stdout"
            assert leaks(client.all_stderr) == [], "stderr"
        for path in data.rglob("*"):
            if path.is_file():
                assert leaks(path.read_bytes()) == [], f"data dir file {path.name}"
    out, err = capfd.readouterr()
    assert "mock fault" in err, "the mock's verbose log was captured"
    assert leaks(err.encode()) == [] and leaks(out.encode()) == [], "the mock's log"


def test_recorded_fixtures_carry_no_canary(tmp_path):
    """The recorder (python -m record) against the mock, with faults that echo the API key back in
    response bodies: whatever it writes (or refuses to write) holds no canary."""
    out_dir = tmp_path / "fixtures"
    with MockOpenSandbox(api_key=API_KEY, execd_close_delay=0.1) as mock:
        for path in (r"^/version$", r"^/health$", r"^/v1/sandboxes$"):
            mock.faults.add(
                kind="status",
                status=502,
                method="GET",
                path=path,
                echo_headers=True,
                content_type="application/json" if "sandboxes" in path else None,
            )
        env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR")}
        env.update({"PYTHONPATH": str(REPO), "OPENSANDBOX_API_KEY": API_KEY, "PYTHONDONTWRITEBYTECODE": "1"})
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "record",
                "--base-url",
                mock.base_url,
                "--out",
                str(out_dir),
                "--mode",
                "all",
                "--timeout",
                "20",
                "--scenario",
                "01",
                "--scenario",
                "02",
                "--scenario",
                "04",
                "--scenario",
                "05",
            ],
            cwd=str(REPO),
            env=env,
            capture_output=True,
            timeout=120,
        )
        echoed = sum(r.hits for r in mock.faults.rules)
    assert echoed >= 3, "the echo faults were hit"
    assert leaks(proc.stdout) == [] and leaks(proc.stderr) == [], proc.stderr[-2000:]
    files = [p for p in out_dir.rglob("*") if p.is_file()] if out_dir.exists() else []
    assert files, f"the recorder wrote fixtures (rc={proc.returncode}): {proc.stdout[-500:]!r} {proc.stderr[-800:]!r}"
    for p in files:
        assert leaks(p.read_bytes()) == [], p.name
    assert any(b"<api-key>" in p.read_bytes() for p in files), "the echoed key was replaced by its placeholder"
