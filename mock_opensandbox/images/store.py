"""ImageStore: resolve an ``image.uri`` to an unpacked image, once, shared by every sandbox.

Order (QUIRKS.md, Image store): an OCI layout or ``docker save`` tarball in the image dir; a local Docker/Podman that
answers (``docker save``); an OCI distribution pull. A reference already resolved is served from the cache
without asking any source again, as the server's ``_ensure_image_available`` uses a cached image without
pulling (an image-dir archive that changed on disk is read again).

Cache layout (``cache_dir``, mode 0700: it holds the images' setuid files and owners)::

    layers/sha256/<diff_id hex>/root/        the layer's files (whiteouts also as overlayfs reads them, as root)
    layers/sha256/<diff_id hex>/layer.json   whiteouts, opaque dirs, skipped devices, sizes
    images/<config hex>.json                 config + manifest digest + layer list of one image
    refs.json                                reference (+ platform) -> image id
    rootfs/<chain id>/                       the layers flattened (hard links into layers/), on demand
    tmp/<pid>.<random>/                      half-written layers of one store (removed on failure, at close,
                                             and by the next store once that process is gone)
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from mock_opensandbox.images import reference
from mock_opensandbox.images.errors import CorruptImage, ImageError, ImageNotFound
from mock_opensandbox.images.registry import Registry
from mock_opensandbox.images.sources import Found, ImageDir, LocalDaemon, want_platform
from mock_opensandbox.images.unpack import flatten, unpack_layer

CONFIG_KEYS = ("Env", "WorkingDir", "User", "Entrypoint", "Cmd", "Labels", "ExposedPorts", "StopSignal")


@dataclass
class Image:
    """An image in the cache. ``layers`` bottom first; each ``{"diff_id", "path", "size", ...}``."""

    id: str  # config digest (Docker's image ID)
    ref: str  # the reference it was resolved for
    refs: list[str]
    source: str  # image-dir | docker | registry
    origin: str
    digest: str | None  # manifest digest (None for a legacy docker-save entry)
    os: str
    architecture: str
    config: dict[str, Any]  # the image config's "config" object (Env, WorkingDir, User, ...)
    layers: list[dict[str, Any]]
    created: float = field(default_factory=time.time)
    store: "ImageStore | None" = field(default=None, repr=False, compare=False)

    # -- what a runtime needs ----------------------------------------------------------------------
    @property
    def env(self) -> list[str]:
        return list(self.config.get("Env") or [])

    @property
    def working_dir(self) -> str:
        return self.config.get("WorkingDir") or ""

    @property
    def user(self) -> str:
        return self.config.get("User") or ""

    @property
    def entrypoint(self) -> list[str]:
        return list(self.config.get("Entrypoint") or [])

    @property
    def cmd(self) -> list[str]:
        return list(self.config.get("Cmd") or [])

    @property
    def labels(self) -> dict[str, str]:
        return dict(self.config.get("Labels") or {})

    @property
    def size(self) -> int:
        return sum(int(x.get("size", 0)) for x in self.layers)

    @property
    def chain_id(self) -> str:
        """OCI ChainID of the layers (identifies the flattened tree)."""
        chain = ""
        for x in self.layers:
            chain = (
                x["diff_id"]
                if not chain
                else "sha256:" + hashlib.sha256(("%s %s" % (chain, x["diff_id"])).encode()).hexdigest()
            )
        return chain or "sha256:" + hashlib.sha256(b"").hexdigest()

    def layer_dirs(self) -> list[str]:
        """The layers' root directories, bottom first."""
        return [x["path"] for x in self.layers]

    def lowerdirs(self) -> list[str] | None:
        """overlayfs ``lowerdir=`` order (topmost first), or None when a layer's whiteouts could not be
        written the way overlayfs reads them (not root): then use ``rootfs()``."""
        if not all(x.get("overlay") or not (x.get("whiteouts") or x.get("opaque")) for x in self.layers):
            return None
        return list(reversed(self.layer_dirs()))

    def rootfs(self) -> str:
        """One read-only directory with every layer applied (built once per chain id, files hard-linked to
        the layer cache). Never write into it: copy it, or put an overlay on top."""
        assert self.store is not None
        return self.store.flattened(self)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "ref": self.ref,
            "refs": list(self.refs),
            "source": self.source,
            "origin": self.origin,
            "digest": self.digest,
            "os": self.os,
            "architecture": self.architecture,
            "size": self.size,
            "layers": [{"diff_id": x["diff_id"], "size": x.get("size", 0)} for x in self.layers],
            "config": {k: self.config[k] for k in CONFIG_KEYS if k in self.config},
            "created": self.created,
        }


class ImageStore:
    def __init__(
        self,
        cache_dir: str,
        image_dir: str | None = None,
        *,
        local_daemon: bool = True,
        registry: bool = True,
        insecure_registries: tuple[str, ...] = (),
        timeout: float = 30.0,
        overlay: bool | None = None,
        registry_client: Registry | None = None,
    ):
        self.cache_dir = os.path.abspath(cache_dir)
        os.makedirs(self.cache_dir, mode=0o700, exist_ok=True)
        os.chmod(self.cache_dir, 0o700)
        for d in ("layers/sha256", "images", "rootfs", "tmp"):
            os.makedirs(os.path.join(self.cache_dir, d), exist_ok=True)
        # several mocks may share one cache (parallel test runs): each writes under tmp/<pid>.<random>/ and
        # removes what dead processes left there; a finished layer is renamed into place (first one wins)
        _reap_tmp(os.path.join(self.cache_dir, "tmp"))
        self.tmp_dir = tempfile.mkdtemp(prefix="%d." % os.getpid(), dir=os.path.join(self.cache_dir, "tmp"))
        self.image_dir = ImageDir(image_dir) if image_dir else None
        self.daemon = LocalDaemon(self.tmp_dir) if local_daemon else None
        self.registry = registry_client or (
            Registry(insecure=tuple(insecure_registries), timeout=timeout) if registry else None
        )
        self.overlay = overlay
        self._lock = threading.Lock()
        self._key_locks: dict[str, threading.Lock] = {}
        self._refs: dict[str, dict[str, Any]] = self._load_refs()
        # images() is read on every change of the dashboard's state: its listing is kept until this process
        # adds or removes an image (the generation) or another process's store changes a record
        self._generation = 0
        self._listing: tuple[Any, list[dict[str, Any]]] | None = None

    # -- sources ------------------------------------------------------------------------------------
    def sources(self) -> list[str]:
        out = []
        if self.image_dir:
            out.append("image-dir")
        if self.daemon and self.daemon.cli():
            out.append(os.path.basename(self.daemon.cli() or ""))
        if self.registry:
            out.append("registry")
        return out

    def _find(self, uri: str, platform: dict[str, str] | None, auth: dict[str, str] | None) -> Found:
        if self.image_dir:
            f = self.image_dir.find(uri, platform)
            if f is not None:
                return f
        if self.daemon:
            f = self.daemon.find(uri, platform)
            if f is not None:
                return f
        if self.registry:
            return self.registry.find(uri, platform, auth)
        raise ImageNotFound(
            "no image named %s in the image sources (%s)" % (uri, ", ".join(self.sources()) or "none"), ref=uri
        )

    # -- resolve ------------------------------------------------------------------------------------
    def _ref_key(self, uri: str, platform: dict[str, str] | None) -> str:
        try:
            name = str(reference.parse(uri))
        except ValueError:
            name = uri
        p = want_platform(platform)
        return "%s|%s/%s" % (name, p["os"], p["architecture"])

    def _key_lock(self, key: str) -> threading.Lock:
        with self._lock:
            return self._key_locks.setdefault(key, threading.Lock())

    def cached(self, uri: str, platform: dict[str, str] | None = None) -> Image | None:
        """The image a reference resolved to before, if its layers are all still in the cache."""
        rec = self._refs.get(self._ref_key(uri, platform))
        if not rec:
            return None
        if rec.get("archive"):  # an archive that changed is read again; one that is gone leaves the image
            path, key = rec["archive"]  # in the cache (as a pulled image stays in Docker)
            try:
                st = os.stat(path)
                if [st.st_mtime_ns, st.st_size] != key:
                    return None
            except OSError:
                pass
        img = self._load_image(rec["id"])
        if img is None or not all(os.path.isdir(x["path"]) for x in img.layers):
            return None
        img.ref = uri
        return img

    def resolve(self, uri: str, auth: dict[str, str] | None = None, platform: dict[str, str] | None = None) -> Image:
        """The image for uri, unpacked: from the cache, else from the first source that has it.
        Raises an ImageError subclass (never with a credential in it)."""
        try:
            reference.parse(uri)
        except ValueError as e:
            raise ImageNotFound("invalid reference format: %s" % e, ref=uri) from None
        key = self._ref_key(uri, platform)
        with self._key_lock(key):
            img = self.cached(uri, platform)
            if img is not None:
                return img
            found = self._find(uri, platform, auth)
            try:
                img = self._install(found)
            finally:
                found.close()
            rec: dict[str, Any] = {"id": img.id, "at": time.time()}
            if found.source == "image-dir":  # re-read when the archive (a layout: its index) changes
                marker = found.origin
                if os.path.isdir(marker):
                    marker = next(
                        (
                            os.path.join(marker, n)
                            for n in ("index.json", "manifest.json")
                            if os.path.isfile(os.path.join(marker, n))
                        ),
                        marker,
                    )
                st = os.stat(marker)
                rec["archive"] = [marker, [st.st_mtime_ns, st.st_size]]
            with self._lock:
                self._refs[key] = rec
                self._save_refs()
            return img

    def _install(self, found: Found) -> Image:
        layers = []
        for lr in found.layers:
            layers.append(self._layer(lr, found.ref))
        cfg = found.config
        img = Image(
            id=found.config_digest,
            ref=found.ref,
            refs=[found.ref],
            source=found.source,
            origin=found.origin,
            digest=found.manifest_digest,
            os=cfg.get("os", ""),
            architecture=cfg.get("architecture", ""),
            config=dict(cfg.get("config") or {}),
            layers=layers,
            store=self,
        )
        old = self._load_image(img.id)
        if old is not None:
            img.refs = sorted(set(old.refs) | {found.ref})
            img.created = old.created
        self.put_image(img)
        return img

    def _layer(self, lr: Any, uri: str) -> dict[str, Any]:
        hexd = _hex(lr.diff_id, "layer diff_id", uri)
        final = os.path.join(self.cache_dir, "layers", "sha256", hexd)
        with self._key_lock("layer:" + hexd):
            info = _read_json(os.path.join(final, "layer.json"))
            if info is not None and os.path.isdir(os.path.join(final, "root")):
                return _layer_view(final, info)
            shutil.rmtree(final, ignore_errors=True)
            tmp = tempfile.mkdtemp(prefix="layer-", dir=self.tmp_dir)
            try:
                os.mkdir(os.path.join(tmp, "root"))
                with lr.open() as raw:
                    info = unpack_layer(
                        raw,
                        os.path.join(tmp, "root"),
                        diff_id=lr.diff_id,
                        blob_digest=lr.blob_digest,
                        overlay=self.overlay,
                    )
                info["media_type"] = lr.media_type
                _write_json(os.path.join(tmp, "layer.json"), info)
                if not _rename_into_place(tmp, final):  # another process unpacked it meanwhile
                    info = _read_json(os.path.join(final, "layer.json")) or info
            except ImageError as e:
                if not e.ref:
                    e.ref = uri
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            return _layer_view(final, info)

    # -- flattened trees ------------------------------------------------------------------------------
    def flattened(self, img: Image) -> str:
        chain = _hex(img.chain_id, "chain id", img.ref)
        final = os.path.join(self.cache_dir, "rootfs", chain)
        with self._key_lock("rootfs:" + chain):
            if os.path.isdir(final):
                return final
            tmp = tempfile.mkdtemp(prefix="rootfs-", dir=self.tmp_dir)
            try:
                os.chmod(tmp, 0o755)
                flatten([(x["path"], x) for x in img.layers], tmp)
                _rename_into_place(tmp, final)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            return final

    # -- admin ----------------------------------------------------------------------------------------
    def images(self) -> list[dict[str, Any]]:
        """Every image in the cache (newest first): id, refs, digest, size, source, layers. Read from the
        image records again only after a change (``put_image``/``drop_image``/``clear`` here, or a record
        added, replaced or removed by another process sharing the cache); each call gets its own dicts."""
        # the key is taken before the records are read (a change meanwhile makes the next call read again):
        # this store's generation, and each record's name and inode (a record is replaced, never rewritten
        # in place, so another process's add, remove or update shows as a new name or inode; no stat needed)
        with os.scandir(os.path.join(self.cache_dir, "images")) as it:
            records = tuple(sorted((e.name, e.inode()) for e in it if e.name.endswith(".json")))
        key = (self._generation, records)
        listing = self._listing
        if listing is None or listing[0] != key:
            out = []
            for n, _ino in records:
                img = self._load_image("sha256:" + n[:-5])
                if img is not None:
                    out.append(img.as_dict())
            out.sort(key=lambda d: d["created"], reverse=True)
            listing = self._listing = (key, out)
        return [dict(d) for d in listing[1]]

    def put_image(self, img: Image) -> None:
        """Write the image's record (its config and layer ids with it): the image is in the cache."""
        rec = img.as_dict()
        rec["config"] = img.config
        rec["layer_ids"] = [x["diff_id"] for x in img.layers]
        _write_json(self._image_path(img.id), rec)
        self._bump()

    def drop_image(self, image_id: str) -> None:
        """Remove the image's record (its layers and tree are the caller's: commit.remove)."""
        try:
            os.unlink(self._image_path(image_id))
        except OSError:
            pass
        self._bump()

    def _bump(self) -> None:
        with self._lock:
            self._generation += 1

    def clear(self) -> None:
        """Forget every image and layer (for ``/__mock__/reset`` when asked to drop the cache)."""
        with self._lock:
            for d in ("layers/sha256", "images", "rootfs"):
                p = os.path.join(self.cache_dir, d)
                shutil.rmtree(p, ignore_errors=True)
                os.makedirs(p, exist_ok=True)
            self._refs = {}
            self._save_refs()
            self._generation += 1

    def close(self) -> None:
        if self.image_dir:
            self.image_dir.close()
        shutil.rmtree(self.tmp_dir, ignore_errors=True)

    # -- files ----------------------------------------------------------------------------------------
    def _image_path(self, image_id: str) -> str:
        return os.path.join(self.cache_dir, "images", _hex(image_id, "image id", "") + ".json")

    def _load_image(self, image_id: str) -> Image | None:
        rec = _read_json(self._image_path(image_id))
        if not rec:
            return None
        layers = []
        for d in rec.get("layer_ids", []):
            p = os.path.join(self.cache_dir, "layers", "sha256", d.split(":", 1)[-1])
            info = _read_json(os.path.join(p, "layer.json"))
            if info is None:
                return None
            layers.append(_layer_view(p, info))
        return Image(
            id=rec["id"],
            ref=rec["ref"],
            refs=rec.get("refs", [rec["ref"]]),
            source=rec["source"],
            origin=rec["origin"],
            digest=rec.get("digest"),
            os=rec.get("os", ""),
            architecture=rec.get("architecture", ""),
            config=rec.get("config") or {},
            layers=layers,
            created=rec.get("created", 0.0),
            store=self,
        )

    def _load_refs(self) -> dict[str, dict[str, Any]]:
        d = _read_json(os.path.join(self.cache_dir, "refs.json"))
        return d if isinstance(d, dict) else {}

    def _save_refs(self) -> None:
        _write_json(os.path.join(self.cache_dir, "refs.json"), self._refs)


def _rename_into_place(tmp: str, final: str) -> bool:
    """Rename tmp to final; False (and tmp removed) when final already exists."""
    try:
        os.rename(tmp, final)
        return True
    except OSError:
        if not os.path.isdir(final):
            raise
        shutil.rmtree(tmp, ignore_errors=True)
        return False


def _reap_tmp(tmp_root: str) -> None:
    """Remove tmp/<pid>.* directories of processes that no longer exist."""
    try:
        names = os.listdir(tmp_root)
    except OSError:
        return
    for n in names:
        pid = n.split(".", 1)[0]
        if pid.isdigit() and os.path.exists("/proc/%s" % pid):
            continue
        shutil.rmtree(os.path.join(tmp_root, n), ignore_errors=True)


def _layer_view(path: str, info: dict[str, Any]) -> dict[str, Any]:
    out = dict(info)
    out["path"] = os.path.join(path, "root")
    return out


def _hex(digest: str, what: str, uri: str) -> str:
    alg, _, hexd = (digest or "").partition(":")
    if alg != "sha256" or len(hexd) != 64 or any(c not in "0123456789abcdef" for c in hexd):
        raise CorruptImage("%s %r is not a sha256 digest" % (what, (digest or "")[:80]), ref=uri)
    return hexd


def _read_json(path: str) -> Any:
    try:
        with open(path, "rb") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _write_json(path: str, obj: Any) -> None:
    tmp = "%s.%d.%d.tmp" % (path, os.getpid(), threading.get_ident())
    with open(tmp, "w") as f:
        json.dump(obj, f, sort_keys=True)
    os.replace(tmp, path)
