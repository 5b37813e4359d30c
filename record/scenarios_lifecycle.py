"""Recording scenarios of the lifecycle API: 01-05 (health and version, auth failures, 422 bodies, unknown ids,
create/get/list/endpoints) and 14-17 (renew, pause/resume, delete on the setup's sandbox; create variants; an image
that cannot be pulled; a long command and execd's heartbeat)."""

from __future__ import annotations

from record.client import Session, created_id, execd_from
from record.scenarios_common import NIL, RESOURCES, SMALL, Ctx, _create, _iso


def s01(s: Session, ctx: Ctx) -> None:
    s.lc("GET", "/health", auth=False)
    s.lc("GET", "/version", auth=False)
    s.lc("GET", "/health")
    s.lc("GET", "/version")


def s02(s: Session, ctx: Ctx) -> None:
    s.lc("GET", "/v1/sandboxes", auth=False)
    s.lc("GET", "/v1/sandboxes", auth="wrong-key")
    _create(s, ctx, ctx.default_create(), auth=False)
    s.lc("GET", f"/v1/sandboxes/{NIL}", auth=False)


def s03(s: Session, ctx: Ctx) -> None:
    base = {"image": {"uri": ctx.image}, "entrypoint": ["tail", "-f", "/dev/null"]}
    _create(s, ctx, {})
    _create(s, ctx, {**base, "timeout": 10, "resourceLimits": dict(RESOURCES)})
    _create(s, ctx, {"image": {"uri": ctx.image}, "entrypoint": [], "resourceLimits": dict(RESOURCES)})
    s.lc("POST", "/v1/sandboxes", content=b"{not json", headers={"Content-Type": "application/json"})
    s.lc("POST", f"/v1/sandboxes/{NIL}/renew-expiration", json={"expiresAt": "not-a-date"})


def s04(s: Session, ctx: Ctx) -> None:
    s.lc("GET", f"/v1/sandboxes/{NIL}")
    s.lc("DELETE", f"/v1/sandboxes/{NIL}")
    s.lc("GET", f"/v1/sandboxes/{NIL}/endpoints/44772")
    s.lc("POST", f"/v1/sandboxes/{NIL}/pause")
    s.lc("POST", f"/v1/sandboxes/{NIL}/resume")
    s.lc("POST", f"/v1/sandboxes/{NIL}/renew-expiration", json={"expiresAt": _iso(3600)})
    s.lc("GET", "/v1/sandboxes/not-a-uuid")


def s05(s: Session, ctx: Ctx) -> None:
    r = _create(s, ctx, ctx.default_create())
    sid = created_id(r)
    s.lc("GET", f"/v1/sandboxes/{sid}")
    s.lc("GET", "/v1/sandboxes")
    s.lc("GET", "/v1/sandboxes?state=Running&metadata=purpose%3Dlive-recording&page=1&pageSize=10")
    s.lc("GET", "/v1/sandboxes?state=Paused")
    s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772")
    s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/8080")
    s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772?use_server_proxy=true")
    s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/0")
    s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/70000")


def s14(s: Session, ctx: Ctx) -> None:
    ex, sid = ctx.execd, ctx.sandbox_id
    assert ex is not None
    s.lc("POST", f"/v1/sandboxes/{sid}/renew-expiration", json={"expiresAt": _iso(7200)})
    s.lc("POST", f"/v1/sandboxes/{sid}/renew-expiration", json={"expiresAt": _iso(-3600)})
    s.lc("GET", f"/v1/sandboxes/{sid}")
    s.lc("POST", f"/v1/sandboxes/{sid}/pause")
    s.lc("GET", f"/v1/sandboxes/{sid}")
    s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772")
    s.lc("POST", f"/v1/sandboxes/{sid}/pause")
    s.lc("POST", f"/v1/sandboxes/{sid}/resume")
    s.lc("GET", f"/v1/sandboxes/{sid}")
    s.lc("POST", f"/v1/sandboxes/{sid}/resume")
    s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772")
    ex.get("/ping")
    ex.command({"command": "echo after-resume"})
    s.lc("DELETE", f"/v1/sandboxes/{sid}")
    s.lc("DELETE", f"/v1/sandboxes/{sid}")
    s.lc("GET", f"/v1/sandboxes/{sid}")
    s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772")


def s15(s: Session, ctx: Ctx) -> None:
    r = _create(
        s,
        ctx,
        {
            "image": {"uri": ctx.busybox_image},
            "entrypoint": ["tail", "-f", "/dev/null"],
            "resourceLimits": dict(SMALL),
            "env": {"HELLO": "world"},
        },
    )
    sid = created_id(r)
    r = s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772")
    ex = execd_from(s, r)
    s.wait_ready(ex)  # unrecorded: Docker's readiness window (accepted, then dropped) before execd listens
    ex.get("/ping")
    ex.command({"command": "echo $HELLO; echo $0; ls /bin/bash 2>&1; exit 7"})
    s.lc("GET", f"/v1/sandboxes/{sid}")
    s.lc("DELETE", f"/v1/sandboxes/{sid}")
    r = _create(
        s,
        ctx,
        {
            "image": {"uri": ctx.image},
            "entrypoint": ["sh", "-c", "exit 1"],
            "timeout": 600,
            "resourceLimits": dict(SMALL),
        },
    )
    sid = created_id(r)
    s.sleep(1.0)
    s.lc("GET", f"/v1/sandboxes/{sid}")
    s.lc("GET", f"/v1/sandboxes/{sid}")
    s.lc("GET", f"/v1/sandboxes/{sid}")
    s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772")
    s.lc("DELETE", f"/v1/sandboxes/{sid}")


def s16(s: Session, ctx: Ctx) -> None:
    _create(
        s,
        ctx,
        {
            "image": {"uri": ctx.missing_image},
            "entrypoint": ["tail", "-f", "/dev/null"],
            "timeout": 600,
            "resourceLimits": dict(SMALL),
        },
    )


def s17(s: Session, ctx: Ctx) -> None:
    r = _create(s, ctx, ctx.default_create())
    sid = created_id(r)
    r = s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772")
    ex = execd_from(s, r)
    s.wait_ready(ex)  # unrecorded: Docker's readiness window (accepted, then dropped) before execd listens
    ex.get("/ping")
    ex.command({"command": "echo a; sleep 7; echo b"})
    s.lc("DELETE", f"/v1/sandboxes/{sid}")
