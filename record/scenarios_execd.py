"""Recording scenarios of execd on the setup's sandbox (06-13): ping with and without the proxy prefix, SSE commands
and their exit codes, timeouts, background commands and their logs, bad requests, output framing, files and
directories."""

from __future__ import annotations

from record.client import Session
from record.scenarios_common import BOUNDARY, EXIT3, Ctx, _part


def s06(s: Session, ctx: Ctx) -> None:
    ex = ctx.execd
    assert ex is not None
    ex.get("/ping")
    ex.get("/ping", prefix=False)
    s.lc("GET", f"/v1/sandboxes/{ctx.sandbox_id}/proxy/44772/ping")
    ex.get("/no-such-route")


def s07(s: Session, ctx: Ctx) -> None:
    ex = ctx.execd
    assert ex is not None
    r = ex.command({"command": EXIT3})
    cid = r.sse_events()[0]["text"]
    ex.get(f"/command/status/{cid}")
    ex.get(f"/command/{cid}/logs")


def s08(s: Session, ctx: Ctx) -> None:
    ex = ctx.execd
    assert ex is not None
    ex.command({"command": EXIT3}, prefix=False)
    s.lc(
        "POST",
        f"/v1/sandboxes/{ctx.sandbox_id}/proxy/44772/command",
        json={"command": EXIT3},
        headers={"Accept": "text/event-stream", "Cache-Control": "no-cache"},
    )
    ex.command({"command": "true"})
    ex.command({"command": "exit 0"})


def s09(s: Session, ctx: Ctx) -> None:
    assert ctx.execd is not None
    ctx.execd.command({"command": "echo start; sleep 10; echo never", "timeout": 1000})


def s10(s: Session, ctx: Ctx) -> None:
    ex = ctx.execd
    assert ex is not None
    r = ex.command(
        {"command": "for i in 1 2 3; do echo line$i; sleep 0.3; done; echo bg-err >&2; exit 5", "background": True}
    )
    cid = r.sse_events()[0]["text"]
    s.sleep(1.5)
    ex.get(f"/command/status/{cid}")
    r = ex.get(f"/command/{cid}/logs")
    ex.get(f"/command/{cid}/logs")
    ex.get(f"/command/{cid}/logs?cursor=2")
    tail = r.headers.get("Execd-Commands-Tail-Cursor") or "0"
    ex.get(f"/command/{cid}/logs?cursor={tail}")
    ex.get(f"/command/status/{cid}")
    ex.get("/command/status/no-such-command")
    ex.get("/command/no-such-command/logs")
    r = ex.command({"command": "echo started; sleep 30; echo never", "background": True})
    cid2 = r.sse_events()[0]["text"]
    ex.get(f"/command/status/{cid2}")
    s.sleep(0.5)  # let "echo started" run before the interrupt (the live run took ~1.5 s here)
    ex.request("DELETE", f"/command?id={cid2}")
    s.sleep(0.5)
    ex.get(f"/command/status/{cid2}")
    ex.get(f"/command/{cid2}/logs")
    ex.request("DELETE", "/command?id=no-such-command")
    ex.request("DELETE", "/command")


def s11(s: Session, ctx: Ctx) -> None:
    ex = ctx.execd
    assert ex is not None
    ex.command({"argv": ["echo", "hi"]})
    ex.command({"command": ["echo", "hi"]})
    ex.command({"command": "echo argv-field-ignored?", "argv": ["echo", "hi"]})
    ex.command({})
    ex.request(
        "POST",
        "/command",
        content=b"{not json",
        headers={"Accept": "text/event-stream", "Cache-Control": "no-cache", "Content-Type": "application/json"},
    )
    ex.command({"command": "echo x", "timeout": -5})
    ex.command({"command": "echo x", "cwd": "/no/such/dir"})
    ex.command({"command": "/no/such/binary"})


def s12(s: Session, ctx: Ctx) -> None:
    ex = ctx.execd
    assert ex is not None
    ex.command({"command": "printf 'a\\r\\nb\\n\\nc'"})
    ex.command({"command": "printf 'no-newline'; printf 'err-no-newline' >&2"})
    ex.command({"command": "seq 1 50"})
    ex.command({"command": 'pwd; echo "FOO=$FOO"; id -u', "cwd": "/tmp", "envs": {"FOO": "bar baz"}})
    ex.command({"command": "echo 'h\u00e9llo \u2603'; echo '{\"json\": true}'; echo 'data: fake'"})
    ex.command({"command": "echo one; sleep 1.2; echo two"})
    ex.command({"command": "kill -9 $$"})
    ex.command({"command": "exit 255"})


def s13(s: Session, ctx: Ctx) -> None:
    ex = ctx.execd
    assert ex is not None
    d = "/tmp/livework"
    ex.request("POST", "/directories", json={d: {"mode": 755}, f"{d}/sub/deeper": {"mode": 700}})
    body = (
        _part("metadata", "metadata", "application/json", b'{"path": "/tmp/livework/hello.txt", "mode": 644}')
        + _part("file", "hello.txt", "application/octet-stream", b"hello world\nline2\r\nline3")
        + _part("metadata", "metadata", "application/json", b'{"path": "/tmp/livework/sub/data.csv"}')
        + _part("file", "data.csv", "application/octet-stream", b"a,b\n1,2\n")
        + f"--{BOUNDARY}--\r\n".encode()
    )
    ex.request(
        "POST", "/files/upload", content=body, headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    )
    ex.get(f"/files/info?path={d}/hello.txt&path={d}/sub")
    ex.get(f"/files/download?path={d}/hello.txt")
    ex.get(f"/files/download?path={d}/hello.txt", headers={"Range": "bytes=0-4"})
    ex.get(f"/directories/list?path={d}")
    ex.get(f"/directories/list?path={d}&depth=3")
    ex.get(f"/files/search?path={d}&pattern=%2A.txt")
    ex.get(f"/files/search?path={d}&pattern=%2A%2A/%2A.csv")
    ex.request("POST", "/files/mv", json=[{"src": f"{d}/hello.txt", "dest": f"{d}/renamed.txt"}])
    ex.get(f"/files/info?path={d}/renamed.txt")
    ex.get(f"/files/info?path={d}/hello.txt")
    ex.get(f"/files/download?path={d}/hello.txt")
    ex.request("DELETE", f"/files?path={d}/renamed.txt")
    ex.request("DELETE", f"/files?path={d}/renamed.txt")
    ex.request("DELETE", f"/directories?path={d}")
    ex.get(f"/directories/list?path={d}")
    ex.get("/files/download")
    ex.request("POST", "/files/upload", json={})
    ex.request("POST", "/files/mv", json={"src": "/a", "dest": "/b"})
