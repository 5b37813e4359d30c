"""Terminals end to end at the HTTP level: the mock's execd PTY routes (mock_opensandbox/execd/pty_routes.py)
on a small httpcore server with a real SandboxRuntime, driven by the plugin's terminal manager
(plugin/methods/pty.py) through the plugin's OpenSandbox client (plugin/osb/execd.py, osb/ws.py).

The tiny server here stands in for ExecdServer: it registers only the PTY routes and checks the
access token and a gateway header the way execd's middleware would (401 {"error": ...}), so the
tests also prove that Endpoint.headers and X-EXECD-ACCESS-TOKEN travel on the upgrade request.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest

# plugin modules: importable through tiers/t1/conftest.py
import methods.pty as terminal
from errors import EppError
from mock_opensandbox.execd.pty_routes import register_pty_routes
from mock_opensandbox.runtime import nethub, zygote
from mock_opensandbox.wire import http1 as httpcore
from osb import Http, OpenSandbox
from osb import ws as _ws
from tiers.toolkit import procs, rest
from tiers.toolkit.waits import wait_until

try:
    from mock_opensandbox.runtime import SandboxRuntime
except ImportError:  # pragma: no cover - runtime.py not there yet: a minimal stand-in
    SandboxRuntime = None

pytestmark = pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs POSIX pseudo-terminals")

TOKEN = "t0ken-for-tests"
GATEWAY = {"OpenSandbox-Ingress-To": "sbx-test"}
WAIT = 20.0  # generous upper bound for a slow shared machine; never a speed assertion


class _Client(OpenSandbox):
    """The plugin's client, pointed at a bare execd: every sandbox id resolves to ``base``."""

    def __init__(self, base: str, headers: dict, timeout: float):
        super().__init__("http://127.0.0.1:9", http=Http(timeout))
        self._endpoint = (base, dict(headers))

    def endpoint(self, sandbox_id, port, server_proxy=None):
        return self._endpoint


class _StandInRuntime:
    """Just enough of SandboxRuntime for the PTY routes (used only when runtime.py is missing)."""

    def __init__(self, root: str):
        self.root = root
        self.paused = False
        self._procs: list[subprocess.Popen] = []
        self.paths = self  # its shell() stands in for SandboxPaths.shell()

    def shell(self) -> list[str]:
        return [shutil.which("bash") or "/bin/sh"]

    def resolve(self, path: str) -> str:
        return os.path.join(self.root, path.lstrip("/"))

    def spawn(self, argv, *, cwd=None, env=None, stdin=None, stdout=None, stderr=None):
        p = subprocess.Popen(
            list(argv),
            cwd=self.resolve(cwd or "/"),
            stdin=stdin,
            stdout=stdout,
            stderr=stderr,
            start_new_session=True,
            close_fds=True,
            env={**os.environ, **(env or {})},
        )
        self._procs.append(p)
        return p

    def terminate(self) -> None:
        for p in self._procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
            p.wait()

    def cleanup(self) -> None:
        self.terminate()
        shutil.rmtree(self.root, ignore_errors=True)


class _Execd(httpcore.App):
    """Stand-in for ExecdServer: a runtime, a router with the PTY routes, a listener."""

    def __init__(self, *, with_pty: bool = True):
        self.root = tempfile.mkdtemp(prefix="osb-pty-t1-")
        # a mock's per-process helpers (the bridge's slirp4netns, the zygote) live while a mock holds them and end
        # with the last one (MockOpenSandbox.start/stop): this stand-in holds them the same way
        nethub.hold()
        zygote.hold()
        self.runtime = SandboxRuntime(self.root) if SandboxRuntime else _StandInRuntime(self.root)
        self.mode = "latest"
        self.router = httpcore.Router()
        self.registry = register_pty_routes(self.router, self) if with_pty else None
        router = self.router

        class Handler(httpcore.Handler):
            flavor = "gin"

            def dispatch(self, req):
                # execd accessTokenMiddleware; a gateway would refuse without its routing header
                if (
                    req.headers.get("X-EXECD-ACCESS-TOKEN") != TOKEN
                    or req.headers.get("OpenSandbox-Ingress-To") != GATEWAY["OpenSandbox-Ingress-To"]
                ):
                    req.send_json(401, {"error": "Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"})
                    return
                fn, params, _seen = router.match(req.method, req.path)
                if fn is None:
                    req.send_text(404, "404 page not found")  # Gin's default (recording 06)
                    return
                req.params = params
                fn(req)

        self.server = httpcore.Server(("127.0.0.1", 0), Handler, app=self)
        self.server.start("pty-t1")
        self.base = f"http://127.0.0.1:{self.server.port}"

    def client(self, timeout: float = 10.0) -> _Client:
        return _Client(self.base, {"X-EXECD-ACCESS-TOKEN": TOKEN, **GATEWAY}, timeout)

    def close(self) -> None:
        if self.registry is not None:
            self.registry.close_all()
        self.server.stop()
        self.runtime.cleanup()
        nethub.release()
        zygote.release()


class _Events:
    """Collects notifications like the host does, keyed by process_id."""

    def __init__(self):
        self.cond = threading.Condition()
        self.items: list[tuple[str, dict]] = []
        self.logs: list[str] = []

    def __call__(self, method: str, params: dict) -> None:
        with self.cond:
            self.items.append((method, params))
            self.cond.notify_all()

    def log(self, message: str) -> None:
        with self.cond:
            self.logs.append(message)
            self.cond.notify_all()

    def output(self, pid: str) -> bytes:
        with self.cond:
            return b"".join(
                base64.b64decode(p["data_b64"]) for m, p in self.items if m == "pty.output" and p["process_id"] == pid
            )

    def exits(self, pid: str) -> list[dict]:
        with self.cond:
            return [p for m, p in self.items if m == "pty.exit" and p["process_id"] == pid]

    def wait(self, predicate, timeout: float = WAIT) -> bool:
        deadline = time.monotonic() + timeout
        with self.cond:
            while not predicate():
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
            return True

    def wait_output(self, pid: str, pattern: str, timeout: float = WAIT) -> re.Match:
        rx = re.compile(pattern.encode(), re.M)
        found: list[re.Match] = []

        def pred():
            m = rx.search(
                b"".join(
                    base64.b64decode(p["data_b64"])
                    for mth, p in self.items
                    if mth == "pty.output" and p["process_id"] == pid
                )
            )
            if m:
                found.append(m)
            return bool(m)

        assert self.wait(pred, timeout), f"no {pattern!r} in terminal output: {self.output(pid)[-600:]!r}"
        return found[0]


@pytest.fixture
def execd():
    before = procs.children()
    srv = _Execd()
    try:
        yield srv
    finally:
        srv.close()
    port = srv.server.port
    assert not os.path.exists(srv.root), "sandbox root left behind"
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    wait_until(lambda: not procs.children() - before, 5)
    assert not (procs.children() - before), "processes left behind"


@pytest.fixture
def events():
    return _Events()


@pytest.fixture
def terms(execd, events):
    m = terminal.PtyManager(execd.client(10), events, connect_timeout=10, log=events.log)
    yield m
    m.close_all()


def _write(m: terminal.PtyManager, pid: str, text: str) -> None:
    m.write({"sandbox_id": "sbx", "process_id": pid, "data_b64": base64.b64encode(text.encode()).decode()})


def _sleep_running(execd: _Execd, sid: str) -> bool:
    """A `sleep 100` in the terminal's session (the shell is the session leader)."""
    shell_pid = execd.registry.get(sid).pid
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as fh:
                if fh.read() != b"sleep\x00100\x00":
                    continue
            with open(f"/proc/{name}/stat", "rb") as fh:
                if int(fh.read().rsplit(b")", 1)[1].split()[3]) == shell_pid:
                    return True
        except (OSError, AttributeError, ValueError):
            continue
    return False


# ------------------------------------------------------------------------------------------------


def test_terminal_echo_resize_ctrl_c_and_exit_status(execd, events, terms):
    pid = terms.open({"sandbox_id": "sbx", "cols": 80, "rows": 24})["process_id"]
    assert isinstance(pid, str) and pid

    _write(terms, pid, "echo $((6*7))\n")
    events.wait_output(pid, r"^42\r?$")  # the result line, not the echoed command
    with open("/proc/%d/cmdline" % execd.registry.get(pid).pid, "rb") as fh:
        assert fh.read() == b"bash\0--norc\0--noprofile\0"  # pty_session.go's, in its order (live `ps`)

    terms.resize({"sandbox_id": "sbx", "process_id": pid, "cols": 120, "rows": 40})
    _write(terms, pid, "stty size\n")
    events.wait_output(pid, r"^40 120\r?$")

    _write(terms, pid, "sleep 100\n")
    assert events.wait(lambda: _sleep_running(execd, pid)), "sleep did not start"
    # Ctrl-C: SIGINT to the terminal's foreground process group, which ignores it as live (the shell started with
    # execd's ignored SIGINT: QUIRKS "SIGINT of a PTY shell or a session"); Ctrl-\ (SIGQUIT) stops it
    _write(terms, pid, "\x03")
    events.wait_output(pid, r"\^C")
    time.sleep(0.3)
    assert _sleep_running(execd, pid), "Ctrl-C stopped sleep: live ignores SIGINT there"
    _write(terms, pid, "\x1c")
    _write(terms, pid, "echo rc=$?\n")
    events.wait_output(pid, r"^rc=131\r?$")  # 128 + SIGQUIT
    assert not _sleep_running(execd, pid)

    _write(terms, pid, "exit 3\n")
    assert events.wait(lambda: events.exits(pid)), "no pty.exit"
    time.sleep(0.2)  # a duplicate would arrive right behind the first
    assert events.exits(pid) == [{"process_id": pid, "exit_code": 3}]
    last = [m for m, p in events.items if p.get("process_id") == pid][-1]
    assert last == "pty.exit", "pty.exit must be the last notification of the terminal"
    with pytest.raises(EppError) as err:
        _write(terms, pid, "echo too late\n")
    assert err.value.code == -32002 and "exited" in err.value.message


def test_open_with_size_applies_it(execd, events, terms):
    pid = terms.open({"sandbox_id": "sbx", "cols": 100, "rows": 30})["process_id"]
    _write(terms, pid, "stty size\n")
    events.wait_output(pid, r"^30 100\r?$")


def test_write_to_a_terminal_this_process_does_not_hold_is_32002(terms):
    with pytest.raises(EppError) as err:
        terms.write({"sandbox_id": "sbx", "process_id": "0123abc", "data_b64": "aGk="})
    assert err.value.code == -32002
    assert "not open in this plugin process" in err.value.message
    with pytest.raises(EppError) as err:
        terms.resize({"sandbox_id": "sbx", "process_id": "0123abc", "cols": 10, "rows": 10})
    assert err.value.code == -32002
    assert terms.close({"sandbox_id": "sbx", "process_id": "0123abc"}) == {}  # idempotent


def test_bad_params_are_typed_errors(execd, events, terms):
    with pytest.raises(EppError) as err:
        terms.open({"sandbox_id": "sbx", "cols": 0, "rows": 24})
    assert err.value.code == -32602
    pid = terms.open({"sandbox_id": "sbx"})["process_id"]
    with pytest.raises(EppError) as err:
        terms.write({"sandbox_id": "sbx", "process_id": pid, "data_b64": "not base64!"})
    assert err.value.code == -32602
    with pytest.raises(EppError) as err:
        terms.resize({"sandbox_id": "sbx", "process_id": pid, "cols": "wide", "rows": 3})
    assert err.value.code == -32602


def test_close_kills_the_shell_and_ends_with_one_exit(execd, events, terms):
    pid = terms.open({"sandbox_id": "sbx"})["process_id"]
    _write(terms, pid, "echo ready\n")
    events.wait_output(pid, r"^ready\r?$")
    shell = execd.registry.get(pid).pid
    assert terms.close({"sandbox_id": "sbx", "process_id": pid}) == {}
    assert events.wait(lambda: events.exits(pid))
    # SIGKILL of the process group: execd reports exit_code -1 for a signal death
    assert events.exits(pid) == [{"process_id": pid, "exit_code": -1}]
    assert execd.registry.get(pid) is None  # DELETE /pty/{id} removed the session
    wait_until(lambda: not os.path.exists(f"/proc/{shell}"), 5)
    assert not os.path.exists(f"/proc/{shell}") or open(f"/proc/{shell}/stat").read().split()[2] == "Z"
    assert terms.open_terminals() == []


def test_terminal_ends_when_the_sandbox_goes_away(execd, events, terms):
    pid = terms.open({"sandbox_id": "sbx"})["process_id"]
    _write(terms, pid, "echo up\n")
    events.wait_output(pid, r"^up\r?$")
    execd.registry.close_all()  # what ExecdServer does when the sandbox terminates
    assert events.wait(lambda: events.exits(pid)), "terminal outlived its sandbox"
    assert len(events.exits(pid)) == 1


def test_close_sandbox_ends_its_terminals(execd, events, terms):
    pid = terms.open({"sandbox_id": "sbx"})["process_id"]
    terms.close_sandbox("other-sandbox")
    assert terms.open_terminals() == [pid]
    terms.close_sandbox("sbx", delete=True)
    assert events.wait(lambda: events.exits(pid))
    assert terms.open_terminals() == []


def test_dropped_socket_is_reattached_without_loss_or_repeat(execd, events, terms):
    pid = terms.open({"sandbox_id": "sbx"})["process_id"]
    _write(terms, pid, "echo m$((1+1))\n")
    events.wait_output(pid, r"^m2\r?$")
    for ws in list(execd.registry._sockets):  # a network blip: the socket dies, the shell lives
        ws.abort()
    assert events.wait(lambda: any("re-attached" in m for m in events.logs)), events.logs
    _write(terms, pid, "echo n$((2+1))\n")
    events.wait_output(pid, r"^n3\r?$")
    assert len(re.findall(rb"(?m)^m2\r?$", events.output(pid))) == 1  # replayed from the right offset
    assert events.exits(pid) == []


def test_missing_token_is_an_authentication_error(execd, events):
    m = terminal.PtyManager(_Client(execd.base, dict(GATEWAY), 5), events)
    with pytest.raises(EppError) as err:
        m.open({"sandbox_id": "sbx"})
    assert err.value.code == -32001


def test_execd_without_pty_api_is_feature_not_supported(events):
    srv = _Execd(with_pty=False)
    try:
        m = terminal.PtyManager(srv.client(5), events)
        with pytest.raises(EppError) as err:
            m.open({"sandbox_id": "sbx"})
        assert err.value.code == -32003
        assert err.value.to_json()["data"]["details"]["feature"] == "pty"
    finally:
        srv.close()


# -- the execd REST/WebSocket surface itself ------------------------------------------------------


def _req(execd: _Execd, method: str, path: str, body: bytes | None = None):
    r = rest.call(
        execd.base,
        method,
        urllib.parse.urlsplit(execd.base).path + path,
        body,
        {"X-EXECD-ACCESS-TOKEN": TOKEN, **GATEWAY},
        timeout=10,
    )
    return r.status, r.headers, r.body


def test_execd_pty_rest_and_upgrade_errors(execd):
    status, headers, body = _req(execd, "POST", "/pty", b"")  # empty body is allowed
    assert status == 201 and headers["Content-Type"] == "application/json; charset=utf-8"
    sid = json.loads(body)["session_id"]
    assert re.fullmatch(
        r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", sid
    )  # tiers/diff pty.lifecycle

    status, _, body = _req(execd, "GET", f"/pty/{sid}")
    assert status == 200
    # "latest" mode (the stand-in's); v1.1.0 has no launch_* fields (model/pty.go at 3bb6fad, tiers/diff)
    assert json.loads(body) == {
        "session_id": sid,
        "running": False,
        "output_offset": 0,
        "launch_attempted": False,
        "launch_failed": False,
    }

    status, _, body = _req(execd, "GET", "/pty/nope")
    assert (status, json.loads(body)) == (404, {"code": "CONTEXT_NOT_FOUND", "message": "pty session nope not found"})

    status, _, body = _req(execd, "POST", "/pty", b"{not json")
    assert status == 400 and json.loads(body)["code"] == "INVALID_REQUEST_BODY"
    assert json.loads(body)["message"].startswith("error parsing request: ")

    hdrs = {"X-EXECD-ACCESS-TOKEN": TOKEN, **GATEWAY}
    with pytest.raises(_ws.HandshakeError) as err:
        _ws.connect(f"{execd.base}/pty/nope/ws", hdrs, timeout=10)
    assert err.value.status == 404 and json.loads(err.value.body)["code"] == "CONTEXT_NOT_FOUND"

    # a plain GET (no upgrade) is refused by the upgrader with gorilla's plain-text 400
    status, headers, body = _req(execd, "GET", f"/pty/{sid}/ws")
    assert (status, body) == (400, b"Bad Request\n")
    assert headers["Sec-Websocket-Version"] == "13"

    ws = _ws.connect(f"{execd.base}/pty/{sid}/ws", hdrs, timeout=10)
    try:
        op, data = ws.recv()
        assert op == _ws.OP_TEXT and data.endswith(b"\n")  # gorilla WriteJSON adds a newline
        assert json.loads(data) == {"type": "connected", "session_id": sid, "mode": "pty"}
        with pytest.raises(_ws.HandshakeError) as err:  # one client per session
            _ws.connect(f"{execd.base}/pty/{sid}/ws", hdrs, timeout=10)
        assert err.value.status == 409 and json.loads(err.value.body)["code"] == "ALREADY_CONNECTED"
        ws.send_text('{"type":"ping"}')
        ws.send_text('{"type":"bogus"}')
        seen = []
        ws.settimeout(WAIT)
        while len(seen) < 2:
            op, data = ws.recv()
            if op == _ws.OP_TEXT:
                seen.append(json.loads(data))
        assert seen == [
            {"type": "pong"},
            {"type": "error", "error": 'unknown frame type "bogus"', "code": "INVALID_FRAME"},
        ]
        status, _, body = _req(execd, "GET", f"/pty/{sid}")
        assert json.loads(body)["running"] is True and json.loads(body)["launch_attempted"] is True
    finally:
        ws.close(timeout=2)

    status, headers, body = _req(execd, "DELETE", f"/pty/{sid}")
    assert (status, body) == (200, b"")
    status, _, _ = _req(execd, "DELETE", f"/pty/{sid}")
    assert status == 404


def test_takeover_and_replay_frame(execd):
    hdrs = {"X-EXECD-ACCESS-TOKEN": TOKEN, **GATEWAY}
    sid = json.loads(_req(execd, "POST", "/pty", b"{}")[2])["session_id"]
    first = _ws.connect(f"{execd.base}/pty/{sid}/ws", hdrs, timeout=10)
    first.settimeout(WAIT)
    assert json.loads(first.recv()[1])["type"] == "connected"
    first.send_binary(b"\x00echo t$((4+4))\n")
    out = b""
    while not re.search(rb"(?m)^t8\r?$", out):
        op, data = first.recv()
        if op == _ws.OP_BINARY:
            assert data[0] == 0x01
            out += data[1:]
    second = _ws.connect(f"{execd.base}/pty/{sid}/ws?takeover=1&since=0", hdrs, timeout=10)
    try:
        with pytest.raises(_ws.ConnectionClosed) as closed:
            while True:
                first.recv()
        assert closed.value.code == 4001 and closed.value.reason == "TAKEN_OVER"
        second.settimeout(WAIT)
        op, data = second.recv()
        assert op == _ws.OP_BINARY and data[0] == 0x03  # replay: 0x03 + offset + bytes
        assert int.from_bytes(data[1:9], "big") == 0 and data[9:].startswith(out[:8])
        assert json.loads(second.recv()[1])["type"] == "connected"
    finally:
        second.close(timeout=2)
        first.shutdown()


def test_pipe_mode_splits_stdout_and_stderr(execd):
    hdrs = {"X-EXECD-ACCESS-TOKEN": TOKEN, **GATEWAY}
    sid = json.loads(_req(execd, "POST", "/pty", b'{"command": "echo out; echo err >&2; exit 5"}')[2])["session_id"]
    ws = _ws.connect(f"{execd.base}/pty/{sid}/ws?pty=0", hdrs, timeout=10)
    ws.settimeout(WAIT)
    frames = []
    try:
        while True:
            frames.append(ws.recv())
    except _ws.ConnectionClosed as end:
        assert (end.code, end.reason) == (1000, "process exited")
    finally:
        ws.shutdown()
    assert json.loads(frames[0][1]) == {"type": "connected", "session_id": sid, "mode": "pipe"}
    assert (cli_bin := [d for o, d in frames if o == _ws.OP_BINARY])
    assert b"".join(d[1:] for d in cli_bin if d[0] == 0x01) == b"out\n"
    assert b"".join(d[1:] for d in cli_bin if d[0] == 0x02) == b"err\n"
    assert json.loads(frames[-1][1]) == {"type": "exit", "exit_code": 5}


def test_silent_socket_is_treated_as_dropped_and_reattached(execd, events):
    """No frame for idle_timeout (execd pings every 30 s) -> the client re-attaches; nothing lost."""
    m = terminal.PtyManager(execd.client(10), events, connect_timeout=10, idle_timeout=0.3, log=events.log)
    try:
        pid = m.open({"sandbox_id": "sbx"})["process_id"]
        _write(m, pid, "echo a$((3+4))\n")
        events.wait_output(pid, r"^a7\r?$")
        assert events.wait(lambda: sum("re-attached" in x for x in events.logs) >= 2), events.logs
        _write(m, pid, "echo b$((4+4))\n")
        events.wait_output(pid, r"^b8\r?$")
        assert len(re.findall(rb"(?m)^a7\r?$", events.output(pid))) == 1
        assert events.exits(pid) == []
    finally:
        m.close_all()
