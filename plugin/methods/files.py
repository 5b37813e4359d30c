"""Files: files.read / write / list / stat / mkdir / remove / move / search / chmod on execd's
files API (rec 13, 18: ``rec NN`` = recording NN, fixtures/NN_*.json).
"""

from __future__ import annotations

from context import Context
from epp import Base64, Request
from errors import EppError, bad_input, unsupported
from failures import is_http
from params import b64_param, path_param, sandbox_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from osb import Execd

MAX_READ_BYTES = 6_000_000  # base64 of this fits one EPP line (8 MiB) with room to spare


def _execd(ctx: Context, p: dict[str, Any]) -> Execd:
    sid = sandbox_id(p)
    client = ctx.client()
    return ctx.guard(lambda: client.execd(sid), op="files")


def file_entry(info: dict[str, Any]) -> dict[str, Any]:
    """execd FileInfo (rec 13) -> EPP FileEntry."""
    path = str(info.get("path") or "")
    kind = str(info.get("type") or "file")
    entry = {
        "name": path.rstrip("/").rsplit("/", 1)[-1] or path,
        "path": path,
        "type": "dir" if kind == "directory" else "file",
        "size": info.get("size") if isinstance(info.get("size"), int) else 0,
        "mtime": info.get("modified_at") or None,
    }
    if kind not in ("file", "directory"):
        entry["kind"] = kind  # symlink / other (execd FileInfo.type)
    for key in ("mode", "owner", "group"):
        if info.get(key) not in (None, ""):
            entry[key] = info[key]
    return entry


def _entries(items: list[Any]) -> dict[str, Any]:
    return {"entries": [file_entry(i) for i in items if isinstance(i, dict)]}


def _octal_mode(value: object) -> int | None:
    """Permissions for execd, which wants the octal digits as a decimal number (rec 13: 644).
    Accepts "644" / "0o644" / "0644" or an int permission value such as 0o644."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise bad_input("mode must be an octal permission like 644.")
    if isinstance(value, int):
        number = value
    else:
        text = str(value).strip().lower().removeprefix("0o")
        if not text or any(c not in "01234567" for c in text):
            raise bad_input(f"mode {str(value)[:20]!r} is not an octal permission like 644.")
        number = int(text, 8)
    if not 0 <= number <= 0o7777:
        raise bad_input("mode must be between 0 and 7777 (octal).")
    return int(format(number, "o"))


def m_files_read(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    from osb import TooLarge

    path = path_param(p)
    execd = _execd(ctx, p)
    offset, length = p.get("offset"), p.get("length")
    for name, val in (("offset", offset), ("length", length)):
        if val is not None and (isinstance(val, bool) or not isinstance(val, int) or val < 0):
            raise bad_input(f"{name} must be a non-negative integer.")
    if length is not None and length > MAX_READ_BYTES:
        raise _too_big(path, length)
    if length == 0:
        return {"content_b64": ""}
    try:
        data = execd.read_file(path, offset=offset, length=length, limit=MAX_READ_BYTES)
    except TooLarge as exc:
        raise _too_big(path, exc.size) from None
    except Exception as exc:  # noqa: BLE001 - mapped below; 416 is a read at or past the end
        if is_http(exc, 416):
            return {"content_b64": ""}
        raise ctx.error(exc, "files", target=path) from None
    return {"content_b64": Base64(data)}  # Server.send writes it as base64, encoding as it writes


def _too_big(path: str, size: int | None) -> EppError:
    what = f"{size} bytes" if size else f"more than {MAX_READ_BYTES} bytes"
    return EppError(
        -32000,
        f"{path} is {what}; one files.read returns at most {MAX_READ_BYTES} bytes (EPP lines are limited to 8 MiB).",
        suggestion="Read it in parts with offset/length, or split/compress it in the sandbox first.",
        max_bytes=MAX_READ_BYTES,
    )


def m_files_write(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    path = path_param(p)
    if p.get("append"):
        raise unsupported(
            "files.write.append",
            "Appending is not supported by OpenSandbox uploads.",
            "Read, concatenate and write the whole file.",
        )
    data = b64_param(p, "content_b64")
    mode = _octal_mode(p.get("mode"))
    execd = _execd(ctx, p)
    ctx.guard(lambda: execd.upload(path, data, mode), op="files", target=path)
    return {}


def m_files_list(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    path = path_param(p)
    depth = p.get("depth", 1)
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise bad_input("depth must be a positive integer.")
    execd = _execd(ctx, p)
    return _entries(ctx.guard(lambda: execd.list_dir(path, depth), op="files", target=path))


def m_files_stat(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    path = path_param(p)
    execd = _execd(ctx, p)
    return file_entry(ctx.guard(lambda: execd.info(path), op="files", target=path))


def m_files_mkdir(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    """Parents are created and an existing directory is fine (execd works like mkdir -p)."""
    path = path_param(p)
    mode = _octal_mode(p.get("mode")) or 755
    execd = _execd(ctx, p)
    ctx.guard(lambda: execd.mkdir(path, mode), op="files", target=path)
    return {}


def m_files_remove(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    """File or directory (recursively). DELETE /files only removes files (rec 13; QUIRKS.md, Files and directories), so stat first."""
    path = path_param(p)
    execd = _execd(ctx, p)
    info = ctx.guard(lambda: execd.info(path), op="files", target=path)
    if info.get("type") == "directory":
        ctx.guard(lambda: execd.remove_dir(path), op="files", target=path)
    else:
        ctx.guard(lambda: execd.remove_file(path), op="files", target=path)
    return {}


def m_files_move(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    """Rename/move; an existing destination file is replaced unless overwrite is false."""
    src, dest = path_param(p, "source"), path_param(p, "destination")
    overwrite = p.get("overwrite", True) is not False
    execd = _execd(ctx, p)

    def dest_info() -> dict[str, Any] | None:
        try:
            return execd.info(dest)
        except Exception as exc:
            if is_http(exc, 404):
                return None
            raise

    if not overwrite and ctx.guard(dest_info, op="files", target=dest) is not None:
        raise bad_input(f"{dest} already exists.", "Pass overwrite=true or choose another destination.")
    try:
        execd.move(src, dest)
    except Exception as exc:  # noqa: BLE001 - mapped below, after looking at the destination
        if is_http(exc, 404):
            raise ctx.error(exc, "files", target=src) from None
        existing = ctx.guard(dest_info, op="files", target=dest) if is_http(exc, 400, 409, 500) else None
        if existing is None or not overwrite:
            raise ctx.error(exc, "files", target=src) from None
        if existing.get("type") == "directory":
            raise bad_input(
                f"Cannot move {src} onto the existing directory {dest}.",
                "Move it to a path inside that directory instead.",
            ) from None
        ctx.guard(lambda: execd.remove_file(dest), op="files", target=dest)
        ctx.guard(lambda: execd.move(src, dest), op="files", target=src)
    return {}


def m_files_search(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    path = path_param(p)
    pattern = p.get("pattern") or "**"
    if not isinstance(pattern, str):
        raise bad_input("pattern must be a glob string such as *.txt or **/*.py.")
    execd = _execd(ctx, p)
    return _entries(ctx.guard(lambda: execd.search(path, pattern), op="files", target=path))


def m_files_chmod(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    path = path_param(p)
    perm: dict[str, Any] = {}
    mode = _octal_mode(p.get("mode"))
    if mode is None:
        raise bad_input("mode is required, e.g. 755.")
    perm["mode"] = mode
    for key in ("owner", "group"):
        if isinstance(p.get(key), str) and p[key]:
            perm[key] = p[key]
    execd = _execd(ctx, p)
    ctx.guard(lambda: execd.chmod(path, perm), op="files", target=path)
    return {}
