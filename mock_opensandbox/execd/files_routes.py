"""The HTTP side of the mock execd's files and directories API: query/body decoding and Gin's
replies around the model in execd/files.py (which does the file work and raises ExecdError).
Download follows execd's filesystem_download.go and net/http's ServeContent (conditional requests,
Range) as the real binary shows them (tiers/diff files.download), with the HTTP text fsops leaves out:
execd's and net/http's Range parsers and the Content-Disposition of a download. See QUIRKS.md (part 2).
"""

from __future__ import annotations

import email.utils
import os
import posixpath
import re
import threading
from typing import Any
from urllib.parse import quote

from mock_opensandbox.execd import gin, linerange
from mock_opensandbox.execd.connection import cork
from mock_opensandbox.execd.errors import (
    INVALID_FILE,
    INVALID_FILE_CONTENT,
    INVALID_FILE_METADATA,
    INVALID_REQUEST,
    ExecdError,
    bad_body,
    missing_query,
)
from mock_opensandbox.execd.files import SandboxFS
from mock_opensandbox.execd.fsat import _DirHandle
from mock_opensandbox.runtime import SandboxRuntime
from mock_opensandbox.wire import formdata as multipart
from mock_opensandbox.wire import http1 as httpcore
from mock_opensandbox.wire.gojson import GoJSONError, Struct, check_struct, decode_value, kind_of, unmarshal_value
from mock_opensandbox.wire.http1 import Request
from mock_opensandbox.wire.listener import SendfileRefused

__all__ = ["FilesRoutes", "execd_parse_range", "go_parse_range", "content_disposition"]


SPOOL_BYTES = 1 << 20  # an upload part's data above this goes to an unnamed temporary file
PERMISSION = {"owner": "string", "group": "string", "mode": "int"}
RENAME_ITEM = Struct("model.RenameFileItem", {"src": "string", "dest": "string"})
FILE_METADATA = Struct("model.FileMetadata", dict(PERMISSION, path="string"))
PERMISSIONS = ("map[string]model.Permission", Struct("model.Permission", PERMISSION))


def _ptr(key: str) -> str:
    """One JSON-pointer token as Go's v2-based errors print a map key or index (~0, ~1)."""
    return key.replace("~", "~0").replace("/", "~1")


def _decode_container(body: bytes, gotype: str, elem: Struct, as_list: bool) -> Any:
    """bindJSON into []model.X or map[string]model.X; errors name the element by pointer path
    (`Go struct field .~1tmp~1a.mode of type int`, `.0.src`; tiers/diff directories.make, files.mv)."""
    try:
        v = decode_value(body)
    except GoJSONError as exc:
        raise bad_body(exc) from exc
    if v is None:
        return [] if as_list else {}
    if not isinstance(v, list if as_list else dict):
        raise bad_body(f"json: cannot unmarshal {kind_of(v)} into Go value of type {gotype}")
    items = enumerate(v) if isinstance(v, list) else v.items()  # a list exactly when as_list (checked above)
    out: Any = [] if as_list else {}
    for k, el in items:
        try:
            val = {} if el is None else check_struct(el, elem, "." + _ptr(str(k)))
        except GoJSONError as exc:
            raise bad_body(exc) from exc
        if as_list:
            out.append(val)
        else:
            out[k] = val
    return out


class FilesRoutes:
    def __init__(self, runtime: SandboxRuntime, stopping: threading.Event | None = None):
        self.rt = runtime
        self.fs = SandboxFS(runtime)
        self._stopping = stopping or threading.Event()  # set when the sandbox's execd goes

    # -- info / delete --------------------------------------------------------------------------
    def info(self, req: Request) -> None:
        gin.json_reply(req, 200, self.fs.info(req.query.get("path", [])))

    def delete_files(self, req: Request) -> None:
        _each(req.query.get("path", []), self.fs.delete_file, req)

    def delete_dirs(self, req: Request) -> None:
        _each(req.query.get("path", []), self.fs.remove_dir, req)

    # -- directories ----------------------------------------------------------------------------
    def mkdirs(self, req: Request) -> None:
        _each(_decode_container(req.body, *PERMISSIONS, False).items(), self.fs.make_dir, req)

    def list_dir(self, req: Request) -> None:
        p = _required_path(req)
        depth = 1
        raw = req.q("depth")
        if raw:
            v = _atoi(raw)
            if v is None or v < 0:
                raise ExecdError(400, INVALID_REQUEST, f"invalid query parameter 'depth': {raw}")
            depth = v
        gin.json_reply(req, 200, self.fs.list_dir(p, depth))

    def search(self, req: Request) -> None:
        gin.json_reply(req, 200, self.fs.search(_required_path(req), req.q("pattern") or ""))

    # -- mv / permissions / replace -------------------------------------------------------------
    def mv(self, req: Request) -> None:
        items = _decode_container(req.body, "[]model.RenameFileItem", RENAME_ITEM, True)
        _each([(it.get("src") or "", it.get("dest") or "") for it in items], self.fs.rename, req)

    def permissions(self, req: Request) -> None:
        _each(_decode_container(req.body, *PERMISSIONS, False).items(), self.fs.chmod, req)

    def replace(self, req: Request) -> None:
        verbose = req.q("verbose") == "true"
        m = _decode_container(
            req.body,
            "map[string]model.ReplaceFileContentItem",
            Struct("model.ReplaceFileContentItem", {"old": "string", "new": "string"}),
            False,
        )
        results: dict[str, Any] = {}
        for f, item in m.items():
            n = self.fs.replace(f, item.get("old") or "", item.get("new") or "")
            if verbose:
                results[f] = {"replacedCount": n}
        if verbose:
            gin.json_reply(req, 200, results)
        else:
            gin.ok(req)

    # -- upload ---------------------------------------------------------------------------------
    def upload(self, req: Request) -> None:
        """The form is read as it arrives, each part's data past SPOOL_BYTES in an unnamed temporary
        file (Gin's ParseMultipartForm keeps 32 MiB in memory, the rest on disk), so memory does not
        grow with the upload; the targets are written once the whole form parsed (execd pairs the
        metadata and file parts by index first)."""
        boundary = multipart.boundary_from_content_type(req.headers.get("Content-Type"))
        parts: list[multipart.Part] = []
        try:
            try:
                if boundary is None:
                    raise multipart.MultipartError("not multipart")
                parser = multipart.MultipartParser(boundary, spool_at=SPOOL_BYTES)
                req.stream_body(lambda chunk: parts.extend(parser.feed(chunk)))
                parts += parser.close()
            except (multipart.MultipartError, ValueError, OSError):
                req.handler.close_connection = True  # the rest of the body is left unread
                raise ExecdError(400, INVALID_FILE, "multipart form is empty") from None
            self._store(parts)
        finally:
            for p in parts:
                p.close()
        gin.ok(req)

    def _store(self, parts: list[multipart.Part]) -> None:
        metas = [p for p in parts if p.is_file and p.name == "metadata"]
        files = [p for p in parts if p.is_file and p.name == "file"]
        if not metas:
            raise ExecdError(400, INVALID_FILE_METADATA, "metadata file is missing")
        if not files:
            raise ExecdError(400, INVALID_FILE_CONTENT, "file is missing")
        if len(metas) != len(files):
            raise ExecdError(400, INVALID_FILE, f"metadata and file count mismatch: {len(metas)} vs {len(files)}")
        for meta_part, file_part in zip(metas, files, strict=True):
            try:
                meta = check_struct(unmarshal_value(b"".join(meta_part.chunks())), FILE_METADATA)
            except GoJSONError as exc:
                raise ExecdError(400, INVALID_FILE_METADATA, f"invalid metadata format. {exc}") from exc
            self.fs.upload(meta.get("path") or "", file_part.chunks(), meta)

    # -- download -------------------------------------------------------------------------------
    def download(self, req: Request) -> None:
        p = _required_path(req)
        raw_offset, raw_limit = req.q("offset") or "", req.q("limit") or ""
        line_mode = bool(raw_offset or raw_limit)
        rng = req.headers.get("Range") or ""
        if line_mode and rng:
            raise ExecdError(
                400,
                INVALID_REQUEST,
                "line-based reading (offset/limit) and byte range (Range header) are mutually exclusive",
            )
        rp, fh = self.fs.open_for_download(p)
        with fh:
            if line_mode:
                self._lines(req, fh, raw_offset, raw_limit)
                return
            # a directory: os.Open works, Seek(0, io.SeekEnd) gives its "size" (GO_DIR_SIZE), the headers go out
            # and the first Read fails, so the body is cut off at 0 bytes (QUIRKS.md, "Download of a directory")
            is_dir = isinstance(fh, _DirHandle)
            st = fh.stat() if is_dir else _fstat(fh)
            size = GO_DIR_SIZE if is_dir else st.st_size
            headers = {
                "Content-Type": "application/octet-stream",
                "Content-Disposition": content_disposition(posixpath.basename(rp.rstrip("/")) or "/"),
                "Content-Length": str(size),
            }
            if rng:
                ranges = execd_parse_range(rng, size)
                if ranges is None:
                    # RespondError(416, UNKNOWN) with the download headers already set: Content-Type and
                    # Content-Length (the file size) stay; Go writes the JSON only if it fits in that
                    # length, and the short body ends with the connection (tiers/diff gen.range)
                    _send_head(req, 416, headers, close=True)
                    body = b'{"code":"UNKNOWN"}'
                    if len(body) <= size and req.method != "HEAD":
                        req.handler.wfile.write(body)
                    return
                if ranges:
                    start, length = ranges[0]
                    headers["Content-Range"] = f"bytes {start}-{start + length - 1}/{size}"
                    headers["Content-Length"] = str(length)
                    if is_dir:
                        _send_head(req, 206, headers, close=req.method != "HEAD")
                        return
                    _send_file(req, 206, headers, fh, start, length)
                    return
            self._serve_content(req, fh, headers, size, st.st_mtime, is_dir)

    def _serve_content(
        self, req: Request, fh: Any, headers: dict[str, str], size: int, mtime: float, is_dir: bool
    ) -> None:
        """net/http ServeContent (Go 1.27) for what execd leaves to it."""
        last_mod = email.utils.formatdate(int(mtime), usegmt=True)
        headers["Last-Modified"] = last_mod
        rng = req.headers.get("Range") or ""
        cond = _preconditions(req, int(mtime))
        if cond == "not-modified":
            for k in ("Content-Type", "Content-Length", "Content-Encoding"):
                headers.pop(k, None)
            _send_head(req, 304, headers)
            return
        if cond == "precondition-failed":
            _serve_error(req, headers, 412, "Precondition Failed\n")
            return
        if cond == "ignore-range" or "," in rng:
            # a Range with several parts (even empty ones, "-0,,") is ignored by the binary's
            # ServeContent: 200 with the whole file, never multipart/byteranges (tiers/diff gen.range)
            rng = ""
        try:
            ranges = go_parse_range(rng, size)
        except NoOverlap:
            if size == 0:
                ranges = []
            else:
                headers["Content-Range"] = f"bytes */{size}"
                _serve_error(req, headers, 416, "invalid range: failed to overlap\n")
                return
        if ranges is None:
            _serve_error(req, headers, 416, "invalid range\n")
            return
        if sum(n for _, n in ranges) > size:
            ranges = []
        status, start, length = 200, 0, size
        if len(ranges) == 1:
            start, length = ranges[0]
            status = 206
            headers["Content-Range"] = f"bytes {start}-{start + length - 1}/{size}"
        headers["Accept-Ranges"] = "bytes"
        headers["Content-Length"] = str(length)
        if is_dir:  # the headers go out, the copy fails at once: an empty, cut-off body (HEAD copies nothing)
            _send_head(req, status, headers, close=req.method != "HEAD")
            return
        _send_file(req, status, headers, fh, start, length)

    def _lines(self, req: Request, fh: Any, raw_offset: str, raw_limit: str) -> None:
        """serveLineRange: 1-based offset (default 1), limit (default all), lines without their
        "\\r\\n" joined by "\\n"; text/plain; charset=utf-8, Go's buffering decides the framing."""
        offset, limit = 1, -1
        if raw_offset:
            v = _parse_int64(raw_offset)
            if v is None or v < 1:
                raise ExecdError(400, INVALID_REQUEST, f"invalid query parameter 'offset': {raw_offset}")
            offset = v
        if raw_limit:
            v = _parse_int64(raw_limit)
            if v is None or v < 1:
                raise ExecdError(400, INVALID_REQUEST, f"invalid query parameter 'limit': {raw_limit}")
            limit = v
        out = linerange.GoWriter(req, "text/plain; charset=utf-8")
        if linerange.line_range(fh, offset, limit, out, linerange.Gone(req, self._stopping)):
            out.close()
        else:
            req.handler.close_connection = True  # the client left or the sandbox went: nothing more is sent


# Seek(0, io.SeekEnd) on an open directory: ext4's htree end and Docker's overlay answer 2**63 - 1 (live through the
# official SDK: "received 0 bytes, expected 9223372036854775807"; the binary, tiers/diff files.download "directory")
GO_DIR_SIZE = (1 << 63) - 1


def _required_path(req: Request) -> str:
    """The ``path`` query parameter, which the controller requires (400 MISSING_QUERY without it)."""
    p = req.q("path") or ""
    if not p:
        raise missing_query("path")
    return p


def _each(items: Any, op: Any, req: Request) -> None:
    """``op`` on every item in order (a tuple item is its arguments), the first error answering; then
    RespondSuccess(nil)."""
    for it in items:
        op(*it) if isinstance(it, tuple) else op(it)
    gin.ok(req)


def _atoi(text: str) -> int | None:
    """strconv.Atoi."""
    return _parse_int64(text)


def _parse_int64(text: str) -> int | None:
    """strconv.ParseInt(text, 10, 64): optional sign, digits only, 64-bit range."""
    if not re.fullmatch(r"[+-]?[0-9]+", text):
        return None
    v = int(text)
    return v if -(1 << 63) <= v < (1 << 63) else None


def _fstat(fh: Any) -> Any:
    return os.fstat(fh.fileno())


# ---------------------------------------------------------------------------------------------
# byte ranges and the download's name (HTTP text: execd controller/utils.go, net/http)


def execd_parse_range(s: str, size: int) -> list[tuple[int, int]] | None:
    """execd controller/utils.go ParseRange: None = "invalid range"; [] = nothing satisfiable (then
    net/http's ServeContent sees the same header)."""
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
            n = _parse_int64(b)
            if n is None or n < 0:
                return None
            n = min(n, size)
            start, length = size - n, n
        else:
            first = _parse_int64(a)
            if first is None or first < 0:
                return None
            start = first
            if b == "":
                length = size - start
            else:
                end = _parse_int64(b)
                if end is None or end < start:
                    return None
                length = end - start + 1
        if start >= size:
            continue
        length = min(length, size - start)
        out.append((start, length))
    return out


class NoOverlap(Exception):
    pass


def go_parse_range(s: str, size: int) -> list[tuple[int, int]] | None:
    """net/http parseRange: None = invalid ("invalid range"); raises NoOverlap; [] = no ranges."""
    if s == "":
        return []
    if not s.startswith("bytes="):
        return None
    out: list[tuple[int, int]] = []
    no_overlap = False
    for ra in s[6:].split(","):
        ra = ra.strip(" \t")
        if ra == "":
            continue
        if "-" not in ra:
            return None
        a, b = ra.split("-", 1)
        a, b = a.strip(" \t"), b.strip(" \t")
        if a == "":
            if b == "" or b[0] == "-":
                return None
            n = _parse_int64(b)
            if n is None or n < 0:
                return None
            n = min(n, size)
            out.append((size - n, n))
            continue
        i = _parse_int64(a)
        if i is None or i < 0:
            return None
        if i >= size:
            no_overlap = True
            continue
        if b == "":
            out.append((i, size - i))
            continue
        j = _parse_int64(b)
        if j is None or i > j:
            return None
        j = min(j, size - 1)
        out.append((i, j - i + 1))
    if no_overlap and not out:
        raise NoOverlap()
    return out


def content_disposition(name: str) -> str:
    """formatContentDisposition: RFC 5987 form (url.PathEscape) when the name is not ASCII. A CR or LF
    in a name (a file called "a\nb") goes out as a space: net/http writes every header value through
    headerNewlineToSpace, so no name can split the header block."""
    if all(ord(c) < 128 for c in name):
        name = name.replace("\r", " ").replace("\n", " ")
        return f'attachment; filename="{name}"'
    enc = quote(name.encode("utf-8", "surrogateescape"), safe="!$&'()*+,;=:@-._~")
    return f"attachment; filename=\"{enc}\"; filename*=UTF-8''{enc}"


def _preconditions(req: Request, mtime: int) -> str | None:
    """checkPreconditions (If-Match, If-Unmodified-Since, If-None-Match, If-Modified-Since, If-Range)
    for a response without an ETag: "not-modified", "precondition-failed", "ignore-range" or None."""
    h = req.headers
    im = h.get("If-Match")
    if im is not None:
        if im.strip() != "*":  # no ETag: only "*" could match an existing file
            return "precondition-failed"
    elif h.get("If-Unmodified-Since"):
        t = _http_date(h.get("If-Unmodified-Since") or "")
        if t is not None and mtime > t:
            return "precondition-failed"
    inm = h.get("If-None-Match")
    if inm is not None:
        if inm.strip() == "*":
            return "not-modified" if req.method in ("GET", "HEAD") else "precondition-failed"
    elif req.method in ("GET", "HEAD") and h.get("If-Modified-Since"):
        t = _http_date(h.get("If-Modified-Since") or "")
        if t is not None and mtime <= t:
            return "not-modified"
    ir = h.get("If-Range")
    if ir and h.get("Range") and req.method in ("GET", "HEAD"):
        t = _http_date(ir)
        if t is None or mtime != t:
            return "ignore-range"
    return None


def _http_date(text: str) -> int | None:
    try:
        dt = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if dt is None:
        return None
    return int(dt.timestamp())


def _send_head(req: Request, status: int, headers: dict[str, str], *, close: bool = False) -> None:
    req.send_head(status, headers)
    if close:
        req.handler.close_connection = True


def _serve_error(req: Request, headers: dict[str, str], status: int, text: str) -> None:
    """net/http serveError/Error: drops Content-Length, Last-Modified (and ETag, Cache-Control,
    Content-Encoding), text/plain + nosniff; other headers (Content-Disposition) stay."""
    for k in ("Content-Length", "Last-Modified", "Etag", "Cache-Control", "Content-Encoding"):
        headers.pop(k, None)
    headers["Content-Type"] = "text/plain; charset=utf-8"
    headers["X-Content-Type-Options"] = "nosniff"
    body = text.encode()
    headers["Content-Length"] = str(len(body))
    _send_head(req, status, headers)
    if req.method != "HEAD":
        req.handler.wfile.write(body)
        if httpcore.OBSERVERS:
            req.sent_body += body


def _send_file(req: Request, status: int, headers: dict[str, str], fh: Any, start: int, length: int) -> None:
    h = req.handler
    sendfile = getattr(h.wfile, "sendfile", None) if req.method != "HEAD" and length > 0 else None
    corked = sendfile is not None and cork(h.connection, True)  # the head waits for the file's first bytes
    try:
        _send_head(req, status, headers)
        if req.method != "HEAD":
            _send_body(req, sendfile, fh, start, length)
    finally:
        if corked:
            cork(h.connection, False)


def _send_body(req: Request, sendfile: Any, fh: Any, start: int, length: int) -> None:
    h = req.handler
    capture = bool(httpcore.OBSERVERS)
    if sendfile is not None:
        # the file straight to the socket, no copy through Python (the observers get the bytes sent, read back)
        try:
            sent = sendfile(h.connection, fh.fileno(), start, length)
        except SendfileRefused:
            pass  # nothing sent: a file sendfile(2) does not take, copied below
        else:
            if capture and sent:
                req.sent_body += os.pread(fh.fileno(), sent, start)
            if sent < length:
                h.close_connection = True  # the file shrank while we sent it: the framing is broken
            return
    try:
        fh.seek(start)
    except OSError:
        h.close_connection = True
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
