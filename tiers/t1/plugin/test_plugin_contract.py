"""The plugin's contract with the host: twelve checks (a test is named by the behaviour it
checks; the section comments number them (1)-(12)), driving the plugin (``python3 -S plugin/launch.py``) over
EPP/stdio against the mock, each in both execd generations (v1.1.0 as recorded, and "latest")."""

from __future__ import annotations

import base64
import datetime as dt
import http.server
import os
import threading
import time
import uuid

import pytest

from mock_opensandbox.lifecycle.model import Provisioner
from mock_opensandbox.server import MockOpenSandbox
from mock_opensandbox.wire import http1 as httpcore
from tiers.toolkit.epp import EppClient, RpcError
from tiers.toolkit.waits import wait_until

MODES = ["v1.1.0", "latest"]


@pytest.fixture(scope="module", params=MODES)
def mock(request):
    """Overrides the toolkit's ``mock`` (tiers/toolkit/fixtures.py): one per execd generation."""
    with MockOpenSandbox(execd_mode=request.param) as osb:
        yield osb


@pytest.fixture
def sid(epp):
    """Overrides the toolkit's ``sid``: the create call carries every field the host sends."""
    sb = epp.call(
        "sandbox.create",
        {
            "template": "base",
            "timeout": 300,
            "metadata": {"suite": "t1"},
            "envs": {},
            "cpu": None,
            "memory": None,
            "disk": None,
            "gpu": None,
            "request_timeout": None,
        },
    )
    yield sb["sandbox_id"]
    epp.call("sandbox.kill", {"sandbox_id": sb["sandbox_id"]})


def run(epp, sid, cmd, args=(), **kw):
    params = {"sandbox_id": sid, "cmd": cmd, "args": list(args), "env": {}, "cwd": "", "user": "", "timeout": 30}
    params.update(kw)
    return epp.call("exec.run", params, timeout=params["timeout"] + 10)


def sh(epp, sid, script, **kw):
    return run(epp, sid, "sh", ["-c", script], **kw)


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


# (1) exit-code matrix --------------------------------------------------------------------------------------


def test_exit_codes_timeouts_and_start_failures(epp, sid, mock):
    assert run(epp, sid, "true")["exit_code"] == 0
    res = sh(epp, sid, "echo oops >&2; exit 3")
    assert res["exit_code"] == 3 and "oops" in res["stderr"]
    assert sh(epp, sid, "exit 127")["exit_code"] == 127
    # a missing binary: bash reports 127 (v1.1.0 runs a shell string, recording 11); a latest execd may
    # refuse to start it, which is a typed error
    try:
        res = run(epp, sid, "/no/such/binary")
    except RpcError as exc:
        assert mock.execd_mode == "latest" and exc.code == -32000 and "could not be started" in exc.message
    else:
        assert res["exit_code"] == 127 and "No such file" in res["stderr"]
    started = time.monotonic()
    res = run(epp, sid, "sleep", ["30"], timeout=1)
    assert res["exit_code"] == 124 and time.monotonic() - started < 15
    with pytest.raises(RpcError) as info:  # start failure: recording 11
        run(epp, sid, "pwd", cwd="/no/such/dir")
    assert info.value.code == -32000 and "working directory" in info.value.message
    with pytest.raises(RpcError) as info:
        run(epp, sid, "true", user="no-such-user-x")
    assert info.value.code == -32000 and "no-such-user-x" in info.value.message
    # the stream variant: the same codes as exec.exit
    _, _notes, code = epp.exec_stream(sid, "sh", ["-c", "exit 5"])
    assert code == 5
    _, _notes, code = epp.exec_stream(sid, "sleep", ["30"], timeout=1)
    assert code == 124


# (2) both framings give the same stdout for printf 'a\r\nb\n' (v1.1.0 loses "\r", documented) ------------


def test_both_execd_framings_give_the_same_stdout_for_crlf(epp, sid, mock):
    _, notes, code = epp.exec_stream(sid, "printf", ["a\\r\\nb\\n"])
    out = EppClient.joined(notes)
    assert code == 0
    assert out == ("a\r\nb\n" if mock.execd_mode == "latest" else "a\nb\n")
    assert out.replace("\r", "") == "a\nb\n"
    res = sh(epp, sid, "printf 'x\\n\\ny\\n'; printf 'e1\\ne2\\n' >&2")
    assert res["stdout"] == "x\n\ny\n" and res["stderr"] == "e1\ne2\n"
    assert (
        run(epp, sid, "echo", ["h\u00e9llo \u2603", '{"json": true}', "data: fake"])["stdout"]
        == 'h\u00e9llo \u2603 {"json": true} data: fake\n'
    )
    _, notes, code = epp.exec_stream(sid, "seq", ["1", "20000"])  # one event per line under v1.1.0
    assert code == 0 and EppClient.joined(notes) == "".join(f"{i}\n" for i in range(1, 20001))


# (3) upload -> download byte-exact -------------------------------------------------------------------------


def test_upload_then_download_is_byte_exact(epp, sid):
    blobs = {"/tmp/t1/bin.dat": bytes(range(256)) * 3 + b"\x00\xff\r\n", "/tmp/t1/big.bin": os.urandom(3 * 1024 * 1024)}
    for path, data in blobs.items():
        epp.call("files.write", {"sandbox_id": sid, "path": path, "content_b64": b64(data)})
    for path, data in blobs.items():
        got = base64.b64decode(epp.call("files.read", {"sandbox_id": sid, "path": path})["content_b64"])
        assert got == data, path
        assert epp.call("files.stat", {"sandbox_id": sid, "path": path})["size"] == len(data)
    part = epp.call("files.read", {"sandbox_id": sid, "path": "/tmp/t1/bin.dat", "offset": 250, "length": 10})
    assert base64.b64decode(part["content_b64"]) == blobs["/tmp/t1/bin.dat"][250:260]
    epp.call("files.write", {"sandbox_id": sid, "path": "/tmp/t1/bin.dat", "content_b64": b64(b"short")})
    assert (
        base64.b64decode(epp.call("files.read", {"sandbox_id": sid, "path": "/tmp/t1/bin.dat"})["content_b64"])
        == b"short"
    )
    # over the per-read cap: a clear error instead of a line the host would kill us for
    epp.call("files.write", {"sandbox_id": sid, "path": "/tmp/t1/huge", "content_b64": b64(b"z" * 6_100_000)})
    with pytest.raises(RpcError) as info:
        epp.call("files.read", {"sandbox_id": sid, "path": "/tmp/t1/huge"})
    assert info.value.code == -32000 and "offset/length" in info.value.data["suggestion"]
    tail = epp.call("files.read", {"sandbox_id": sid, "path": "/tmp/t1/huge", "offset": 6_000_000})
    assert base64.b64decode(tail["content_b64"]) == b"z" * 100_000
    with pytest.raises(RpcError) as info:
        epp.call("files.write", {"sandbox_id": sid, "path": "/tmp/t1/x", "content_b64": "not base64!"})
    assert info.value.code == -32000


def test_empty_file_and_a_range_past_the_end(epp, sid):
    epp.call("files.write", {"sandbox_id": sid, "path": "/tmp/t1/empty", "content_b64": ""})
    assert epp.call("files.read", {"sandbox_id": sid, "path": "/tmp/t1/empty"}) == {"content_b64": ""}
    assert epp.call("files.stat", {"sandbox_id": sid, "path": "/tmp/t1/empty"})["size"] == 0
    past = epp.call("files.read", {"sandbox_id": sid, "path": "/tmp/t1/empty", "offset": 5, "length": 3})
    assert past == {"content_b64": ""}


# (4) remove file / dir / missing, move onto an existing file, search and list depth -------------------------


def test_remove_move_search_and_list_depth(epp, sid):
    def write(path, data=b"x"):
        epp.call("files.write", {"sandbox_id": sid, "path": path, "content_b64": b64(data)})

    def exists(path):
        try:
            epp.call("files.stat", {"sandbox_id": sid, "path": path})
            return True
        except RpcError as exc:
            assert exc.code == -32002 and exc.sdk_code == "E4001"
            return False

    epp.call("files.mkdir", {"sandbox_id": sid, "path": "/w/a/b/c"})
    epp.call("files.mkdir", {"sandbox_id": sid, "path": "/w/a/b/c"})  # exists: fine
    write("/w/a/one.txt", b"1")
    write("/w/a/b/two.csv", b"2")
    write("/w/a/b/c/three.csv", b"3")
    names = {e["name"]: e["type"] for e in epp.call("files.list", {"sandbox_id": sid, "path": "/w/a"})["entries"]}
    assert names == {"one.txt": "file", "b": "dir"}
    deep = epp.call("files.list", {"sandbox_id": sid, "path": "/w/a", "depth": 3})["entries"]
    assert {e["path"] for e in deep} >= {"/w/a/b/c/three.csv", "/w/a/b/two.csv"}
    found = epp.call("files.search", {"sandbox_id": sid, "path": "/w", "pattern": "**/*.csv"})["entries"]
    assert {e["path"] for e in found} == {"/w/a/b/two.csv", "/w/a/b/c/three.csv"}
    # move onto an existing file replaces it
    write("/w/dst.txt", b"old")
    epp.call("files.move", {"sandbox_id": sid, "source": "/w/a/one.txt", "destination": "/w/dst.txt"})
    assert base64.b64decode(epp.call("files.read", {"sandbox_id": sid, "path": "/w/dst.txt"})["content_b64"]) == b"1"
    assert not exists("/w/a/one.txt")
    with pytest.raises(RpcError) as info:
        epp.call("files.move", {"sandbox_id": sid, "source": "/w/nope", "destination": "/w/x"})
    assert info.value.code == -32002
    # remove a file, a directory tree, and a missing path
    epp.call("files.remove", {"sandbox_id": sid, "path": "/w/dst.txt"})
    assert not exists("/w/dst.txt")
    epp.call("files.remove", {"sandbox_id": sid, "path": "/w/a"})
    assert not exists("/w/a/b/c/three.csv") and not exists("/w/a")
    with pytest.raises(RpcError) as info:
        epp.call("files.remove", {"sandbox_id": sid, "path": "/w/a"})
    assert info.value.code == -32002 and info.value.sdk_code == "E4001"
    epp.call("files.chmod", {"sandbox_id": sid, "path": "/w", "mode": "700"})
    assert epp.call("files.stat", {"sandbox_id": sid, "path": "/w"})["mode"] == 700


# (5) set_timeout: expiresAt from the server's clock -------------------------------------------------------


def _expires(epp, sid) -> dt.datetime:
    rec = epp.call("sandbox.get", {"sandbox_id": sid})
    return dt.datetime.fromisoformat(rec["expires_at"].replace("Z", "+00:00"))


def test_set_timeout_takes_expiry_from_the_server_clock(epp, sid):
    epp.call("sandbox.set_timeout", {"sandbox_id": sid, "timeout": 600})
    want = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=600)
    assert abs((_expires(epp, sid) - want).total_seconds()) <= 2
    epp.call("sandbox.set_timeout", {"sandbox_id": sid, "timeout": 30})  # clamped to 60 s
    want = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=60)
    assert abs((_expires(epp, sid) - want).total_seconds()) <= 2
    with pytest.raises(RpcError) as info:
        epp.call("sandbox.set_timeout", {"sandbox_id": "00000000-0000-0000-0000-000000000000", "timeout": 600})
    assert info.value.code == -32002 and info.value.sdk_code == "E2009"


@pytest.mark.mock_only
@pytest.mark.parametrize("hours", [2, -3])
def test_set_timeout_with_a_skewed_client_clock(tmp_path, hours):
    skew = dt.timedelta(hours=hours)  # the server's clock differs from this machine's
    with (
        MockOpenSandbox(clock=lambda: dt.datetime.now(dt.timezone.utc) + skew) as osb,
        EppClient(str(tmp_path / "d"), {"base_url": osb.base_url, "api_key": osb.api_key}) as epp,
    ):
        sid = epp.call("sandbox.create", {"template": "base", "timeout": 300})["sandbox_id"]
        try:
            epp.call("sandbox.set_timeout", {"sandbox_id": sid, "timeout": 600})
            want = dt.datetime.now(dt.timezone.utc) + skew + dt.timedelta(seconds=600)
            assert abs((_expires(epp, sid) - want).total_seconds()) <= 2
        finally:
            epp.call("sandbox.kill", {"sandbox_id": sid})


# (6) kill is idempotent --------------------------------------------------------------------------------------


def test_kill_is_idempotent(epp, mock):
    sid = epp.call("sandbox.create", {"template": "base", "timeout": 300})["sandbox_id"]
    assert sid in mock.sandboxes
    for _ in range(2):
        assert epp.call("sandbox.kill", {"sandbox_id": sid}) == {}
    assert epp.call("sandbox.kill", {"sandbox_id": "does-not-exist-0000"}) == {}
    with pytest.raises(RpcError) as info:
        epp.call("sandbox.get", {"sandbox_id": sid})
    assert info.value.sdk_code == "E2009"
    with pytest.raises(RpcError) as info:
        epp.call("sandbox.connect", {"sandbox_id": "does-not-exist-0000"})
    assert info.value.code == -32002 and info.value.sdk_code == "E2009"


# (7) metadata label rejection names the key, before anything is created ------------------------------------


def test_bad_metadata_label_is_rejected_before_anything_is_created(epp, mock):
    # every create below carries this test's own label beside the bad one: on a live server other tests (other
    # xdist workers) create sandboxes at the same time, so the check is "none with this label", not a count
    mark = {"osb-test-run": uuid.uuid4().hex[:12]}
    for key in ("bad key", "opensandbox.io/x", "a" * 64):
        with pytest.raises(RpcError) as info:
            epp.call("sandbox.create", {"template": "base", "timeout": 300, "metadata": {key: "v", **mark}})
        assert info.value.code == -32000 and repr(key) in info.value.message
    with pytest.raises(RpcError) as info:
        epp.call("sandbox.create", {"template": "base", "timeout": 300, "metadata": {"ok": "x" * 64, **mark}})
    assert "'ok'" in info.value.message
    made = [sid for sid, sb in mock.sandboxes.items() if mark.items() <= (_metadata_of(sb) or {}).items()]
    assert made == []


def _metadata_of(sb: object) -> dict | None:
    """A sandbox's metadata: the mock's Sandbox object, or a live server's list item."""
    return sb.get("metadata") if isinstance(sb, dict) else getattr(sb, "metadata", None)


# (8) no call to execd's code endpoints (POST /code/context hangs on images without the interpreter) --------


@pytest.mark.mock_only
def test_never_calls_execd_code_endpoints(epp, sid):
    seen: list[str] = []

    def obs(ex):
        seen.append(ex.path)

    httpcore.OBSERVERS.append(obs)
    try:
        epp.call("sandbox.get", {"sandbox_id": sid})
        run(epp, sid, "true")
        epp.call("files.list", {"sandbox_id": sid, "path": "/"})
        epp.call("process.list", {"sandbox_id": sid})
        epp.call("ports.url", {"sandbox_id": sid, "port": 8080})
        epp.call("sandbox.list", {"limit": 10})
    finally:
        httpcore.OBSERVERS.remove(obs)
    assert seen and not [p for p in seen if "/code" in p]


# (9) Endpoint.headers on every execd request, SSE and uploads included (gateway mode) ----------------------


@pytest.mark.mock_only
@pytest.mark.parametrize("mode", MODES)
def test_gateway_headers_on_every_execd_request(tmp_path, mode):
    seen: list = []

    def obs(ex):
        seen.append(ex)

    with (
        MockOpenSandbox(gateway=True, execd_mode=mode) as osb,
        EppClient(str(tmp_path / "d"), {"base_url": osb.base_url, "api_key": osb.api_key}) as epp,
    ):
        sid = epp.call("sandbox.create", {"template": "base", "timeout": 300})["sandbox_id"]
        httpcore.OBSERVERS.append(obs)
        try:
            _, notes, code = epp.exec_stream(sid, "sh", ["-c", "echo via-gateway"])
            assert code == 0 and EppClient.joined(notes) == "via-gateway\n"
            epp.call("files.write", {"sandbox_id": sid, "path": "/g.txt", "content_b64": b64(b"g")})
            assert epp.call("files.read", {"sandbox_id": sid, "path": "/g.txt"})["content_b64"] == b64(b"g")
            epp.call("files.list", {"sandbox_id": sid, "path": "/"})
            url = epp.call("ports.url", {"sandbox_id": sid, "port": 9000})
            assert url["headers"] == {"OpenSandbox-Ingress-To": f"{sid}-44772"}
            # the mock reports a stream when its handler ends (execd's ~1 s close delay after the last event)
            assert wait_until(lambda: any(ex.path.endswith("/command") for ex in seen), timeout=10)
        finally:
            httpcore.OBSERVERS.remove(obs)
            epp.call("sandbox.kill", {"sandbox_id": sid})
    execd = [ex for ex in seen if ex.server_kind == "gin"]  # execd is Gin, lifecycle uvicorn
    assert {ex.path.rsplit("/", 1)[-1] for ex in execd} >= {"command", "upload", "download", "list"}
    for ex in execd:
        headers = {k.lower(): v for k, v in ex.request_headers.items()}
        assert headers.get("opensandbox-ingress-to") == f"{sid}-44772", ex.path


# (10) list pagination beyond 200 --------------------------------------------------------------------------


@pytest.mark.mock_only
def test_list_pages_beyond_200_sandboxes(epp, mock):
    real = mock.store.provisioner
    mock.store.provisioner = Provisioner()  # model-only sandboxes: no processes, no listeners
    try:
        made = {
            mock.store.create(
                image={"uri": "python:3.12-slim"},
                entrypoint=["tail", "-f", "/dev/null"],
                resource_limits={"cpu": "500m", "memory": "512Mi"},
                metadata={"bulk": "yes"},
            ).id
            for _ in range(205)
        }
    finally:
        mock.store.provisioner = real
    try:
        listed = epp.call("sandbox.list", {"limit": 1000})
        assert made <= {r["sandbox_id"] for r in listed["sandboxes"]} and listed["next"] is None
        page = epp.call("sandbox.list", {"limit": 100})  # what the host sends by default
        assert len(page["sandboxes"]) == 200 and page["next"] == "2"
        rest = epp.call("sandbox.list", {"limit": 300, "cursor": page["next"]})
        assert len(page["sandboxes"]) + len(rest["sandboxes"]) == len(listed["sandboxes"])
        assert epp.call("sandbox.list", {"limit": 100, "status": "paused"})["sandboxes"] == []
    finally:
        for sandbox_id in made:
            mock.store.delete(sandbox_id)


# (11) stream ordering: every exec.output before one exec.exit ---------------------------------------------


def test_every_output_comes_before_one_exec_exit(epp, sid):
    script = "echo one; sleep 0.3; echo two >&2; sleep 0.2; echo three; exit 4"
    pid, notes, code = epp.exec_stream(sid, "sh", ["-c", script])
    methods = [n["method"] for n in notes]
    assert methods.count("exec.exit") == 1 and methods[-1] == "exec.exit" and code == 4
    assert EppClient.joined(notes) == "one\nthree\n" and EppClient.joined(notes, "stderr") == "two\n"
    time.sleep(0.3)
    late = [n for n in epp.notifications if n["params"].get("process_id") == pid]
    assert len(late) == len(notes), "nothing may follow exec.exit"


# (12) error shapes: ErrorResponse, 422 detail, execd {"error"}, HTML 502 -----------------------------------


class _Stub(http.server.BaseHTTPRequestHandler):
    reply = (500, "text/plain", b"")

    def _answer(self):
        status, ctype, body = self.server.reply
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = do_DELETE = _answer

    def log_message(self, *args):
        pass


@pytest.mark.mock_only
@pytest.mark.parametrize(
    "status,ctype,body,code,sdk,text",
    [
        (
            404,
            "application/json",
            b'{"code":"DOCKER::SANDBOX_NOT_FOUND","message":"Sandbox x not found."}',
            -32002,
            "E2009",
            "Sandbox x not found.",
        ),
        (
            422,
            "application/json",
            b'{"detail":[{"type":"missing","loc":["path","sandboxId"],"msg":"Field required"}]}',
            -32000,
            None,
            "sandboxId: Field required",
        ),
        (
            401,
            "application/json",
            b'{"error":"Unauthorized: invalid or missing header X-EXECD-ACCESS-TOKEN"}',
            -32001,
            "E1001",
            "X-EXECD-ACCESS-TOKEN",
        ),
        (
            502,
            "text/html",
            b"<html><body><h1>502 Bad Gateway</h1><hr>nginx</body></html>",
            -32000,
            None,
            "502 Bad Gateway nginx",
        ),
    ],
)
def test_server_error_shapes_map_to_typed_errors(tmp_path, status, ctype, body, code, sdk, text):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    srv.reply = (status, ctype, body)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        with EppClient(str(tmp_path / "d"), {"base_url": f"http://127.0.0.1:{srv.server_port}/v1"}) as epp:
            with pytest.raises(RpcError) as info:
                epp.call("sandbox.get", {"sandbox_id": "x"})
            assert epp.violations == []
    finally:
        srv.shutdown()
        srv.server_close()
    assert info.value.code == code and info.value.sdk_code == sdk
    assert text in info.value.message and info.value.data.get("suggestion")
