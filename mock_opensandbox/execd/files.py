"""Files and directories API of the mock execd, on top of SandboxRuntime.resolve() (never leaves the
sandbox root). Messages and status codes follow recording 13/18 and execd's
pkg/web/controller/{filesystem.go,filesystem_upload.go,filesystem_download.go,utils.go}; see
QUIRKS.md (part 2). Paths in answers are sandbox paths.
"""
from __future__ import annotations

import email.utils
import errno
import grp
import os
import posixpath
import pwd
import re
import shutil
import stat
from typing import Any
from urllib.parse import quote

from .. import httpcore, multipart
from ..gojson import GoJSONError, Struct, check_struct, decode_value, go_time, kind_of, unmarshal_value
from ..httpcore import Request
from . import gin
from .errors import ExecdError

__all__ = ["FilesAPI", "FileOpError", "sandbox_abs", "glob_match", "file_info"]

UMASK = 0o022  # a container's default umask: Go's MkdirAll/OpenFile(0777) give 0755 (recording 13: data.csv 755)


FileOpError = ExecdError  # the files half's name for it (kept for callers)


def _errtext(exc: OSError) -> str:
    msg = os.strerror(exc.errno) if exc.errno else str(exc)
    return msg[:1].lower() + msg[1:]


def _perr(op: str, path: str, exc: OSError) -> str:
    """Go's *PathError text: "lstat /tmp/x: no such file or directory"."""
    return f"{op} {path}: {_errtext(exc)}"


def _as_oserror(exc: Exception) -> OSError:
    """A path the root mapping refuses (ValueError: NUL byte, loop...) reads like Go's EINVAL error."""
    return OSError(errno.EINVAL, str(exc)) if isinstance(exc, ValueError) else exc


def _not_exist(exc: BaseException) -> bool:
    return isinstance(exc, OSError) and exc.errno == errno.ENOENT


def sandbox_abs(path: str) -> str:
    """pathutil.ExpandAbsPath: "~" -> /root, relative -> from "/", then Clean."""
    if path == "~" or path.startswith("~/"):
        path = "/root" + path[1:]
    p = posixpath.normpath("/" + path) if not path.startswith("/") else posixpath.normpath(path)
    if p.startswith("//"):
        p = "/" + p.lstrip("/")
    return p


def expand(path: str) -> str:
    """pathutil.ExpandPath: only "~" (no Clean, no Abs); the mock still maps it from "/"."""
    if path == "~" or path.startswith("~/"):
        return "/root" + path[1:]
    return path


def _owner(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _ftype(st: os.stat_result) -> str:
    if stat.S_ISLNK(st.st_mode):
        return "symlink"
    if stat.S_ISDIR(st.st_mode):
        return "directory"
    if stat.S_ISREG(st.st_mode):
        return "file"
    return "other"


def file_info(spath: str, st: os.stat_result) -> dict[str, Any]:
    """model.FileInfo (recording 13): mode is the permission bits written as octal digits."""
    return {"path": spath, "type": _ftype(st), "size": st.st_size,
            "modified_at": go_time(st.st_mtime_ns), "created_at": go_time(st.st_ctime_ns),
            "owner": _owner(st.st_uid), "group": _group(st.st_gid),
            "mode": int(oct(stat.S_IMODE(st.st_mode) & 0o777)[2:])}


def _octal_mode(mode: int) -> int:
    """strconv.ParseUint(strconv.Itoa(mode), 8, 32)."""
    text = str(mode)
    if not re.fullmatch(r"[0-7]+", text) or int(text, 8) >= 1 << 32:
        raise ValueError(f'strconv.ParseUint: parsing "{text}": invalid syntax')
    return int(text, 8)


# ---------------------------------------------------------------------------------------------
# glob (execd pkg/util/glob.PathMatch, doublestar semantics, matched against the base name)

def _segment_regex(seg: str) -> str:
    out, i = [], 0
    while i < len(seg):
        c = seg[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\":
            i += 1
            if i >= len(seg):
                raise ValueError("syntax error in pattern")
            out.append(re.escape(seg[i]))
        elif c == "[":
            j = i + 1
            neg = False
            if j < len(seg) and seg[j] in "^!":
                neg, j = True, j + 1
            cls = []
            first = True
            while j < len(seg) and (seg[j] != "]" or first):
                ch = seg[j]
                if ch == "\\":
                    j += 1
                    if j >= len(seg):
                        raise ValueError("syntax error in pattern")
                    ch = seg[j]
                cls.append(re.escape(ch) if ch != "-" else "-")
                first = False
                j += 1
            if j >= len(seg) or not cls:
                raise ValueError("syntax error in pattern")
            out.append("[" + ("^" if neg else "") + "".join(cls) + "]")
            i = j
        elif c == "{":
            j = seg.find("}", i)
            if j < 0:
                raise ValueError("syntax error in pattern")
            alts = seg[i + 1:j].split(",")
            out.append("(?:" + "|".join(_segment_regex(a) for a in alts) + ")")
            i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def glob_match(pattern: str, name: str) -> bool:
    """doublestar.PathMatch(pattern, name); raises ValueError("syntax error in pattern")."""
    segs = pattern.split("/")
    regs = [None if s == "**" else re.compile(_segment_regex(s) + r"\Z", re.S) for s in segs]
    parts = name.split("/")

    def m(i: int, j: int) -> bool:
        if i == len(regs):
            return j == len(parts)
        r = regs[i]
        if r is None:
            return any(m(i + 1, k) for k in range(j, len(parts) + 1))
        return j < len(parts) and bool(r.match(parts[j])) and m(i + 1, j + 1)

    return m(0, 0)


# ---------------------------------------------------------------------------------------------


class _Replies:
    """Gin replies under the names the files half used before the reshaping."""

    @staticmethod
    def _err(req: Request, status: int, code: str, message: str) -> None:
        gin.error_reply(req, ExecdError(status, code, message))

    @staticmethod
    def _ok(req: Request) -> None:
        gin.ok(req)


class FilesAPI:
    def __init__(self, runtime: Any):
        self.s = _Replies()
        self.rt = runtime

    # helpers
    def host(self, spath: str, follow: bool = True) -> str:
        return self.rt.resolve(spath, follow_symlinks=follow)

    def _json(self, req: Request, status: int, obj: Any) -> None:
        gin.json_reply(req, status, obj)

    def _err(self, req: Request, e: FileOpError) -> None:
        self.s._err(req, e.status, e.code, e.message)

    def _file_error(self, msg: str, exc: BaseException) -> FileOpError:
        """controller handleFileError: ErrNotExist -> 404 FILE_NOT_FOUND, else 500 RUNTIME_ERROR."""
        if _not_exist(exc):
            return FileOpError(404, "FILE_NOT_FOUND", f"file not found. {msg}")
        return FileOpError(500, "RUNTIME_ERROR", f"error accessing file: {msg}")

    # -- info ------------------------------------------------------------------------------------
    def info(self, req: Request) -> None:
        out: dict[str, Any] = {}
        for p in req.query.get("path", []):
            ap = sandbox_abs(p)
            try:
                st = os.lstat(self.host(ap, follow=False))
            except (OSError, ValueError) as exc:
                exc = _as_oserror(exc)
                if _not_exist(exc):
                    self._err(req, FileOpError(404, "FILE_NOT_FOUND",
                                               f"file not found. file not found: {p}: {_perr('lstat', ap, exc)}"))
                else:
                    self._err(req, FileOpError(500, "RUNTIME_ERROR",
                                               f"error accessing file: error accessing file {p}: {_perr('lstat', ap, exc)}"))
                return
            out[p] = file_info(ap, st)
        self._json(req, 200, out)

    # -- download --------------------------------------------------------------------------------
    def download(self, req: Request) -> None:
        p = req.q("path") or ""
        if not p:
            self.s._err(req, 400, "MISSING_QUERY", "missing query parameter 'path'")
            return
        rp = expand(p)
        offset, limit = req.q("offset"), req.q("limit")
        if offset or limit:
            if not offset or not limit:
                self.s._err(req, 400, "INVALID_REQUEST_BODY",
                            "both offset and limit must be provided together for line-based reading")
                return
            if not re.fullmatch(r"[+-]?\d+", offset) or int(offset) < 1:
                self.s._err(req, 400, "INVALID_REQUEST_BODY", "offset must be a positive integer (1-based)")
                return
            if not re.fullmatch(r"[+-]?\d+", limit) or int(limit) < 1:
                self.s._err(req, 400, "INVALID_REQUEST_BODY", "limit must be a positive integer")
                return
        try:
            hp = self.host(sandbox_abs(rp))
            fh = open(hp, "rb")
        except (OSError, ValueError) as exc:
            exc = _as_oserror(exc)
            self._err(req, self._file_error(_perr("open", rp, exc), exc))
            return
        with fh:
            st = os.fstat(fh.fileno())
            if stat.S_ISDIR(st.st_mode):
                # [choice] Go's ServeContent fails reading a directory; answer a typed error
                self._err(req, FileOpError(500, "RUNTIME_ERROR", f"error accessing file: read {rp}: is a directory"))
                return
            if offset and limit:
                self._lines(req, fh, int(offset), int(limit))
                return
            size = st.st_size
            name = posixpath.basename(rp.rstrip("/")) or "/"
            headers = {"Content-Disposition": _disposition(name)}
            rng = req.headers.get("Range")
            if rng:
                ranges = _parse_range(rng, size)
                if ranges is None:
                    self._json(req, 416, {"code": "UNKNOWN"})
                    return
                if ranges:
                    start, length = ranges[0]
                    headers["Content-Range"] = f"bytes {start}-{start + length - 1}/{size}"
                    fh.seek(start)
                    self._send_stream(req, 206, fh, length, headers)
                    return
                # every range starts past the end: net/http ServeContent answers 416
                req.send(416, b"invalid range: failed to overlap\n", "text/plain; charset=utf-8",
                         {"Content-Range": f"bytes */{size}", "X-Content-Type-Options": "nosniff"})
                return
            headers["Accept-Ranges"] = "bytes"
            headers["Last-Modified"] = email.utils.formatdate(st.st_mtime, usegmt=True)
            ims = req.headers.get("If-Modified-Since")
            if ims:
                try:
                    t = email.utils.parsedate_to_datetime(ims).timestamp()
                    if int(st.st_mtime) <= t:
                        req.send(304, b"", None, {"Last-Modified": headers["Last-Modified"]})
                        return
                except (TypeError, ValueError, IndexError):
                    pass
            self._send_stream(req, 200, fh, size, headers)

    def _lines(self, req: Request, fh, offset: int, limit: int) -> None:
        out = bytearray()
        n = 0
        for i, line in enumerate(fh, start=1):
            if n >= limit:
                break
            if i >= offset:
                out += line
                n += 1
        req.send(200, bytes(out), "text/plain")

    def _send_stream(self, req: Request, status: int, fh, length: int, headers: dict[str, str]) -> None:
        h = req.handler
        all_headers = {"Content-Type": "application/octet-stream"}
        all_headers.update(headers)
        all_headers["Content-Length"] = str(length)
        h.send_response(status)
        for k, v in all_headers.items():
            h.send_header(k, v)
        h.end_headers()
        req.responded = True
        capture = bool(httpcore.OBSERVERS)
        if capture:
            req.sent_status, req.sent_headers = status, all_headers
        if req.method == "HEAD":
            return
        left = length
        while left > 0:
            chunk = fh.read(min(left, 1 << 16))
            if not chunk:
                break
            h.wfile.write(chunk)
            if capture:
                req.sent_body += chunk
            left -= len(chunk)
        if left:  # the file shrank while we sent it: the framing is broken, drop the connection
            h.close_connection = True

    # -- upload ----------------------------------------------------------------------------------
    def upload(self, req: Request) -> None:
        boundary = multipart.boundary_from_content_type(req.headers.get("Content-Type"))
        parts: list[multipart.Part] = []
        try:
            if boundary is None:
                raise multipart.MultipartError("not multipart")
            parts = multipart.parse(req.body, boundary)
        except (multipart.MultipartError, ValueError, OSError):
            self.s._err(req, 400, "INVALID_FILE", "multipart form is empty")
            return
        metas = [p for p in parts if p.is_file and p.name == "metadata"]
        files = [p for p in parts if p.is_file and p.name == "file"]
        if not metas:
            self.s._err(req, 400, "INVALID_FILE_METADATA", "metadata file is missing")
            return
        if not files:
            self.s._err(req, 400, "INVALID_FILE_CONTENT", "file is missing")
            return
        if len(metas) != len(files):
            self.s._err(req, 400, "INVALID_FILE", f"metadata and file count mismatch: {len(metas)} vs {len(files)}")
            return
        for meta_part, file_part in zip(metas, files):
            try:
                self._upload_one(meta_part, file_part)
            except FileOpError as e:
                self._err(req, e)
                return
        self.s._ok(req)

    def _upload_one(self, meta_part: multipart.Part, file_part: multipart.Part) -> None:
        fields = {"path": "string", "owner": "string", "group": "string", "mode": "int"}
        try:
            meta = check_struct(unmarshal_value(bytes(meta_part.data)), Struct("model.FileMetadata", fields))
        except GoJSONError as exc:
            raise FileOpError(400, "INVALID_FILE_METADATA", f"invalid metadata format. {exc}") from exc
        target = meta.get("path") or ""
        if not target:
            raise FileOpError(400, "INVALID_FILE_METADATA", "metadata path is empty")
        spath = expand(target)
        sdir = posixpath.dirname(spath) or "."
        owner, group, mode = meta.get("owner") or "", meta.get("group") or "", int(meta.get("mode") or 0)
        try:
            self._mkdir_all(sandbox_abs(sdir), owner, group)
        except OSError as exc:
            raise FileOpError(500, "RUNTIME_ERROR", f"error creating target directory {sdir}. {_perr('mkdir', sdir, exc)}") from exc
        except LookupError as exc:
            raise FileOpError(500, "RUNTIME_ERROR", f"error creating target directory {sdir}. {exc}") from exc
        try:
            hp = self.host(sandbox_abs(spath))
            created = not os.path.lexists(hp)
            fd = os.open(hp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0), 0o777 & ~UMASK)
            with os.fdopen(fd, "wb") as out:
                out.write(file_part.data)
            if created:
                os.chmod(hp, 0o777 & ~UMASK)
        except (OSError, ValueError) as exc:
            exc = _as_oserror(exc)
            raise FileOpError(500, "RUNTIME_ERROR",
                              f"error opening destination file {spath}. {_perr('open', spath, exc)}") from exc
        try:
            self._chmod(spath, mode, owner, group)
        except (OSError, ValueError, LookupError) as exc:
            raise FileOpError(500, "RUNTIME_ERROR", f"error chmoding file {spath}. {_chmod_text(spath, exc)}") from exc

    def _mkdir_all(self, sdir: str, owner: str = "", group: str = "") -> list[str]:
        """os.MkdirAll(0777 &^ umask) inside the root; returns the sandbox dirs it created."""
        created: list[str] = []
        cur = "/"
        for comp in [c for c in sdir.split("/") if c]:
            cur = posixpath.join(cur, comp)
            hp = self.host(cur)
            try:
                st = os.stat(hp)
            except FileNotFoundError:
                try:
                    os.mkdir(hp, 0o777 & ~UMASK)
                except FileExistsError:
                    # another request made it meanwhile: like os.MkdirAll, a directory that exists now is fine
                    st = os.stat(hp)
                else:
                    os.chmod(hp, 0o777 & ~UMASK)
                    created.append(cur)
                    continue
            if not stat.S_ISDIR(st.st_mode):
                raise NotADirectoryError(errno.ENOTDIR, "not a directory", cur)
        if created and (owner or group):
            for d in created:
                self._chown(d, owner, group)
        return created

    def _chown(self, spath: str, owner: str, group: str) -> None:
        if not owner and not group:
            return
        uid = gid = -1
        if owner:
            try:
                uid = pwd.getpwnam(owner).pw_uid
            except KeyError:
                raise LookupError(f"failed to lookup user {owner}: user: unknown user {owner}") from None
        if group:
            try:
                gid = grp.getgrnam(group).gr_gid
            except KeyError:
                raise LookupError(f"failed to lookup group {group}: group: unknown group {group}") from None
        try:
            os.chown(self.host(spath), uid, gid)
        except OSError as exc:
            raise LookupError(f"failed to set owner/group for {spath}: {_perr('chown', spath, exc)}") from exc

    def _chmod(self, spath: str, mode: int, owner: str, group: str) -> None:
        """ChmodFile: mode 0 means "leave it"; digits are octal; then owner/group."""
        ap = sandbox_abs(spath)
        if mode:
            m = _octal_mode(mode)
            os.chmod(self.host(ap), m & 0o7777)
        self._chown(ap, owner, group)

    # -- mv --------------------------------------------------------------------------------------
    def mv(self, req: Request) -> None:
        items = self._decode_list(req, "[]model.RenameFileItem", "RenameFileItem", {"src": "string", "dest": "string"})
        if items is None:
            return
        for it in items:
            src, dest = sandbox_abs(it.get("src") or ""), sandbox_abs(it.get("dest") or "")
            try:
                try:
                    hs = self.host(src, follow=False)
                    os.stat(self.host(src))
                except FileNotFoundError as exc:
                    raise self._file_error(f"source path not found: {it.get('src') or ''}: {_perr('stat', src, exc)}", exc)
                try:
                    self._mkdir_all(posixpath.dirname(dest))
                except OSError as exc:
                    raise FileOpError(500, "RUNTIME_ERROR", "error accessing file: failed to create destination "
                                      f"directory: {_perr('mkdir', posixpath.dirname(dest), exc)}")
                hd = self.host(dest)
                if os.path.exists(hd):
                    raise FileOpError(500, "RUNTIME_ERROR",
                                      f"error accessing file: destination path already exists: {it.get('dest') or ''}")
                if hs == self.rt.root:
                    raise OSError(errno.EBUSY, "device or resource busy")
                hd = self.host(dest, follow=False)
                try:
                    os.rename(hs, hd)
                except OSError as exc:
                    raise FileOpError(500, "RUNTIME_ERROR",
                                      f"error accessing file: failed to rename file: rename {src} {dest}: {_errtext(exc)}")
            except FileOpError as e:
                self._err(req, e)
                return
            except (OSError, ValueError) as exc:
                exc = _as_oserror(exc)
                self._err(req, self._file_error(f"failed to rename file: rename {src} {dest}: {_errtext(exc)}", exc))
                return
        self.s._ok(req)

    def _decode_list(self, req: Request, gotype: str, elem: str, fields: dict[str, str]) -> list[dict[str, Any]] | None:
        try:
            v = decode_value(req.body)
        except GoJSONError as exc:
            self.s._err(req, 400, "INVALID_REQUEST_BODY", f"error parsing request, MAYBE invalid body format. {exc}")
            return None
        if v is None:
            return []
        if not isinstance(v, list):
            self.s._err(req, 400, "INVALID_REQUEST_BODY", "error parsing request, MAYBE invalid body format. "
                        f"json: cannot unmarshal {_kind(v)} into Go value of type {gotype}")
            return None
        out = []
        for el in v:
            if el is None:
                out.append({})
                continue
            try:
                out.append(check_struct(el, Struct(f"model.{elem}", fields)))
            except GoJSONError as exc:
                self.s._err(req, 400, "INVALID_REQUEST_BODY", f"error parsing request, MAYBE invalid body format. {exc}")
                return None
        return out

    def _decode_map(self, req: Request, gotype: str, elem: str, fields: dict[str, str]) -> dict[str, dict[str, Any]] | None:
        try:
            v = decode_value(req.body)
        except GoJSONError as exc:
            self.s._err(req, 400, "INVALID_REQUEST_BODY", f"error parsing request, MAYBE invalid body format. {exc}")
            return None
        if v is None:
            return {}
        if not isinstance(v, dict):
            self.s._err(req, 400, "INVALID_REQUEST_BODY", "error parsing request, MAYBE invalid body format. "
                        f"json: cannot unmarshal {_kind(v)} into Go value of type {gotype}")
            return None
        out: dict[str, dict[str, Any]] = {}
        for k, el in v.items():
            if el is None:
                out[k] = {}
                continue
            try:
                out[k] = check_struct(el, Struct(f"model.{elem}", fields))
            except GoJSONError as exc:
                self.s._err(req, 400, "INVALID_REQUEST_BODY", f"error parsing request, MAYBE invalid body format. {exc}")
                return None
        return out

    # -- delete ----------------------------------------------------------------------------------
    def delete_files(self, req: Request) -> None:
        for p in req.query.get("path", []):
            ap = sandbox_abs(p)
            try:
                try:
                    st = os.stat(self.host(ap))
                except FileNotFoundError:
                    continue  # missing is fine (recording 13: second delete 200)
                if stat.S_ISDIR(st.st_mode):
                    raise FileOpError(500, "RUNTIME_ERROR", f"error removing file {p}. path is a directory: {p}")
                hp = self.host(ap, follow=False)
                if hp == self.rt.root:
                    raise FileOpError(500, "RUNTIME_ERROR", f"error removing file {p}. path is a directory: {p}")
                os.remove(hp)
            except FileOpError as e:
                self._err(req, e)
                return
            except (OSError, ValueError) as exc:
                exc = _as_oserror(exc)
                self.s._err(req, 500, "RUNTIME_ERROR", f"error removing file {p}. failed to remove file: {_perr('remove', ap, exc)}")
                return
        self.s._ok(req)

    def delete_dirs(self, req: Request) -> None:
        for p in req.query.get("path", []):
            ap = sandbox_abs(expand(p))
            try:
                hp = self.host(ap, follow=False)
                if hp == self.rt.root:
                    for name in os.listdir(hp):
                        _remove_all(os.path.join(hp, name))
                else:
                    _remove_all(hp)
            except (OSError, ValueError) as exc:
                exc = _as_oserror(exc)
                self.s._err(req, 500, "RUNTIME_ERROR", f"error removing directory {p}. {_perr('unlinkat', ap, exc)}")
                return
        self.s._ok(req)

    # -- directories -----------------------------------------------------------------------------
    def mkdirs(self, req: Request) -> None:
        m = self._decode_map(req, "map[string]model.Permission", "Permission",
                             {"owner": "string", "group": "string", "mode": "int"})
        if m is None:
            return
        for d, perm in m.items():
            ap = sandbox_abs(d)
            try:
                existed = os.path.exists(self.host(ap))
                self._mkdir_all(ap, perm.get("owner") or "", perm.get("group") or "")
                mode = int(perm.get("mode") or 0)
                if not existed and mode:
                    try:
                        os.chmod(self.host(ap), _octal_mode(mode))
                    except ValueError as exc:
                        raise FileOpError(500, "RUNTIME_ERROR", f"error accessing file: {exc}") from exc
            except FileOpError as e:
                self._err(req, e)
                return
            except LookupError as exc:
                self.s._err(req, 500, "RUNTIME_ERROR", f"error accessing file: {exc}")
                return
            except (OSError, ValueError) as exc:
                exc = _as_oserror(exc)
                where = getattr(exc, "filename", None) or ap
                self._err(req, self._file_error(_perr("mkdir", where, exc), exc))
                return
        self.s._ok(req)

    def list_dir(self, req: Request) -> None:
        p = req.q("path") or ""
        if not p:
            self.s._err(req, 400, "MISSING_QUERY", "missing query parameter 'path'")
            return
        depth = 1
        raw = req.q("depth")
        if raw:
            if not re.fullmatch(r"[+-]?\d+", raw) or int(raw) < 0:
                self.s._err(req, 400, "INVALID_REQUEST_BODY", f"invalid query parameter 'depth': {raw}")
                return
            depth = int(raw)
        ap = sandbox_abs(p)
        try:
            st = os.lstat(self.host(ap, follow=False))
        except (OSError, ValueError) as exc:
            exc = _as_oserror(exc)
            self._err(req, self._file_error(_perr("lstat", ap, exc), exc))
            return
        if stat.S_ISLNK(st.st_mode):
            self.s._err(req, 400, "INVALID_REQUEST_BODY", f"path is a symbolic link, refusing to traverse: {ap}")
            return
        if not stat.S_ISDIR(st.st_mode):
            self.s._err(req, 400, "INVALID_REQUEST_BODY", f"path is not a directory: {ap}")
            return
        entries: list[dict[str, Any]] = []
        try:
            if depth > 0:
                self._walk(ap, 0, depth, entries)
        except OSError as exc:
            self.s._err(req, 500, "RUNTIME_ERROR", f"error listing directory {ap}. {_perr('open', ap, exc)}")
            return
        self._json(req, 200, entries)

    def _walk(self, sdir: str, cur: int, maxd: int, out: list[dict[str, Any]]) -> None:
        hdir = self.host(sdir, follow=False)
        for name in sorted(os.listdir(hdir)):
            sp = posixpath.join(sdir, name)
            try:
                st = os.lstat(os.path.join(hdir, name))
            except FileNotFoundError:
                continue
            out.append(file_info(sp, st))
            if stat.S_ISDIR(st.st_mode) and cur + 1 < maxd:
                self._walk(sp, cur + 1, maxd, out)

    # -- search ----------------------------------------------------------------------------------
    def search(self, req: Request) -> None:
        p = req.q("path") or ""
        if not p:
            self.s._err(req, 400, "MISSING_QUERY", "missing query parameter 'path'")
            return
        ap = sandbox_abs(p)
        try:
            st = os.stat(self.host(ap))
        except (OSError, ValueError) as exc:
            exc = _as_oserror(exc)
            self._err(req, self._file_error(_perr("stat", ap, exc), exc))
            return
        pattern = req.q("pattern") or "**"
        try:
            glob_match(pattern, "x")
        except ValueError:
            self.s._err(req, 500, "RUNTIME_ERROR", f"error searching files. invalid pattern {pattern}: syntax error in pattern")
            return
        found: list[dict[str, Any]] = []
        root_host = self.host(ap)

        def walk(sp: str, hp: str, st0: os.stat_result) -> None:
            if not stat.S_ISDIR(st0.st_mode):
                if glob_match(pattern, posixpath.basename(sp) or sp):
                    found.append(file_info(sp, st0))
                return
            try:
                names = sorted(os.listdir(hp))
            except OSError:
                return
            for n in names:
                child = os.path.join(hp, n)
                try:
                    cst = os.lstat(child)
                except OSError:
                    continue
                walk(posixpath.join(sp, n), child, cst)

        walk(ap, root_host, st if stat.S_ISDIR(st.st_mode) else os.lstat(root_host))
        self._json(req, 200, found)

    # -- permissions / replace -------------------------------------------------------------------
    def permissions(self, req: Request) -> None:
        m = self._decode_map(req, "map[string]model.Permission", "Permission",
                             {"owner": "string", "group": "string", "mode": "int"})
        if m is None:
            return
        for f, perm in m.items():
            try:
                self._chmod(f, int(perm.get("mode") or 0), perm.get("owner") or "", perm.get("group") or "")
            except (OSError, ValueError, LookupError) as exc:
                self.s._err(req, 500, "RUNTIME_ERROR", f"error changing permissions for {f}. {_chmod_text(sandbox_abs(f), exc)}")
                return
        self.s._ok(req)

    def replace(self, req: Request) -> None:
        verbose = req.q("verbose") == "true"
        m = self._decode_map(req, "map[string]model.ReplaceFileContentItem", "ReplaceFileContentItem",
                             {"old": "string", "new": "string"})
        if m is None:
            return
        results: dict[str, Any] = {}
        for f, item in m.items():
            ap = sandbox_abs(f)
            try:
                hp = self.host(ap)
                st = os.stat(hp)
                with open(hp, "rb") as fh:
                    content = fh.read()
            except (OSError, ValueError) as exc:
                exc = _as_oserror(exc)
                self._err(req, self._file_error(_perr("stat", ap, exc), exc))
                return
            old, new = item.get("old") or "", item.get("new") or ""
            if not old:
                self.s._err(req, 400, "INVALID_REQUEST_BODY", "old content must not be empty")
                return
            ob, nb = old.encode("utf-8"), new.encode("utf-8")
            try:
                with open(hp, "wb") as fh:
                    fh.write(content.replace(ob, nb))
                os.chmod(hp, stat.S_IMODE(st.st_mode))
            except OSError as exc:
                self._err(req, self._file_error(_perr("open", ap, exc), exc))
                return
            if verbose:
                results[f] = {"replacedCount": content.count(ob)}
        if verbose:
            self._json(req, 200, results)
        else:
            self.s._ok(req)


def _chmod_text(spath: str, exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return _perr("chmod", spath, exc)
    return str(exc.args[0] if exc.args else exc)


_kind = kind_of


def _disposition(name: str) -> str:
    if all(ord(c) < 128 for c in name):
        return f'attachment; filename="{name}"'
    enc = quote(name, safe="!$&'()*+,;=:@-._~")
    return f"attachment; filename=\"{enc}\"; filename*=UTF-8''{enc}"


def _parse_range(s: str, size: int) -> list[tuple[int, int]] | None:
    """execd controller/utils.go ParseRange: None = invalid; [] = nothing satisfiable."""
    if not s.startswith("bytes="):
        return None
    out: list[tuple[int, int]] = []
    for ra in s[6:].split(","):
        ra = ra.strip()
        if not ra:
            continue
        if "-" not in ra:
            return None
        a, b = (x.strip() for x in ra.split("-", 1))
        if a == "":
            if not re.fullmatch(r"\+?\d+", b):
                return None
            n = min(int(b), size)
            start, length = size - n, n
        else:
            if not re.fullmatch(r"\+?\d+", a):
                return None
            start = int(a)
            if b == "":
                length = size - start
            else:
                if not re.fullmatch(r"\+?\d+", b) or int(b) < start:
                    return None
                length = int(b) - start + 1
        if start >= size:
            continue
        length = min(length, size - start)
        out.append((start, length))
    return out


def _remove_all(hp: str) -> None:
    """os.RemoveAll: missing is fine, symlinks are removed not followed."""
    try:
        st = os.lstat(hp)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(hp)
    else:
        os.unlink(hp)
