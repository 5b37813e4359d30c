"""A snapshot's content side: commit what a sandbox wrote as a new layer and image in the image store, and put
a committed layer back into a sandbox root that does not run on an image (docs/IMAGES.md; QUIRKS.md, Snapshots).

What Docker's ``container.commit`` does (server ``services/docker/snapshot_runtime.py``): the container's
writable layer becomes one new layer on top of the image's layers, its config (``Env``, ``Labels``, ...)
becomes the new image's config. Here the writable layer comes from ``SandboxRuntime.changes_dir()`` ->
``(path, kind)``:

* ``overlay``: an overlayfs upper dir; a 0/0 character device is a whiteout, a directory with
  ``trusted.overlay.opaque=y`` is opaque. Everything in it is a change.
* ``full``: a whole copied root; compared with the image's flattened tree (``Image.rootfs()``): an entry
  whose type, mode, owner, size, mtime or link target differ is a change (Docker's naive diff, directories
  compared without size and mtime), an entry of the image that is gone is a whiteout.
* ``host-tools``: the sandbox root of the host-tools view (no image): compared the same way with a fresh root
  as ``runtime/_util.make_image_root`` makes it; the host's directories the view mounts over it
  (``SYSTEM_DIRS``: ``/usr``, ``/bin``, ``/etc``, ...) are not the sandbox's and are left out.

Never in a layer (Docker: bind mounts, its init layer, and the execd the server copies in before every start):
``/etc/hostname``, ``/etc/hosts``, ``/etc/resolv.conf``, ``/opt/opensandbox``, ``/.dockerenv``, empty ``/dev``,
``/proc``, ``/sys``.

The change set is written as a plain tar (OCI whiteouts ``.wh.NAME`` / ``.wh..wh..opq``) and unpacked into
the cache by the store's own unpacker (``unpack.py``): the same path checks, the same owner/mode handling
(owners kept as root only; extended attributes not kept), a real ``diff_id``. The sandbox is paused while
this runs (a commit pauses the container), and every file is opened with ``O_NOFOLLOW``.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tarfile
import tempfile
import time
from typing import IO, Any, Callable, Iterator

from mock_opensandbox.images.store import Image, ImageStore, _read_json
from mock_opensandbox.images.unpack import OPAQUE, OVERLAY_OPAQUE_XATTR, WHITEOUT, apply_layer, real_dir_chain
from mock_opensandbox.runtime._util import SYSTEM_DIRS, make_image_root

KINDS = ("overlay", "full", "host-tools")
NEVER = ("etc/hostname", "etc/hosts", "etc/resolv.conf", "opt/opensandbox", ".dockerenv")
MOUNT_POINTS = ("dev", "proc", "sys")
SNAPSHOT_REPOSITORY = "opensandbox-snapshots"  # server services/docker/snapshot_runtime.py
LABEL_SNAPSHOT = "mock-opensandbox.snapshot-id"
LABEL_VIEW = "mock-opensandbox.view"
LABEL_LAYER = "mock-opensandbox.layer"
LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar"


class CommitError(RuntimeError):
    """The commit could not be made (the message becomes the snapshot's Failed message)."""


def changes_of(runtime: Any) -> tuple[str, str]:
    """``runtime.changes_dir()``, checked."""
    path, kind = runtime.changes_dir()
    if kind not in KINDS:
        raise CommitError("unknown kind of changes directory: %r" % (kind,))
    return path, kind


def snapshot_ref(snapshot_id: str) -> str:
    return "%s:%s" % (SNAPSHOT_REPOSITORY, snapshot_id)


# -- the change set ------------------------------------------------------------------------------------------
def _excluded(rel: str, kind: str) -> bool:
    if any(rel == n or rel.startswith(n + "/") for n in NEVER):
        return True
    if kind == "host-tools":
        return rel.split("/", 1)[0] in SYSTEM_DIRS
    return False


def _lstat(path: str) -> os.stat_result | None:
    try:
        return os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None


def _same(a: os.stat_result, b: os.stat_result, pa: str, pb: str) -> bool:
    if stat.S_IFMT(a.st_mode) != stat.S_IFMT(b.st_mode):
        return False
    if (stat.S_IMODE(a.st_mode), a.st_uid, a.st_gid) != (stat.S_IMODE(b.st_mode), b.st_uid, b.st_gid):
        return False
    if stat.S_ISDIR(a.st_mode):
        return True
    if stat.S_ISLNK(a.st_mode):  # its target is what counts (a fresh root's links are younger)
        return os.readlink(pa) == os.readlink(pb)
    return a.st_size == b.st_size and int(a.st_mtime) == int(b.st_mtime)


def changes(path: str, kind: str, base: str | None) -> Iterator[tuple[str, str, os.stat_result | None]]:
    """(rel, what, stat) of every change, parents before children; what: "entry" | "whiteout" | "opaque"."""
    for dirpath, dirnames, filenames in os.walk(path):
        rel_dir = os.path.relpath(dirpath, path)
        rel_dir = "" if rel_dir == "." else rel_dir.replace(os.sep, "/")
        base_dir = base is not None and real_dir_chain(base, rel_dir.split("/") if rel_dir else [])
        keep = []
        present = set(dirnames) | set(filenames)  # os.walk lists a symlink to a directory under dirnames
        for name in sorted(dirnames) + sorted(filenames):
            rel = rel_dir + "/" + name if rel_dir else name
            if _excluded(rel, kind):
                continue
            full = os.path.join(dirpath, name)
            st = _lstat(full)
            if st is None:
                continue
            if not rel_dir and name in MOUNT_POINTS and stat.S_ISDIR(st.st_mode) and not os.listdir(full):
                continue  # an empty mount point the runtime made (Docker's init layer; not committed)
            if kind == "overlay":
                if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
                    yield rel, "whiteout", None
                    continue
                yield rel, "entry", st
                if stat.S_ISDIR(st.st_mode):
                    keep.append(name)
                    try:
                        if os.getxattr(full, OVERLAY_OPAQUE_XATTR, follow_symlinks=False) == b"y":
                            yield rel, "opaque", None
                    except OSError:
                        pass
                continue
            bfull = os.path.join(base, rel) if base else None
            bst = _lstat(bfull) if bfull and base_dir else None
            if bst is None or bfull is None or not _same(st, bst, full, bfull):  # bfull is set when bst is
                yield rel, "entry", st
            if stat.S_ISDIR(st.st_mode):
                keep.append(name)
        dirnames[:] = [d for d in dirnames if d in keep]
        if kind != "overlay" and base is not None and base_dir:  # gone since the base: whiteouts
            try:
                gone = sorted(set(os.listdir(os.path.join(base, rel_dir))) - present)
            except OSError:
                gone = []
            for name in gone:
                rel = rel_dir + "/" + name if rel_dir else name
                if not _excluded(rel, kind):
                    yield rel, "whiteout", None


def write_tar(path: str, kind: str, base: str | None, out: Any) -> int:
    """The change set of path as an uncompressed tar on out (a binary stream tarfile only writes to); returns how
    many entries."""
    n = 0
    links: dict[tuple[int, int], str] = {}
    with tarfile.open(fileobj=out, mode="w|", format=tarfile.PAX_FORMAT) as tf:
        for rel, what, st in changes(path, kind, base):
            n += 1
            if what != "entry":
                d, _, name = rel.rpartition("/")
                wh_name = rel + "/" + OPAQUE if what == "opaque" else ((d + "/") if d else "") + WHITEOUT + name
                ti = tarfile.TarInfo(wh_name)
                ti.mode = 0o644
                tf.addfile(ti)
                continue
            assert st is not None
            full = os.path.join(path, rel)
            ti = tarfile.TarInfo(rel)
            ti.mode = stat.S_IMODE(st.st_mode)
            ti.uid, ti.gid = st.st_uid, st.st_gid
            ti.mtime = int(st.st_mtime)
            if stat.S_ISDIR(st.st_mode):
                ti.type = tarfile.DIRTYPE
                tf.addfile(ti)
            elif stat.S_ISLNK(st.st_mode):
                ti.type = tarfile.SYMTYPE
                ti.linkname = os.readlink(full)
                tf.addfile(ti)
            elif stat.S_ISFIFO(st.st_mode):
                ti.type = tarfile.FIFOTYPE
                tf.addfile(ti)
            elif stat.S_ISREG(st.st_mode):
                key = (st.st_dev, st.st_ino)
                if st.st_nlink > 1 and key in links:
                    ti.type = tarfile.LNKTYPE
                    ti.linkname = links[key]
                    tf.addfile(ti)
                    continue
                try:
                    fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
                except OSError:
                    n -= 1
                    continue  # gone, or not readable by the mock: Docker would fail; the mock leaves it out
                with os.fdopen(fd, "rb") as f:
                    real = os.fstat(f.fileno())
                    if not stat.S_ISREG(real.st_mode):
                        n -= 1
                        continue
                    ti.size = real.st_size
                    tf.addfile(ti, _Exact(f, real.st_size))
                if st.st_nlink > 1:
                    links[key] = rel
            else:
                n -= 1  # sockets, devices: not in a layer (the unpacker skips devices too)
    return n


class _Exact:
    """A file read as exactly ``size`` bytes (a file that shrank is padded, one that grew is cut), so that the
    tar header stays true."""

    def __init__(self, f: IO[bytes], size: int):
        self.f, self.left = f, size

    def read(self, n: int = -1) -> bytes:
        if self.left <= 0:
            return b""
        want = self.left if n is None or n < 0 else min(n, self.left)
        data = self.f.read(want)
        if len(data) < want:
            data += b"\0" * (want - len(data))
        self.left -= len(data)
        return data


class _HashingWriter:
    """A write-only stream that hashes (sha256) what passes through it on its way to ``f``: the layer's
    diff_id in the same pass that writes it (tarfile's stream mode only writes)."""

    def __init__(self, f: IO[bytes]):
        self.f = f
        self.sha = hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.sha.update(data)
        return self.f.write(data)


# -- the store side ------------------------------------------------------------------------------------------
class _TarLayer:
    def __init__(self, path: str, diff_id: str):
        self.path, self.diff_id, self.blob_digest, self.media_type = path, diff_id, None, LAYER_MEDIA_TYPE

    def open(self) -> Any:
        return open(self.path, "rb")


def _host_tools_base(tmp: str) -> str:
    base = os.path.join(tmp, "base")
    os.mkdir(base, 0o755)
    make_image_root(base)
    return base


def commit(
    store: ImageStore,
    runtime: Any,
    snapshot_id: str,
    *,
    base: Image | None,
    env: dict[str, str],
    labels: dict[str, str],
) -> Image:
    """Commit the sandbox's changes as a new image in store: base's layers (none in the host-tools view) +
    one new layer; config from base with the container's Env and Labels. Raises CommitError."""
    path, kind = changes_of(runtime)
    tmp = tempfile.mkdtemp(prefix="commit-", dir=store.tmp_dir)
    try:
        if kind == "host-tools":
            base_tree: str | None = _host_tools_base(tmp)
            parent_layers: list[dict[str, Any]] = []
        else:
            if base is None:
                raise CommitError("a %s changes directory needs the sandbox's image" % kind)
            base_tree = base.rootfs() if kind == "full" else None
            parent_layers = list(base.layers)
        tar_path = os.path.join(tmp, "layer.tar")
        with open(tar_path, "wb") as f:
            out = _HashingWriter(f)
            write_tar(path, kind, base_tree, out)
        diff_id = "sha256:" + out.sha.hexdigest()
        layer = store._layer(_TarLayer(tar_path, diff_id), snapshot_ref(snapshot_id))
    except (OSError, ValueError, tarfile.TarError) as e:
        raise CommitError("cannot commit the sandbox's file system: %s" % e) from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    config = dict(base.config) if base is not None else {}
    merged = dict(e.split("=", 1) for e in (base.env if base is not None else []) if "=" in e)
    merged.update(env)  # the container's Config.Env: the image's, then the container's own
    config["Env"] = ["%s=%s" % kv for kv in merged.items()]
    config["Labels"] = dict(
        config.get("Labels") or {}, **labels, **{LABEL_SNAPSHOT: snapshot_id, LABEL_VIEW: kind, LABEL_LAYER: diff_id}
    )
    layers = parent_layers + [layer]
    doc: dict[str, Any] = {
        "architecture": base.architecture if base else "",
        "os": base.os if base else "linux",
        "config": config,
        "created": time.time(),
        "rootfs": {"type": "layers", "diff_ids": [x["diff_id"] for x in layers]},
    }
    image_id = "sha256:" + hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()
    ref = snapshot_ref(snapshot_id)
    img = Image(
        id=image_id,
        ref=ref,
        refs=[ref],
        source="snapshot",
        origin=snapshot_id,
        digest=None,
        os=doc["os"],
        architecture=doc["architecture"],
        config=config,
        layers=layers,
        store=store,
    )
    store.put_image(img)
    return img


def remove(img: Image) -> None:
    """Forget a committed image: its record, its flattened tree, and its own layer unless another image of
    the cache uses it (a snapshot restored and snapshotted again shares it, as Docker's parent images do)."""
    store = img.store
    if store is None:
        return
    store.drop_image(img.id)
    chain = img.chain_id.split(":", 1)[-1]
    shutil.rmtree(os.path.join(store.cache_dir, "rootfs", chain), ignore_errors=True)
    own = (img.config.get("Labels") or {}).get(LABEL_LAYER)
    if not own:
        return
    images_dir = os.path.join(store.cache_dir, "images")
    for n in os.listdir(images_dir):
        rec = _read_json(os.path.join(images_dir, n)) if n.endswith(".json") else None
        if isinstance(rec, dict) and own in (rec.get("layer_ids") or []):
            return
    shutil.rmtree(os.path.join(store.cache_dir, "layers", "sha256", own.split(":", 1)[-1]), ignore_errors=True)


# -- restore into a host-tools root --------------------------------------------------------------------------
def restore_layer(img: Image) -> dict[str, Any] | None:
    """The layer a host-tools sandbox restored from img gets copied in (its own, topmost host-tools layer:
    it holds the whole state against a fresh root), or None when img is not a host-tools commit."""
    labels = img.config.get("Labels") or {}
    if labels.get(LABEL_VIEW) != "host-tools":
        return None
    own = labels.get(LABEL_LAYER)
    return next((x for x in img.layers if x["diff_id"] == own), None)


# -- the mock's glue (server.py) -----------------------------------------------------------------------------
class Committer:
    """``snapshots.SnapshotStore``'s committer and remover over an image store: the mock's own (its
    ``--image-dir`` store) or, without one, a store of the mock's own under its root that goes with it
    (``store_factory`` makes it on the first snapshot)."""

    def __init__(self, store_factory: Callable[[], ImageStore]):
        self._factory = store_factory
        self._store: ImageStore | None = None

    @property
    def store(self) -> ImageStore:
        if self._store is None:
            self._store = self._factory()
        return self._store

    def __call__(self, sb: Any, snap: Any) -> Image:
        runtime = sb.runtime
        if runtime is None:
            raise CommitError("Sandbox %s has no container to commit." % sb.id)
        env = dict(snap.env)
        env["OPENSANDBOX_ID"] = sb.id
        return commit(self.store, runtime, snap.id, base=sb.rootfs_image, env=env, labels=dict(snap.metadata))

    def remove(self, img: Image) -> None:
        remove(img)


def restore_into(sb: Any, runtime: Any) -> None:
    """A sandbox restored from a snapshot of the host-tools view: copy the snapshot's layer into its root
    before anything runs there (an image-based runtime runs ``sb.rootfs_image``, the snapshot's image, itself)."""
    img = getattr(sb, "snapshot_image", None)
    if img is None or changes_of(runtime)[1] != "host-tools":
        return
    layer = restore_layer(img)
    if layer is not None:
        # copies, never hard links into the cache; nothing written through a symlink of the root
        apply_layer(layer["path"], layer, runtime.root, copy=True)
