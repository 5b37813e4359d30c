"""Recording scenarios that replay a whole client flow: 18, the official Python SDK 1.1.1's request sequence with
its headers and bodies; 20, the smoke flow of tiers/flows/server/smoke_flow.py in one self-contained scenario."""

from __future__ import annotations

from record.client import Session, created_id, execd_from
from record.scenarios_common import BOUNDARY, EXIT3, RESOURCES, Ctx, _create, _iso, _part

SDK_HEADERS = {
    "User-Agent": "OpenSandbox-Python-SDK/1.1.1",
    "OPEN-SANDBOX-CLIENT-IP": "192.0.2.2",
    "Accept-Encoding": "gzip, deflate",
}
SDK_BOUNDARY = "opensandbox_2c3ec9d588d4bb2f_1795938459"


def s18(s: Session, ctx: Ctx) -> None:
    """The official SDK's request sequence (recording 18), replayed with the same headers and bodies."""
    h = dict(SDK_HEADERS)
    body = {
        "image": {"uri": ctx.image},
        "timeout": 600,
        "resourceLimits": dict(RESOURCES),
        "metadata": {"via": "sdk"},
        "entrypoint": ["tail", "-f", "/dev/null"],
        "secureAccess": False,
    }
    r = _create(s, ctx, body, headers=h, json_compact=True)
    sid = created_id(r)
    r = s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772?use_server_proxy=false", headers=h)
    ex = execd_from(s, r)
    s.wait_ready(ex)  # unrecorded: Docker's readiness window (accepted, then dropped) before execd listens
    s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/18080?use_server_proxy=false", headers=h)
    ex.get("/ping", headers=h)
    ex.request(
        "POST",
        "/command",
        json={"command": EXIT3},
        json_compact=True,
        headers={**h, "Accept": "text/event-stream", "Cache-Control": "no-cache"},
    )
    up = (
        _part(
            "metadata",
            "metadata",
            "application/json",
            b'{"path": "/tmp/sdk.txt", "owner": null, "group": null, "mode": 755}',
            SDK_BOUNDARY,
        )
        + _part("file", "sdk.txt", "text/plain; charset=utf-8", b"hello from sdk\n", SDK_BOUNDARY)
        + f"--{SDK_BOUNDARY}--\r\n".encode()
    )
    ex.request(
        "POST",
        "/files/upload",
        content=[up],  # an iterable: sent chunked, like the SDK
        headers={**h, "content-type": f"multipart/form-data; boundary={SDK_BOUNDARY}"},
    )
    ex.get("/files/download?path=%2Ftmp%2Fsdk.txt", headers=h)
    s.lc("GET", f"/v1/sandboxes/{sid}", headers=h)
    s.lc("DELETE", f"/v1/sandboxes/{sid}", headers=h)


def s20(s: Session, ctx: Ctx) -> None:
    """The smoke flow (tiers/flows/server/smoke_flow.py): auth, create/get/list/endpoint, SSE exec with exit codes and timeout,
    background command with log cursor and interrupt, files, renew, pause/resume, kill, second kill."""
    s.lc("GET", "/v1/sandboxes", auth=False)
    r = _create(s, ctx, ctx.default_create(timeout=600))
    sid = created_id(r)
    s.lc("GET", f"/v1/sandboxes/{sid}")
    s.lc("GET", "/v1/sandboxes?metadata=purpose%3Dlive-recording")
    r = s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772")
    ex = execd_from(s, r)
    s.wait_ready(ex)  # unrecorded: Docker's readiness window (accepted, then dropped) before execd listens
    ex.get("/ping")
    ex.command({"command": "echo hi"})
    ex.command({"command": EXIT3})
    ex.command({"command": "echo start; sleep 10", "timeout": 500})
    r = ex.command({"command": "echo l1; echo l2; sleep 30", "background": True})
    cid = r.sse_events()[0]["text"]
    s.sleep(0.5)
    ex.get(f"/command/{cid}/logs")
    ex.get(f"/command/{cid}/logs?cursor=1")
    ex.request("DELETE", f"/command?id={cid}")
    s.sleep(0.3)
    ex.get(f"/command/status/{cid}")
    d = "/tmp/smoke"
    ex.request("POST", "/directories", json={d: {"mode": 755}})
    body = (
        _part("metadata", "metadata", "application/json", b'{"path": "/tmp/smoke/a.txt"}')
        + _part("file", "a.txt", "application/octet-stream", b"abc\n")
        + f"--{BOUNDARY}--\r\n".encode()
    )
    ex.request(
        "POST", "/files/upload", content=body, headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    )
    ex.get(f"/files/info?path={d}/a.txt")
    ex.get(f"/directories/list?path={d}")
    ex.get(f"/files/search?path={d}&pattern=%2A.txt")
    ex.request("POST", "/files/mv", json=[{"src": f"{d}/a.txt", "dest": f"{d}/b.txt"}])
    ex.get(f"/files/download?path={d}/b.txt")
    ex.request("DELETE", f"/files?path={d}/b.txt")
    ex.request("DELETE", f"/directories?path={d}")
    s.lc("POST", f"/v1/sandboxes/{sid}/renew-expiration", json={"expiresAt": _iso(3600)})
    s.lc("POST", f"/v1/sandboxes/{sid}/pause")
    s.lc("GET", f"/v1/sandboxes/{sid}")
    s.lc("POST", f"/v1/sandboxes/{sid}/resume")
    ex.command({"command": "echo back"})
    s.lc("DELETE", f"/v1/sandboxes/{sid}")
    s.lc("DELETE", f"/v1/sandboxes/{sid}")
