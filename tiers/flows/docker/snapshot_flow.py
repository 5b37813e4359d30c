"""Snapshots (QUIRKS.md, Snapshots), one flow for every tier: the requests of recorder scenario 25
(``record/scenarios_docker.py`` ``s25``, ``fixtures/25_snapshots.json``, recorded from opensandbox-server 1.1.1 with
Docker 20.10) with their answers asserted. ``run(target)`` runs it on any server through
``tiers.flows.sandbox.sandbox_inside.Target`` (standard library HTTP): tiers/t1/docker/test_snapshots.py on the mock,
tiers/t4/docker/test_live_snapshots.py on the live stack.

What it asserts (every value is what the recording shows):

* create: 202, ``Location: /v1/snapshots/<id>``, ``Creating`` / ``snapshot_accepted``; it leaves ``Creating``
  by itself for ``Ready`` / ``snapshot_runtime_ready``; the source sandbox is Running again after;
* get and list: filters by sandboxId, exact name and states (OR), pages, the 422s of page/pageSize;
* errors: an empty name (422), an unknown sandbox (404 ``DOCKER::SANDBOX_NOT_FOUND``), an unknown snapshot on
  get/delete/restore (404 ``SNAPSHOT::NOT_FOUND``), image and snapshotId together (422), a paused source (409
  ``SNAPSHOT::INVALID_SOURCE_STATE``), a delete while a restored sandbox exists (409
  ``SNAPSHOT::DELETE_CONFLICT``, the snapshot stays ``Deleting``, a restore from it is 409
  ``SNAPSHOT::NOT_READY``), then 204 and 404 once it is gone;
* the restored sandbox: GET has ``snapshotId`` and no ``image``, the source's metadata, the default entrypoint;
  its files are the source's (``/tmp``, ``/root``, ``/workspace``; a removed directory and an image file removed
  from ``/etc`` stay removed; a file
  removed in a restored sandbox stays removed in a snapshot of it), processes are not, the source's create
  env is there under the restore's own env.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from tiers.flows.sandbox.sandbox_inside import Target
from tiers.toolkit.waits import poll, wait_until

NIL = "00000000-0000-0000-0000-000000000000"
SMALL = {"cpu": "250m", "memory": "128Mi"}
NAME = "snap-flow"
WRITE = (
    "echo a > /tmp/a.txt; echo r > /root/r.txt; mkdir -p /workspace; echo w > /workspace/w.txt; "
    "rmdir /srv; rm -f /etc/issue.net; (sleep 600 &); export FOO=bar; echo written"
)
READ = (
    "cat /tmp/a.txt /root/r.txt /workspace/w.txt; ls -d /srv 2>&1 >/dev/null | wc -l; "
    "echo sleepers=$(ps -eo args 2>/dev/null | grep -c '^sleep 600'); "
    "echo FOO=$FOO SRC_VAR=$SRC_VAR REQ_VAR=$REQ_VAR ID=$OPENSANDBOX_ID; ls /etc/issue.net 2>&1 >/dev/null | wc -l"
)
ACCEPTED = {"state": "Creating", "reason": "snapshot_accepted", "message": "Snapshot creation accepted."}
READY = {"state": "Ready", "reason": "snapshot_runtime_ready", "message": "Docker snapshot image created successfully."}
DELETING = {"state": "Deleting", "reason": "snapshot_delete_requested", "message": "Snapshot deletion requested."}


def _status(body: Dict[str, Any]) -> Dict[str, str]:
    return {k: body["status"][k] for k in ("state", "reason", "message")}


def _err(r: Any) -> tuple:
    return r.status, r.json()


class Flow:
    def __init__(self, target: Target):
        self.t = target
        self.snapshots: list = []

    def life(self, method: str, path: str, body: Any = None, **kw: Any) -> Any:
        if body is not None:
            kw["json_body"] = body
        return self.t.life(method, path, **kw)

    def snapshot(self, sid: str, name: Optional[str] = None) -> str:
        r = self.life("POST", f"/v1/sandboxes/{sid}/snapshots", {"name": name} if name is not None else None)
        assert r.status == 202, r
        body = r.json()
        assert r.headers.get("location") == "/v1/snapshots/" + body["id"]
        assert list(body) == ["id", "sandboxId"] + (["name"] if name is not None else []) + ["status", "createdAt"]
        assert body["sandboxId"] == sid and body.get("name") == name
        assert _status(body) == ACCEPTED and body["status"]["lastTransitionAt"] == body["createdAt"]
        self.snapshots.append(body["id"])
        return body["id"]

    def settled(self, snap: str, timeout: float = 60.0) -> Dict[str, Any]:
        def get() -> Dict[str, Any]:
            r = self.life("GET", f"/v1/snapshots/{snap}")
            assert r.status == 200, r
            return r.json()

        body = poll(get, lambda b: b["status"]["state"] != "Creating", timeout, 0.1)
        assert body["status"]["state"] != "Creating", f"snapshot {snap} still Creating after {timeout} s"
        return body

    def running(self, sid: str, timeout: float = 30.0) -> None:
        assert wait_until(
            lambda: self.life("GET", f"/v1/sandboxes/{sid}").json()["status"]["state"] == "Running", timeout, 0.1
        ), f"sandbox {sid} not Running again after its snapshot"

    def restore(self, snap: str, **extra: Any) -> str:
        body = {"snapshotId": snap, "timeout": 600, "resourceLimits": dict(SMALL)}
        body.update(extra)
        r = self.life("POST", "/v1/sandboxes", body, timeout=120)
        assert r.status == 202, r
        assert r.json()["entrypoint"] == ["tail", "-f", "/dev/null"]  # server services/snapshot_restore.py
        sid = r.json()["id"]
        self.t.created.append(sid)
        self.t.wait_ready(sid)
        return sid

    def cleanup(self) -> None:
        self.t.delete_all()
        for snap in self.snapshots:
            try:
                self.life("DELETE", f"/v1/snapshots/{snap}")
            except OSError:
                pass


def run(target: Target, *, etc_kept: bool = True) -> None:
    """``etc_kept``: a change to the image's ``/etc`` (``/etc/issue.net`` removed) is in the snapshot; False for the
    mock's host-tools view, whose ``/etc`` is the view's, not the sandbox's (docs/IMAGES.md "Snapshots")."""
    f = Flow(target)
    try:
        _run(f, etc_kept)
    finally:
        f.cleanup()


def _run(f: Flow, etc_kept: bool) -> None:
    t = f.t
    src = t.create(env={"SRC_VAR": "s"}, metadata={"purpose": "snapshot-flow"})
    assert t.command(src, WRITE).out == "written\n"
    snap = f.snapshot(src, NAME)
    got = f.settled(snap)
    assert _status(got) == READY and got["name"] == NAME and got["sandboxId"] == src
    f.running(src)

    # list: filters and pages (server repositories/snapshots/sqlite.py list)
    def items(query: str) -> tuple:
        r = f.life("GET", "/v1/snapshots?" + query)
        assert r.status == 200, r
        return [x["id"] for x in r.json()["items"]], r.json()["pagination"]

    assert items(f"sandboxId={src}") == (
        [snap],
        {"page": 1, "pageSize": 20, "totalItems": 1, "totalPages": 1, "hasNextPage": False},
    )
    assert items(f"sandboxId={src}&name={NAME}")[0] == [snap]
    assert items(f"sandboxId={src}&name=other")[0] == []
    assert items(f"sandboxId={src}&state=Creating")[0] == []
    assert items(f"sandboxId={src}&state=Failed&state=Ready&page=1&pageSize=1")[0] == [snap]
    assert items(f"sandboxId={src}&page=2&pageSize=1") == (
        [],
        {"page": 2, "pageSize": 1, "totalItems": 1, "totalPages": 1, "hasNextPage": False},
    )
    r = f.life("GET", "/v1/snapshots?page=0&pageSize=201")
    assert r.status == 422 and [(e["type"], e["loc"]) for e in r.json()["detail"]] == [
        ("greater_than_equal", ["query", "page"]),
        ("less_than_equal", ["query", "pageSize"]),
    ]

    # errors
    r = f.life("POST", f"/v1/sandboxes/{src}/snapshots", {"name": ""})
    assert r.status == 422 and r.json()["detail"][0]["type"] == "string_too_short"
    assert _err(f.life("POST", f"/v1/sandboxes/{NIL}/snapshots", {})) == (
        404,
        {"code": "DOCKER::SANDBOX_NOT_FOUND", "message": f"Sandbox {NIL} not found."},
    )
    not_found = (404, {"code": "SNAPSHOT::NOT_FOUND", "message": f"Snapshot {NIL} not found"})
    assert _err(f.life("GET", f"/v1/snapshots/{NIL}")) == not_found
    assert _err(f.life("DELETE", f"/v1/snapshots/{NIL}")) == not_found
    assert (
        _err(f.life("POST", "/v1/sandboxes", {"snapshotId": NIL, "timeout": 600, "resourceLimits": dict(SMALL)}))
        == not_found
    )
    r = f.life(
        "POST",
        "/v1/sandboxes",
        {
            "snapshotId": snap,
            "image": {"uri": t.image},
            "timeout": 600,
            "entrypoint": ["tail", "-f", "/dev/null"],
            "resourceLimits": dict(SMALL),
        },
    )
    assert (
        r.status == 422
        and r.json()["detail"][0]["msg"] == "Value error, Exactly one of image or snapshotId must be provided."
    )

    # restore: the files, not the processes; the source's env under the request's; its labels as metadata
    restored = f.restore(snap, env={"REQ_VAR": "r"})
    g = f.life("GET", f"/v1/sandboxes/{restored}").json()
    assert g["snapshotId"] == snap and "image" not in g and g["metadata"] == {"purpose": "snapshot-flow"}
    assert g["status"]["state"] == "Running"
    out = t.command(restored, READ).out
    want = "a\nr\nw\n1\nsleepers=0\nFOO= SRC_VAR=s REQ_VAR=r ID=%s\n" % restored
    assert out.startswith(want) and (not etc_kept or out[len(want) :] == "1\n"), out

    # in use: 409 and Deleting (it stays so), no restore from it
    conflict = (
        409,
        {"code": "SNAPSHOT::DELETE_CONFLICT", "message": "snapshot image cannot be deleted due to a conflict"},
    )
    assert _err(f.life("DELETE", f"/v1/snapshots/{snap}")) == conflict
    assert _status(f.life("GET", f"/v1/snapshots/{snap}").json()) == DELETING
    assert _err(f.life("DELETE", f"/v1/snapshots/{snap}")) == conflict
    assert _err(
        f.life("POST", "/v1/sandboxes", {"snapshotId": snap, "timeout": 600, "resourceLimits": dict(SMALL)})
    ) == (409, {"code": "SNAPSHOT::NOT_READY", "message": f"Snapshot {snap} is not ready for restore."})

    # a paused source
    assert f.life("POST", f"/v1/sandboxes/{restored}/pause").status == 202
    assert _err(f.life("POST", f"/v1/sandboxes/{restored}/snapshots", {})) == (
        409,
        {"code": "SNAPSHOT::INVALID_SOURCE_STATE", "message": "Snapshot can only be created from a Running sandbox."},
    )
    assert f.life("POST", f"/v1/sandboxes/{restored}/resume").status == 202
    f.running(restored)

    # a file removed in a restored sandbox stays removed in a snapshot of it (a whiteout over the first layer)
    assert t.command(restored, "rm /tmp/a.txt && echo removed").out == "removed\n"
    snap2 = f.snapshot(restored)
    assert _status(f.settled(snap2)) == READY
    f.running(restored)
    again = f.restore(snap2)
    out = t.command(again, "ls /tmp/a.txt 2>&1 >/dev/null | wc -l; cat /root/r.txt /workspace/w.txt").out
    assert out == "1\nr\nw\n", out

    # gone once nothing uses it
    t.delete(again)
    assert f.life("DELETE", f"/v1/snapshots/{snap2}").status == 204
    t.delete(restored)
    assert f.life("DELETE", f"/v1/snapshots/{snap}").status == 204
    assert _err(f.life("GET", f"/v1/snapshots/{snap}")) == (
        404,
        {"code": "SNAPSHOT::NOT_FOUND", "message": f"Snapshot {snap} not found"},
    )
    t.delete(src)
    assert items(f"sandboxId={src}")[0] == []
