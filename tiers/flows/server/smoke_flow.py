"""The live smoke flow, one body for every tier.

``run_smoke_flow(base_url, api_key)`` drives an OpenSandbox server through: auth, create/get/list/endpoint,
SSE exec + exit codes + timeout, background + logs cursor + interrupt, mkdir/upload/stat/list/search/mv/rm/rmdir,
renew, pause/resume, kill + second-kill 404. It runs unchanged against the live server (t4), the mock (t1) and the
mock with an execd process per sandbox (t3), so a behaviour the mock gets wrong fails the same assertion that the
live server passes.

Every expectation below comes from a recording in fixtures/ (named in the step) unless it says
otherwise. Output checks accept both execd framings (QUIRKS.md, POST /command): v1.1.0-style one event per line with the
line ending stripped, and "latest"-style byte-exact chunks.

Standard library only (http.client), so the flow needs nothing but a URL and a key.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import http.client
import json
import re
import urllib.parse
import uuid
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

from tiers.toolkit.waits import poll

EXECD_PORT = 44772
HEX32 = re.compile(r"^[0-9a-f]{32}$")
REQUEST_TIMEOUT = 30.0


class SmokeFailure(AssertionError):
    """A smoke-flow expectation did not hold; the message names the step."""


# ------------------------------------------------------------------------------------------------ HTTP plumbing


class Reply:
    def __init__(self, status: int, headers: Dict[str, str], body: bytes):
        self.status = status
        self.headers = headers  # lower-cased names
        self.body = body

    def json(self) -> Any:
        try:
            return json.loads(self.body.decode("utf-8"))
        except ValueError as exc:
            raise SmokeFailure(f"expected a JSON body, got {self.body[:300]!r}") from exc

    def __repr__(self) -> str:
        return f"<Reply {self.status} {self.body[:300]!r}>"


def _split(url: str) -> Tuple[str, int, str]:
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        raise ValueError(f"only http:// URLs are supported here, got {url!r}")
    return parts.hostname, parts.port or 80, parts.path.rstrip("/")


def _connect(url: str, timeout: float) -> Tuple[http.client.HTTPConnection, str]:
    host, port, prefix = _split(url)
    return http.client.HTTPConnection(host, port, timeout=timeout), prefix


def request(
    method: str,
    url: str,
    path: str,
    *,
    headers: Optional[Dict[str, str]] = None,
    body: Optional[bytes] = None,
    json_body: Any = None,
    timeout: float = REQUEST_TIMEOUT,
) -> Reply:
    hdrs = dict(headers or {})
    if json_body is not None:
        body = json.dumps(json_body).encode()
        hdrs.setdefault("Content-Type", "application/json")
    conn, prefix = _connect(url, timeout)
    try:
        conn.request(method, prefix + path, body=body, headers=hdrs)
        resp = conn.getresponse()
        data = resp.read()
        return Reply(resp.status, {k.lower(): v for k, v in resp.getheaders()}, data)
    finally:
        conn.close()


def parse_sse_frames(buffer: bytes) -> Tuple[List[dict], bytes]:
    """Split complete frames off ``buffer``. Accepts execd's bare-JSON frames and standard ``data:`` frames."""
    events = []
    buffer = buffer.replace(b"\r\n", b"\n")
    while b"\n\n" in buffer:
        frame, buffer = buffer.split(b"\n\n", 1)
        lines = [ln for ln in frame.split(b"\n") if ln.strip() and not ln.startswith(b":")]
        if not lines:
            continue
        if all(ln.startswith((b"data:", b"event:", b"id:", b"retry:")) for ln in lines):
            payload = b"\n".join(ln[5:].lstrip() for ln in lines if ln.startswith(b"data:"))
        else:
            payload = b"\n".join(lines)
        if payload:
            events.append(json.loads(payload.decode("utf-8")))
    return events, buffer


def stream_command(
    execd: str, headers: Dict[str, str], payload: dict, timeout: float = REQUEST_TIMEOUT, path: str = "/command"
) -> Tuple[int, Dict[str, str], List[dict]]:
    """POST /command (or another SSE route: ``path``) and read SSE events until the terminal one (error /
    execution_complete).

    The real server keeps the stream open ~1 s after the last event, so the reader stops at the terminal event
    instead of waiting for the end of the body.
    """
    conn, prefix = _connect(execd, timeout)
    try:
        hdrs = {**headers, "Content-Type": "application/json", "Cache-Control": "no-cache"}
        conn.request("POST", prefix + path, body=json.dumps(payload).encode(), headers=hdrs)
        resp = conn.getresponse()
        rheaders = {k.lower(): v for k, v in resp.getheaders()}
        if resp.status != 200:
            return resp.status, rheaders, [{"type": "<http>", "body": resp.read().decode("utf-8", "replace")}]
        events: List[dict] = []
        buffer = b""
        while True:
            chunk = resp.read1(65536)
            if not chunk:
                break
            new, buffer = parse_sse_frames(buffer + chunk)
            events.extend(new)
            if any(e.get("type") in ("error", "execution_complete") for e in new):
                break
        return resp.status, rheaders, events
    finally:
        conn.close()


def encode_multipart(parts: List[Tuple[str, str, str, bytes]]) -> Tuple[bytes, str]:
    """parts: (field name, file name, content type, bytes) -> (body, content-type header)."""
    boundary = "----smokeflow" + uuid.uuid4().hex
    out = []
    for name, filename, ctype, data in parts:
        out.append(f"--{boundary}\r\n".encode())
        out.append(f'Content-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'.encode())
        out.append(f"Content-Type: {ctype}\r\n\r\n".encode())
        out.append(data)
        out.append(b"\r\n")
    out.append(f"--{boundary}--\r\n".encode())
    return b"".join(out), f"multipart/form-data; boundary={boundary}"


def terminal_of(events: List[dict]) -> dict:
    """The stream's last event but a heartbeat: the real execd's first ``ping`` comes from a goroutine of its own and
    can land after the output (rec 18) or even after the terminal event (live t4, once, 2026-12-07; QUIRKS.md,
    "Order"); the mock always sends it second."""
    rest = [e for e in events if e.get("type") != "ping"]
    return rest[-1] if rest else {}


def output_of(events: List[dict], kind: str) -> str:
    """Concatenated stdout/stderr, normalised so both execd framings compare equal.

    v1.1.0 emits one event per line with "\\n" stripped (an empty line as "\\n"); latest emits the bytes as they
    came. Appending the missing "\\n" to each v1.1.0 event yields the original text for line-oriented output.
    """
    text = ""
    for e in events:
        if e.get("type") == kind:
            t = e.get("text", "")
            text += t if t.endswith("\n") else t + "\n"
    return text


def server_root(base_url: str) -> str:
    """``http://h:p`` from ``http://h:p``, ``http://h:p/`` or ``http://h:p/v1`` (OPENSANDBOX_BASE_URL carries /v1)."""
    url = base_url.rstrip("/")
    if url.endswith("/v1"):
        url = url[:-3]
    return url


def _iso(ts: str) -> _dt.datetime:
    ts = ts.strip()
    if ts.endswith("Z"):
        ts = ts[:-1] + "+00:00"
    m = re.match(r"^(.*T\d\d:\d\d:\d\d)(\.\d+)?(.*)$", ts)
    if m and m.group(2):  # Python 3.10 fromisoformat wants 3 or 6 fraction digits
        ts = m.group(1) + (m.group(2) + "000000")[:7] + m.group(3)
    return _dt.datetime.fromisoformat(ts)


def _poll(what: str, fn: Callable[[], Any], ok: Callable[[Any], bool], timeout: float, interval: float = 0.1) -> Any:
    value = poll(fn, ok, timeout, interval)
    if not ok(value):
        raise SmokeFailure(f"{what}: still {value!r} after {timeout:.0f} s")
    return value


# ------------------------------------------------------------------------------------------------ the flow


class _Flow:
    def __init__(self, base_url: str, api_key: str, image: str, log: Optional[Callable[[str], None]]):
        self.root = server_root(base_url)
        self.key = api_key
        self.image = image
        self.log = log or (lambda _msg: None)
        self.passed: List[str] = []
        self.sandbox_id: Optional[str] = None
        self.execd: Optional[str] = None
        self.execd_headers: Dict[str, str] = {}

    @contextlib.contextmanager
    def step(self, name: str) -> Iterator[None]:
        try:
            yield
        except SmokeFailure as exc:
            raise SmokeFailure(f"[{name}] {exc}") from None
        except AssertionError as exc:
            raise SmokeFailure(f"[{name}] {exc}") from None
        except (OSError, http.client.HTTPException) as exc:
            raise SmokeFailure(f"[{name}] transport error: {exc!r}") from None
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            raise SmokeFailure(f"[{name}] unexpected response shape: {exc!r}") from exc
        self.passed.append(name)
        self.log(f"ok  {name}")

    # lifecycle / execd shorthands
    def life(self, method: str, path: str, *, key: Optional[str] = "", **kw) -> Reply:
        headers = dict(kw.pop("headers", {}) or {})
        k = self.key if key == "" else key
        if k is not None:
            headers["OPEN-SANDBOX-API-KEY"] = k
        return request(method, self.root, path, headers=headers, **kw)

    def ex(self, method: str, path: str, **kw) -> Reply:
        headers = {**self.execd_headers, **(kw.pop("headers", {}) or {})}
        assert self.execd is not None
        return request(method, self.execd, path, headers=headers, **kw)

    def _ping_or_none(self) -> Optional[Reply]:
        try:
            return self.ex("GET", "/ping", timeout=5)
        except (OSError, http.client.HTTPException):
            return None

    def run(self, payload: dict, timeout: float = REQUEST_TIMEOUT) -> Tuple[int, List[dict]]:
        assert self.execd is not None
        status, _headers, events = stream_command(self.execd, self.execd_headers, payload, timeout)
        return status, events

    def sandbox(self) -> dict:
        r = self.life("GET", f"/v1/sandboxes/{self.sandbox_id}")
        assert r.status == 200, r
        return r.json()

    def cmd_status(self, cid: str, polling: bool = False) -> dict:
        """``polling``: a 404 is "not yet" ({}): the real execd v1.0.19 may register a background command a
        moment after its init event (seen in t3 with the real binary)."""
        r = self.ex("GET", f"/command/status/{cid}")
        if polling and r.status == 404:
            return {}
        assert r.status == 200, r
        return r.json()

    # ----------------------------------------------------------------------------------------------- steps
    def go(self) -> List[str]:
        try:
            self.lifecycle()
            self.commands()
            self.files()
            self.renew_pause_resume()
            self.kill()
        finally:
            self.cleanup()
        return self.passed

    def lifecycle(self) -> None:
        with self.step("health"):  # 01_health_version
            r = request("GET", self.root, "/health")
            assert r.status == 200 and r.json() == {"status": "healthy"}, r

        with self.step("auth: missing key -> 401 MISSING_API_KEY"):  # 02_auth_failures
            r = self.life("GET", "/v1/sandboxes", key=None)
            assert r.status == 401 and r.json().get("code") == "MISSING_API_KEY", r
        with self.step("auth: wrong key -> 401 INVALID_API_KEY"):
            r = self.life("GET", "/v1/sandboxes", key="wrong-key")
            assert r.status == 401 and r.json().get("code") == "INVALID_API_KEY", r

        self.purpose = "smoke-" + uuid.uuid4().hex[:12]
        with self.step("create -> 202 Running"):  # 05_create_get_list_endpoints
            r = self.life(
                "POST",
                "/v1/sandboxes",
                json_body={
                    "image": {"uri": self.image},
                    "entrypoint": ["tail", "-f", "/dev/null"],
                    "timeout": 600,
                    "resourceLimits": {"cpu": "500m", "memory": "512Mi"},
                    "metadata": {"purpose": self.purpose},
                },
            )
            assert r.status == 202, r
            assert HEX32.match(r.headers.get("x-request-id", "")), r.headers
            body = r.json()
            self.sandbox_id = body["id"]
            assert body["metadata"] == {"purpose": self.purpose}, body
            assert body["entrypoint"] == ["tail", "-f", "/dev/null"], body
            assert "expiresAt" in body, body
            if body["status"]["state"] != "Running":  # the recording says Running at once; allow a slow start
                _poll("sandbox state", lambda: self.sandbox()["status"]["state"], lambda s: s == "Running", 120)

        with self.step("get"):
            body = self.sandbox()
            assert body["id"] == self.sandbox_id and body["image"] == {"uri": self.image}, body
            assert body["status"]["state"] == "Running" and body["metadata"] == {"purpose": self.purpose}, body
            _iso(body["expiresAt"])
            _iso(body["createdAt"])

        with self.step("list filtered by metadata"):
            q = urllib.parse.urlencode({"metadata": f"purpose={self.purpose}", "state": "Running", "pageSize": 10})
            r = self.life("GET", f"/v1/sandboxes?{q}")
            assert r.status == 200, r
            body = r.json()
            assert [it["id"] for it in body["items"]] == [self.sandbox_id], body
            assert body["pagination"]["totalItems"] == 1 and body["pagination"]["pageSize"] == 10, body

        with self.step("endpoint 44772 (no scheme) and invalid port 400"):
            r = self.life("GET", f"/v1/sandboxes/{self.sandbox_id}/endpoints/{EXECD_PORT}")
            assert r.status == 200, r
            body = r.json()
            endpoint = body["endpoint"]
            assert "://" not in endpoint, body
            self.execd = "http://" + endpoint
            self.execd_headers = dict(body.get("headers") or {})
            r = self.life("GET", f"/v1/sandboxes/{self.sandbox_id}/endpoints/0")
            assert r.status == 400 and r.json().get("code") == "DOCKER::INVALID_PORT", r

        with self.step("execd ping, direct and through the server proxy"):  # 06_execd_ping
            # Running comes before execd listens: until it does, the published port accepts and drops the
            # connection (Docker's readiness window, QUIRKS.md). Wait like the plugin does, then ping.
            _poll("execd /ping", self._ping_or_none, lambda r: r is not None and r.status == 200, 60)
            r = self.ex("GET", "/ping")
            assert r.status == 200, r
            r = self.life("GET", f"/v1/sandboxes/{self.sandbox_id}/proxy/{EXECD_PORT}/ping")
            assert r.status == 200, r

    def commands(self) -> None:
        with self.step("exec: SSE framing, exit 3"):  # 07_command_exit3_sse
            status, events = self.run({"command": "echo out; echo err >&2; exit 3"})
            assert status == 200, events
            assert events[0]["type"] == "init" and HEX32.match(events[0]["text"]), events
            assert output_of(events, "stdout") == "out\n" and output_of(events, "stderr") == "err\n", events
            last = terminal_of(events)
            assert last["type"] == "error" and last["error"]["ename"] == "CommandExecError", events
            assert last["error"]["evalue"] == "3" and last["error"]["traceback"] == ["exit status 3"], events
            assert not [e for e in events if e["type"] == "execution_complete"], events
            # the real execd v1.0.19 may still say running: true just after the terminal event (seen live on
            # 2026-12-01 with the machine under load): the status settles a moment later
            cid = events[0]["text"]
            st = _poll("exit-3 command status", lambda: self.cmd_status(cid), lambda s: s.get("running") is False, 10)
            assert st["running"] is False and st["exit_code"] == 3, st

        with self.step("exec: exit 0 -> execution_complete"):  # 08_command_sse_direct_and_server_proxy
            status, events = self.run({"command": "echo hello"})
            assert status == 200 and terminal_of(events)["type"] == "execution_complete", events
            assert output_of(events, "stdout") == "hello\n", events
            assert not [e for e in events if e["type"] == "error"], events

        with self.step("exec: missing binary -> 127"):
            status, events = self.run({"command": "/no/such/binary"})
            assert terminal_of(events)["type"] == "error" and terminal_of(events)["error"]["evalue"] == "127", events
            assert "/no/such/binary" in output_of(events, "stderr"), events

        with self.step("exec: timeout kills the command -> -1"):  # 09_command_timeout
            # 2 s (the recording used 1 s): room for the shell to print "start" on a loaded machine
            status, events = self.run({"command": "echo start; sleep 10; echo never", "timeout": 2000})
            assert output_of(events, "stdout") == "start\n", events
            last = terminal_of(events)
            assert last["type"] == "error" and last["error"]["evalue"] == "-1", events
            # The kill is SIGKILL, but the real execd forwards to the command's process group every signal it receives
            # itself while a command runs (runtime/command.go: signal.Notify(signals) with no list, then Kill(-pid, sig)
            # for all but SIGCHLD/SIGURG). The previous step's stream was closed by this reader at its terminal event, a
            # reset when bytes were left unread; ~1 s later execd's handler writes the end of that response into it,
            # gets SIGPIPE and passes it on: the command dies of "broken pipe" before the timeout (a client that resets
            # its stream provoked it 6/6 with the real v1.0.19; QUIRKS.md, POST /command). What the server guarantees is
            # a death by signal: SIGKILL, or one execd passed on.
            assert last["error"]["traceback"][0] in ("signal: killed", "signal: broken pipe"), events

        with self.step("background: logs, cursor, exit code"):  # 10_command_background_logs
            status, events = self.run(
                {
                    "command": "for i in 1 2 3; do echo line$i; sleep 0.2; done; echo bg-err >&2; exit 5",
                    "background": True,
                }
            )
            assert status == 200 and events[0]["type"] == "init", events
            assert terminal_of(events)["type"] == "execution_complete", events
            cid = events[0]["text"]
            st = _poll(
                "background command",
                lambda: self.cmd_status(cid, polling=True),
                lambda s: s.get("running") is False,
                20,
            )
            assert st["exit_code"] == 5, st
            want = b"line1\nline2\nline3\nbg-err\n"
            r = self.ex("GET", f"/command/{cid}/logs")
            assert r.status == 200 and r.body == want, r
            assert r.headers.get("execd-commands-tail-cursor") == str(len(want)), r.headers
            r = self.ex("GET", f"/command/{cid}/logs?cursor=2")
            assert r.status == 200 and r.body == want[2:], r
            assert r.headers.get("execd-commands-tail-cursor") == str(len(want)), r.headers
            r = self.ex("GET", f"/command/{cid}/logs?cursor={len(want)}")
            assert r.status == 200 and r.body == b"", r

        with self.step("background: interrupt"):
            status, events = self.run({"command": "echo started; sleep 30; echo never", "background": True})
            cid = events[0]["text"]
            _poll(
                "background output",
                lambda: self.ex("GET", f"/command/{cid}/logs").body,
                lambda b: b == b"started\n",
                20,
            )
            assert self.cmd_status(cid)["running"] is True
            r = self.ex("DELETE", f"/command?id={cid}")
            assert r.status == 200, r
            st = _poll(
                "interrupted command",
                lambda: self.cmd_status(cid, polling=True),
                lambda s: s.get("running") is False,
                20,
            )
            assert st["exit_code"] != 0, st
            r = self.ex("GET", f"/command/{cid}/logs")
            assert r.body == b"started\n", r
            r = self.ex("GET", "/command/status/no-such-command")
            assert r.status == 404, r

    def files(self) -> None:
        d = self.dir = "/tmp/osb-smoke-" + uuid.uuid4().hex[:12]
        hello = b"hello world\nline2\r\nline3"
        csv = b"a,b\n1,2\n"
        with self.step("mkdir"):  # 13_files_and_directories
            r = self.ex("POST", "/directories", json_body={d: {"mode": 755}, f"{d}/sub/deeper": {"mode": 700}})
            assert r.status == 200, r

        with self.step("upload (two files, one request)"):
            body, ctype = encode_multipart(
                [
                    (
                        "metadata",
                        "metadata",
                        "application/json",
                        json.dumps({"path": f"{d}/hello.txt", "mode": 644}).encode(),
                    ),
                    ("file", "hello.txt", "application/octet-stream", hello),
                    ("metadata", "metadata", "application/json", json.dumps({"path": f"{d}/sub/data.csv"}).encode()),
                    ("file", "data.csv", "application/octet-stream", csv),
                ]
            )
            r = self.ex("POST", "/files/upload", body=body, headers={"Content-Type": ctype})
            assert r.status == 200, r

        with self.step("stat"):
            q = urllib.parse.urlencode([("path", f"{d}/hello.txt"), ("path", f"{d}/sub")])
            r = self.ex("GET", f"/files/info?{q}")
            assert r.status == 200, r
            info = r.json()
            assert set(info) == {f"{d}/hello.txt", f"{d}/sub"}, info
            f, sub = info[f"{d}/hello.txt"], info[f"{d}/sub"]
            assert f["type"] == "file" and f["size"] == len(hello) and f["mode"] == 644, f
            assert sub["type"] == "directory" and sub["mode"] == 755, sub

        with self.step("download, whole and ranged"):
            r = self.ex("GET", "/files/download?" + urllib.parse.urlencode({"path": f"{d}/hello.txt"}))
            assert r.status == 200 and r.body == hello, r
            r = self.ex(
                "GET",
                "/files/download?" + urllib.parse.urlencode({"path": f"{d}/hello.txt"}),
                headers={"Range": "bytes=0-4"},
            )
            assert r.status == 206 and r.body == b"hello", r
            assert r.headers.get("content-range") == f"bytes 0-4/{len(hello)}", r.headers

        with self.step("list, depth 1 and 3"):
            r = self.ex("GET", "/directories/list?" + urllib.parse.urlencode({"path": d}))
            assert r.status == 200, r
            assert sorted(e["path"] for e in r.json()) == [f"{d}/hello.txt", f"{d}/sub"], r
            r = self.ex("GET", "/directories/list?" + urllib.parse.urlencode({"path": d, "depth": 3}))
            assert sorted(e["path"] for e in r.json()) == [
                f"{d}/hello.txt",
                f"{d}/sub",
                f"{d}/sub/data.csv",
                f"{d}/sub/deeper",
            ], r

        with self.step("search"):
            r = self.ex("GET", "/files/search?" + urllib.parse.urlencode({"path": d, "pattern": "*.txt"}))
            assert r.status == 200 and [e["path"] for e in r.json()] == [f"{d}/hello.txt"], r
            r = self.ex("GET", "/files/search?" + urllib.parse.urlencode({"path": d, "pattern": "**/*.csv"}))
            assert r.status == 200 and [e["path"] for e in r.json()] == [f"{d}/sub/data.csv"], r

        with self.step("mv"):
            r = self.ex("POST", "/files/mv", json_body=[{"src": f"{d}/hello.txt", "dest": f"{d}/renamed.txt"}])
            assert r.status == 200, r
            r = self.ex("GET", "/files/info?" + urllib.parse.urlencode({"path": f"{d}/renamed.txt"}))
            assert r.status == 200 and r.json()[f"{d}/renamed.txt"]["size"] == len(hello), r
            r = self.ex("GET", "/files/info?" + urllib.parse.urlencode({"path": f"{d}/hello.txt"}))
            assert r.status == 404 and r.json().get("code") == "FILE_NOT_FOUND", r

        with self.step("rm (twice: still 200)"):
            for _ in range(2):
                r = self.ex("DELETE", "/files?" + urllib.parse.urlencode({"path": f"{d}/renamed.txt"}))
                assert r.status == 200, r

        with self.step("rmdir"):
            r = self.ex("DELETE", "/directories?" + urllib.parse.urlencode({"path": d}))
            assert r.status == 200, r
            r = self.ex("GET", "/directories/list?" + urllib.parse.urlencode({"path": d}))
            assert r.status == 404 and r.json().get("code") == "FILE_NOT_FOUND", r
            self.dir = None

    def renew_pause_resume(self) -> None:
        sid = self.sandbox_id
        with self.step("renew"):  # 14_lifecycle_renew_pause_resume_delete
            new = (_dt.datetime.now(_dt.timezone.utc) + _dt.timedelta(hours=2)).replace(microsecond=0)
            stamp = new.strftime("%Y-%m-%dT%H:%M:%SZ")
            r = self.life("POST", f"/v1/sandboxes/{sid}/renew-expiration", json_body={"expiresAt": stamp})
            assert r.status == 200 and _iso(r.json()["expiresAt"]) == new, r
            assert _iso(self.sandbox()["expiresAt"]) == new
            past = (new - _dt.timedelta(hours=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
            r = self.life("POST", f"/v1/sandboxes/{sid}/renew-expiration", json_body={"expiresAt": past})
            assert r.status == 400 and r.json().get("code") == "DOCKER::INVALID_EXPIRATION", r

        with self.step("pause, pause again 409"):
            r = self.life("POST", f"/v1/sandboxes/{sid}/pause")
            assert r.status == 202, r
            _poll("state after pause", lambda: self.sandbox()["status"]["state"], lambda s: s == "Paused", 30)
            r = self.life("POST", f"/v1/sandboxes/{sid}/pause")
            assert r.status == 409 and r.json().get("code") == "DOCKER::SANDBOX_NOT_RUNNING", r

        with self.step("resume, resume again 409, exec works"):
            r = self.life("POST", f"/v1/sandboxes/{sid}/resume")
            assert r.status == 202, r
            _poll("state after resume", lambda: self.sandbox()["status"]["state"], lambda s: s == "Running", 30)
            r = self.life("POST", f"/v1/sandboxes/{sid}/resume")
            assert r.status == 409 and r.json().get("code") == "DOCKER::SANDBOX_NOT_PAUSED", r
            _status, events = self.run({"command": "echo after-resume"})
            assert (
                output_of(events, "stdout") == "after-resume\n" and terminal_of(events)["type"] == "execution_complete"
            ), events

    def kill(self) -> None:
        sid = self.sandbox_id
        with self.step("kill 204, second kill 404"):
            r = self.life("DELETE", f"/v1/sandboxes/{sid}")
            assert r.status == 204, r
            self.sandbox_id = None
            r = self.life("DELETE", f"/v1/sandboxes/{sid}")
            assert r.status == 404 and r.json().get("code") == "DOCKER::SANDBOX_NOT_FOUND", r
            r = self.life("GET", f"/v1/sandboxes/{sid}")
            assert r.status == 404, r

    def cleanup(self) -> None:
        """Best effort after a failure: remove the work directory and the sandbox."""
        if getattr(self, "dir", None) and self.execd:
            with contextlib.suppress(Exception):
                self.ex("DELETE", "/directories?" + urllib.parse.urlencode({"path": self.dir}), timeout=5)
        if self.sandbox_id:
            with contextlib.suppress(Exception):
                self.life("POST", f"/v1/sandboxes/{self.sandbox_id}/resume", timeout=10)
            with contextlib.suppress(Exception):
                self.life("DELETE", f"/v1/sandboxes/{self.sandbox_id}", timeout=30)


def run_smoke_flow(
    base_url: str, api_key: str, *, image: str = "python:3.12-slim", log: Optional[Callable[[str], None]] = None
) -> List[str]:
    """Run the whole flow; return the names of the steps that passed (all of them, or raise SmokeFailure)."""
    return _Flow(base_url, api_key, image, log).go()


STEPS = 27  # number of named steps in a full run; tests assert len(run_smoke_flow(...)) == STEPS
