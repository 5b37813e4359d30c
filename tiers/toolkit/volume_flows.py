"""Volume flows (QUIRKS.md, Volumes) against any OpenSandbox server: the mock in tiers/t1/docker/test_volumes.py, a live
server in tiers/t4/docker/test_live_volumes.py. Same requests, same expectations.

``Target(root, api_key, image)``: ``create(volumes)`` -> (status, body); ``run(sid, command)`` -> (exit status,
stdout + stderr) through execd's POST /command; ``delete(sid)``. Sandboxes are deleted at ``close()``.
"""

from __future__ import annotations

import http.client
import uuid
from typing import Any, Dict, List, Optional, Tuple

from tiers.flows.server.smoke_flow import _poll, output_of, request, server_root, stream_command

EXECD_PORT = 44772
READ_ONLY = "Read-only file system"


def unique(prefix: str = "osbvt") -> str:
    """A volume name no earlier run used (a live server's named volumes outlive the test)."""
    return "%s-%s" % (prefix, uuid.uuid4().hex[:10])


def pvc(name: str, claim: str, mount: str, **kw: Any) -> dict:
    v: Dict[str, Any] = {"name": name, "pvc": {"claimName": claim}, "mountPath": mount}
    for k, val in kw.items():
        if k in ("createIfNotExists", "deleteOnSandboxTermination"):
            v["pvc"][k] = val
        else:
            v[k] = val
    return v


def host(name: str, path: str, mount: str, **kw: Any) -> dict:
    return dict({"name": name, "host": {"path": path}, "mountPath": mount}, **kw)


class Target:
    def __init__(self, base_url: str, api_key: Optional[str], image: str = "python:3.12-slim"):
        self.root = server_root(base_url)
        self.key = api_key
        self.image = image
        self.created: List[str] = []
        self._execd: Dict[str, Tuple[str, Dict[str, str]]] = {}

    def life(self, method: str, path: str, body: Any = None) -> Tuple[int, Any]:
        headers = {"OPEN-SANDBOX-API-KEY": self.key} if self.key else {}
        r = request(method, self.root, path, headers=headers, json_body=body, timeout=120)
        try:
            return r.status, r.json() if r.body else None
        except Exception:  # noqa: BLE001 - a non-JSON answer is compared as text
            return r.status, r.body.decode("utf-8", "replace")

    def create(self, volumes: List[dict], *, entrypoint: Optional[List[str]] = None) -> Tuple[int, Any]:
        status, body = self.life(
            "POST",
            "/v1/sandboxes",
            {
                "image": {"uri": self.image},
                "entrypoint": entrypoint or ["tail", "-f", "/dev/null"],
                "timeout": 600,
                "resourceLimits": {"cpu": "500m", "memory": "512Mi"},
                "volumes": volumes,
            },
        )
        if status == 202 and isinstance(body, dict):
            self.created.append(body["id"])
        return status, body

    def sandbox(self, volumes: List[dict]) -> str:
        status, body = self.create(volumes)
        assert status == 202, (status, body)
        sid = body["id"]
        _poll(
            "state",
            lambda: self.life("GET", f"/v1/sandboxes/{sid}")[1]["status"]["state"],
            lambda s: s == "Running",
            120,
        )
        return sid

    def _endpoint(self, sid: str) -> Tuple[str, Dict[str, str]]:
        if sid not in self._execd:
            status, body = self.life("GET", f"/v1/sandboxes/{sid}/endpoints/{EXECD_PORT}")
            assert status == 200, (status, body)
            ep = ("http://" + body["endpoint"], dict(body.get("headers") or {}))

            def ping() -> Optional[int]:
                try:
                    return request("GET", ep[0], "/ping", headers=ep[1], timeout=5).status
                except (OSError, http.client.HTTPException):
                    return None

            _poll("execd /ping", ping, lambda s: s == 200, 60)
            self._execd[sid] = ep
        return self._execd[sid]

    def run(self, sid: str, command: str) -> Tuple[int, str]:
        url, headers = self._endpoint(sid)
        status, _, events = stream_command(url, headers, {"command": command}, 120)
        assert status == 200, (status, events)
        rc = 0
        for e in events:
            if e.get("type") == "error":
                rc = int((e.get("error") or {}).get("evalue") or 1)
        return rc, output_of(events, "stdout") + output_of(events, "stderr")

    def delete(self, sid: str) -> None:
        status, body = self.life("DELETE", f"/v1/sandboxes/{sid}")
        assert status in (204, 404), (status, body)
        if sid in self.created:
            self.created.remove(sid)
        self._execd.pop(sid, None)

    def close(self) -> None:
        for sid in list(self.created):
            try:
                self.delete(sid)
            except (AssertionError, OSError, http.client.HTTPException):
                pass


# -- the flows: each returns what it saw; the tests assert the same values on every target ------------------


def shared_between_sandboxes(t: Target) -> Dict[str, Any]:
    claim = unique()
    a = t.sandbox([pvc("work", claim, "/workspace/shared")])
    b = t.sandbox([pvc("work", claim, "/mnt/work")])
    w = t.run(a, "echo from-a > /workspace/shared/note && echo written")
    r = t.run(b, "cat /mnt/work/note")
    w2 = t.run(b, "echo from-b >> /mnt/work/note")
    r2 = t.run(a, "cat /workspace/shared/note")
    return {"claim": claim, "write": w, "read": r, "write_back": w2, "read_back": r2}


def outlives_the_sandbox(t: Target) -> Dict[str, Any]:
    claim = unique()
    a = t.sandbox([pvc("data", claim, "/data")])
    t.run(a, "mkdir -p /data/dir && echo kept > /data/dir/file")
    t.delete(a)
    c = t.sandbox([pvc("data", claim, "/data")])
    return {"claim": claim, "read": t.run(c, "cat /data/dir/file")}


def read_only(t: Target) -> Dict[str, Any]:
    claim = unique()
    a = t.sandbox([pvc("data", claim, "/data")])
    t.run(a, "echo seed > /data/seed")
    b = t.sandbox([pvc("data", claim, "/data", readOnly=True)])
    return {
        "claim": claim,
        "read": t.run(b, "cat /data/seed"),
        "write": t.run(b, "echo x > /data/new"),
        "touch": t.run(b, "touch /data/seed"),
        "rm": t.run(b, "rm -f /data/seed; test -f /data/seed && echo still-there"),
    }


def sub_path(t: Target) -> Dict[str, Any]:
    claim = unique()
    a = t.sandbox([pvc("data", claim, "/data")])
    t.run(a, "mkdir -p /data/projects/one && echo one > /data/projects/one/readme && echo top > /data/top")
    b = t.sandbox(
        [
            pvc("one", claim, "/work", subPath="projects/one"),
            pvc("fresh", claim, "/fresh", subPath="made/by/the/server"),
        ]
    )
    seen = t.run(b, "cat /work/readme; ls /work; test -e /work/top || echo no-top")
    t.run(b, "echo hello > /fresh/f")
    back = t.run(a, "ls /data/made/by/the/server; cat /data/made/by/the/server/f")
    return {"claim": claim, "seen": seen, "back": back}


def symlink_inside_volume(t: Target) -> Dict[str, Any]:
    """A sandbox plants links in a shared volume; another sandbox names them as subPath."""
    claim = unique()
    a = t.sandbox([pvc("data", claim, "/data")])
    t.run(
        a,
        "mkdir -p /data/real && echo inside > /data/real/f && ln -s real /data/inlink && "
        "ln -s / /data/root && ln -s ../../../../../../etc /data/up && ln -s /etc/passwd /data/pw",
    )
    out: Dict[str, Any] = {"claim": claim}
    ok_status, ok_body = t.create([pvc("data", claim, "/in", subPath="inlink")])
    out["inlink"] = ok_status
    if ok_status == 202:
        sid = ok_body["id"]
        _poll(
            "state", lambda: t.life("GET", f"/v1/sandboxes/{sid}")[1]["status"]["state"], lambda s: s == "Running", 120
        )
        out["inlink_read"] = t.run(sid, "cat /in/f")
    for name in ("root", "up"):
        out[name] = t.create([pvc("data", claim, "/x", subPath=name)])
    # a link read from inside resolves in the reader's own view, never the host's
    b = t.sandbox([pvc("data", claim, "/data")])
    out["pw_is_own"] = t.run(b, "head -c 4 /data/pw; echo; readlink /data/pw")
    return out


def check_symlinks_stay_inside(seen: Dict[str, Any]) -> None:
    """What symlink_inside_volume must show on the mock and live alike: the link inside the volume works,
    the links out of it are refused, and a link read from inside resolves in the sandbox's own view."""
    assert seen["inlink"] == 202 and seen["inlink_read"] == (0, "inside\n")
    for name in ("root", "up"):
        status, body = seen[name]
        assert (status, body["code"]) == (400, "VOLUME::INVALID_SUB_PATH"), seen
        assert body["message"] == (
            "Volume 'data': resolved subPath escapes the volume mountpoint after symlink resolution."
        )
    assert seen["pw_is_own"] == (0, "root\n/etc/passwd\n")


def check_refusal(case: Tuple[str, List[dict], int, str, Optional[str]], got_status: int, body: Any) -> None:
    """One refusals() case against a create's answer: status, code, message (or the start-failure prefix)."""
    _, _, status, code, message = case
    assert (got_status, body.get("code")) == (status, code), body
    if message is not None:
        assert body["message"] == message
    if code == "DOCKER::SANDBOX_START_FAILED":
        assert body["message"].startswith("Failed to create or start container: ")


# refusals before anything is mounted: (name, volumes, status, code, message or None)
def refusals(claim: str) -> List[Tuple[str, List[dict], int, str, Optional[str]]]:
    return [
        (
            "duplicate name",
            [pvc("a", claim, "/a"), pvc("a", claim, "/b")],
            400,
            "VOLUME::DUPLICATE_NAME",
            "Duplicate volume name 'a'. Each volume must have a unique name.",
        ),
        (
            "absolute subPath",
            [pvc("a", claim, "/a", subPath="/etc")],
            400,
            "VOLUME::INVALID_SUB_PATH",
            "SubPath '/etc' must be a relative path, not absolute.",
        ),
        (
            "subPath ..",
            [pvc("a", claim, "/a", subPath="x/../../etc")],
            400,
            "VOLUME::INVALID_SUB_PATH",
            "SubPath 'x/../../etc' contains path traversal '..' which is not allowed.",
        ),
        (
            "host path ..",
            [host("h", "/tmp/../etc", "/h")],
            400,
            "VOLUME::INVALID_HOST_PATH",
            "Host path '/tmp/../etc' contains path traversal component '..'.",
        ),
        (
            "host path //",
            [host("h", "/tmp//x", "/h")],
            400,
            "VOLUME::INVALID_HOST_PATH",
            "Host path '/tmp//x' is not normalized. Remove redundant slashes.",
        ),
        (
            "missing volume, createIfNotExists false",
            [pvc("a", claim + "-absent", "/a", createIfNotExists=False)],
            400,
            "VOLUME::PVC_NOT_FOUND",
            "Volume 'a': Docker named volume '%s-absent' does not exist. Named volumes must be created before "
            "sandbox creation (e.g., 'docker volume create <name>')." % claim,
        ),
        (
            "ossfs without ossfs",
            [
                {
                    "name": "o",
                    "ossfs": {
                        "bucket": "my-bucket",
                        "endpoint": "oss.example.com",
                        "accessKeyId": "id",
                        "accessKeySecret": "secret",
                    },
                    "mountPath": "/o",
                }
            ],
            500,
            "VOLUME::OSSFS_MOUNT_FAILED",
            None,
        ),
        ("mount over /proc", [pvc("a", claim, "/proc")], 500, "DOCKER::SANDBOX_START_FAILED", None),
        ("mount inside /proc", [pvc("a", claim, "/proc/x")], 500, "DOCKER::SANDBOX_START_FAILED", None),
        ("mount over /", [pvc("a", claim, "/")], 500, "DOCKER::SANDBOX_START_FAILED", None),
    ]


# the mock's own refusals (QUIRKS.md "Volumes", [choice]): live answers 202 for each (measured on the
# local-up stack: Docker copies the image's /dev into a fresh named volume over /dev, and the server's put_archive
# writes bootstrap.sh and execd into a volume over /opt/opensandbox); the mock keeps both its own
MOCK_ONLY_REFUSALS = [
    ("mount over /dev", lambda claim: [pvc("a", claim, "/dev")], 500, "DOCKER::SANDBOX_START_FAILED"),
    (
        "mount over /opt/opensandbox",
        lambda claim: [pvc("a", claim, "/opt/opensandbox")],
        500,
        "DOCKER::SANDBOX_START_FAILED",
    ),
    (
        "mount below /opt/opensandbox",
        lambda claim: [pvc("a", claim, "/opt/opensandbox/execd")],
        500,
        "DOCKER::SANDBOX_START_FAILED",
    ),
]


def host_not_allowed(path: str, allowed: List[str]) -> Tuple[int, str, str]:
    return (
        400,
        "VOLUME::HOST_PATH_NOT_ALLOWED",
        "Host path '%s' is not under any allowed prefix. Allowed prefixes: %s" % (path, allowed),
    )
