"""POST /command and friends against the mock execd, in both framing modes (recordings 07-12, 17)."""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import time

import pytest

from tiers.t1.conftest_execd import Client, outputs
from tiers.toolkit.waits import wait_until

MODES = ["v1.1.0", "latest"]
HEX32 = re.compile(r"^[0-9a-f]{32}$")


@pytest.fixture(params=MODES)
def client(request, make_execd):
    s = make_execd(mode=request.param)
    c = Client(s.port)
    c.mode = request.param
    return c


def test_exit_code_error_event_and_framing(client):
    r = client.run("echo out; echo err >&2; exit 3")
    assert r.status == 200
    assert r.header("Content-Type") == "text/event-stream"
    assert r.header("Cache-Control") == "no-cache"
    assert r.header("X-Accel-Buffering") == "no"
    assert r.header("Transfer-Encoding") == "chunked"
    # bare JSON frames, no "data:" prefix (recording 07)
    assert r.body.startswith(b'{"type":"init","text":"')
    assert b"data:" not in r.body
    ev = r.events()
    assert [e["type"] for e in ev[:2]] == ["init", "ping"]
    assert HEX32.match(ev[0]["text"]) and ev[1]["text"] == "pong"
    assert ev[-1] == {
        "type": "error",
        "timestamp": ev[-1]["timestamp"],
        "error": {"ename": "CommandExecError", "evalue": "3", "traceback": ["exit status 3"]},
    }
    # key order as recorded: type, timestamp, error
    assert r.body.rstrip(b"\n").rsplit(b"\n\n", 1)[-1].startswith(b'{"type":"error","timestamp":')
    suffix = "\n" if client.mode == "latest" else ""
    assert outputs(ev) == ["out" + suffix] and outputs(ev, "stderr") == ["err" + suffix]
    st = client.get(f"/command/status/{ev[0]['text']}")
    assert st.status == 200 and st.header("Content-Type") == "application/json; charset=utf-8"
    body = st.json()
    assert list(body) == ["id", "content", "running", "exit_code", "error", "started_at", "finished_at"]
    assert body["exit_code"] == 3 and body["error"] == "exit status 3" and body["running"] is False
    # Go's JSON escaping of > and & (recording 07)
    assert b'"content":"echo out; echo err \\u003e\\u00262; exit 3"' in st.body
    assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?Z$", body["started_at"])
    logs = client.get(f"/command/{ev[0]['text']}/logs")
    assert logs.status == 400
    assert logs.json() == {
        "code": "INVALID_REQUEST_BODY",
        "message": f"command {ev[0]['text']} is not running in background",
    }


@pytest.mark.parametrize("cmd", ["true", "exit 0"])
def test_success_execution_complete(client, cmd):
    ev = client.run(cmd).events()
    assert [e["type"] for e in ev] == ["init", "ping", "execution_complete"]
    assert list(ev[-1]) in (["type", "execution_time", "timestamp"], ["type", "timestamp"])


def test_timeout_kills_with_signal_killed(client):
    ev = client.run("echo start; sleep 10; echo never", timeout=400).events()
    assert ev[-1]["error"] == {"ename": "CommandExecError", "evalue": "-1", "traceback": ["signal: killed"]}
    assert "".join(outputs(ev)).strip() == "start"


def test_v1_line_framing_recording_12(make_execd):
    c = Client(make_execd(mode="v1.1.0").port)
    assert outputs(c.run("printf 'a\\r\\nb\\n\\nc'").events()) == ["a", "b", "\n", "c"]
    ev = c.run("printf 'no-newline'; printf 'err-no-newline' >&2").events()
    assert outputs(ev) == ["no-newline"] and outputs(ev, "stderr") == ["err-no-newline"]
    assert outputs(c.run("seq 1 50").events()) == [str(i) for i in range(1, 51)]


def test_latest_framing_is_byte_exact(make_execd):
    c = Client(make_execd(mode="latest").port)
    assert "".join(outputs(c.run("printf 'a\\r\\nb\\n\\nc'").events())) == "a\r\nb\n\nc"
    assert "".join(outputs(c.run("seq 1 50").events())) == "".join(f"{i}\n" for i in range(1, 51))
    # a multi-byte character split across writes is still one valid character
    ev = c.run("printf '\\xe2\\x98'; sleep 0.2; printf '\\x83\\n'").events()
    assert "".join(outputs(ev)) == "\u2603\n"


def test_cwd_env_and_identity(client, runtime):
    ev = client.run('pwd; echo "FOO=$FOO"; id -u', cwd="/tmp", envs={"FOO": "bar baz"}).events()
    lines = "".join(o if o.endswith("\n") else o + "\n" for o in outputs(ev)).splitlines()
    if runtime.isolated:
        assert lines == ["/tmp", "FOO=bar baz", "0"]
    else:
        assert lines[1] == "FOO=bar baz"


def test_unicode_and_json_looking_output(client):
    ev = client.run("echo 'h\u00e9llo \u2603'; echo '{\"json\": true}'; echo 'data: fake'").events()
    text = "".join(o if client.mode == "latest" else o + "\n" for o in outputs(ev))
    assert text == 'h\u00e9llo \u2603\n{"json": true}\ndata: fake\n'


@pytest.mark.parametrize(
    "cmd,evalue,tb",
    [
        ("kill -9 $$", "-1", "signal: killed"),
        ("exit 255", "255", "exit status 255"),
        ("kill -TERM $$", "-1", "signal: terminated"),
    ],
)
def test_exit_matrix(client, cmd, evalue, tb):
    ev = client.run(cmd).events()
    assert ev[-1]["error"] == {"ename": "CommandExecError", "evalue": evalue, "traceback": [tb]}


def test_missing_binary_uses_bash_message(client, runtime):
    ev = client.run("/no/such/binary").events()
    assert ev[-1]["error"]["evalue"] == "127"
    if runtime.paths.which("bash"):
        assert outputs(ev, "stderr")[0].rstrip("\n") == "bash: line 1: /no/such/binary: No such file or directory"


def test_nul_byte_in_a_command_is_execs_einval(client, runtime):
    """QUIRKS "NUL byte in a command": the real execd's answer (Go's exec: EINVAL before the fork)."""
    ev = client.run("echo a\x00b").events()
    errs = [e["error"] for e in ev if e.get("type") == "error"]
    exe = runtime.paths.which("bash") or "bash"
    assert errs == [
        {
            "ename": "CommandExecError",
            "evalue": "fork/exec %s: invalid argument" % exe,
            "traceback": ["fork/exec %s: invalid argument" % exe],
        }
    ], ev
    assert not outputs(ev, "stdout"), ev


REQUIRED = (
    "invalid request, validation error Key: 'RunCommandRequest.Command' Error:Field validation for "
    "'Command' failed on the 'required' tag"
)


@pytest.mark.parametrize(
    "body,message",
    [
        ('{"argv": ["echo", "hi"]}', REQUIRED),
        ("{}", REQUIRED),
        (
            '{"command": ["echo", "hi"]}',
            "error parsing request, MAYBE invalid body format. json: cannot unmarshal "
            "array into Go struct field RunCommandRequest.command of type string",
        ),
        (
            "{not json",
            "error parsing request, MAYBE invalid body format. invalid character 'n' looking for "
            "beginning of object key string",
        ),
        (
            '{"command": "echo x", "timeout": -5}',
            "invalid request, validation error Key: 'RunCommandRequest.TimeoutMs' "
            "Error:Field validation for 'TimeoutMs' failed on the 'gte' tag",
        ),
        (
            '{"command": "echo x", "cwd": "/no/such/dir"}',
            "invalid request, validation error working directory does "
            "not exist: /no/such/dir: stat /no/such/dir: no such file or directory",
        ),
        ("", "error parsing request, MAYBE invalid body format. EOF"),
        (
            "[1]",
            "error parsing request, MAYBE invalid body format. json: cannot unmarshal array into Go value of "
            "type model.RunCommandRequest",
        ),
        # a number into a string field: no literal in the text (the binary; tiers/diff command.validation)
        (
            '{"command": 1.5}',
            "error parsing request, MAYBE invalid body format. json: cannot unmarshal number "
            "into Go struct field RunCommandRequest.command of type string",
        ),
        (
            '{"command": "x", "timeout": 1.5}',
            "error parsing request, MAYBE invalid body format. json: cannot unmarshal "
            "number 1.5 into Go struct field RunCommandRequest.timeout of type int64",
        ),
    ],
)
def test_v1_bad_requests_recording_11(make_execd, body, message):
    c = Client(make_execd(mode="v1.1.0").port)
    r = c.post("/command", body, headers={"Content-Type": "application/json"})
    assert r.status == 400
    assert r.header("Content-Type") == "application/json; charset=utf-8"
    assert r.json() == {"code": "INVALID_REQUEST_BODY", "message": message}


def test_v1_argv_ignored_when_command_given(make_execd):
    c = Client(make_execd(mode="v1.1.0").port)
    ev = c.post("/command", {"command": "echo argv-field-ignored?", "argv": ["echo", "hi"]}).events()
    assert outputs(ev) == ["argv-field-ignored?"]


def test_latest_argv_runs_without_shell(make_execd):
    c = Client(make_execd(mode="latest").port)
    ev = c.post("/command", {"argv": ["echo", "$HOME", "a;b"]}).events()
    assert "".join(outputs(ev)) == "$HOME a;b\n"
    st = c.get(f"/command/status/{ev[0]['text']}").json()
    assert st["content"] == '["echo","$HOME","a;b"]'
    ev = c.post("/command", {"argv": ["no-such-program-xyz"]}).events()
    assert ev[-1]["error"]["evalue"] == 'exec: "no-such-program-xyz": executable file not found in $PATH'
    for body, msg in [
        (
            {"command": "echo", "argv": ["echo"]},
            "error parsing request, MAYBE invalid body format. exactly one of non-empty command or argv is required",
        ),
        ({}, "error parsing request, MAYBE invalid body format. exactly one of non-empty command or argv is required"),
        ({"argv": []}, "invalid request, validation error argv must contain a non-empty executable"),
    ]:
        r = c.post("/command", body)
        assert (r.status, r.json()["message"]) == (400, msg)


def test_background_status_logs_cursor_recording_10(client):
    ev = client.run(
        "for i in 1 2 3; do echo line$i; sleep 0.1; done; echo bg-err >&2; exit 5", background=True
    ).events()
    assert [e["type"] for e in ev] == ["init", "ping", "execution_complete"]
    cid = ev[0]["text"]
    wait_until(lambda: not client.get(f"/command/status/{cid}").json()["running"], 10)
    st = client.get(f"/command/status/{cid}").json()
    assert st["exit_code"] == 5 and st["error"] == "exit status 5" and "finished_at" in st
    logs = client.get(f"/command/{cid}/logs")
    assert logs.status == 200 and logs.header("Content-Type") == "text/plain; charset=utf-8"
    assert logs.text == "line1\nline2\nline3\nbg-err\n"
    assert logs.header("Execd-Commands-Tail-Cursor") == "25"
    part = client.get(f"/command/{cid}/logs?cursor=2")
    assert (part.text, part.header("Execd-Commands-Tail-Cursor")) == ("ne1\nline2\nline3\nbg-err\n", "25")
    end = client.get(f"/command/{cid}/logs?cursor=99")  # Seek past the end: position = cursor (tiers/diff)
    assert (end.body, end.header("Execd-Commands-Tail-Cursor")) == (b"", "99")
    neg = client.get(f"/command/{cid}/logs?cursor=-1")
    # Seek(-1) on the <id>.output file (the binary; tiers/diff command.background)
    assert neg.status == 400 and neg.json()["message"] == f"error seek file: seek /tmp/{cid}.output: invalid argument"


def test_background_logs_read_while_it_writes_keep_every_byte_in_order(client):
    """A background command's logs drain its pipe themselves (execd's command writes its <id>.output file, whose
    bytes are there at once) while the pump thread drains it too: read with the tail cursor while the command
    writes, the pieces join into exactly its output."""
    ev = client.run("seq 1 40000; sleep 0.1; seq 40001 80000", background=True).events()
    cid = ev[0]["text"]
    got, cursor = bytearray(), 0
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        r = client.get(f"/command/{cid}/logs?cursor={cursor}")
        got += r.body
        cursor = int(r.header("Execd-Commands-Tail-Cursor"))
        if not r.body and not client.get(f"/command/status/{cid}").json()["running"]:
            break
        time.sleep(0.003)
    got += client.get(f"/command/{cid}/logs?cursor={cursor}").body
    assert bytes(got) == "".join(f"{i}\n" for i in range(1, 80_001)).encode()


def test_background_logs_are_its_file_read_by_its_path(client):
    """A background command's fd 1 and fd 2 are its ``<id>.output`` file (read-write, seekable), and its logs are
    that file read by its path at each request: once code removed it, 400 as live answers (QUIRKS.md, "A
    command's fd 1 and fd 2"; live 2026-12-07: the same body)."""
    cmd = "readlink /proc/self/fd/2; python3 -c 'import sys; print(sys.stdout.seekable())'; sleep 0.3; "
    cmd += 'rm -f "$(readlink /proc/self/fd/2)"; sleep 30'
    cid = client.run(cmd, background=True).events()[0]["text"]
    assert wait_until(lambda: client.get(f"/command/{cid}/logs").body.endswith(b"True\n"), 10)
    assert client.get(f"/command/{cid}/logs").body == f"/tmp/{cid}.output\nTrue\n".encode()
    assert wait_until(lambda: client.get(f"/command/{cid}/logs").status == 400, 10)
    r = client.get(f"/command/{cid}/logs?cursor=3")
    assert r.json() == {
        "code": "INVALID_REQUEST_BODY",
        "message": f"error open combined output file for command {cid}: open /tmp/{cid}.output: "
        "no such file or directory",
    }
    assert client.delete(f"/command?id={cid}").status == 200


def test_a_session_run_with_much_output_keeps_every_line_in_order(client):
    """A session run's output lines leave a read of the pipe at a time (sessions.RunHooks.lines, one event each,
    written together): 600 lines of 200 digits, more than one read, a CRLF line, then the run's env and cwd kept for the next."""
    sid = client.post("/session", {}).json()["session_id"]
    ev = client.post(
        f"/session/{sid}/run", {"command": "seq -f '%0200g' 1 600; printf 'crlf\\r\\nlast\\n'; export KEPT=1; cd /tmp"}
    ).events()
    assert ev[0]["type"] == "init" and ev[-1]["type"] == "execution_complete"
    assert outputs(ev) == ["%0200d" % i for i in range(1, 601)] + ["crlf", "last"]
    ev = client.post(f"/session/{sid}/run", {"command": "echo $KEPT; pwd"}).events()
    assert outputs(ev) == ["1", "/tmp"]


def test_unknown_command_ids(client):
    st = client.get("/command/status/no-such-command")
    assert st.status == 404
    assert st.json() == {"code": "INVALID_REQUEST_BODY", "message": "command not found: no-such-command"}
    logs = client.get("/command/no-such-command/logs")
    assert logs.status == 400 and logs.json()["message"] == "command not found: no-such-command"
    d = client.delete("/command?id=no-such-command")
    assert d.status == 500
    assert d.json() == {"code": "RUNTIME_ERROR", "message": "error interruptting code context. no such session"}
    d = client.delete("/command")
    assert d.status == 400 and d.json() == {"code": "MISSING_QUERY", "message": "missing query parameter 'id'"}


def test_interrupt_background(client):
    ev = client.run("echo started; sleep 30; echo never", background=True).events()
    cid = ev[0]["text"]
    running = client.get(f"/command/status/{cid}").json()
    assert running["running"] is True and "exit_code" not in running and "finished_at" not in running
    time.sleep(0.2)
    d = client.delete(f"/command?id={cid}")
    assert d.status == 200 and d.body == b"" and d.header("Content-Type") is None
    st = client.get(f"/command/status/{cid}").json()
    assert (st["running"], st["exit_code"], st["error"]) == (False, -1, "signal: terminated")
    assert client.get(f"/command/{cid}/logs").text == "started\n"
    again = client.delete(f"/command?id={cid}")
    assert (
        again.status == 500
        and again.json()["message"] == f"error interruptting code context. command session {cid} is not running"
    )


def test_heartbeat_pings_while_running(make_execd):
    c = Client(make_execd(heartbeat=0.2).port)
    ev = c.run("echo a; sleep 0.7; echo b").events()
    types = [e["type"] for e in ev]
    assert types[:2] == ["init", "ping"]
    assert types.count("ping") >= 3  # the initial ping plus heartbeats while sleeping
    assert types[-1] == "execution_complete"
    assert types.index("stdout") < len(types) - 2


def test_stream_stays_open_about_a_second(make_execd):
    c = Client(make_execd(close_delay=1.0).port)
    conn = http.client.HTTPConnection("127.0.0.1", c.port, timeout=10)
    conn.request("POST", "/command", body=json.dumps({"command": "true"}))
    r = conn.getresponse()
    buf = b""
    while b"execution_complete" not in buf:
        buf += r.read1(4096)
    t0 = time.monotonic()
    rest = r.read()
    held = time.monotonic() - t0
    conn.close()
    assert rest == b"" or b"execution_complete" not in rest
    assert held >= 0.5  # the stream was not closed right after the terminal event


def test_client_disconnect_leaves_foreground_command_running(make_execd, runtime):
    """Execute runs under context.Background(): a client that goes away does not stop the command
    (the real binary; tiers/diff command.disconnect)."""
    s = make_execd()
    sock = socket.create_connection(("127.0.0.1", s.port))
    body = json.dumps({"command": "echo go; sleep 0.3; echo done > /tmp/after-disconnect"}).encode()
    sock.sendall(
        b"POST /command HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (len(body), body)
    )
    buf = b""
    deadline = time.monotonic() + 10
    while b'"type":"stdout"' not in buf and time.monotonic() < deadline:
        buf += sock.recv(4096)
    assert b'"text":"go"' in buf, buf
    sock.close()
    marker = runtime.resolve("/tmp/after-disconnect")

    def written() -> str:  # the shell creates the file (`>`) before echo writes into it
        try:
            with open(marker) as fh:
                return fh.read()
        except FileNotFoundError:
            return ""

    wait_until(lambda: written() == "done\n", 10)
    assert written() == "done\n"


def test_status_of_foreground_command_after_finish(client):
    ev = client.run("echo hi").events()
    st = client.get(f"/command/status/{ev[0]['text']}").json()
    assert st["running"] is False and st["exit_code"] == 0 and "error" not in st


def test_a_stream_that_breaks_leaves_the_command_to_finish(make_execd, monkeypatch):
    """The request thread pumps a foreground command's output; when its stream ends on an error before the
    exit, the rest is pumped without a reader (CommandRegistry.drain) and the command's status still ends."""
    from mock_opensandbox.execd import commands_routes

    def broken(self, req, cmd, out, framers):
        next(iter(cmd.events))  # one step of the pump, then the stream breaks
        raise RuntimeError("a stream that breaks")

    monkeypatch.setattr(commands_routes.CommandsRoutes, "_pump", broken)
    c = Client(make_execd().port)
    conn = http.client.HTTPConnection("127.0.0.1", c.port, timeout=10)
    conn.request("POST", "/command", body=json.dumps({"command": "echo a; sleep 0.3; exit 3"}))
    buf = b""
    try:
        r = conn.getresponse()
        while b'"ping"' not in buf:
            chunk = r.read1(4096)
            if not chunk:
                break
            buf += chunk
    except (http.client.HTTPException, OSError):
        pass
    conn.close()
    cid = json.loads(buf.split(b"\n")[0])["text"]  # the init event
    wait_until(lambda: not c.get(f"/command/status/{cid}").json()["running"], 10)
    st = c.get(f"/command/status/{cid}").json()
    assert (st["exit_code"], st["error"]) == (3, "exit status 3"), st


def _pipe_fds() -> set[str]:
    """This process's descriptors on a pipe (a command's output pipes are opened here, in-process)."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("pipe:"):
            out.add(f"{fd} {target}")
    return out


def test_each_commands_pipes_are_closed_when_it_ends(make_execd, monkeypatch):
    """A command's output pipes are bare descriptors read by its pump: a foreground command's, a background
    command's, and those of one whose event stream could not even start (the pump still drains and closes
    them) are all closed once each command ends."""
    from mock_opensandbox.execd import commands_routes

    c = Client(make_execd().port)
    c.run("true")  # the server's own descriptors made before counting
    before = _pipe_fds()
    for _ in range(3):
        assert outputs(c.run("echo fg; echo err >&2").events()) == ["fg"]
    cid = c.run("echo bg", background=True).events()[0]["text"]
    wait_until(lambda: not c.get(f"/command/status/{cid}").json()["running"], 10)
    assert c.get(f"/command/{cid}/logs").body == b"bg\n"
    real = commands_routes.gin.sse_start

    def refused(req):
        raise OSError("the stream's head could not be written")

    monkeypatch.setattr(commands_routes.gin, "sse_start", refused)
    conn = http.client.HTTPConnection("127.0.0.1", c.port, timeout=10)
    try:
        conn.request("POST", "/command", body=json.dumps({"command": "echo unread; sleep 0.2"}))
        conn.getresponse().read()
    except (http.client.HTTPException, OSError):
        pass
    conn.close()
    monkeypatch.setattr(commands_routes.gin, "sse_start", real)
    wait_until(lambda: _pipe_fds() <= before, 10)
    assert _pipe_fds() <= before, sorted(_pipe_fds() - before)


@pytest.mark.parametrize("interval,most", [(0.1, 24), (0.005, 60)])
def test_a_running_commands_files_are_read_on_ticks(make_execd, monkeypatch, interval, most):
    """execd reads a foreground command's files by path on a ticker (100 ms; the fast timing's 5 ms doubles up
    to 100 ms while nothing comes, and starts again at 5 ms once output does): a silent second costs ~10 reads
    of each file, not 200; lines that come every 20 ms all arrive, in order (QUIRKS.md, "A command's fd 1 and
    fd 2")."""
    from mock_opensandbox.execd import runfiles

    reads = []
    real = runfiles.RunFiles.read

    def counted(self, path, pos):
        reads.append(path)
        return real(self, path, pos)

    monkeypatch.setattr(runfiles.RunFiles, "read", counted)
    c = Client(make_execd(tail_interval=interval).port)
    assert c.run("sleep 1").events()[-1]["type"] == "execution_complete"
    assert 4 <= len(reads) <= most, len(reads)  # (2 files a read, and the last read at the exit)
    ev = c.run("for i in $(seq 1 15); do echo $i; sleep 0.02; done").events()
    assert outputs(ev) == [str(i) for i in range(1, 16)]


def test_an_unfinished_line_is_read_again_up_to_a_size(make_execd, monkeypatch):
    """execd's readFromPos leaves an unfinished last line in the file and reads it again at the next tick (the
    command's rewrite of it is what comes: ``XYZ``, not ``abc``); one over REREAD_MAX is taken as read, so a
    long line without an end costs its length once, and the fast timing backs off while only it grows (QUIRKS.md,
    "A command's fd 1 and fd 2")."""
    from mock_opensandbox.execd import commands, runfiles

    monkeypatch.setattr(commands, "REREAD_MAX", 4096)
    read_bytes = []
    real = runfiles.RunFiles.read

    def counted(self, path, pos):
        for data in real(self, path, pos):
            read_bytes.append(len(data))
            yield data

    monkeypatch.setattr(runfiles.RunFiles, "read", counted)
    c = Client(make_execd(tail_interval=0.005).port)
    rewrite = 'python3 -c \'import os, time; os.write(1, b"abc"); time.sleep(0.3); os.pwrite(1, b"XYZ\\n", 0)\''
    assert outputs(c.run(rewrite).events()) == ["XYZ"]
    reads = len(read_bytes)
    assert reads <= 14, reads  # 0.3 s with "abc" unfinished: backing off from 5 ms, not 60 reads
    read_bytes.clear()
    long = "head -c 40000 /dev/zero | tr '\\0' x; sleep 0.3; echo; echo end"
    assert outputs(c.run(long).events()) == ["x" * 40000, "end"]
    assert sum(read_bytes) < 40000 * 3, sum(read_bytes)  # taken once it passed 4096 bytes, not read at every tick


def test_a_finished_command_keeps_only_its_status(make_execd):
    """execd keeps every command for GET /command/status/{id}; a finished one keeps its status and nothing of its
    run (its process, its output's reader, its Event): a sandbox that ran 6,000 commands grew 4 MiB for each
    1,000 before, 0.7 MiB after (bench/README.md). Its status and a wait on it are as before."""
    from mock_opensandbox.execd import commands

    s = make_execd()
    c = Client(s.port)
    for background in (False, True):
        r = c.run("echo hi; exit 3", background=background)
        cid = r.events()[0]["text"]
        cmd = s.commands.get(cid)
        assert wait_until(lambda cmd=cmd: not cmd.running, 5)
        assert cmd.proc is None and cmd.done is commands._FINISHED and cmd.done.wait(0)
        assert list(cmd.events) == []
        held = {type(v).__name__ for v in vars(cmd).values() if v is not commands._FINISHED}
        assert not {"Popen", "generator", "Event", "Deadline"} & held, held
        st = cmd.status()
        assert (st["running"], st["exit_code"], st["error"]) == (False, 3, "exit status 3"), st
