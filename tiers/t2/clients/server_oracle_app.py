"""The real opensandbox-server 1.1.1 FastAPI app (``opensandbox_server.main:app``) as a test oracle, with
no Docker daemon: runs inside ``.venv-server`` (requirements-server-oracle.txt), never in the host venv.

Everything up to the Docker calls is the server's own code: routing, middleware (auth, X-Request-ID),
exception handlers, FastAPI/pydantic validation of every request model, ``services/validators.py``,
``extensions/validation.py`` and the Docker service's pre-provisioning checks. Only the Docker client is a
stand-in (``FakeDocker``): it holds containers the driver registers (``{"op": "add"}``) and
``_provision_sandbox`` - the first step that would pull an image and start a container - answers 202 with
a fake container instead.

Protocol (JSON lines on stdin/stdout): ``{"op": "request", "method", "path", "headers", "body"}`` ->
``{"status", "headers", "body"}``; ``{"op": "add", "id", "timeout": bool}`` -> ``{"ok": true}``.
Bodies are latin-1 strings (bytes 0-255).
"""

from __future__ import annotations

import atexit
import json
import os
import shutil
import sys
import tempfile
from datetime import datetime, timedelta, timezone

API_KEY = "oracle-key"


def _config(root: str) -> str:
    # the live stack's configuration (fixtures/README.md; local-up.sh)
    path = os.path.join(root, "sandbox.toml")
    with open(path, "w") as fh:
        fh.write(f"""
[server]
host = "127.0.0.1"
port = 8080
api_key = "{API_KEY}"

[runtime]
type = "docker"
execd_image = "local/execd:v1.0.19-src3bb6fad"

[docker]
network_mode = "bridge"
publish_host = "127.0.0.1"

[store]
type = "sqlite"
path = "{root}/store.db"

[proxy]
resolve_internal = false

[ingress]
mode = "direct"

[storage]
allowed_host_paths = ["{root}/host"]
""")
    # host binds under root/host (local-up's one prefix); named volumes under root/volumes (the mock uses the
    # same directory, so both see the same volumes and the same links planted in them)
    os.makedirs(os.path.join(root, "host"), exist_ok=True)
    os.makedirs(os.path.join(root, "volumes"), exist_ok=True)
    return path


class _Image:
    def __init__(self, tag: str):
        self.tags = [tag]
        self.short_id = "sha256:0000000000"
        self.attrs: dict = {}
        self.id = "sha256:" + "0" * 64


class FakeContainer:
    def __init__(self, sid: str, labels: dict, cmd: list, image: str):
        self.id = ("%032x" % abs(hash(sid)))[:32] * 2
        self.name = "sandbox-" + sid
        now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"
        self.attrs = {
            "Config": {"Labels": labels, "Cmd": cmd, "Image": image, "Env": []},
            "State": {
                "Status": "running",
                "Running": True,
                "Paused": False,
                "ExitCode": 0,
                "StartedAt": now,
                "FinishedAt": "0001-01-01T00:00:00Z",
            },
            "Created": now,
            "HostConfig": {},
            "NetworkSettings": {"Networks": {}, "Ports": {}},
        }
        self.image = _Image(image)
        self.status = "running"

    def update(self, **kw):
        return None

    def reload(self):
        return None

    def logs(self, **kw):
        return b""

    # snapshots (services/docker/snapshot_runtime.py): docker commit tags an image the fake daemon keeps;
    # delete removes the container (a restored sandbox no longer holds its snapshot's image)
    def commit(self, repository=None, tag=None, **kw):
        ref = "%s:%s" % (repository, tag)
        IMAGES.tags.add(ref)
        IMAGES.labels[ref] = dict(self.attrs["Config"]["Labels"])  # the image keeps the container's labels

    def kill(self, **kw):
        return None

    def remove(self, **kw):
        CONTAINERS.items = {k: c for k, c in CONTAINERS.items.items() if c is not self}


class _Images:
    """docker-py's images API as the snapshot runtime uses it: get, and remove (409 while a container uses it)."""

    def __init__(self):
        self.tags: set = set()
        self.labels: dict = {}

    def get(self, ref):
        import docker.errors

        if ref not in self.tags:
            raise docker.errors.ImageNotFound("No such image: %s" % ref)
        return _Image(ref)

    def remove(self, image=None, **kw):
        import docker.errors

        if image not in self.tags:
            raise docker.errors.ImageNotFound("No such image: %s" % image)
        if any(c.image.tags == [image] for c in CONTAINERS.items.values()):
            resp = type("Resp", (), {"status_code": 409, "reason": "Conflict", "url": ""})()
            raise docker.errors.APIError("409 Client Error: Conflict", response=resp)
        self.tags.discard(image)


class _Containers:
    def __init__(self):
        self.items: dict[str, FakeContainer] = {}

    def get(self, name):
        import docker.errors

        for c in self.items.values():
            if c.name == name or c.id == name:
                return c
        raise docker.errors.NotFound("No such container: %s" % name)

    def list(self, all=False, filters=None):
        label = (filters or {}).get("label")
        out = list(self.items.values())
        if label:
            k, _, v = label.partition("=")
            out = [c for c in out if c.attrs["Config"]["Labels"].get(k) == v]
        return out


CONTAINERS = _Containers()


class _Api:
    timeout = 60

    def __init__(self, containers: "_Containers", root: str = ""):
        self._containers = containers
        self.volumes = os.path.join(root, "volumes")

    def containers(self, all=False, filters=None, trunc=False):
        return [{"Id": c.id, "Labels": c.attrs["Config"]["Labels"]} for c in self._containers.items.values()]

    def inspect_volume(self, name):
        # a local-driver named volume is a directory (Docker: /var/lib/docker/volumes/<name>/_data)
        import docker.errors

        path = os.path.join(self.volumes, name)
        if not os.path.isdir(path):
            raise docker.errors.NotFound("get %s: no such volume" % name)
        return {"Name": name, "Driver": "local", "Mountpoint": path, "Labels": {}}

    def create_volume(self, name, labels=None, **kw):
        os.makedirs(os.path.join(self.volumes, name), exist_ok=True)
        return self.inspect_volume(name)

    def version(self):
        return {"ApiVersion": "1.41", "Version": "20.10.24", "Os": "linux", "Arch": "amd64"}


IMAGES = _Images()


class FakeDocker:
    def __init__(self, root: str = ""):
        self.containers = CONTAINERS
        self.images = IMAGES
        self.api = _Api(self.containers, root)

    def info(self):
        return {"Runtimes": {"runc": {}}, "OSType": "linux", "Architecture": "x86_64"}

    def version(self):
        return self.api.version()


def build():
    root = tempfile.mkdtemp(prefix="osb-oracle-")
    atexit.register(shutil.rmtree, root, True)  # the server's config, sqlite store and ~/.opensandbox
    os.environ["SANDBOX_CONFIG_PATH"] = _config(root)
    os.environ["HOME"] = root  # DockerMetadataStore writes under ~/.opensandbox
    import docker

    fake = FakeDocker(root)
    docker.from_env = lambda *a, **k: fake
    from opensandbox_server.api.schema import CreateSandboxResponse, SandboxStatus
    from opensandbox_server.services.constants import (
        SANDBOX_EXPIRES_AT_LABEL,
        SANDBOX_ID_LABEL,
        SANDBOX_MANUAL_CLEANUP_LABEL,
    )
    from opensandbox_server.services.docker.docker_service import DockerSandboxService

    def provision(self, sandbox_id, request, created_at, expires_at, *args, **kwargs):
        # the server's own label/env building and response shape; only the container is fake
        from opensandbox_server.extensions import extract_extensions_from_mapping

        labels, _env = self._build_labels_and_env(sandbox_id, request, expires_at)
        # Docker: a container's labels are its image's, then the create's (a snapshot image keeps its source's)
        labels = {**IMAGES.labels.get(request.image.uri if request.image else "", {}), **labels}
        container = FakeContainer(
            sandbox_id, labels, list(request.entrypoint or []), request.image.uri if request.image else ""
        )
        fake.containers.items[sandbox_id] = container
        if expires_at is not None:
            self._schedule_expiration(sandbox_id, expires_at)
        return CreateSandboxResponse(
            id=sandbox_id,
            status=SandboxStatus(
                state="Running",
                reason="CONTAINER_RUNNING",
                message="Sandbox container started successfully.",
                last_transition_at=created_at,
            ),
            metadata=request.metadata,
            extensions=extract_extensions_from_mapping(labels),
            platform=self._resolve_platform_for_container(container, labels) or request.platform,
            expiresAt=expires_at,
            createdAt=created_at,
            entrypoint=request.entrypoint,
        )

    DockerSandboxService._provision_sandbox = provision
    from opensandbox_server.main import app

    def add(sid: str, timeout: bool) -> None:
        labels = {
            SANDBOX_ID_LABEL: sid,
            "opensandbox.io/embedding-proxy-port": "40001",
            "opensandbox.io/http-port": "40002",
        }
        if timeout:
            labels[SANDBOX_EXPIRES_AT_LABEL] = (datetime.now(timezone.utc) + timedelta(hours=1)).isoformat()
        else:
            labels[SANDBOX_MANUAL_CLEANUP_LABEL] = "true"
        fake.containers.items[sid] = FakeContainer(sid, labels, ["tail", "-f", "/dev/null"], "local/python:3-slim")

    return app, add, root


def main() -> int:
    app, add, root = build()
    from fastapi.testclient import TestClient

    client = TestClient(app, raise_server_exceptions=False, base_url="http://127.0.0.1:8080")
    out = sys.stdout
    print(json.dumps({"ready": True, "api_key": API_KEY, "root": root}), file=out, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        if msg.get("op") == "add":
            add(msg["id"], bool(msg.get("timeout", True)))
            print(json.dumps({"ok": True}), file=out, flush=True)
            continue
        body = msg.get("body")
        r = client.request(
            msg["method"],
            msg["path"],
            headers=msg.get("headers") or {},
            content=body.encode("latin-1") if body is not None else None,
        )
        print(
            json.dumps({"status": r.status_code, "headers": dict(r.headers), "body": r.content.decode("latin-1")}),
            file=out,
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
