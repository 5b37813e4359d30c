"""t4: the plugin's fault bodies (tiers/t1/plugin/test_faults_plugin.py) through the fault proxy against the
live server: every fault kind on every OpenSandbox route the plugin uses, injected into a real
server's traffic. The plugin must survive a real server's faults as it survives the mock's.

The t1 module's own functions run unchanged (prepare, start, outcome, expected, the test bodies);
only the lane differs: its "mocks" are two fault proxies in front of the live server (the second for
the execd /ping case, as in t1), and the state checks that t1 makes on the mock's internals (paused,
files on disk, a command's status) are made here over the live server's own APIs, bypassing the
proxy. Timings are scaled to a real server, whose create answers only once the container runs: http_timeout
8 s (the "timeout" kind waits 9 s), creates get 8 s to become ready (= http_timeout, as in t1), answers are
bounded at 60 s.

Found this way: when the plugin's first
``POST /command`` to a v1.0.19 execd (the argv probe, answered 400) is itself cut short (``truncate`` /
``reset_body``), the plugin cannot read the rejection message and reports ``HTTP 400`` instead of a
connection error (E5001); the lane below therefore makes the probe before the faults.
"""

from __future__ import annotations

import importlib
import json
import os
import posixpath
import uuid
from pathlib import Path

import pytest

from mock_opensandbox.workbench.proxy import FaultProxy
from tiers.toolkit import rest
from tiers.toolkit.epp import EppClient
from tiers.toolkit.waits import wait_until

HERE = Path(__file__).resolve().parent
faults_plugin = importlib.import_module("tiers.t1.plugin.test_faults_plugin")

pytestmark = pytest.mark.spec_exempt("fault injection through the proxy: deliberately broken answers")

HTTP_TIMEOUT = 8.0  # a real create answers after the container started: 1-3 s here, more under load
LIVE_KINDS = dict(faults_plugin.KINDS, timeout={"kind": "delay", "delay": HTTP_TIMEOUT + 1.0})
SUMMARY: dict[str, dict[str, str]] = {}


def _req(hostport: str, method: str, path: str, body=None, headers=None, timeout=30.0):
    r = rest.call(hostport, method, path, body, headers, timeout=timeout)
    return r.status, r.body


class _Live:
    """The live server's lifecycle and each sandbox's execd, reached directly (not through a proxy)."""

    def __init__(self, root: str, api_key: str):
        self.hostport = root.split("://", 1)[1]
        self.key = {"OPEN-SANDBOX-API-KEY": api_key}
        self._execd: dict[str, tuple[str, dict]] = {}

    def lc(self, method, path, body=None):
        return _req(self.hostport, method, path, body, self.key)

    def execd(self, sid):
        if sid not in self._execd:
            st, body = self.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772")
            assert st == 200, body
            ep = json.loads(body)
            hp, _, rest = ep["endpoint"].partition("/")
            self._execd[sid] = (hp, "/" + rest, dict(ep.get("headers") or {}))
        return self._execd[sid]

    def ex(self, sid, method, path, body=None, headers=None):
        hp, prefix, hdrs = self.execd(sid)
        return _req(hp, method, prefix + path, body, dict(hdrs, **(headers or {})))

    def state(self, sid):
        st, body = self.lc("GET", f"/v1/sandboxes/{sid}")
        return json.loads(body) if st == 200 else None


class RemotePath:
    """The bits of pathlib.Path the t1 checks use, over execd's files API."""

    def __init__(self, live: _Live, sid: str, path: str):
        self.live, self.sid, self.path = live, sid, path

    @property
    def parent(self):
        return RemotePath(self.live, self.sid, posixpath.dirname(self.path))

    def _info(self):
        st, body = self.live.ex(self.sid, "GET", "/files/info?path=" + self.path)
        return json.loads(body).get(self.path) if st == 200 else None

    def exists(self):
        return self._info() is not None

    def is_dir(self):
        info = self._info()
        return bool(info) and info.get("type") == "directory"

    def mkdir(self, parents=False, exist_ok=False):
        st, body = self.live.ex(self.sid, "POST", "/directories", {self.path: {"mode": 755}})
        assert st == 200, body

    def read_bytes(self):
        st, body = self.live.ex(self.sid, "GET", "/files/download?path=" + self.path)
        assert st == 200, body
        return body

    def read_text(self):
        return self.read_bytes().decode()

    def write_bytes(self, data: bytes):
        b = "----live" + uuid.uuid4().hex
        meta = json.dumps({"path": self.path, "mode": 644})
        body = (
            (
                f'--{b}\r\nContent-Disposition: form-data; name="metadata"; filename="metadata"\r\n'
                f"Content-Type: application/json\r\n\r\n{meta}\r\n--{b}\r\nContent-Disposition: form-data; "
                f'name="file"; filename="f"\r\nContent-Type: application/octet-stream\r\n\r\n'
            ).encode()
            + data
            + f"\r\n--{b}--\r\n".encode()
        )
        st, out = self.live.ex(
            self.sid, "POST", "/files/upload", body, {"Content-Type": f"multipart/form-data; boundary={b}"}
        )
        assert st == 200, out


class _Command:
    def __init__(self, live, sid, cid):
        self.live, self.sid, self.cid = live, sid, cid

    def status(self):
        st, body = self.live.ex(self.sid, "GET", f"/command/status/{self.cid}")
        return json.loads(body) if st == 200 else {}


class RemoteSandbox:
    def __init__(self, live: _Live, sid: str):
        self.live, self.id = live, sid
        self.runtime = self
        self.execd = self
        self.commands = self

    # sb.paused / sb.to_json()
    @property
    def paused(self):
        return (self.live.state(self.id) or {}).get("status", {}).get("state") == "Paused"

    def to_json(self):
        return self.live.state(self.id)

    # sb.runtime.resolve(path) -> the path itself (LiveLane.host wraps it)
    def resolve(self, path):
        return path

    # sb.execd.commands.get(cid)
    def get(self, cid):
        return _Command(self.live, self.id, cid)


class _Store:
    def __init__(self, live: _Live):
        self.live = live

    def _to(self, sid, action, want):
        st, body = self.live.lc("POST", f"/v1/sandboxes/{sid}/{action}")
        assert st in (200, 202, 204), body
        assert wait_until(lambda: (self.live.state(sid) or {}).get("status", {}).get("state") == want, 30, 0.2), (
            f"{sid} never became {want}"
        )

    def pause(self, sid):
        self._to(sid, "pause", "Paused")

    def resume(self, sid):
        self._to(sid, "resume", "Running")


class _ProxyAsMock:
    """What the t1 bodies use of a MockOpenSandbox: ``faults``, ``sandboxes``, ``store``."""

    def __init__(self, proxy: FaultProxy, live: _Live):
        self.proxy, self.faults, self.live, self.store = proxy, proxy.faults, live, _Store(live)

    @property
    def sandboxes(self):
        _st, body = self.live.lc("GET", "/v1/sandboxes?pageSize=200")
        return {i["id"]: i for i in json.loads(body)["items"]}


class LiveLane(faults_plugin.Lane):
    def __init__(self, tmp, live_server):
        self.live = _Live(live_server.root, live_server.api_key)
        self.proxy = FaultProxy(live_server.root, api_key=live_server.api_key).start()
        self.ping_proxy = FaultProxy(live_server.root, api_key=live_server.api_key).start()
        self.mock = _ProxyAsMock(self.proxy, self.live)
        self.ping_mock = _ProxyAsMock(self.ping_proxy, self.live)
        core = {"http_timeout": HTTP_TIMEOUT}
        cfg = {"api_key": live_server.api_key, "default_image": live_server.image}
        self.epp = self.ping_epp = None
        self.epp = EppClient(str(tmp / "main"), dict(cfg, base_url=self.proxy.base_url), core=core)
        self.ping_epp = EppClient(str(tmp / "ping"), dict(cfg, base_url=self.ping_proxy.base_url), core=core)
        pending = {
            c.name: self.epp.request("sandbox.create", {"template": "base", "timeout": 3600})
            for c in faults_plugin.CASES
            if c.name not in ("create", "ping")
        }
        self.sids = {name: self.epp.wait(rid, q, 120)["sandbox_id"] for name, (rid, q) in pending.items()}
        for name in ("files.stat", "files.read", "files.list", "files.search"):
            self.put(name, "/data/f.bin", faults_plugin.PAYLOAD)
        # The plugin learns each sandbox's execd generation from its first POST /command (argv, and a 400
        # "'Command' ... required" from execd v1.0.19 switches it to a command string). The t1 lane's
        # "latest" mock never needs that probe; here it is made once before any fault, so each case tests
        # the route, not the probe. (A fault on the probe itself: see the module docstring.)
        pending = [
            self.epp.request("exec.run", {"sandbox_id": sid, "cmd": "true", "timeout": 30})
            for sid in self.sids.values()
        ]
        for rid, q in pending:
            assert self.epp.wait(rid, q, 60)["exit_code"] == 0

    def sb(self, case_name):
        return RemoteSandbox(self.live, self.sids[case_name])

    def host(self, case_name, path):
        return RemotePath(self.live, self.sids[case_name], path)

    def put(self, case_name, path, data):
        p = self.host(case_name, path)
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)

    def close(self):
        for epp in (self.epp, self.ping_epp):
            if epp is not None:
                epp.close()
        proxies = (self.proxy, self.ping_proxy)
        for p in proxies:  # let delayed or stalled requests (creates among them) finish
            p.faults.clear()
            p.faults.wait_idle(30)
        # every sandbox this lane made through either proxy (the proxy keeps them all, the journal is
        # bounded), also those a faulted kill or a create the plugin gave up on left behind
        made = set(self.sids.values())
        for p in proxies:
            made |= {sid for sid, meta in list(p.known.items()) if meta.get("created")}
            p.stop()
        for sid in made:
            self.live.lc("DELETE", f"/v1/sandboxes/{sid}")


@pytest.fixture(scope="module")
def lane(live_server, tmp_path_factory):
    ln = LiveLane(tmp_path_factory.mktemp("proxy-faults"), live_server)
    try:
        yield ln
    finally:
        ln.close()
    assert ln.epp.violations == [] and ln.ping_epp.violations == []


@pytest.fixture
def live_timings(monkeypatch):
    monkeypatch.setattr(faults_plugin, "KINDS", LIVE_KINDS)
    monkeypatch.setattr(faults_plugin, "READY", "%g" % HTTP_TIMEOUT)  # = http_timeout, as t1 (create waits the max)
    monkeypatch.setattr(faults_plugin, "BOUND", 60.0)


@pytest.fixture
def record_outcomes(monkeypatch, request):
    """Keep every (kind, case) outcome for the closing summary line."""
    kind = request.node.callspec.params["kind"]
    real = faults_plugin.outcome

    def outcome(lane, case, ctx, handle):
        label, detail = real(lane, case, ctx, handle)
        SUMMARY.setdefault(kind, {})[case.name] = label
        return label, detail

    monkeypatch.setattr(faults_plugin, "outcome", outcome)


@pytest.mark.parametrize("kind", list(faults_plugin.KINDS))
def test_plugin_under_fault_through_the_proxy(lane, kind, live_timings, record_outcomes):
    try:
        faults_plugin.test_plugin_under_fault(lane, kind)
    except AssertionError as e:
        seen = [
            f"{x['method']} {x['path'][:60]} {x['status'] or x['error']} {x['fault'] and x['fault']['id']}"
            for x in lane.ping_proxy.requests()[-8:]
        ]
        raise AssertionError(f"{e}\nping proxy's last requests: {seen}") from None


def pytest_terminal_summary_line() -> str:
    cases = sum(len(v) for v in SUMMARY.values())
    bad = [
        f"{k}/{c}={lab}"
        for k, v in SUMMARY.items()
        for c, lab in v.items()
        if lab not in faults_plugin.expected(k, next(x for x in faults_plugin.CASES if x.name == c))
    ]
    counts: dict[str, int] = {}
    for v in SUMMARY.values():
        for lab in v.values():
            counts[lab] = counts.get(lab, 0) + 1
    return (
        f"proxy fault bodies vs live: {len(SUMMARY)} kinds x {len(faults_plugin.CASES)} routes = {cases} cases, "
        f"{cases - len(bad)} as expected ({', '.join(f'{k} {n}' for k, n in sorted(counts.items()))})"
        + (f"; unexpected: {bad}" if bad else "")
    )


@pytest.fixture(scope="module", autouse=True)
def _summary(request):
    yield
    if SUMMARY:
        tr = request.config.pluginmanager.get_plugin("terminalreporter")
        line = pytest_terminal_summary_line()
        if tr is not None:
            tr.write_line("\n" + line)
        out = os.environ.get("OSB_PROXY_FAULTS_SUMMARY")
        if out:
            with open(out, "w", encoding="utf-8") as f:
                f.write(line + "\n" + json.dumps(SUMMARY, indent=1, sort_keys=True) + "\n")


def test_retry_after_is_honoured_through_the_proxy(lane, live_timings):
    faults_plugin.test_retry_after_is_honoured(lane)


def test_a_long_retry_after_is_not_waited_for_through_the_proxy(lane, live_timings):
    faults_plugin.test_a_long_retry_after_is_not_waited_for(lane)


def test_post_command_is_never_sent_twice_through_the_proxy(lane, live_timings):
    faults_plugin.test_post_command_is_never_sent_twice(lane)
