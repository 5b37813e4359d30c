"""Recording scenarios of what the Docker runtime adds: 24, a named volume (pvc) shared by two sandboxes; 25,
snapshots taken, listed, restored and deleted; 26, networkPolicy with the egress image and its sidecar's /policy
API."""

from __future__ import annotations

import time
from typing import Any

from record.client import RecorderError, Session, created_id, execd_from
from record.scenarios_common import NIL, SMALL, Ctx, _create

# A Docker named volume (``pvc``; QUIRKS.md, Volumes): created by the first sandbox, which writes it, and mounted read-only
# by a second sandbox while the first one runs. The first create asks for deleteOnSandboxTermination: server 1.1.1
# removes a volume only when the sandbox whose create made it is deleted (services/docker/volumes.py
# ``was_created``), so deleting the reader first and the writer last leaves no volume behind.
VOLUME_CLAIM = "osb-record-vol"


def s24(s: Session, ctx: Ctx) -> None:
    rw = {"name": "data", "pvc": {"claimName": VOLUME_CLAIM, "deleteOnSandboxTermination": True}, "mountPath": "/data"}
    writer = created_id(_create(s, ctx, ctx.default_create(volumes=[rw])))
    ex = execd_from(s, s.lc("GET", f"/v1/sandboxes/{writer}/endpoints/44772"))
    s.wait_ready(ex)
    ex.command({"command": "mount | grep -E ' /data '; echo hello > /data/f.txt; ls -la /data"})
    ro = {"name": "data", "pvc": {"claimName": VOLUME_CLAIM}, "mountPath": "/mnt/ro", "readOnly": True}
    reader = created_id(_create(s, ctx, ctx.default_create(volumes=[ro])))
    s.lc("GET", f"/v1/sandboxes/{reader}")
    ex = execd_from(s, s.lc("GET", f"/v1/sandboxes/{reader}/endpoints/44772"))
    s.wait_ready(ex)
    ex.command({"command": "mount | grep -E ' /mnt/ro '; cat /mnt/ro/f.txt; touch /mnt/ro/x"})
    s.lc("DELETE", f"/v1/sandboxes/{reader}")
    s.lc("DELETE", f"/v1/sandboxes/{writer}")


# Snapshots (QUIRKS.md, Snapshots; server services/snapshot_service.py, services/docker/snapshot_runtime.py: docker
# commit). The source writes /tmp, /root and /workspace, removes an image file, starts a background process and
# exports a variable in its shell; the restored sandbox shows which of these the commit kept. The snapshot is
# polled (unrecorded) until it leaves Creating: Docker's commit takes 0.4-0.8 s here, during which the source
# sandbox reads Paused (commit pauses the container), so a recorded poll would be timing.
SNAP_NAME = "osb-record-snap"
SNAP_WRITE = (
    "echo a > /tmp/a.txt; echo r > /root/r.txt; mkdir -p /workspace; echo w > /workspace/w.txt; "
    "rm /etc/issue.net; (sleep 600 &); export FOO=bar; echo written"
)
SNAP_READ = (
    "cat /tmp/a.txt /root/r.txt /workspace/w.txt; ls /etc/issue.net; "
    "echo sleepers=$(ps -eo args | grep -c '^sleep 600'); echo FOO=$FOO SRC_VAR=$SRC_VAR REQ_VAR=$REQ_VAR"
)


def _snapshot_settled(s: Session, snap: str, timeout: float = 60.0) -> None:
    """Unrecorded GETs until the snapshot leaves Creating."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = s.lc("GET", f"/v1/snapshots/{snap}", record=False)
        if r.status != 200 or r.json()["status"]["state"] != "Creating":
            return
        time.sleep(0.2)
    raise RecorderError(f"GET /v1/snapshots/{snap}: still Creating after {timeout:g} s")


def _snapshot_and_settle(s: Session, src: str, snaps: list[str], **body: Any) -> str:
    """POST a snapshot of ``src`` (``body``: the request's ``json=``, or none), wait (unrecorded) until it leaves
    Creating, then the recorded GET of it. Its id, also appended to ``snaps`` for the scenario's cleanup."""
    r = s.lc("POST", f"/v1/sandboxes/{src}/snapshots", **body)
    snap = created_id(r, "POST /v1/sandboxes/{id}/snapshots")
    snaps.append(snap)
    _snapshot_settled(s, snap)
    s.lc("GET", f"/v1/snapshots/{snap}")
    return snap


def s25(s: Session, ctx: Ctx) -> None:
    snaps: list[str] = []
    try:
        _s25(s, ctx, snaps)
    finally:  # sandboxes first (a snapshot in use cannot be deleted), then the snapshots, unrecorded
        for sid in ctx.created:
            s.delete_sandbox(sid)
        for snap in snaps:
            try:
                s.lc("DELETE", f"/v1/snapshots/{snap}", record=False)
            except RecorderError:
                pass


def _s25(s: Session, ctx: Ctx, snaps: list[str]) -> None:
    src = created_id(_create(s, ctx, ctx.default_create(env={"SRC_VAR": "s"})))
    ex = execd_from(s, s.lc("GET", f"/v1/sandboxes/{src}/endpoints/44772"))
    s.wait_ready(ex)
    ex.command({"command": SNAP_WRITE})
    snap = _snapshot_and_settle(s, src, snaps, json={"name": SNAP_NAME})
    s.lc("GET", f"/v1/snapshots?sandboxId={src}")
    s.lc("GET", f"/v1/snapshots?sandboxId={src}&name={SNAP_NAME}")
    s.lc("GET", f"/v1/snapshots?sandboxId={src}&name=other")
    s.lc("GET", f"/v1/snapshots?sandboxId={src}&state=Creating")
    s.lc("GET", f"/v1/snapshots?sandboxId={src}&state=Failed&state=Ready&page=1&pageSize=1")
    s.lc("GET", f"/v1/snapshots?sandboxId={src}&page=2&pageSize=1")
    s.lc("GET", "/v1/snapshots?page=0&pageSize=201")
    s.lc("POST", f"/v1/sandboxes/{src}/snapshots", json={"name": ""})
    s.lc("POST", f"/v1/sandboxes/{NIL}/snapshots", json={})
    s.lc("GET", f"/v1/snapshots/{NIL}")
    s.lc("DELETE", f"/v1/snapshots/{NIL}")
    _create(s, ctx, {"snapshotId": NIL, "timeout": 600, "resourceLimits": dict(SMALL)})
    _create(
        s,
        ctx,
        {
            "snapshotId": snap,
            "image": {"uri": ctx.image},
            "entrypoint": ["tail", "-f", "/dev/null"],
            "timeout": 600,
            "resourceLimits": dict(SMALL),
        },
    )
    r = _create(s, ctx, {"snapshotId": snap, "timeout": 600, "resourceLimits": dict(SMALL), "env": {"REQ_VAR": "r"}})
    restored = created_id(r)
    s.lc("GET", f"/v1/sandboxes/{restored}")
    ex2 = execd_from(s, s.lc("GET", f"/v1/sandboxes/{restored}/endpoints/44772"))
    s.wait_ready(ex2)
    ex2.command({"command": SNAP_READ})
    s.lc("DELETE", f"/v1/snapshots/{snap}")
    s.lc("GET", f"/v1/snapshots/{snap}")
    s.lc("DELETE", f"/v1/snapshots/{snap}")
    _create(s, ctx, {"snapshotId": snap, "timeout": 600, "resourceLimits": dict(SMALL)})
    s.lc("POST", f"/v1/sandboxes/{restored}/pause")
    s.lc("POST", f"/v1/sandboxes/{restored}/snapshots", json={})
    s.lc("DELETE", f"/v1/sandboxes/{restored}")
    s.lc("DELETE", f"/v1/snapshots/{snap}")
    s.lc("GET", f"/v1/snapshots/{snap}")
    snap2 = _snapshot_and_settle(s, src, snaps)
    s.lc("DELETE", f"/v1/sandboxes/{src}")
    s.lc("GET", f"/v1/snapshots?sandboxId={src}")
    s.lc("DELETE", f"/v1/snapshots/{snap2}")
    s.lc("GET", f"/v1/snapshots?sandboxId={src}")


EGRESS_AUTH = "OPENSANDBOX-EGRESS-AUTH"


def s26(s: Session, ctx: Ctx) -> None:
    """networkPolicy with the egress image: creates with a policy and the validation answers, the endpoint of
    18080 and its header, the sidecar's /policy API (401 without the header, GET, PATCH, DELETE, POST, reset)."""
    pol = {"defaultAction": "deny", "egress": [{"action": "allow", "target": "pypi.org"}]}
    r = _create(s, ctx, ctx.default_create(networkPolicy=pol))
    sid = created_id(r)
    s.lc("GET", f"/v1/sandboxes/{sid}")
    ep = s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/18080")
    side = execd_from(s, ep)
    ctx.secrets.extend(side.headers.values())
    s.wait_ready(s.execd_endpoint(sid))  # unrecorded: the published ports' readiness window
    s.request("GET", side.origin + side.prefix + "/policy")
    side.get("/healthz")
    side.get("/policy")
    side.request("PATCH", "/policy", json=[])
    side.request("PATCH", "/policy", json=[{"action": "allow", "target": "files.pythonhosted.org"}])
    side.request("PATCH", "/policy", json=[{"action": "deny", "target": "FILES.pythonhosted.org"}])
    side.request("DELETE", "/policy", json=["pypi.org", "unknown.invalid"])
    side.request("DELETE", "/policy", json=["nothing.invalid"])
    side.request("POST", "/policy", json={"defaultAction": "allow", "egress": [{"action": "maybe", "target": "x"}]})
    side.request(
        "PUT", "/policy", json={"defaultAction": "allow", "egress": [{"action": "deny", "target": "pypi.org"}]}
    )
    side.get("/policy")
    side.request("POST", "/policy", content=b"")
    side.request("OPTIONS", "/policy")
    side.get("/nothing")
    for bad in (
        {"defaultAction": "whatever"},
        {"defaultAction": "deny"},
        {"egress": [{"action": "allow", "target": ""}]},
        "deny",
    ):
        r = _create(s, ctx, ctx.default_create(networkPolicy=bad))
    _create(s, ctx, ctx.default_create(networkPolicy={"egress": [{"action": "maybe", "target": "x.test"}]}))
