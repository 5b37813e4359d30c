"""Test images written by the tests themselves: layer tars (any entry, hostile ones included), OCI image
layouts, ``docker save`` tarballs (legacy manifest.json), a reader of real ``docker save`` tarballs, and a
stdlib pusher for an OCI registry; ``docker_has`` says whether the local Docker holds an image."""

from __future__ import annotations

import gzip
import hashlib
import http.client
import io
import json
import os
import shutil
import subprocess
import tarfile
import urllib.parse
from dataclasses import dataclass, field

MT_LAYER_GZ = "application/vnd.oci.image.layer.v1.tar+gzip"
MT_LAYER = "application/vnd.oci.image.layer.v1.tar"
MT_CONFIG = "application/vnd.oci.image.config.v1+json"
MT_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_INDEX = "application/vnd.oci.image.index.v1+json"


def sha(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def layer(entries: list[tuple], *, gz: bool = True) -> tuple[bytes, bytes]:
    """(blob, uncompressed tar) of a layer. Entries: ("dir", name[, mode]), ("file", name, data[, mode]),
    ("symlink", name, target), ("hardlink", name, target), ("chr", name), ("fifo", name)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        for e in entries:
            kind, name = e[0], e[1]
            ti = tarfile.TarInfo(name)
            ti.mtime = 1700000000
            data = None
            if kind == "dir":
                ti.type, ti.mode = tarfile.DIRTYPE, (e[2] if len(e) > 2 else 0o755)
            elif kind == "file":
                data = e[2] if isinstance(e[2], bytes) else e[2].encode()
                ti.size, ti.mode = len(data), (e[3] if len(e) > 3 else 0o644)
            elif kind == "symlink":
                ti.type, ti.linkname = tarfile.SYMTYPE, e[2]
            elif kind == "hardlink":
                ti.type, ti.linkname = tarfile.LNKTYPE, e[2]
            elif kind == "chr":
                ti.type, ti.devmajor, ti.devminor = tarfile.CHRTYPE, 1, 3
            elif kind == "fifo":
                ti.type = tarfile.FIFOTYPE
            tf.addfile(ti, io.BytesIO(data) if data is not None else None)
    tar = buf.getvalue()
    return (gzip.compress(tar, mtime=0) if gz else tar), tar


@dataclass
class BuiltImage:
    """An image as blobs: config, manifest, layers (blob, tar)."""

    layers: list[tuple[bytes, bytes]]
    config_extra: dict = field(default_factory=dict)
    arch: str = "amd64"
    gz: bool = True

    def __post_init__(self) -> None:
        cfg = {
            "architecture": self.arch,
            "os": "linux",
            "config": {
                "Env": ["PATH=/usr/bin:/bin", "HELLO=world"],
                "WorkingDir": "/work",
                "User": "1000:1000",
                "Entrypoint": ["/bin/sh"],
                "Cmd": ["-c", "true"],
                "Labels": {"a": "b"},
            },
            "rootfs": {"type": "layers", "diff_ids": [sha(t) for _, t in self.layers]},
        }
        cfg.update(self.config_extra)
        self.config = json.dumps(cfg, sort_keys=True).encode()
        self.manifest = self._make_manifest()

    def _make_manifest(self) -> bytes:
        return json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": MT_MANIFEST,
                "config": {"mediaType": MT_CONFIG, "digest": sha(self.config), "size": len(self.config)},
                "layers": [
                    {"mediaType": MT_LAYER_GZ if self.gz else MT_LAYER, "digest": sha(b), "size": len(b)}
                    for b, _ in self.layers
                ],
            },
            sort_keys=True,
        ).encode()

    @property
    def digest(self) -> str:
        return sha(self.manifest)

    def blobs(self) -> dict[str, bytes]:
        out = {sha(self.config): self.config, sha(self.manifest): self.manifest}
        for b, _ in self.layers:
            out[sha(b)] = b
        return out


def write_oci_layout(
    path: str,
    images: dict[str, BuiltImage],
    *,
    index_for: dict[str, list[BuiltImage]] | None = None,
    corrupt: str | None = None,
) -> None:
    """An OCI image layout directory: each name gets an index.json entry (ref.name + containerd name).
    index_for: names that point at an image index with several platforms. corrupt: a blob digest whose
    bytes are altered on disk."""
    os.makedirs(os.path.join(path, "blobs", "sha256"), exist_ok=True)
    with open(os.path.join(path, "oci-layout"), "w") as f:
        f.write('{"imageLayoutVersion":"1.0.0"}')
    manifests = []

    def put(data: bytes) -> str:
        d = sha(data)
        with open(os.path.join(path, "blobs", "sha256", d[7:]), "wb") as f:
            f.write(data)
        return d

    for name, img in images.items():
        for data in img.blobs().values():
            put(data)
        manifests.append(
            {
                "mediaType": MT_MANIFEST,
                "digest": img.digest,
                "size": len(img.manifest),
                "annotations": {
                    "io.containerd.image.name": name,
                    "org.opencontainers.image.ref.name": name.rsplit(":", 1)[1],
                },
            }
        )
    for name, imgs in (index_for or {}).items():
        idx = {"schemaVersion": 2, "mediaType": MT_INDEX, "manifests": []}
        for img in imgs:
            for data in img.blobs().values():
                put(data)
            idx["manifests"].append(
                {
                    "mediaType": MT_MANIFEST,
                    "digest": img.digest,
                    "size": len(img.manifest),
                    "platform": {"os": "linux", "architecture": img.arch},
                }
            )
        data = json.dumps(idx).encode()
        put(data)
        manifests.append(
            {
                "mediaType": MT_INDEX,
                "digest": sha(data),
                "size": len(data),
                "annotations": {"io.containerd.image.name": name},
            }
        )
    with open(os.path.join(path, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "manifests": manifests}, f)
    if corrupt:
        p = os.path.join(path, "blobs", "sha256", corrupt[7:])
        data = bytearray(open(p, "rb").read())
        data[len(data) // 2] ^= 0xFF
        with open(p, "wb") as f:
            f.write(bytes(data))


BUSYBOX = "/bin/busybox"  # Debian busybox-static: what image tests build their images from


def static_busybox() -> bool:
    """/bin/busybox is there and statically linked (it runs in an image with no libc)."""
    if not os.path.isfile(BUSYBOX):
        return False
    r = subprocess.run(["ldd", BUSYBOX], capture_output=True, text=True)
    return "not a dynamic executable" in (r.stdout + r.stderr)


def docker_has(image: str) -> bool:
    """The local Docker answers ``docker image inspect IMAGE`` with success (False without a docker CLI or daemon)."""
    if shutil.which("docker") is None:
        return False
    try:
        return (
            subprocess.run(
                ["docker", "image", "inspect", image], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30
            ).returncode
            == 0
        )
    except (OSError, subprocess.SubprocessError):
        return False


def write_docker_save(path: str, name: str, img: BuiltImage) -> None:
    """A legacy ``docker save`` tarball: <config hex>.json, <tar sha256>/layer.tar (uncompressed), manifest.json."""
    cfg_name = sha(img.config)[7:] + ".json"
    members: list[tuple[str, bytes]] = [(cfg_name, img.config)]
    layer_names = []
    for _, tar in img.layers:
        ln = "%s/layer.tar" % sha(tar)[7:]
        layer_names.append(ln)
        members.append((ln, tar))
    members.append(
        ("manifest.json", json.dumps([{"Config": cfg_name, "RepoTags": [name], "Layers": layer_names}]).encode())
    )
    with tarfile.open(path, "w") as tf:
        for n, data in members:
            ti = tarfile.TarInfo(n)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))


class SavedImage(BuiltImage):
    """An image read back from a ``docker save`` tarball, for ``push``: the config exactly as Docker saved it
    (the image id stays), each layer.tar as an uncompressed OCI layer blob (its digest = its diff_id)."""

    def __init__(self, config: bytes, tars: list[bytes]):  # not the dataclass's: the config is given
        self.layers, self.config_extra, self.gz = [(t, t) for t in tars], {}, False
        self.arch = json.loads(config).get("architecture", "")
        self.config = config
        self.manifest = self._make_manifest()


def read_docker_save(path: str) -> dict[str, SavedImage]:
    """Every tagged image of a ``docker save`` tarball (manifest.json: Config, RepoTags, Layers), by tag."""
    out: dict[str, SavedImage] = {}
    with tarfile.open(path) as tf:

        def member(name: str) -> bytes:
            f = tf.extractfile(name)
            if f is None:
                raise ValueError("%s: %s is not a file" % (path, name))
            return f.read()

        for entry in json.loads(member("manifest.json")):
            img = SavedImage(member(entry["Config"]), [member(n) for n in entry["Layers"]])
            for tag in entry.get("RepoTags") or []:
                out[tag] = img
    return out


# -- pushing to a registry (OCI distribution API) -------------------------------------------------------------
def push(
    base: str,
    repo: str,
    tag: str,
    img: BuiltImage | None = None,
    *,
    index: list[BuiltImage] | None = None,
    authz: str | None = None,
) -> str:
    """Push img (or an index of images) as repo:tag to http://host:port; returns the manifest digest."""
    u = urllib.parse.urlsplit(base)

    def req(method: str, path: str, body: bytes = b"", headers: dict | None = None) -> http.client.HTTPResponse:
        c = http.client.HTTPConnection(u.netloc, timeout=60)
        h = dict(headers or {})
        if authz:
            h["Authorization"] = authz
        h["Content-Length"] = str(len(body))
        c.request(method, path, body=body, headers=h)
        r = c.getresponse()
        r.read()
        c.close()
        return r

    def blob(data: bytes) -> None:
        r = req("POST", "/v2/%s/blobs/uploads/" % repo)
        assert r.status == 202, r.status
        loc = urllib.parse.urlsplit(r.getheader("Location"))
        q = loc.query + ("&" if loc.query else "") + "digest=" + sha(data)
        r = req("PUT", loc.path + "?" + q, data, {"Content-Type": "application/octet-stream"})
        assert r.status == 201, r.status

    def manifest(ref: str, data: bytes, mt: str) -> None:
        r = req("PUT", "/v2/%s/manifests/%s" % (repo, ref), data, {"Content-Type": mt})
        assert r.status == 201, r.status

    imgs = index if index is not None else [img]
    for im in imgs:
        for data in im.blobs().values():
            if data is not im.manifest:
                blob(data)
        if index is not None:
            manifest(im.digest, im.manifest, MT_MANIFEST)
    if index is None:
        manifest(tag, img.manifest, MT_MANIFEST)
        return img.digest
    idx = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": MT_INDEX,
            "manifests": [
                {
                    "mediaType": MT_MANIFEST,
                    "digest": im.digest,
                    "size": len(im.manifest),
                    "platform": {"os": "linux", "architecture": im.arch},
                }
                for im in index
            ],
        }
    ).encode()
    manifest(tag, idx, MT_INDEX)
    return sha(idx)
