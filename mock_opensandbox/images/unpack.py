"""Unpack one image layer (a tar, gzip or plain) into a directory, safely; apply unpacked layers onto a tree
(``flatten``: an image's one tree; commit.py: a snapshot's layer copied into a sandbox root).

Safety: every entry is created through directory file descriptors opened with ``O_NOFOLLOW`` from the layer
root, so nothing is ever written through a symlink. Refused (``UnsafeLayer``, and the caller removes the
half-written directory): absolute names, any ``..`` component, an entry whose parent is a symlink or not a
directory (covers "a symlink, then a file through it"), a hard link whose target is absolute, has ``..`` or
is not an already-unpacked file of the same layer.

Whiteouts (OCI image-spec layer.md): ``.wh.NAME`` deletes NAME of the lower layers, ``.wh..wh..opq`` hides
every lower entry of its directory. They are always listed in the layer's ``layer.json`` (what ``flatten``
applies) and, when the process may (root: ``mknod`` and ``trusted.*`` xattrs), also represented the way
overlayfs reads a lower dir: a 0/0 character device and ``trusted.overlay.opaque=y``.

Device nodes are skipped, as a container runtime without CAP_MKNOD skips them (rootless Docker/Podman);
they are listed in ``layer.json``. Extended attributes in the tar (PAX ``SCHILY.xattr.*``, file
capabilities) are not applied.
"""

from __future__ import annotations

import errno
import gzip
import hashlib
import os
import shutil
import stat
import tarfile
import zlib
from typing import IO, Any, Literal, Protocol, cast, overload

from mock_opensandbox.images.errors import CorruptImage, DigestMismatch, UnsafeLayer, UnsupportedImage
from mock_opensandbox.wire.fsutil import remove_all

GZIP_MAGIC = b"\x1f\x8b"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"
OVERLAY_OPAQUE_XATTR = "trusted.overlay.opaque"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_CHUNK = 1 << 20


class Reader(Protocol):
    """What a layer is read from: a byte stream read front to back (a blob of the image sources, a gzip
    stream, a HashingReader); nothing seeks it."""

    def read(self, n: int = -1, /) -> bytes: ...


class HashingReader:
    """A read-only stream that hashes (sha256) and counts what passes through it."""

    def __init__(self, raw: Reader, limit: int | None = None):
        self.raw = raw
        self.sha = hashlib.sha256()
        self.count = 0
        self.limit = limit

    def read(self, n: int = -1) -> bytes:
        data = self.raw.read(n)
        if data:
            self.sha.update(data)
            self.count += len(data)
            if self.limit is not None and self.count > self.limit:
                raise CorruptImage("layer is larger than the store's limit (%d bytes)" % self.limit)
        return data

    def drain(self) -> None:
        while self.read(_CHUNK):
            pass

    @property
    def digest(self) -> str:
        return "sha256:" + self.sha.hexdigest()


class _Prefixed:
    """A stream whose first bytes were already read (to sniff the compression)."""

    def __init__(self, head: bytes, raw: Reader):
        self.head = head
        self.raw = raw

    def read(self, n: int = -1) -> bytes:
        if self.head:
            if n is None or n < 0:
                out, self.head = self.head + self.raw.read(), b""
                return out
            out, self.head = self.head[:n], self.head[n:]
            if len(out) < n:
                out += self.raw.read(n - len(out))
            return out
        return self.raw.read(n)


def sniff(raw: Reader) -> tuple[str, Reader]:
    """('gzip'|'tar'|'zstd', stream starting at byte 0)."""
    head = raw.read(4)
    stream = _Prefixed(head, raw)
    if head[:2] == GZIP_MAGIC:
        return "gzip", stream
    if head == ZSTD_MAGIC:
        return "zstd", stream
    return "tar", stream


def split_name(name: str, what: str = "entry") -> list[str]:
    """The components of a tar entry name, relative to the layer root; UnsafeLayer for an absolute name
    or a ``..`` component."""
    if name.startswith("/"):
        raise UnsafeLayer("layer %s %r has an absolute path" % (what, name))
    comps = [c for c in name.split("/") if c not in ("", ".")]
    if ".." in comps:
        raise UnsafeLayer("layer %s %r leaves the layer root (..)" % (what, name))
    return comps


class _Root:
    """Operations under one directory, never following a symlink on the way."""

    def __init__(self, path: str):
        self.path = path
        self.fd = os.open(path, _DIR_FLAGS)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1

    @overload
    def parent(self, comps: list[str], *, create: Literal[True], name: str) -> int: ...
    @overload
    def parent(self, comps: list[str], *, create: bool, name: str) -> int | None: ...
    def parent(self, comps: list[str], *, create: bool, name: str) -> int | None:
        """An fd of the directory holding comps[-1] (caller closes it). None when a component is missing
        and create is False. UnsafeLayer when a component is a symlink or not a directory."""
        fd = os.dup(self.fd)
        try:
            for c in comps[:-1]:
                try:
                    nfd = os.open(c, _DIR_FLAGS, dir_fd=fd)
                except FileNotFoundError:
                    if not create:
                        os.close(fd)
                        return None
                    os.mkdir(c, 0o755, dir_fd=fd)
                    nfd = os.open(c, _DIR_FLAGS, dir_fd=fd)
                except OSError as e:
                    if e.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise UnsafeLayer(
                            "layer entry %r goes through a symlink or a non-directory (%s)" % (name, c)
                        ) from None
                    raise
                os.close(fd)
                fd = nfd
            return fd
        except BaseException:
            os.close(fd)
            raise


def _remove(dfd: int, base: str, host_path: str) -> None:
    """Remove base (any type) in directory dfd; host_path is the same entry by name (for rmtree)."""
    try:
        st = os.lstat(base, dir_fd=dfd)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(host_path)
    else:
        os.unlink(base, dir_fd=dfd)


def unpack_layer(
    raw: Reader,
    dest: str,
    *,
    diff_id: str | None = None,
    blob_digest: str | None = None,
    overlay: bool | None = None,
    limit: int | None = None,
) -> dict[str, Any]:
    """Unpack one layer stream into the existing empty directory dest. Verifies blob_digest (sha256 of the
    bytes as stored) and diff_id (sha256 of the uncompressed tar) when given. Returns the layer's
    description (what layer.json holds). The caller removes dest on any exception."""
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    if overlay is None:
        overlay = as_root
    blob = HashingReader(raw)
    kind, stream = sniff(blob)
    if kind == "zstd":
        raise UnsupportedImage(
            "zstd-compressed layers are not supported by the mock's image store "
            "(standard library only: gzip and uncompressed tar)"
        )
    # (the casts: typeshed's fileobj protocols of GzipFile and tarfile.open also name seek, tell and write, for
    # every mode; a read-only stream, read in order ("rb", "r|"), is never asked for them)
    plain = HashingReader(
        gzip.GzipFile(fileobj=cast("IO[bytes]", stream), mode="rb") if kind == "gzip" else stream, limit
    )
    info: dict[str, Any] = {
        "compression": kind,
        "whiteouts": [],
        "opaque": [],
        "skipped_devices": [],
        "size": 0,
        "files": 0,
        "overlay": bool(overlay),
    }
    os.chmod(dest, 0o755)  # "/" of the image unless the layer says otherwise ("./" entry)
    root = _Root(dest)
    dir_modes: list[tuple[list[str], tarfile.TarInfo]] = []
    try:
        try:
            tf = tarfile.open(fileobj=cast("IO[bytes]", plain), mode="r|")
        except tarfile.TarError as e:
            raise CorruptImage("layer is not a tar archive (%s)" % e) from None
        try:
            for m in tf:
                _entry(tf, m, root, info, dir_modes, as_root)
            plain.drain()
            blob.drain()
        except (tarfile.TarError, EOFError, gzip.BadGzipFile, zlib.error) as e:
            raise CorruptImage("layer archive is corrupt (%s)" % e) from None
        for comps, m in reversed(dir_modes):  # after the children: a 0555 dir must not block them
            pfd = root.parent(comps, create=False, name=m.name)
            if pfd is None:
                continue
            try:
                _meta(pfd, comps[-1], m, as_root, is_dir=True)
            finally:
                os.close(pfd)
    finally:
        root.close()
    if blob_digest and blob.digest != blob_digest:
        raise DigestMismatch("layer blob", blob_digest, blob.digest)
    if diff_id and plain.digest != diff_id:
        raise DigestMismatch("layer diff_id", diff_id, plain.digest)
    info["diff_id"] = plain.digest
    info["blob_digest"] = blob.digest
    info["blob_size"] = blob.count
    return info


def _meta(pfd: int, base: str, m: tarfile.TarInfo, as_root: bool, *, is_dir: bool = False) -> None:
    if as_root:
        os.chown(base, m.uid, m.gid, dir_fd=pfd, follow_symlinks=False)
    if not m.issym():
        os.chmod(base, m.mode & 0o7777, dir_fd=pfd)
    if not is_dir:
        try:
            os.utime(base, (m.mtime, m.mtime), dir_fd=pfd, follow_symlinks=False)
        except (OSError, OverflowError, ValueError):
            pass


def _entry(
    tf: tarfile.TarFile,
    m: tarfile.TarInfo,
    root: _Root,
    info: dict[str, Any],
    dir_modes: list[tuple[list[str], tarfile.TarInfo]],
    as_root: bool,
) -> None:
    comps = split_name(m.name)
    if not comps:  # "./": the layer root itself
        if m.isdir():
            if as_root:
                os.chown(root.fd, m.uid, m.gid)
            os.chmod(root.fd, m.mode & 0o7777)
        return
    base = comps[-1]
    rel = "/".join(comps)
    if base == OPAQUE:
        dcomps = comps[:-1]
        info["opaque"].append("/".join(dcomps))
        if dcomps:
            pfd = root.parent(dcomps + ["x"], create=True, name=m.name)
        else:
            pfd = os.dup(root.fd)
        try:
            if info["overlay"]:
                try:
                    os.setxattr(pfd, OVERLAY_OPAQUE_XATTR, b"y")
                except OSError:
                    info["overlay"] = False
        finally:
            os.close(pfd)
        return
    if base.startswith(WHITEOUT):
        target = base[len(WHITEOUT) :]
        if not target or target in (".", ".."):
            raise UnsafeLayer("layer whiteout %r names no entry" % m.name)
        info["whiteouts"].append("/".join(comps[:-1] + [target]))
        if info["overlay"]:
            pfd = root.parent(comps, create=True, name=m.name)
            try:
                _remove(pfd, target, os.path.join(root.path, *comps[:-1], target))
                os.mknod(target, 0o600 | stat.S_IFCHR, os.makedev(0, 0), dir_fd=pfd)
            except PermissionError:
                info["overlay"] = False
            finally:
                os.close(pfd)
        return
    if m.ischr() or m.isblk():
        info["skipped_devices"].append(rel)
        return
    if not (m.isdir() or m.isreg() or m.issym() or m.islnk() or m.isfifo()):
        return  # other types (e.g. GNU volume headers) carry no file
    pfd = root.parent(comps, create=True, name=m.name)
    try:
        host = os.path.join(root.path, *comps)
        if m.isdir():
            try:
                st = os.lstat(base, dir_fd=pfd)
                if not stat.S_ISDIR(st.st_mode):
                    _remove(pfd, base, host)
                    os.mkdir(base, 0o700, dir_fd=pfd)
            except FileNotFoundError:
                os.mkdir(base, 0o700, dir_fd=pfd)
            dir_modes.append((comps, m))
            return
        _remove(pfd, base, host)
        if m.isreg():
            fd = os.open(base, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=pfd)
            try:
                src = tf.extractfile(m)
                left = m.size
                while left > 0 and src is not None:
                    chunk = src.read(min(_CHUNK, left))
                    if not chunk:
                        raise CorruptImage("layer entry %r is cut short" % m.name)
                    _write_all(fd, chunk)
                    left -= len(chunk)
            finally:
                os.close(fd)
            info["size"] += m.size
            info["files"] += 1
        elif m.issym():
            os.symlink(m.linkname, base, dir_fd=pfd)
        elif m.islnk():
            lcomps = split_name(m.linkname, "hard link target")
            if not lcomps:
                raise UnsafeLayer("layer hard link %r points at the layer root" % m.name)
            spfd = root.parent(lcomps, create=False, name=m.linkname)
            if spfd is None:
                raise UnsafeLayer("layer hard link %r -> %r: no such file in the layer" % (m.name, m.linkname))
            try:
                try:
                    st = os.lstat(lcomps[-1], dir_fd=spfd)
                except FileNotFoundError:
                    raise UnsafeLayer(
                        "layer hard link %r -> %r: no such file in the layer" % (m.name, m.linkname)
                    ) from None
                if stat.S_ISDIR(st.st_mode):
                    raise UnsafeLayer("layer hard link %r -> %r is a directory" % (m.name, m.linkname))
                os.link(lcomps[-1], base, src_dir_fd=spfd, dst_dir_fd=pfd, follow_symlinks=False)
            finally:
                os.close(spfd)
            return  # the link shares the target's inode and metadata
        elif m.isfifo():
            os.mkfifo(base, 0o600, dir_fd=pfd)
        _meta(pfd, base, m, as_root)
    finally:
        os.close(pfd)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


# -- applying unpacked layers onto a tree (flatten; a snapshot's restore: commit.py) -------------------------
def real_dir_chain(top: str, comps: list[str]) -> bool:
    """Is every component of comps (under top) a real directory (no symlink)?"""
    p = top
    for c in comps:
        p = os.path.join(p, c)
        try:
            if not stat.S_ISDIR(os.lstat(p).st_mode):
                return False
        except (FileNotFoundError, NotADirectoryError):
            return False
    return True


def _dir_meta(dst: str, st: os.stat_result, as_root: bool) -> None:
    if as_root:
        os.chown(dst, st.st_uid, st.st_gid)
    # non-root keeps its own write bit, or the next layer could not write into a 0555 directory
    os.chmod(dst, stat.S_IMODE(st.st_mode) | (0 if as_root else 0o700))


def apply_layer(lroot: str, info: dict[str, Any], dest: str, *, copy: bool = False) -> None:
    """Apply one unpacked layer (its root directory ``lroot`` and its layer.json ``info``) onto the tree dest:
    opaque directories and whiteouts first, then every entry, directory owners and modes after their children
    (dest's own are left alone). Nothing is written through a symlink of dest: only real directory chains of
    dest are entered or cleared, and whatever stands where an entry goes is removed first.

    ``copy`` false (flatten): regular files are hard links into the layer cache (the tree is read-only like
    the layers). ``copy`` true (a sandbox root restored from a snapshot, commit.py): regular files are copies,
    and files and FIFOs take the layer's mtime too."""
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    for d in info.get("opaque", []):
        comps = split_name(d) if d else []
        if real_dir_chain(dest, comps):
            top = os.path.join(dest, *comps)
            for name in os.listdir(top):
                remove_all(os.path.join(top, name))
    wh = set(info.get("whiteouts", []))
    for w in wh:
        comps = split_name(w)
        if real_dir_chain(dest, comps[:-1]):
            remove_all(os.path.join(dest, *comps))
    dirs: list[tuple[str, os.stat_result]] = []
    for dirpath, dirnames, filenames in os.walk(lroot):
        rel = os.path.relpath(dirpath, lroot)
        rcomps = [] if rel == "." else rel.split(os.sep)
        if not real_dir_chain(dest, rcomps):
            dirnames[:] = []
            continue
        out_dir = os.path.join(dest, *rcomps)
        for name in sorted(dirnames) + sorted(filenames):
            if "/".join(rcomps + [name]) in wh:
                continue  # the overlay representation of a whiteout
            src = os.path.join(dirpath, name)
            dst = os.path.join(out_dir, name)
            st = os.lstat(src)
            if stat.S_ISDIR(st.st_mode):
                try:
                    if not stat.S_ISDIR(os.lstat(dst).st_mode):
                        remove_all(dst)
                        os.mkdir(dst, 0o700)
                except FileNotFoundError:
                    os.mkdir(dst, 0o700)
                dirs.append((dst, st))
                continue  # its owner and mode after its children (below)
            remove_all(dst)
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(src), dst)
            elif stat.S_ISFIFO(st.st_mode):
                os.mkfifo(dst, 0o600)
            elif stat.S_ISREG(st.st_mode):
                if not copy:
                    os.link(src, dst, follow_symlinks=False)
                    continue  # the cache's inode, with its owner, mode and times
                shutil.copyfile(src, dst, follow_symlinks=False)
            else:
                continue
            if as_root:
                os.lchown(dst, st.st_uid, st.st_gid)
            if not stat.S_ISLNK(st.st_mode):
                os.chmod(dst, stat.S_IMODE(st.st_mode))
                if copy:
                    os.utime(dst, ns=(st.st_atime_ns, st.st_mtime_ns))
    for dst, st in reversed(dirs):  # reversed walk order: every directory after all of its descendants
        _dir_meta(dst, st, as_root)


def flatten(layers: list[tuple[str, dict[str, Any]]], dest: str) -> None:
    """Apply the layers (bottom first: (layer root dir, layer.json dict)) into the empty directory dest, which
    takes each layer root's owner and mode as the image's "/". Files are hard links into the layer cache (dest
    is a read-only tree like the layers)."""
    as_root = hasattr(os, "geteuid") and os.geteuid() == 0
    for lroot, info in layers:
        apply_layer(lroot, info, dest)
        _dir_meta(dest, os.lstat(lroot), as_root)
