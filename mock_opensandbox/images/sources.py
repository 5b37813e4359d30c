"""Where an image comes from before the cache: an OCI image layout (directory or tar), a ``docker save``
tarball (legacy ``manifest.json`` or the OCI ``index.json`` Docker 25+ writes), or a local Docker/Podman
(``docker save`` into a temporary tarball).

A source yields a ``Found`` image: its manifest digest, its config (bytes, digest-verified) and, per layer,
the blob digest, diff_id and a way to open the blob. Layers are verified while they are unpacked.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import os
import platform as _platform
import shutil
import subprocess
import tarfile
import tempfile
import threading
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any, Callable, Literal, Protocol

from mock_opensandbox.images import reference
from mock_opensandbox.images.errors import CorruptImage, DigestMismatch, ImageError, ImageNotFound, UnsupportedImage

if TYPE_CHECKING:
    from types import TracebackType

MT_OCI_INDEX = "application/vnd.oci.image.index.v1+json"
MT_OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
MT_DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MT_DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
INDEX_TYPES = (MT_OCI_INDEX, MT_DOCKER_LIST)
MANIFEST_TYPES = (MT_OCI_MANIFEST, MT_DOCKER_MANIFEST)
REF_NAME = "org.opencontainers.image.ref.name"
CONTAINERD_NAME = "io.containerd.image.name"

_ARCH = {
    "x86_64": "amd64",
    "amd64": "amd64",
    "aarch64": "arm64",
    "arm64": "arm64",
    "armv7l": "arm",
    "armv6l": "arm",
    "i386": "386",
    "i686": "386",
    "ppc64le": "ppc64le",
    "s390x": "s390x",
    "riscv64": "riscv64",
}


class Blob(Protocol):
    """An open blob, read front to back and closed (a ``with`` block): a file of an image directory, a member
    of an archive (``_Slice``, ``_Owned``), a registry's answer (registry.py's ``_Resp``)."""

    def read(self, n: int = -1, /) -> bytes: ...

    def close(self) -> None: ...

    def __enter__(self) -> Blob: ...

    def __exit__(
        self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None, /
    ) -> object: ...


def host_platform() -> dict[str, str]:
    m = _platform.machine().lower()
    out = {"os": "linux", "architecture": _ARCH.get(m, m)}
    if m == "armv7l":
        out["variant"] = "v7"
    return out


def want_platform(platform: dict[str, str] | None) -> dict[str, str]:
    """The platform to pick from an index: the create request's ``platform`` ({os, arch}) or the host's."""
    if platform and platform.get("os") and platform.get("arch"):
        arch = platform["arch"].lower()
        return {"os": platform["os"].lower(), "architecture": _ARCH.get(arch, arch)}
    return host_platform()


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def check_digest(what: str, data: bytes, digest: str | None, ref: str = "") -> None:
    if digest and not digest.startswith("sha256:"):
        raise UnsupportedImage(
            "%s uses digest algorithm %s (only sha256 is supported)" % (what, digest.split(":")[0]), ref=ref
        )
    if digest and sha256(data) != digest:
        raise DigestMismatch(what, digest, sha256(data), ref=ref)


def load_json(what: str, data: bytes, ref: str = "") -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError):
        raise CorruptImage("%s is not valid JSON" % what, ref=ref) from None


def pick_platform(index: dict[str, Any], want: dict[str, str], ref: str = "") -> dict[str, Any]:
    """The descriptor of an index/manifest list for the wanted platform (attestation entries skipped)."""
    seen = []
    manifests: list[dict[str, Any]] = index.get("manifests") or []
    for d in manifests:
        p = d.get("platform") or {}
        if (
            p.get("os") == "unknown"
            or (d.get("annotations") or {}).get("vnd.docker.reference.type") == "attestation-manifest"
        ):
            continue
        seen.append("%s/%s" % (p.get("os"), p.get("architecture")))
        if p.get("os") == want["os"] and p.get("architecture") == want["architecture"]:
            if want.get("variant") and p.get("variant") and p["variant"] != want["variant"]:
                continue
            return d
    raise UnsupportedImage(
        "no manifest for platform %s/%s in the image index (has: %s)"
        % (want["os"], want["architecture"], ", ".join(seen) or "none"),
        ref=ref,
    )


@dataclass
class LayerRef:
    diff_id: str
    blob_digest: str | None  # None for a legacy docker-save layer.tar (only its diff_id is known)
    media_type: str
    open: Callable[[], Blob]


@dataclass
class Found:
    ref: str  # the reference as asked
    source: str  # "image-dir", "docker", "registry"
    origin: str  # a path or host (never a credential)
    manifest_digest: str | None
    config_digest: str
    config: dict[str, Any]
    layers: list[LayerRef]
    cleanup: list[Callable[[], None]] = field(default_factory=list)

    def close(self) -> None:
        for fn in self.cleanup:
            try:
                fn()
            except OSError:
                pass
        self.cleanup.clear()


def layers_from_manifest(
    manifest: dict[str, Any], config: dict[str, Any], blob_opener: Callable[[str], Blob], ref: str
) -> list[LayerRef]:
    descs = manifest.get("layers") or []
    diff_ids = ((config.get("rootfs") or {}).get("diff_ids")) or []
    if len(descs) != len(diff_ids):
        raise CorruptImage("manifest has %d layers, config has %d diff_ids" % (len(descs), len(diff_ids)), ref=ref)
    out = []
    for d, diff in zip(descs, diff_ids, strict=True):
        mt = d.get("mediaType", "")
        if "zstd" in mt:
            raise UnsupportedImage(
                "layer %s is zstd-compressed (%s): not supported by the mock's image store" % (d.get("digest"), mt),
                ref=ref,
            )
        dg = d.get("digest")
        out.append(LayerRef(diff, dg, mt, functools.partial(blob_opener, dg)))
    return out


# -- OCI image layout / docker-save archives ---------------------------------------------------------------
class Archive:
    """A directory or a tar file holding an OCI layout and/or a docker-save manifest.json."""

    def __init__(self, path: str):
        self.path = path
        self.is_dir = os.path.isdir(path)
        self._tf: tarfile.TarFile | None = None
        self._lock = threading.Lock()

    def _tar(self) -> tarfile.TarFile:
        if self._tf is None:
            try:
                self._tf = tarfile.open(self.path, "r:*")
            except (tarfile.TarError, OSError) as e:
                raise CorruptImage("%s is not a readable tar archive (%s)" % (os.path.basename(self.path), e)) from None
        return self._tf

    def close(self) -> None:
        with self._lock:
            if self._tf is not None:
                self._tf.close()
                self._tf = None

    def has(self, name: str) -> bool:
        if self.is_dir:
            return os.path.isfile(os.path.join(self.path, name))
        with self._lock:  # the first getmember reads the whole member list through the shared tarfile
            try:
                self._tar().getmember(name)
                return True
            except KeyError:
                return False

    def open(self, name: str) -> Blob:
        comps = reference_path(name)
        if self.is_dir:
            return open(os.path.join(self.path, *comps), "rb")
        with self._lock:
            tf = self._tar()
            try:
                m = tf.getmember("/".join(comps))
            except KeyError:
                m = None
            if m is not None and m.isreg() and isinstance(tf.fileobj, io.BufferedReader):
                # a plain tar: a private handle on the member's bytes, so that layers of one archive can be
                # read by several threads at once (a shared tarfile would interleave their seeks)
                return _Slice(self.path, m.offset_data, m.size)
            if m is not None:  # a compressed archive, or a link member: a tarfile of its own
                own = tarfile.open(self.path, "r:*")
                f = own.extractfile(m.name)
                if f is not None:
                    return _Owned(f, own)
                own.close()
        raise CorruptImage("%s: %s is missing" % (os.path.basename(self.path), name))

    def read(self, name: str) -> bytes:
        with self.open(name) as f:
            return f.read()

    def blob(self, digest: str) -> Blob:
        alg, _, hexd = digest.partition(":")
        return self.open("blobs/%s/%s" % (alg, hexd))

    # -- what it names ------------------------------------------------------------------------------
    def names(self) -> list[tuple[str, Any]]:
        """[(image name, locator)]: locator is ('docker', entry) or ('oci', descriptor)."""
        out: list[tuple[str, Any]] = []
        base = os.path.basename(self.path.rstrip("/"))
        for suffix in (".tar.gz", ".tgz", ".tar"):
            if base.endswith(suffix):
                base = base[: -len(suffix)]
        if self.has("manifest.json"):
            entries = load_json("manifest.json", self.read("manifest.json"))
            for e in entries if isinstance(entries, list) else []:
                for t in e.get("RepoTags") or []:
                    out.append((t, ("docker", e)))
        if self.has("index.json"):
            idx = load_json("index.json", self.read("index.json"))
            for d in idx.get("manifests") or []:
                ann = d.get("annotations") or {}
                if ann.get(CONTAINERD_NAME):
                    out.append((ann[CONTAINERD_NAME], ("oci", d)))
                rn = ann.get(REF_NAME)
                if rn:
                    # a bare tag ("latest") names the layout itself: <dir or file name>:<tag>
                    full = rn if ("/" in rn or ":" in rn) and not rn.startswith(":") else "%s:%s" % (base, rn)
                    out.append((full, ("oci", d)))
        return out

    def find(self, uri: str, platform: dict[str, str] | None) -> Found | None:
        try:
            want_ref = reference.parse(uri)
        except ValueError:
            return None
        for name, loc in self.names():
            if not reference.same_image(uri, name):
                continue
            if want_ref.digest and loc[0] == "oci" and loc[1].get("digest") != want_ref.digest:
                continue
            if loc[0] == "docker":
                return self._docker_entry(uri, loc[1])
            return self._oci(uri, loc[1], platform)
        return None

    def _docker_entry(self, uri: str, e: dict[str, Any]) -> Found:
        cfg_name = e.get("Config") or ""
        cfg_bytes = self.read(cfg_name)
        hexd = os.path.basename(cfg_name).split(".")[0]
        cfg_digest = "sha256:" + hexd if len(hexd) == 64 else sha256(cfg_bytes)
        check_digest("image config", cfg_bytes, cfg_digest, uri)
        config = load_json("image config", cfg_bytes, uri)
        diff_ids = (config.get("rootfs") or {}).get("diff_ids") or []
        layer_names = e.get("Layers") or []
        if len(layer_names) != len(diff_ids):
            raise CorruptImage(
                "manifest.json has %d layers, config has %d diff_ids" % (len(layer_names), len(diff_ids)), ref=uri
            )
        layers = []
        for ln, diff in zip(layer_names, diff_ids, strict=True):
            blob = None
            if ln.startswith("blobs/sha256/"):
                blob = "sha256:" + ln.rsplit("/", 1)[1]
            layers.append(LayerRef(diff, blob, "", functools.partial(self.open, ln)))
        return Found(uri, "image-dir", self.path, None, cfg_digest, config, layers)

    def _oci(self, uri: str, desc: dict[str, Any], platform: dict[str, str] | None) -> Found:
        seen = 0
        while desc.get("mediaType") in INDEX_TYPES:
            seen += 1
            if seen > 4:
                raise CorruptImage("image index nests too deep", ref=uri)
            data = self._blob_bytes(desc["digest"], "image index", uri)
            desc = pick_platform(load_json("image index", data, uri), want_platform(platform), uri)
        mdigest = desc.get("digest")
        mdata = self._blob_bytes(mdigest, "manifest", uri)
        manifest = load_json("manifest", mdata, uri)
        if manifest.get("mediaType") in INDEX_TYPES or "manifests" in manifest:
            desc = pick_platform(manifest, want_platform(platform), uri)
            return self._oci(uri, desc, platform)
        cdesc = manifest.get("config") or {}
        cfg = self._blob_bytes(cdesc.get("digest", ""), "image config", uri)
        config = load_json("image config", cfg, uri)
        return Found(
            uri,
            "image-dir",
            self.path,
            mdigest,
            cdesc["digest"],
            config,
            layers_from_manifest(manifest, config, self.blob, uri),
        )

    def _blob_bytes(self, digest: str | None, what: str, uri: str) -> bytes:
        if not digest:
            raise CorruptImage("%s has no digest" % what, ref=uri)
        try:
            with self.blob(digest) as f:
                data = f.read()
        except FileNotFoundError:
            raise CorruptImage("%s blob %s is missing" % (what, digest), ref=uri) from None
        check_digest(what, data, digest, uri)
        return data


class _Slice(io.RawIOBase):
    """size bytes of a file from offset, on a handle of its own."""

    def __init__(self, path: str, offset: int, size: int):
        super().__init__()
        self.f = open(path, "rb")
        self.f.seek(offset)
        self.left = size

    def readable(self) -> bool:
        return True

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0 or n > self.left:
            n = self.left
        data = self.f.read(n)
        self.left -= len(data)
        return data

    def close(self) -> None:
        self.f.close()
        super().close()


class _Owned:
    """A member stream that closes its own tarfile with it."""

    def __init__(self, f: IO[bytes], tf: tarfile.TarFile):
        self.f, self.tf = f, tf

    def read(self, n: int = -1) -> bytes:
        return self.f.read(n)

    def close(self) -> None:
        self.f.close()
        self.tf.close()

    def __enter__(self) -> "_Owned":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def reference_path(name: str) -> list[str]:
    """An archive member name as components; CorruptImage for one that leaves the archive."""
    comps = [c for c in name.split("/") if c not in ("", ".")]
    if name.startswith("/") or ".." in comps or not comps:
        raise CorruptImage("archive names a file outside itself: %r" % name)
    return comps


class ImageDir:
    """``--image-dir DIR``: OCI layouts (dirs with ``oci-layout``) and docker-save tarballs/dirs in DIR
    (and DIR itself when it is one)."""

    SUFFIXES = (".tar", ".tar.gz", ".tgz")

    def __init__(self, path: str):
        self.path = os.path.abspath(path)
        self._archives: dict[str, tuple[tuple[int, int], Archive]] = {}
        self._lock = threading.Lock()

    def archives(self) -> list[Archive]:
        cands = [self.path]
        try:
            for n in sorted(os.listdir(self.path)):
                p = os.path.join(self.path, n)
                if n.endswith(self.SUFFIXES) and os.path.isfile(p):
                    cands.append(p)
                elif os.path.isdir(p):
                    cands.append(p)
        except OSError:
            return []
        out = []
        with self._lock:
            for p in cands:
                if os.path.isdir(p) and not (
                    os.path.isfile(os.path.join(p, "index.json")) or os.path.isfile(os.path.join(p, "manifest.json"))
                ):
                    continue
                try:
                    st = os.stat(p)
                except OSError:
                    continue
                key = (st.st_mtime_ns, st.st_size)
                old = self._archives.get(p)
                if old is None or old[0] != key:
                    if old is not None:
                        old[1].close()
                    self._archives[p] = (key, Archive(p))
                out.append(self._archives[p][1])
        return out

    def find(self, uri: str, platform: dict[str, str] | None) -> Found | None:
        for a in self.archives():
            try:
                found = a.find(uri, platform)
            except ImageError:
                raise
            except (OSError, KeyError, TypeError, AttributeError) as e:
                raise CorruptImage(
                    "%s: unreadable image archive (%s)" % (os.path.basename(a.path), type(e).__name__), ref=uri
                ) from None
            if found is not None:
                return found
        return None

    def names(self) -> list[str]:
        out: list[str] = []
        for a in self.archives():
            try:
                out.extend(n for n, _ in a.names())
            except (ImageError, OSError, ValueError):
                continue
        return out

    def close(self) -> None:
        with self._lock:
            for _, a in self._archives.values():
                a.close()
            self._archives.clear()


# -- a local Docker or Podman -------------------------------------------------------------------------------
class LocalDaemon:
    """``docker save`` (or ``podman save``) of an image the local daemon already has; never pulls through
    it. Decided once: the first CLI whose ``info`` answers within 5 s."""

    def __init__(self, tmp_dir: str, clis: tuple[str, ...] = ("docker", "podman")):
        self.tmp_dir = tmp_dir
        self.clis = clis
        self._cli: str | None | Literal[False] = False  # False = not decided yet

    def cli(self) -> str | None:
        if self._cli is False:
            self._cli = None
            for c in self.clis:
                exe = shutil.which(c)
                if not exe:
                    continue
                try:
                    r = subprocess.run(
                        [exe, "info", "--format", "{{.ServerVersion}}"],
                        capture_output=True,
                        timeout=5,
                        stdin=subprocess.DEVNULL,
                    )
                except (OSError, subprocess.TimeoutExpired):
                    continue
                if r.returncode == 0:
                    self._cli = exe
                    break
        return self._cli or None

    def find(self, uri: str, platform: dict[str, str] | None) -> Found | None:
        exe = self.cli()
        if not exe:
            return None
        try:
            r = subprocess.run(
                [exe, "image", "inspect", "--format", "{{.Id}}", "--", uri],
                capture_output=True,
                timeout=15,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired):
            return None
        if r.returncode != 0:
            return None
        os.makedirs(self.tmp_dir, exist_ok=True)
        fd, tar = _mkstemp(self.tmp_dir)
        os.close(fd)
        args = [exe, "save", "-o", tar, "--", uri]
        if os.path.basename(exe) == "podman":
            args[2:2] = ["--format", "docker-archive"]
        try:
            r = subprocess.run(args, capture_output=True, timeout=600, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired):
            os.unlink(tar)
            return None
        if r.returncode != 0:
            os.unlink(tar)
            return None
        a = Archive(tar)
        found = a.find(uri, platform)
        if found is None:  # saved under another spelling of the name: the only image in the archive
            names = a.names()
            if len(names) >= 1:
                kind, loc = names[0][1]
                found = a._docker_entry(uri, loc) if kind == "docker" else a._oci(uri, loc, platform)
        if found is None:
            a.close()
            os.unlink(tar)
            raise ImageNotFound("docker save wrote no image named %s" % uri, ref=uri)
        found.source = "docker"
        found.origin = os.path.basename(exe)
        found.cleanup += [a.close, (lambda: os.unlink(tar))]
        return found


def _mkstemp(d: str) -> tuple[int, str]:
    return tempfile.mkstemp(prefix="save-", suffix=".tar", dir=d)
