"""t1: the plugin over EPP under every fault kind on every OpenSandbox route it uses.

One mock and one plugin process (http_timeout HTTP_TIMEOUT); one sandbox per route case, so each case's fault
rule is scoped to its own sandbox (or to a route nobody else uses) and all cases of a fault kind run
at once as concurrent EPP requests. A second mock carries the execd /ping case (only a create pings).

For every (fault kind, route) the answer must be one of the expected outcomes:

* ``OK``      the correct result, checked against the mock's state (a read returns the exact bytes,
              a command its own output and exit code, a move really moved...);
* ``TIMEOUT`` -32000 + E3001 ("did not answer in time" / "not ready"), never later than the bound;
* ``UNREACH`` -32000 + E5001 (connection reset, reply cut short, command output lost);
* ``HTTP(n)`` -32000 with data.http_status n and a suggestion (429: "retry in 1 s");
* ``LOST``    a streamed command ends with exactly one exec.exit (-1 or its real code) and a
              "[opensandbox provider]" note on stderr: never a made-up exit code, never two.

Idempotent calls (GET, DELETE, renew) are retried by the plugin, so a fault that happens once is
absorbed there and fails everything else. See docs/FAULTS.md, "Failure behaviour".
"""

from __future__ import annotations

import base64
import os
import pathlib
import time

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit.epp import EppClient, RpcError
from tiers.toolkit.waits import wait_until

pytestmark = pytest.mark.spec_exempt("fault injection: deliberately broken answers")

# The budgets leave room for a loaded machine: an OK case must answer (a whole sandbox create, then its
# /ping) within HTTP_TIMEOUT / READY while 23 cases run at once, and with 1 s (the plugin's minimum) a busy
# 2-core host timed out the ping case's create before it ever pinged ("rules that never fired: ['ping']").
# A late answer stays late under any load, so "timeout" only needs a delay beyond both budgets.
HTTP_TIMEOUT = 3.0  # the plugin's http_timeout (core.http_timeout)
READY = "3"  # ready_timeout of the create cases (their create call waits max(this, http_timeout))
BOUND = 10.0  # no answer may take longer (the host's own call timeout is 60 s)
PAYLOAD = os.urandom(3000)  # the file every read case must get back byte for byte

OK, TIMEOUT, UNREACH, LOST = "OK", "TIMEOUT", "UNREACH", "LOST"


def HTTP(n):
    return f"HTTP{n}"


# ---- fault kinds ------------------------------------------------------------------------------------------
KINDS = {
    "delay": {"kind": "delay", "delay": 0.2},
    "delay_random": {"kind": "delay", "delay": 0.0, "delay_max": 0.3, "probability": 0.5, "seed": 11},
    "timeout": {"kind": "delay", "delay": 3.8},  # > HTTP_TIMEOUT and READY: late whatever the load
    "stall": {"kind": "stall"},
    "429_once": {"kind": "status", "status": 429, "retry_after": 1, "count": 1},
    "500_once": {"kind": "status", "status": 500, "count": 1},
    "502_once": {"kind": "status", "status": 502, "count": 1},
    "503": {"kind": "status", "status": 503},
    "reset_once": {"kind": "reset", "count": 1},
    "reset_body_once": {"kind": "reset_body", "after_bytes": 5, "count": 1},
    "truncate": {"kind": "truncate", "after_bytes": 5},
    "dribble": {"kind": "dribble", "chunk": 16, "interval": 0.05},
}


class Case:
    """One route the plugin uses, reached through one EPP method.

    idem: the plugin retries the call; body: what the faulted answer carries (empty / data / sse, or
    detached = a background command followed by polling)."""

    def __init__(self, name, method, path, *, idem=False, body="data", scoped=True, stale_retry=False):
        self.name, self.method, self.path = name, method, path
        self.idem, self.body, self.scoped, self.stale_retry = idem, body, scoped, stale_retry
        self.listener = "execd" if path.startswith(("^/ping", "^/command", "^/files", "^/directories")) else "lifecycle"

    def __repr__(self):
        return self.name


CASES = [
    Case("create", "POST", r"^/v1/sandboxes$", scoped=False),
    Case("get", "GET", r"^/v1/sandboxes/[^/]+$", idem=True),
    Case("list", "GET", r"^/v1/sandboxes$", idem=True, scoped=False),
    Case("kill", "DELETE", r"^/v1/sandboxes/[^/]+$", idem=True, body="empty"),
    Case("renew", "POST", r"/renew-expiration$", idem=True),
    Case("pause", "POST", r"/pause$", body="empty"),
    Case("resume", "POST", r"/resume$", body="empty"),
    Case("endpoints", "GET", r"/endpoints/\d+$", idem=True),
    Case("ping", "GET", r"^/ping$", body="empty", scoped=False),
    Case("exec.run", "POST", r"^/command$", body="sse"),
    Case("exec.start", "POST", r"^/command$", body="sse"),
    Case("status", "GET", r"^/command/status/", body="detached"),
    Case("logs", "GET", r"^/command/[^/]+/logs$", body="detached"),
    Case("interrupt", "DELETE", r"^/command$", body="empty", stale_retry=True),
    Case("files.stat", "GET", r"^/files/info$", idem=True),
    Case("files.write", "POST", r"^/files/upload$", body="empty"),
    Case("files.read", "GET", r"^/files/download$", idem=True),
    Case("files.move", "POST", r"^/files/mv$", body="empty"),
    Case("files.remove", "DELETE", r"^/files$", idem=True, body="empty"),
    Case("files.list", "GET", r"^/directories/list$", idem=True),
    Case("files.search", "GET", r"^/files/search$", idem=True),
    Case("files.mkdir", "POST", r"^/directories$", body="empty"),
    Case("files.rmdir", "DELETE", r"^/directories$", idem=True, body="empty"),
]


def expected(kind: str, case: Case) -> set[str]:
    absorbs = case.idem or case.name == "ping" or case.body == "detached"  # retried or polled again
    if kind in ("delay", "delay_random"):
        return {OK}
    if kind in ("timeout", "stall"):
        return {LOST} if case.body == "detached" else {TIMEOUT}
    if kind in ("429_once", "502_once"):
        return {OK} if absorbs else {HTTP(int(kind[:3]))}
    if kind == "500_once":  # 500 is an answer, not retried
        return {OK} if case.name == "ping" or case.body == "detached" else {HTTP(500)}
    if kind == "503":
        return {LOST} if case.body == "detached" else {TIMEOUT} if case.name == "ping" else {HTTP(503)}
    if kind == "reset_once":
        if absorbs:
            return {OK}
        return {OK, UNREACH} if case.stale_retry else {UNREACH}  # a DELETE on a kept-alive socket gets one fresh try
    if kind == "reset_body_once":
        if case.body == "empty" or absorbs:
            return {OK}
        return {LOST} if case.name == "exec.start" else {UNREACH}
    if kind == "truncate":
        if case.body == "empty" or case.name == "ping":
            return {OK}
        return {LOST} if case.body == "detached" or case.name == "exec.start" else {UNREACH}
    if kind == "dribble":
        if case.body in ("empty", "sse") or case.name == "ping":
            return {OK}
        return {OK, LOST} if case.body == "detached" else {OK, TIMEOUT}
    raise AssertionError(kind)


# ---- the lane: mocks, plugin processes, one sandbox per case -----------------------------------------------


class Lane:
    def __init__(self, tmp):
        self.mock = MockOpenSandbox(execd_mode="latest", execd_close_delay=0.2).start()
        self.ping_mock = MockOpenSandbox(execd_mode="latest", execd_close_delay=0.2).start()
        core = {"http_timeout": HTTP_TIMEOUT}
        self.epp = EppClient(
            str(tmp / "main"), {"base_url": self.mock.base_url, "api_key": self.mock.api_key}, core=core
        )
        self.ping_epp = EppClient(
            str(tmp / "ping"), {"base_url": self.ping_mock.base_url, "api_key": self.ping_mock.api_key}, core=core
        )
        pending = {
            c.name: self.epp.request("sandbox.create", {"template": "base", "timeout": 3600})
            for c in CASES
            if c.name not in ("create", "ping")
        }
        self.sids = {name: self.epp.wait(rid, q, 30)["sandbox_id"] for name, (rid, q) in pending.items()}
        for name in ("files.stat", "files.read", "files.list", "files.search"):
            self.put(name, "/data/f.bin", PAYLOAD)

    def close(self):
        for epp in (self.epp, self.ping_epp):
            epp.close()
        self.mock.stop()
        self.ping_mock.stop()

    def sb(self, case_name):
        return self.mock.store.get(self.sids[case_name])

    def host(self, case_name, path):
        return pathlib.Path(self.sb(case_name).runtime.resolve(path))

    def put(self, case_name, path, data):
        p = self.host(case_name, path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)


@pytest.fixture(scope="module")
def lane(tmp_path_factory):
    ln = Lane(tmp_path_factory.mktemp("faults"))
    yield ln
    ln.close()
    assert ln.epp.violations == [] and ln.ping_epp.violations == []


# ---- per case: prepare, call, check -----------------------------------------------------------------------


def prepare(lane: Lane, case: Case, kind: str) -> dict:
    ctx: dict = {}
    n = case.name
    if n == "kill":
        lane.sids[n] = lane.epp.call("sandbox.create", {"template": "base", "timeout": 3600}, timeout=30)["sandbox_id"]
    elif n == "pause":
        sb = lane.sb(n)
        if sb.paused:
            lane.mock.store.resume(sb.id)
    elif n == "resume":
        sb = lane.sb(n)
        if not sb.paused:
            lane.mock.store.pause(sb.id)
    elif n == "interrupt":
        res = lane.epp.call(
            "exec.start", {"sandbox_id": lane.sids[n], "cmd": "sleep", "args": ["30"], "timeout": 60, "detached": True}
        )
        ctx["cid"] = res["process_id"]
    elif n == "files.write":
        ctx["data"] = os.urandom(2000)
        ctx["path"] = f"/data/w-{kind}.bin"
    elif n == "files.move":
        ctx["src"], ctx["dst"] = f"/data/src-{kind}.txt", f"/data/dst-{kind}.txt"
        lane.put(n, ctx["src"], kind.encode())
    elif n == "files.remove":
        ctx["path"] = f"/data/rm-{kind}.txt"
        lane.put(n, ctx["path"], b"x")
    elif n == "files.mkdir":
        ctx["path"] = f"/data/new-{kind}/sub"
    elif n == "files.rmdir":
        ctx["path"] = f"/data/old-{kind}"
        lane.host(n, ctx["path"] + "/inner").mkdir(parents=True, exist_ok=True)
    return ctx


def start(lane: Lane, case: Case, ctx: dict):
    n = case.name
    sid = lane.sids.get(n)
    epp = lane.ping_epp if n == "ping" else lane.epp
    params: dict
    if n in ("create", "ping"):
        method, params = "sandbox.create", {"template": "base", "timeout": 300, "options": {"ready_timeout": READY}}
    elif n == "get":
        method, params = "sandbox.get", {"sandbox_id": sid}
    elif n == "list":
        method, params = "sandbox.list", {"limit": 1000}
    elif n == "kill":
        method, params = "sandbox.kill", {"sandbox_id": sid}
    elif n == "renew":
        method, params = "sandbox.set_timeout", {"sandbox_id": sid, "timeout": 7200}
    elif n in ("pause", "resume"):
        method, params = f"sandbox.{n}", {"sandbox_id": sid}
    elif n == "endpoints":
        method, params = "ports.url", {"sandbox_id": sid, "port": 9000}
    elif n == "exec.run":
        method, params = (
            "exec.run",
            {"sandbox_id": sid, "cmd": "sh", "args": ["-c", "echo out; echo err >&2; exit 3"], "timeout": 20},
        )
    elif n == "exec.start":
        method, params = (
            "exec.start",
            {"sandbox_id": sid, "cmd": "sh", "args": ["-c", "echo one; echo two"], "timeout": 20},
        )
    elif n in ("status", "logs"):
        method, params = (
            "exec.start",
            {
                "sandbox_id": sid,
                "cmd": "sh",
                "args": ["-c", "echo background; exit 3"],
                "timeout": 20,
                "detached": True,
            },
        )
    elif n == "interrupt":
        method, params = "process.signal", {"sandbox_id": sid, "pid": ctx["cid"], "signal": 9}
    elif n == "files.stat":
        method, params = "files.stat", {"sandbox_id": sid, "path": "/data/f.bin"}
    elif n == "files.write":
        method, params = (
            "files.write",
            {"sandbox_id": sid, "path": ctx["path"], "content_b64": base64.b64encode(ctx["data"]).decode()},
        )
    elif n == "files.read":
        method, params = "files.read", {"sandbox_id": sid, "path": "/data/f.bin"}
    elif n == "files.move":
        method, params = "files.move", {"sandbox_id": sid, "source": ctx["src"], "destination": ctx["dst"]}
    elif n in ("files.remove", "files.rmdir"):
        method, params = "files.remove", {"sandbox_id": sid, "path": ctx["path"]}
    elif n == "files.list":
        method, params = "files.list", {"sandbox_id": sid, "path": "/data"}
    elif n == "files.search":
        method, params = "files.search", {"sandbox_id": sid, "path": "/data", "pattern": "*.bin"}
    elif n == "files.mkdir":
        method, params = "files.mkdir", {"sandbox_id": sid, "path": ctx["path"]}
    else:
        raise AssertionError(n)
    rid, q = epp.request(method, params)
    return epp, rid, q, time.monotonic()


def check_ok(lane: Lane, case: Case, ctx: dict, result, notes) -> None:
    n = case.name
    sid = lane.sids.get(n)
    if n in ("create", "ping"):
        assert result["status"] == "running" and result["sandbox_id"]
        epp = lane.ping_epp if n == "ping" else lane.epp
        epp.call("sandbox.kill", {"sandbox_id": result["sandbox_id"]})
    elif n == "get":
        assert result["sandbox_id"] == sid and result["status"] == "running"
    elif n == "list":
        assert sid in {r["sandbox_id"] for r in result["sandboxes"]}
    elif n == "kill":
        assert result == {} and sid not in lane.mock.sandboxes
    elif n == "renew":
        assert result["expires_at"].startswith(lane.sb(n).to_json()["expiresAt"][:16])
    elif n == "pause":
        assert result == {} and lane.sb(n).paused
    elif n == "resume":
        assert result == {} and not lane.sb(n).paused
    elif n == "endpoints":
        assert result["url"].endswith("/proxy/9000")
    elif n == "exec.run":
        assert result == {"stdout": "out\n", "stderr": "err\n", "exit_code": 3}
    elif n == "exec.start":
        assert EppClient.joined(notes) == "one\ntwo\n" and notes[-1]["params"]["exit_code"] == 0
    elif n in ("status", "logs"):
        assert EppClient.joined(notes) == "background\n" and notes[-1]["params"]["exit_code"] == 3
    elif n == "interrupt":
        assert result == {}
        cmd = lane.sb(n).execd.commands.get(ctx["cid"])
        wait_until(lambda: not cmd.status().get("running"), 5)
        assert cmd.status().get("running") is False
    elif n == "files.stat":
        assert result["size"] == len(PAYLOAD) and result["type"] == "file"
    elif n == "files.write":
        assert result == {} and lane.host(n, ctx["path"]).read_bytes() == ctx["data"]
    elif n == "files.read":
        assert base64.b64decode(result["content_b64"]) == PAYLOAD
    elif n == "files.move":
        assert lane.host(n, ctx["dst"]).read_bytes() == case_kind_bytes(ctx) and not lane.host(n, ctx["src"]).exists()
    elif n in ("files.remove", "files.rmdir"):
        assert result == {} and not lane.host(n, ctx["path"]).exists()
    elif n == "files.list":
        assert "/data/f.bin" in {e["path"] for e in result["entries"]}
    elif n == "files.search":
        assert "/data/f.bin" in {e["path"] for e in result["entries"]}
    elif n == "files.mkdir":
        assert result == {} and lane.host(n, ctx["path"]).is_dir()


def case_kind_bytes(ctx: dict) -> bytes:
    return ctx["src"].split("src-", 1)[1].rsplit(".", 1)[0].encode()


def outcome(lane, case, ctx, handle) -> tuple[str, str]:
    """(outcome label, detail) for one case."""
    epp, rid, q, started = handle
    deadline = started + BOUND
    try:
        result = epp.wait(rid, q, timeout=max(0.1, deadline - time.monotonic()))
    except RpcError as e:
        err = e
        assert err.code == -32000, f"code {err.code}: {err.message}"
        assert err.data.get("suggestion"), f"no suggestion: {err.message}"
        status = err.data.get("http_status")
        if status:
            if status == 429:
                assert "retry in 1 s" in err.data["suggestion"], err.data
            return HTTP(status), err.message
        if err.sdk_code == "E3001":
            return TIMEOUT, err.message
        if err.sdk_code == "E5001":
            return UNREACH, err.message
        return f"ERROR {err.sdk_code}", err.message
    except TimeoutError:
        return "HANG", f"no answer within {BOUND} s"
    notes = []
    if case.name in ("exec.start", "status", "logs"):
        pid = str(result["process_id"])
        ctx["streamed"] = (epp, pid)
        try:
            notes = list(epp.events(pid, timeout=max(0.1, deadline - time.monotonic())))
        except TimeoutError:
            return "HANG", f"no exec.exit within {BOUND} s"
        exits = [x for x in notes if x.get("method") == "exec.exit"]
        assert len(exits) == 1, f"{len(exits)} exec.exit notifications"
        assert notes[-1] is exits[0], "output after exec.exit"
        code = exits[0]["params"]["exit_code"]
        if "[opensandbox provider]" in EppClient.joined(notes, "stderr"):
            real = 3 if case.body == "detached" else 0
            assert code in (-1, real), f"lost stream reported exit {code}"
            return LOST, EppClient.joined(notes, "stderr")
    check_ok(lane, case, ctx, result, notes)
    return OK, ""


@pytest.mark.parametrize("kind", list(KINDS))
def test_plugin_under_fault(lane, kind):
    rules = []
    ctxs = {c.name: prepare(lane, c, kind) for c in CASES}
    for c in CASES:
        mock = lane.ping_mock if c.name == "ping" else lane.mock
        rule = dict(
            KINDS[kind], method=c.method, path=c.path, id=f"{kind}-{c.name}".replace(".", "-"), listener=c.listener
        )
        if c.scoped:
            rule["sandbox"] = lane.sids[c.name]
        rules.append(mock.faults.add(rule))
    handles = {c.name: start(lane, c, ctxs[c.name]) for c in CASES}
    got, problems = {}, []
    try:
        for c in CASES:
            try:
                label, detail = outcome(lane, c, ctxs[c.name], handles[c.name])
            except AssertionError as e:
                label, detail = "WRONG", str(e)
            got[c.name] = label
            if label not in expected(kind, c):
                problems.append(f"{c.name}: {label} not in {sorted(expected(kind, c))} ({detail[:300]})")
    finally:
        for m in (lane.mock, lane.ping_mock):
            m.faults.clear()
            assert m.faults.wait_idle(10)
    time.sleep(0.2)  # would a second exec.exit (or late output) follow?
    for c in CASES:
        if "streamed" in ctxs[c.name]:
            epp, pid = ctxs[c.name]["streamed"]
            late = [m for m in list(epp._stream(pid).queue) if m is not None]
            if late:
                problems.append(f"{c.name}: notifications after exec.exit: {late[:2]}")
    hit = {r.id.split("-", 1)[1] for r in rules if r.hits}
    if kind not in ("delay_random",):
        missed = {c.name.replace(".", "-") for c in CASES} - hit
        assert not missed, f"rules that never fired: {sorted(missed)}; outcomes: {got}; " + "\n".join(problems)
    assert not problems, "\n".join(problems)


def test_retry_after_is_honoured(lane):
    """A 429 with Retry-After: 1 on an idempotent call: the retry comes no sooner than a second later."""
    sid = lane.sids["get"]
    first = lane.mock.faults.add(
        kind="status", status=429, retry_after=1, count=1, sandbox=sid, method="GET", path=r"^/v1/sandboxes/[^/]+$"
    )
    second = lane.mock.faults.add(
        kind="delay", delay=0, count=1, sandbox=sid, method="GET", path=r"^/v1/sandboxes/[^/]+$"
    )
    try:
        assert lane.epp.call("sandbox.get", {"sandbox_id": sid}, timeout=BOUND)["sandbox_id"] == sid
        assert first.hits == 1 and second.hits == 1
        assert second.hit_times[0] - first.hit_times[0] >= 1.0
    finally:
        lane.mock.faults.clear()


def test_a_long_retry_after_is_not_waited_for(lane):
    sid = lane.sids["get"]
    rule = lane.mock.faults.add(
        kind="status", status=429, retry_after=3600, sandbox=sid, method="GET", path=r"^/v1/sandboxes/[^/]+$"
    )
    try:
        with pytest.raises(RpcError) as info:
            lane.epp.call("sandbox.get", {"sandbox_id": sid}, timeout=BOUND)
        assert rule.hits == 1 and info.value.data["http_status"] == 429
        assert "retry in 3600 s" in info.value.data["suggestion"] and info.value.data["retry_after"] == 3600
    finally:
        lane.mock.faults.clear()


def test_post_command_is_never_sent_twice(lane):
    """A reset on POST /command (before or after the stream started) is reported, not retried: the
    command ran at most once."""
    sid = lane.sids["exec.run"]
    marker = f"/data/runs-{os.getpid()}.txt"
    for kind in ({"kind": "reset", "count": 1}, {"kind": "reset_body", "after_bytes": 40, "count": 1}):
        lane.mock.faults.add(dict(kind, sandbox=sid, method="POST", path="/command$"))
        try:
            with pytest.raises(RpcError) as info:
                lane.epp.call(
                    "exec.run",
                    {"sandbox_id": sid, "cmd": "sh", "args": ["-c", f"echo x >> {marker}"], "timeout": 20},
                    timeout=BOUND,
                )
            assert info.value.sdk_code == "E5001"
        finally:
            lane.mock.faults.clear()
    target = lane.host("exec.run", marker)
    assert not target.exists() or target.read_text().count("x") <= 1
