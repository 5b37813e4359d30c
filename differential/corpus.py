"""The differential corpus: request sequences derived from execd's route table
(components/execd/pkg/web/router.go at 3bb6fad) and its controllers. Every case runs unchanged
against the real binary and the mock; every path it generates lives under the case's own
directory (``ctx.dir``, /diff/<case>). The /files and /directories cases are corpus_files.py's."""

from __future__ import annotations

import json
import time
from typing import Any

from differential import corpus_files
from differential.harness import Case, Ctx, case_collector
from differential.routes import MIDDLEWARE, ROUTES

__all__ = ["ROUTES", "MIDDLEWARE", "CASES", "case"]

CASES: list[Case] = []
case = case_collector(CASES)


def _concrete(route: str) -> tuple[str, str]:
    method, path = route.split(" ", 1)
    return method, (
        path.replace(":contextId", "nosuchctx").replace(":sessionId", "nosuchsession").replace(":id", "nosuchcmd")
    )


# ---------------------------------------------------------------------------------------------
# Methods: every route with its own method is covered below; here every path also gets HEAD,
# OPTIONS and a method no route accepts (gin answers those from its tree, not the controller).

_PATHS: dict[str, list[str]] = {}
for _r in ROUTES:
    _m, _p = _concrete(_r)
    _PATHS.setdefault(_p, []).append(_r)

for _p, _rs in _PATHS.items():

    def _methods(c: Ctx, p: str = _p, rs: list[str] = _rs) -> None:
        accepted = {r.split(" ", 1)[0] for r in rs}
        for m in ("HEAD", "OPTIONS", "PATCH", "PUT"):
            if m not in accepted:
                c.req(m, p, label=f"{m} {p}")
        if "GET" not in accepted:
            c.req("GET", p, label=f"GET {p}")
        if "POST" not in accepted and "GET" in accepted:
            c.req("POST", p, body=b"{}", label=f"POST {p}")

    CASES.append(Case("methods" + _p.replace("/", "."), tuple(_rs), _methods))


@case("unknown.paths", "* unknown path")
def _unknown(c: Ctx) -> None:
    for p in (
        "/",
        "/nope",
        "/ping/",
        "/files/",
        "/command/",
        "/command/status",
        "/command/status/",
        "/code/contexts/",
        "/session/",
        "/session/x/run/",
        "/pty/",
        "/metrics/",
        "//ping",
        "/PING",
        "/files/info/extra",
        "/directories/",
        "/session/x",
    ):
        c.get(p, label=f"GET {p}")
    c.req("POST", "/session/x", body=b"{}", label="POST /session/x")
    c.req("POST", "/command/", body=b"{}", label="POST /command/ (trailing slash)")
    c.req("DELETE", "/files/", label="DELETE /files/ (trailing slash)")
    c.req("HEAD", "/ping/", label="HEAD /ping/")
    c.req("GET", "/ping?x=1&y", label="GET /ping?query")


# ---------------------------------------------------------------------------------------------
# /ping


@case("ping", "GET /ping")
def _ping(c: Ctx) -> None:
    c.get("/ping")
    c.get("/ping", headers=[("Accept", "application/json")], label="GET /ping accept json")
    c.req("GET", "/ping", body=b"ignored body", label="GET /ping with body")


# ---------------------------------------------------------------------------------------------
# access token


@case("token.checks", "* accessToken", "GET /ping", "POST /command", "GET /files/info", token=True)
def _token(c: Ctx) -> None:
    c.get("/ping", token=False, label="no token")
    c.get("/ping", headers=[("X-EXECD-ACCESS-TOKEN", "wrong")], label="wrong token")
    c.get("/ping", headers=[("X-EXECD-ACCESS-TOKEN", "")], label="empty token")
    c.get("/ping", headers=[("x-execd-access-token", c.token)], label="lower-case header name")
    c.get("/ping", headers=[("X-EXECD-ACCESS-TOKEN", c.token + " ")], label="token trailing space")
    c.get("/ping", label="right token")
    c.get("/nope", token=False, label="unknown path no token")
    c.get("/nope", label="unknown path right token")
    c.req("OPTIONS", "/ping", token=False, label="OPTIONS no token")
    c.req("HEAD", "/ping", token=False, label="HEAD no token")
    c.post("/command", {"command": "echo hi"}, token=False, label="command no token")
    c.get("/files/info", query={"path": c.dir}, token=False, label="files no token")
    c.get("/files/info", query={"path": c.dir}, label="files right token")


# ---------------------------------------------------------------------------------------------
# /command


def run(c: Ctx, body: Any, label: str | None = None, **kw: Any):
    return c.post("/command", body, label=label or "POST /command", **kw)


def _init_id(resp) -> str | None:
    for frame in resp.body.split(b"\n\n"):
        try:
            ev = json.loads(frame)
        except ValueError:
            continue
        if isinstance(ev, dict) and ev.get("type") == "init":
            return ev.get("text")
    return None


@case("command.fg.basic", "POST /command")
def _fg_basic(c: Ctx) -> None:
    run(c, {"command": "echo hello; echo world >&2"}, "echo")
    run(c, {"command": "exit 3"}, "exit 3")
    run(c, {"command": "printf 'a\\nb\\r\\nc\\rd'"}, "line endings")
    run(c, {"command": "printf ''"}, "no output")
    run(c, {"command": "printf '\\n\\n\\nx\\n\\n'"}, "empty lines")
    run(c, {"command": "printf 'no newline'"}, "partial line")
    run(c, {"command": "printf '\\xff\\xfe ok \\xc3\\n'"}, "invalid utf8")
    run(c, {"command": "printf 'a\\0b\\n'"}, "nul in output")
    run(c, {"command": "printf '<>&\\u2028\\n'"}, "html escapes")
    run(c, {"command": "kill -9 $$"}, "killed by signal")
    run(c, {"command": "kill -TERM $$"}, "terminated by signal")
    run(c, {"command": "nosuchcommand-xyz"}, "command not found")
    run(c, {"command": "echo $0; echo $HOME; pwd; id -u"}, "shell and env")


@case("command.fg.env_cwd", "POST /command")
def _fg_env(c: Ctx) -> None:
    c.mkdir("wd")
    c.write("afile", "x")
    run(c, {"command": "pwd", "cwd": c.p("wd")}, "cwd ok")
    run(c, {"command": "pwd", "cwd": c.p("missing")}, "cwd missing")
    run(c, {"command": "pwd", "cwd": c.p("afile")}, "cwd is a file")
    run(c, {"command": "pwd", "cwd": c.p("afile/sub")}, "cwd under a file")
    run(c, {"command": "pwd", "cwd": c.p("missing/..")}, "cwd missing/..")
    run(c, {"command": "pwd", "cwd": c.p("wd/$NOPE")}, "cwd undefined env var")
    run(c, {"command": "pwd", "cwd": "~"}, "cwd tilde")
    run(c, {"command": "pwd", "cwd": "relative/dir"}, "cwd relative")
    run(c, {"command": "pwd", "cwd": "$HOME"}, "cwd env var")
    run(c, {"command": "pwd", "cwd": c.p("wd") + "/../wd"}, "cwd dotdot")
    run(c, {"command": "echo $FOO-$BAR", "envs": {"FOO": "1", "BAR": "two words"}}, "envs")
    run(c, {"command": "echo $HOME", "envs": {"HOME": "/tmp"}}, "envs override HOME")
    # execd runs the bash its own PATH names (exec.Command's LookPath), whatever PATH the command gets
    run(c, {"command": "echo $PATH", "envs": {"PATH": "/nonexistent"}}, "envs PATH without the shell on it")
    run(c, {"command": "env | grep -c '^X='", "envs": {"X": ""}}, "envs empty value")
    run(c, {"command": "echo ok", "envs": {"1BAD": "v", "A-B": "v"}}, "envs odd names")
    run(c, {"command": "echo ok", "envs": {"": "v"}}, "envs empty name")


@case("command.environment", "POST /command", "POST /session/:sessionId/run")
def _environment(c: Ctx) -> None:
    run(c, {"command": "printenv | LC_ALL=C sort | grep -v '^_='"}, "printenv")
    sid = _sid(c.post("/session", {}, record=False))
    c.post(f"/session/{sid}/run", {"command": "export -p | grep -v ' _='"}, label="session export -p")
    c.delete(f"/session/{sid}", record=False)


@case("command.env_empty_name", "POST /command")
def _env_empty(c: Ctx) -> None:
    run(c, {"command": "printenv | grep -c '^=v$'", "envs": {"": "v"}}, "printenv")


@case("command.validation", "POST /command")
def _cmd_validation(c: Ctx) -> None:
    for label, body in [
        ("empty body", b""),
        ("not json", b"nope"),
        ("truncated", b'{"command": "ec'),
        ("array", b"[1,2]"),
        ("string", b'"echo"'),
        ("null", b"null"),
        ("number", b"42"),
        ("empty object", b"{}"),
        ("empty command", b'{"command": ""}'),
        ("command number", b'{"command": 5}'),
        ("command null", b'{"command": null}'),
        ("background string", b'{"command": "true", "background": "yes"}'),
        ("timeout negative", b'{"command": "true", "timeout": -1}'),
        ("timeout float", b'{"command": "true", "timeout": 1.5}'),
        ("timeout string", b'{"command": "true", "timeout": "10"}'),
        ("timeout huge", b'{"command": "true", "timeout": 1e30}'),
        ("uid negative", b'{"command": "true", "uid": -1}'),
        ("uid huge", b'{"command": "true", "uid": 4294967296}'),
        ("gid without uid", b'{"command": "true", "gid": 0}'),
        ("envs array", b'{"command": "true", "envs": ["A=1"]}'),
        ("envs number value", b'{"command": "true", "envs": {"A": 1}}'),
        ("unknown field", b'{"command": "echo ok", "zzz": 1}'),
        ("case-insensitive key", b'{"COMMAND": "echo upper"}'),
        ("trailing data", b'{"command": "echo ok"} trailing'),
        ("two objects", b'{"command": "echo one"}{"command": "echo two"}'),
        ("bad escape", b'{"command": "\\x"}'),
        ("control char", b'{"command": "a\x01b"}'),
        ("invalid utf8", b'{"command": "echo \xff"}'),
        ("argv only", b'{"argv": ["echo", "hi"]}'),
        ("missing comma", b'{"command": "true" "cwd": "/"}'),
        ("bad literal", b'{"command": "true", "background": tru}'),
        ("leading ws", b'  \n {"command": "echo ws"}'),
    ]:
        c.req("POST", "/command", body=body, headers=[("Content-Type", "application/json")], label=label)
    c.req("POST", "/command", body=b'{"command": "echo no ctype"}', label="no content type")
    c.req(
        "POST",
        "/command",
        body=b'{"command": "echo form"}',
        headers=[("Content-Type", "text/plain")],
        label="text content type",
    )


@case("command.uid_gid", "POST /command")
def _cmd_uid(c: Ctx) -> None:
    run(c, {"command": "id -u; id -g", "uid": 0}, "uid 0")
    run(c, {"command": "id -u; id -g", "uid": 0, "gid": 0}, "uid 0 gid 0")
    run(c, {"command": "id -u", "uid": 65534}, "uid nobody")
    run(c, {"command": "id -u", "uid": 12345, "gid": 12345}, "uid unknown")


@case("command.start_failure", "POST /command", "GET /command/status/:id")
def _cmd_start_failure(c: Ctx) -> None:
    """cmd.Start fails after execd's own checks: the child cannot chdir as that user."""
    run(c, {"command": "pwd", "uid": 65534, "cwd": "/root"}, "uid nobody, cwd /root (0700)")
    r = run(c, {"command": "pwd", "uid": 65534, "cwd": "/root", "background": True}, "background: same")
    cid = _init_id(r)
    if cid:
        c.get(f"/command/status/{cid}", label="background: its status")


@case("command.timeout", "POST /command")
def _cmd_timeout(c: Ctx) -> None:
    run(c, {"command": "echo start; sleep 5; echo never", "timeout": 300}, "timeout kills")
    run(c, {"command": "echo quick", "timeout": 5000}, "timeout not reached")


@case("command.background", "POST /command", "GET /command/status/:id", "GET /command/:id/logs")
def _bg(c: Ctx) -> None:
    r = run(c, {"command": "echo one; echo two >&2; printf three", "background": True}, "start")
    cid = _init_id(r)
    _wait_done(c, cid)
    c.get(f"/command/status/{cid}", label="status done")
    c.get(f"/command/{cid}/logs", label="logs no cursor")
    c.get(f"/command/{cid}/logs", query={"cursor": "0"}, label="logs cursor 0")
    c.get(f"/command/{cid}/logs", query={"cursor": "4"}, label="logs cursor 4")
    c.get(f"/command/{cid}/logs", query={"cursor": "1000"}, label="logs cursor past end")
    c.get(f"/command/{cid}/logs", query={"cursor": "-1"}, label="logs cursor negative")
    c.get(f"/command/{cid}/logs", query={"cursor": "abc"}, label="logs cursor junk")
    c.get(f"/command/{cid}/logs", query={"cursor": "2.5"}, label="logs cursor float")
    r2 = run(c, {"command": "exit 7", "background": True}, "start failing")
    cid2 = _init_id(r2)
    _wait_done(c, cid2)
    c.get(f"/command/status/{cid2}", label="status failed")
    c.get(f"/command/{cid2}/logs", label="logs failed")
    r3 = run(c, {"command": "kill -9 $$", "background": True}, "start killed")
    cid3 = _init_id(r3)
    _wait_done(c, cid3)
    c.get(f"/command/status/{cid3}", label="status killed")
    c.get("/command/status/nosuch", label="status unknown")
    c.get("/command/nosuch/logs", label="logs unknown")


@case("command.foreground_status", "POST /command", "GET /command/status/:id", "GET /command/:id/logs")
def _fg_status(c: Ctx) -> None:
    r = run(c, {"command": "echo fg"}, "fg run")
    cid = _init_id(r)
    c.get(f"/command/status/{cid}", label="status of foreground")
    c.get(f"/command/{cid}/logs", label="logs of foreground")


def _wait_done(c: Ctx, cid: str | None, running: bool = False, limit: float = 10.0) -> None:
    if not cid:
        return
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        r = c.get(f"/command/status/{cid}", record=False)
        try:
            if json.loads(r.body).get("running") is running:
                return
        except (ValueError, AttributeError):
            return
        time.sleep(0.05)


@case(
    "command.background_running", "POST /command", "GET /command/status/:id", "GET /command/:id/logs", "DELETE /command"
)
def _bg_running(c: Ctx) -> None:
    r = run(c, {"command": "echo started; exec sleep 30", "background": True}, "start")
    cid = _init_id(r)
    _wait_logs(c, cid, b"started")
    c.get(f"/command/status/{cid}", label="status running")
    c.get(f"/command/{cid}/logs", label="logs running")
    c.delete("/command", query={"id": cid}, label="interrupt")
    _wait_done(c, cid)
    c.get(f"/command/status/{cid}", label="status interrupted")
    c.delete("/command", query={"id": cid}, label="interrupt again")
    c.delete("/command", label="interrupt no id")
    c.delete("/command", query={"id": ""}, label="interrupt empty id")
    c.delete("/command", query={"id": "nosuch"}, label="interrupt unknown")


def _wait_logs(c: Ctx, cid: str | None, want: bytes, limit: float = 10.0) -> None:
    deadline = time.monotonic() + limit
    while cid and time.monotonic() < deadline:
        r = c.get(f"/command/{cid}/logs", record=False)
        if want in r.body or r.status != 200:
            return
        time.sleep(0.05)


@case("command.disconnect", "POST /command", "GET /command/status/:id")
def _disconnect(c: Ctx) -> None:
    marker = c.p("alive")
    r = c.post(
        "/command",
        {"command": f"echo go; sleep 1; touch {marker}; echo late"},
        label="stream closed early",
        stop=lambda chunks: any(b'"stdout"' in ch for ch in chunks),
    )
    cid = _init_id(r)
    _wait_done(c, cid, limit=5)
    c.get(f"/command/status/{cid}", label="status after disconnect")
    time.sleep(1.2)
    c.snapshot(label="fs after disconnect")


@case("command.long_lines", "POST /command")
def _long(c: Ctx) -> None:
    run(c, {"command": "head -c 70000 /dev/zero | tr '\\0' a; echo"}, "70k line")
    run(c, {"command": "seq 1 300"}, "300 lines")
    # more than one read of the pipe (83 KB), line ends of every kind across them (the mock cuts a read at CR/LF
    # once and writes its lines together: execd/commands.py LineSplitter, wire/sse.py output_frames); 800 events
    # only: the tests' spec guard checks each event of a stream before its end goes out (~0.3 ms each)
    command = "for i in $(seq 1 200); do printf '%0400d\\r\\n\\r\\rx <&>\\n' $i; done; printf tail"
    run(c, {"command": command}, "200 mixed")


# ---------------------------------------------------------------------------------------------
# /session (bash sessions)


def _sid(resp) -> str | None:
    try:
        return json.loads(resp.body).get("session_id")
    except (ValueError, AttributeError):
        return None


@case("session.lifecycle", "POST /session", "POST /session/:sessionId/run", "DELETE /session/:sessionId")
def _session(c: Ctx) -> None:
    sid = _sid(c.post("/session", {}, label="create"))
    c.post(f"/session/{sid}/run", {"command": "export FOO=bar; cd /tmp; echo hi"}, label="run 1")
    c.post(f"/session/{sid}/run", {"command": "echo $FOO; pwd"}, label="run 2 keeps env+cwd")
    c.post(f"/session/{sid}/run", {"command": "echo err >&2; exit 4"}, label="run exit 4")
    # more than one read of the pipe, CRLF and CR inside lines (the mock splits a read at once: sessions.py)
    many = "for i in $(seq 1 200); do printf '%0400d\\r\\n\\rx <&>\\n\\n' $i; done; printf tail"
    c.post(f"/session/{sid}/run", {"command": many}, label="run 200 long lines")
    c.post(f"/session/{sid}/run", {"command": "printf 'a\\rb\\n\\nc'"}, label="run line endings")
    c.post(f"/session/{sid}/run", {"command": "pwd", "cwd": c.dir}, label="run cwd")
    c.post(f"/session/{sid}/run", {"command": "pwd"}, label="run after cwd")
    c.post(f"/session/{sid}/run", {"command": "sleep 5", "timeout": 300}, label="run timeout")
    c.post(f"/session/{sid}/run", {"command": "echo after timeout"}, label="run after timeout")
    c.delete(f"/session/{sid}", label="delete")
    c.delete(f"/session/{sid}", label="delete again")
    c.post(f"/session/{sid}/run", {"command": "echo gone"}, label="run deleted")


@case("session.create_variants", "POST /session", "DELETE /session/:sessionId")
def _session_create(c: Ctx) -> None:
    for label, body in [
        ("empty body", b""),
        ("null", b"null"),
        ("not json", b"x"),
        ("array", b"[]"),
        ("cwd number", b'{"cwd": 1}'),
        ("unknown field", b'{"zzz": 1}'),
        ("truncated", b'{"cwd": "/t'),
    ]:
        r = c.req("POST", "/session", body=body, headers=[("Content-Type", "application/json")], label=label)
        sid = _sid(r)
        if sid:
            c.delete(f"/session/{sid}", record=False)
    r = c.post("/session", {"cwd": c.p("new/dir")}, label="cwd created")
    c.snapshot(label="fs after cwd create")
    sid = _sid(r)
    c.post(f"/session/{sid}/run", {"command": "pwd"}, label="run in created cwd")
    c.delete(f"/session/{sid}", record=False)
    c.write("afile", "x")
    c.post("/session", {"cwd": c.p("afile")}, label="cwd is a file")
    c.post("/session", {"cwd": c.p("afile/sub")}, label="cwd under a file")


@case("session.run_validation", "POST /session/:sessionId/run")
def _session_validation(c: Ctx) -> None:
    sid = _sid(c.post("/session", {}, record=False))
    for label, body in [
        ("empty body", b""),
        ("not json", b"x"),
        ("empty object", b"{}"),
        ("empty command", b'{"command": ""}'),
        ("timeout negative", b'{"command": "true", "timeout": -5}'),
        ("timeout string", b'{"command": "true", "timeout": "1"}'),
        ("cwd missing", json.dumps({"command": "pwd", "cwd": c.p("missing")}).encode()),
        ("array", b"[]"),
        ("null", b"null"),
    ]:
        c.req("POST", f"/session/{sid}/run", body=body, headers=[("Content-Type", "application/json")], label=label)
    c.post("/session/nosuch/run", {"command": "echo"}, label="unknown session")
    c.post("/session/nosuch/run", {}, label="unknown session invalid body")
    c.delete("/session/nosuch", label="delete unknown")
    c.delete(f"/session/{sid}", record=False)


# ---------------------------------------------------------------------------------------------
# /code on a plain image (no Jupyter)


@case(
    "code.plain_image",
    "POST /code",
    "DELETE /code",
    "GET /code/contexts",
    "DELETE /code/contexts",
    "DELETE /code/contexts/:contextId",
    "GET /code/contexts/:contextId",
)
def _code(c: Ctx) -> None:
    c.get("/code/contexts", label="list")
    c.get("/code/contexts", query={"language": "python"}, label="list python")
    c.get("/code/contexts", query={"language": "command"}, label="list command")
    c.get("/code/contexts", query={"language": "background-command"}, label="list background-command")
    c.get("/code/contexts", query={"language": "sql"}, label="list sql")
    c.delete("/code/contexts", label="delete by language missing")
    c.delete("/code/contexts", query={"language": "python"}, label="delete by language python")
    c.delete("/code/contexts", query={"language": "command"}, label="delete by language command")
    c.get("/code/contexts/nosuch", label="get unknown")
    c.delete("/code/contexts/nosuch", label="delete unknown")
    c.delete("/code", label="interrupt no id")
    c.delete("/code", query={"id": "nosuch"}, label="interrupt unknown")
    c.post("/code", {"code": "echo from code"}, label="run no context")
    c.post("/code", {"code": "echo x", "context": {"language": "command"}}, label="run language command")
    c.post("/code", {"code": "echo bg", "context": {"language": "background-command"}}, label="run background-command")
    c.post("/code", {"code": "exit 3", "context": {"language": "command", "id": "x"}}, label="run command exit 3")
    c.post("/code", {"code": "x", "context": {"language": 1}}, label="run language number")
    c.post("/code", {"code": "print(1)", "context": {"language": "python"}}, label="run python")
    c.post("/code", {"code": "print(1)", "context": {"language": "nosuchlang"}}, label="run unknown language")
    c.post("/code", {"code": "select 1", "context": {"language": "sql"}}, label="run sql")
    c.post("/code", {"code": ""}, label="run empty code")
    c.post("/code", {}, label="run no code")
    c.req("POST", "/code", body=b"x", headers=[("Content-Type", "application/json")], label="run not json")
    c.post("/code", {"code": "x", "context": "python"}, label="run context string")


@case("code.context_create", "POST /code/context")
def _code_ctx(c: Ctx) -> None:
    c.req("POST", "/code/context", body=b"x", headers=[("Content-Type", "application/json")], label="not json")
    c.req(
        "POST",
        "/code/context",
        body=b'{"language": 1}',
        headers=[("Content-Type", "application/json")],
        label="language number",
    )
    c.post("/code/context", {"language": "python"}, label="create python (no jupyter)", timeout=1.5)


# ---------------------------------------------------------------------------------------------
# /metrics


@case("metrics", "GET /metrics", "GET /metrics/watch")
def _metrics(c: Ctx) -> None:
    c.get("/metrics")
    c.get(
        "/metrics/watch", label="watch two samples", stop=lambda chunks: b"".join(chunks).count(b"\n") >= 2, timeout=10
    )


# ---------------------------------------------------------------------------------------------
# /pty


@case("pty.lifecycle", "POST /pty", "GET /pty/:sessionId", "DELETE /pty/:sessionId", "GET /pty/:sessionId/ws")
def _pty(c: Ctx) -> None:
    r = c.post("/pty", {}, label="create")
    sid = _sid(r)
    c.get(f"/pty/{sid}", label="status")
    c.get(f"/pty/{sid}/ws", label="ws without upgrade")
    c.delete(f"/pty/{sid}", label="delete")
    c.get(f"/pty/{sid}", label="status deleted")
    c.delete(f"/pty/{sid}", label="delete again")
    c.get("/pty/nosuch", label="status unknown")
    c.get("/pty/nosuch/ws", label="ws unknown")
    c.req("POST", "/pty", body=b"x", headers=[("Content-Type", "application/json")], label="create not json")
    r = c.req("POST", "/pty", body=b"", label="create empty body")
    if _sid(r):
        c.delete(f"/pty/{_sid(r)}", record=False)
    r = c.post("/pty", {"cwd": c.dir, "command": "bash"}, label="create cwd+command")
    if _sid(r):
        c.delete(f"/pty/{_sid(r)}", record=False)
    c.post("/pty", {"cwd": c.p("missing")}, label="create cwd missing")
    c.write("afile", "x")
    c.post("/pty", {"cwd": c.p("afile")}, label="create cwd is a file")
    c.post("/pty", {"cwd": c.p("afile/sub")}, label="create cwd under a file")


# ---------------------------------------------------------------------------------------------
# /proxy


@case("proxy", "* /proxy/:port")
def _proxy(c: Ctx) -> None:
    c.get("/proxy/", label="no port")
    c.get("/proxy/1/x", label="closed port")
    c.get("/proxy/notaport/x", label="junk port")


# ---------------------------------------------------------------------------------------------
# /files and /directories: corpus_files.py (here, so that the cases keep their order)

CASES.extend(corpus_files.CASES)


@case("pty.websocket", "GET /pty/:sessionId/ws", "POST /pty", "GET /pty/:sessionId", "DELETE /pty/:sessionId")
def _pty_ws(c: Ctx) -> None:
    sid = _sid(c.post("/pty", {"cwd": c.dir}, label="create"))
    ws = f"/pty/{sid}/ws"
    # bad handshakes first (no client holds the session: the answers do not depend on how fast a
    # closed connection releases it)
    c.ws(ws, label="no key", key="")
    c.ws(ws, label="bad version", headers=[("Sec-WebSocket-Version", "12")])
    c.ws(ws, label="no upgrade token", headers=[("Upgrade", "h2c")])
    c.ws(ws, label="no connection token", headers=[("Connection", "keep-alive")])
    c.ws(ws, label="upgrade, ping, bogus frame", send=[{"type": "ping"}, {"type": "bogus"}, {"type": "resize"}])
    c.get(f"/pty/{sid}", label="status after first client")
    c.ws(ws + "?pty=0&takeover=1", label="pipe mode (shell already started)")
    c.ws(ws + "?since=0&takeover=1", label="since=0", send=[{"type": "resize", "cols": 90, "rows": 20}])
    c.ws("/pty/nosuch/ws", label="unknown session")
    c.delete(f"/pty/{sid}", label="delete")
    c.ws(ws, label="after delete")


@case("token.routes", "* accessToken", token=True)
def _token_routes(c: Ctx) -> None:
    """Token mode on the other families: sessions, files, the PTY WebSocket, the /proxy prefix."""
    sid = _sid(c.post("/session", {}, label="session create"))
    c.post(f"/session/{sid}/run", {"command": "echo tok"}, label="session run")
    c.post(f"/session/{sid}/run", {"command": "echo tok"}, token=False, label="session run no token")
    c.delete(f"/session/{sid}", label="session delete")
    c.write("t.txt", "x")
    c.get("/files/download", query={"path": c.p("t.txt")}, label="download")
    c.get("/files/download", query={"path": c.p("t.txt")}, token=False, label="download no token")
    c.get("/proxy/44772/ping", token=False, label="proxy own port no token")
    c.get("/proxy/1/x", token=False, label="proxy other port no token")
    pid = _sid(c.post("/pty", {}, label="pty create"))
    c.ws(f"/pty/{pid}/ws", label="pty ws with token")
    c.delete(f"/pty/{pid}", label="pty delete")
