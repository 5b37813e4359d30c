"""The files and directories API of the mock execd as plain model code: every operation of execd's
controller/{filesystem.go,filesystem_upload.go,filesystem_download.go,utils.go} on sandbox paths,
raising ExecdError with the binary's status, code and text. No HTTP here (execd/files_routes.py is the
HTTP side). Paths are sandbox paths; SandboxRuntime.resolve() maps them into the root (never out of
it). Go's *PathError texts use the sandbox path. Texts checked against the real binary by the
differential tier (tiers/diff files.* / directories.* cases)."""

from __future__ import annotations

import contextlib
import errno
import grp
import os
import posixpath
import pwd
import re
import stat
from typing import Any, Callable, Iterable, Mapping, TypeVar

from mock_opensandbox.execd.errors import (
    INVALID_FILE_METADATA,
    INVALID_REQUEST,
    RUNTIME_ERROR,
    ExecdError,
    GoError,
    handle_file_error,
)
from mock_opensandbox.execd.fileinfo import Accounts, file_info
from mock_opensandbox.execd.fsat import _DirHandle
from mock_opensandbox.execd.fsat import mkdir_at as _mkdir_at
from mock_opensandbox.execd.fsat import proc_fd as _proc_fd
from mock_opensandbox.execd.fsat import read_fd as _read_fd
from mock_opensandbox.execd.fsat import remove_all_at as _remove_all_at
from mock_opensandbox.execd.fsat import unlink_at as _unlink_at
from mock_opensandbox.execd.fsat import write_fd as _write_fd
from mock_opensandbox.execd.globmatch import glob_match
from mock_opensandbox.execd.paths import PathExpandError, clean, expand_path
from mock_opensandbox.runtime import SandboxRuntime, openat2
from mock_opensandbox.wire.gojson import errno_text

_T = TypeVar("_T")

__all__ = ["SandboxFS", "UMASK", "MKDIR_MODE"]

UMASK = 0o022  # a container's default umask: Go's MkdirAll/OpenFile(0777) give 0755 (recording 13: data.csv 755)
MKDIR_MODE = 0o777 & ~UMASK


def _write_over(fd: int, pieces: Iterable[bytes | bytearray | memoryview], existing: bool) -> None:
    """Write ``pieces`` from the start of ``fd`` (opened without O_TRUNC); an existing regular file is then cut
    to what was written, also when a write fails: the same bytes, size and times as O_TRUNC and the writes,
    without the truncation freeing the old blocks at the open (ext4: ~0.3 ms for 1 MiB, and its
    auto_da_alloc at close: bench/README.md; QUIRKS.md, "Upload over an existing file")."""
    written = 0
    cut = existing and stat.S_ISREG(os.fstat(fd).st_mode)
    try:
        for piece in pieces:
            view = memoryview(piece)
            while view:
                n = os.write(fd, view)
                written += n
                view = view[n:]
    except OSError:
        if cut:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, written)  # what O_TRUNC and the writes up to the failure had left
        raise
    if cut:
        os.ftruncate(fd, written)


def _octal_mode(mode: int) -> int:
    """strconv.ParseUint(strconv.Itoa(mode), 8, 32); Go's os.FileMode then keeps the permission
    bits only (its setuid/sticky flags are other bits), so 4755 chmods to 0755 (tiers/diff)."""
    text = str(mode)
    if not re.fullmatch(r"[0-7]+", text) or int(text, 8) >= 1 << 32:
        raise GoError(
            f'strconv.ParseUint: parsing "{text}": invalid syntax'
            if not re.fullmatch(r"[0-7]+", text)
            else f'strconv.ParseUint: parsing "{text}": value out of range'
        )
    return int(text, 8) & 0o777


# ---------------------------------------------------------------------------------------------


class SandboxFS:
    """execd's file operations on one sandbox."""

    def __init__(self, runtime: SandboxRuntime):
        self.rt = runtime

    # -- paths ----------------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        """execd's own environment (os.Environ) as the sandbox sees it: what $VAR expands to."""
        env = dict(self.rt.base_env())
        if not getattr(self.rt, "isolated", True):
            env.update(HOME="/root", TMPDIR="/tmp")
        return env

    def expand(self, p: str) -> str:
        """pathutil.ExpandPath; raises GoError."""
        try:
            return expand_path(p, self.env(), self.env().get("HOME", "/root"))
        except PathExpandError as exc:
            raise GoError(str(exc)) from None

    def expand_abs(self, p: str) -> str:
        """pathutil.ExpandAbsPath (relative to execd's working directory "/")."""
        e = self.expand(p)
        return clean(e if e.startswith("/") else "/" + e)

    def abs_or(self, p: str, prefix: str) -> str:
        """expand_abs(p); its error as ``fmt.Errorf(prefix + "%v", err)`` (a new error, not wrapped)."""
        try:
            return self.expand_abs(p)
        except GoError as e:
            raise GoError(prefix + e.text) from None

    def _expanded(self, sp: str) -> str:
        """The clean absolute sandbox path of an expanded path (relative to "/"), its ".." walked first
        as the kernel walks it; raises OSError / ValueError."""
        sp = sp if sp.startswith("/") else "/" + sp
        if "\x00" in sp:
            raise ValueError("path contains a NUL byte")
        self.check_dotdot(sp)
        return clean(sp)

    def _walk_root(self, p: str, follow: bool) -> tuple[str, os.stat_result]:
        """ListDirectory / SearchFiles: the absolute path (``path, err := ExpandAbsPath(path)`` shadows the
        path with "" before the message uses it) and its (l)stat, errors as execd answers them."""
        try:
            sabs = self.expand_abs(p)
        except GoError as e:
            raise ExecdError(500, RUNTIME_ERROR, f"error converting path  to absolute. {e}") from None
        try:
            return sabs, (self.stat if follow else self.lstat)(sabs)
        except GoError as e:
            raise handle_file_error(e) from None

    def host(self, spath: str, follow: bool = True) -> str:
        return self.rt.resolve(spath if spath.startswith("/") else "/" + spath, follow_symlinks=follow)

    def root_host(self) -> str:
        """The host path that is the sandbox's "/" (never removed or renamed)."""
        return self.host("/", follow=False)

    def names(self) -> Accounts | None:
        """The sandbox's accounts when execd works on the sandbox's own view, else None (the host's)."""
        pid1 = getattr(self.rt, "pid1", None)
        if pid1 is None or not getattr(self.rt, "isolated", False) or pid1.view_root() == self.rt.root:
            return None

        def read(sp: str) -> bytes:
            try:
                with os.fdopen(self.fd(sp, os.O_RDONLY), "rb") as fh:
                    return fh.read(1 << 20)
            except (OSError, ValueError):
                return b""

        passwd, group = read("/etc/passwd"), read("/etc/group")
        return Accounts(passwd, group, self.rt.paths.id_map("uid"), self.rt.paths.id_map("gid"))

    def check_dotdot(self, spath: str) -> None:
        """The kernel walks an uncleaned path: "a/x/../b" needs a/x to exist and be a directory
        (resolve() cleans lexically). Raises OSError like open(2) would (tiers/diff gen.paths.upload)."""
        parts = spath.split("/")
        for i, comp in enumerate(parts):
            if comp == ".." and "".join(parts[:i]).strip("/"):
                prefix = "/".join(parts[:i]) or "/"
                try:
                    st = self.stat(prefix)
                except GoError:
                    raise OSError(errno.ENOENT, "no such file or directory") from None
                if not stat.S_ISDIR(st.st_mode):
                    raise OSError(errno.ENOTDIR, "not a directory")

    def fd(self, spath: str, flags: int, mode: int = 0) -> int:
        """An fd of a sandbox path, opened by openat2(RESOLVE_IN_ROOT) on the sandbox's "/" (runtime/openat2.py:
        the kernel's one walk never leaves the root, whatever runs inside concurrently); without
        openat2, open(2) of the checked host path (racy: the start-up note and x-mock-isolation say so)."""
        if openat2.AVAILABLE:
            return openat2.open_in(self.root_host(), spath, flags, mode)
        return os.open(self.host(spath, not flags & os.O_NOFOLLOW), flags | os.O_CLOEXEC, mode)

    def parent(self, spath: str) -> tuple[int, str]:
        """(O_PATH fd of the parent directory, last name) of a sandbox path; name "" for "/"."""
        sabs = clean("/" + spath.lstrip("/"))
        if openat2.AVAILABLE:
            return openat2.parent_in(self.root_host(), sabs)
        hp, root = self.host(sabs, follow=False), self.root_host()
        if hp == root:
            return os.open(root, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC), ""
        head, name = os.path.split(hp)
        return os.open(head, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC), name

    def _fdcall(self, op: str, spath: str, flags: int, fn: Callable[[int], _T]) -> _T:
        """fn(fd) on the sandbox path opened with flags; errors as Go's *PathError."""
        try:
            fd = self.fd(spath, flags)
        except (OSError, ValueError) as exc:
            raise GoError.path(op, spath, exc) from None
        try:
            return fn(fd)
        except (OSError, ValueError) as exc:
            raise GoError.path(op, spath, exc) from None
        finally:
            os.close(fd)

    def _atcall(self, op: str, spath: str, fn: Callable[[int, str], _T]) -> _T:
        """fn(parent fd, name) on a sandbox path's parent directory; errors as Go's *PathError."""
        try:
            pfd, name = self.parent(spath)
        except (OSError, ValueError) as exc:
            raise GoError.path(op, spath, exc) from None
        try:
            return fn(pfd, name)
        except (OSError, ValueError) as exc:
            raise GoError.path(op, spath, exc) from None
        finally:
            os.close(pfd)

    def stat(self, spath: str) -> os.stat_result:
        return self._fdcall("stat", spath, os.O_PATH, os.fstat)

    def lstat(self, spath: str) -> os.stat_result:
        return self._fdcall("lstat", spath, os.O_PATH | os.O_NOFOLLOW, os.fstat)

    def mkdir_all(self, spath: str) -> list[str]:
        """os.MkdirAll(path, 0777) with a 022 umask: the dirs it created; raises GoError (the
        component that is not a directory: "mkdir /a/file: not a directory")."""
        created: list[str] = []
        cur = ""
        for comp in [c for c in clean("/" + spath).split("/") if c]:
            cur = cur + "/" + comp
            try:
                st = self.stat(cur)
            except GoError as e:
                if not e.not_exist:
                    raise GoError("mkdir" + e.text[4:]) from None
                try:
                    self._atcall("mkdir", cur, _mkdir_at)
                except GoError as e2:
                    if "file exists" in e2.text:
                        continue  # made meanwhile by someone else: fine, like MkdirAll
                    raise
                created.append(cur)
                continue
            if not stat.S_ISDIR(st.st_mode):
                raise GoError(f"mkdir {cur}: not a directory")
        return created

    def chown(self, sabs: str, owner: str, group: str) -> None:
        """SetFileOwnership."""
        if not owner and not group:
            return
        names = self.names()

        def lookup(kind: str, name: str) -> int:
            """user.Lookup / user.LookupGroup in the sandbox's accounts (else the host's); -1 = keep."""
            if not name:
                return -1
            try:
                if kind == "user":
                    found = names.host_uid(name) if names else pwd.getpwnam(name).pw_uid
                else:
                    found = names.host_gid(name) if names else grp.getgrnam(name).gr_gid
                if found is None:
                    raise KeyError(name)
                return found
            except KeyError:
                raise GoError(f"failed to lookup {kind} {name}: {kind}: unknown {kind} {name}") from None

        uid, gid = lookup("user", owner), lookup("group", group)
        try:
            self._fdcall("chown", sabs, os.O_PATH, lambda fd: os.chown(_proc_fd(fd), uid, gid))
        except GoError as exc:
            raise GoError(f"failed to set owner/group for {sabs}: {exc}") from None

    def chmod_file(self, p: str, perm: Mapping[str, Any]) -> None:
        """ChmodFile: mode 0 leaves the mode; digits are octal; then owner/group."""
        sabs = self.expand_abs(p)
        mode = int(perm.get("mode") or 0)
        if mode:
            m = _octal_mode(mode)
            self._fdcall("chmod", sabs, os.O_PATH, lambda fd: os.chmod(_proc_fd(fd), m))
        self.chown(sabs, perm.get("owner") or "", perm.get("group") or "")

    # -- info -------------------------------------------------------------------------------------
    def info(self, paths: Iterable[str]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        names = self.names()
        for p in paths:
            try:
                sabs = self.abs_or(p, f"invalid path {p}: ")
                try:
                    st = self.lstat(sabs)
                except GoError as e:
                    if e.not_exist:
                        raise e.wrap(f"file not found: {p}: ") from None
                    raise GoError(f"error accessing file {p}: {e}") from None
            except GoError as e:
                raise handle_file_error(e) from None
            out[p] = file_info(sabs, st, names)
        return out

    # -- delete ---------------------------------------------------------------------------------
    def delete_file(self, p: str) -> None:
        """DeleteFile; raises ExecdError 500 `error removing file <p>. <err>`."""
        try:
            sabs = self.abs_or(p, "invalid path: ")
            try:
                st = self.stat(sabs)
            except GoError as e:
                if e.not_exist:
                    return  # missing is fine (recording 13: second delete 200)
                raise
            if stat.S_ISDIR(st.st_mode) or sabs == "/":
                raise GoError(f"path is a directory: {p}")
            try:
                self._atcall("remove", sabs, _unlink_at)
            except GoError as e:
                raise GoError(f"failed to remove file: {e}") from None
        except GoError as e:
            raise ExecdError(500, RUNTIME_ERROR, f"error removing file {p}. {e}") from None

    def remove_dir(self, p: str) -> None:
        """RemoveDirs: ExpandPath then os.RemoveAll (missing is fine, symlinks removed, not followed).
        The sandbox root itself is emptied, never removed."""
        try:
            resolved = self.expand(p)
        except GoError as e:
            raise ExecdError(500, RUNTIME_ERROR, f"error resolving directory {p}. {e}") from None
        sabs = clean("/" + resolved if not resolved.startswith("/") else resolved)
        try:
            self._atcall("unlinkat", sabs, _remove_all_at)
        except GoError as exc:
            raise ExecdError(500, RUNTIME_ERROR, f"error removing directory {p}. {exc}") from None

    # -- directories ----------------------------------------------------------------------------
    def make_dir(self, d: str, perm: Mapping[str, Any]) -> None:
        """MakeDir: MkdirAll(0777), then ChmodFile only for a directory that did not exist."""
        try:
            sabs = self.expand_abs(d)
            try:
                self.stat(sabs)
                existed = True
            except GoError:
                existed = False
            self.mkdir_all(sabs)
            if not existed:
                self.chmod_file(sabs, perm)
        except GoError as e:
            raise handle_file_error(e) from None

    def list_dir(self, p: str, depth: int) -> list[dict[str, Any]]:
        sabs, st = self._walk_root(p, follow=False)
        if stat.S_ISLNK(st.st_mode):
            raise ExecdError(400, INVALID_REQUEST, f"path is a symbolic link, refusing to traverse: {sabs}")
        if not stat.S_ISDIR(st.st_mode):
            raise ExecdError(400, INVALID_REQUEST, f"path is not a directory: {sabs}")
        entries: list[dict[str, Any]] = []
        if depth > 0:
            try:
                self._walk(sabs, 0, depth, entries, self.names())
            except GoError as e:
                raise ExecdError(500, RUNTIME_ERROR, f"error listing directory {sabs}. {e}") from None
        return entries

    def _walk(self, sdir: str, cur: int, maxd: int, out: list[dict[str, Any]], accounts: Accounts | None) -> None:
        try:
            dfd = self.fd(sdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except (OSError, ValueError) as exc:
            raise GoError.path("open", sdir, exc) from None
        try:
            rows = []
            for name in sorted(os.listdir(dfd)):
                try:
                    rows.append((name, os.stat(name, dir_fd=dfd, follow_symlinks=False)))
                except FileNotFoundError:
                    continue
        finally:
            os.close(dfd)
        for name, st in rows:
            sp = posixpath.join(sdir, name)
            out.append(file_info(sp, st, accounts))
            if stat.S_ISDIR(st.st_mode) and cur + 1 < maxd:
                self._walk(sp, cur + 1, maxd, out, accounts)

    # -- search ---------------------------------------------------------------------------------
    def search(self, p: str, pattern: str) -> list[dict[str, Any]]:
        sabs, _ = self._walk_root(p, follow=True)
        pattern = pattern or "**"
        try:
            glob_match(pattern, "x")
        except ValueError:
            bad = True
        else:
            bad = False
        found: list[dict[str, Any]] = []
        accounts = self.names()

        def visit_file(sp: str, st_or_entry: Any) -> None:
            if bad:
                raise ExecdError(
                    500, RUNTIME_ERROR, f"error searching files. invalid pattern {pattern}: syntax error in pattern"
                )
            if glob_match(pattern, posixpath.basename(sp) or sp):
                st1 = (
                    st_or_entry if isinstance(st_or_entry, os.stat_result) else st_or_entry.stat(follow_symlinks=False)
                )
                found.append(file_info(sp, st1, accounts))

        # filepath.Walk: lexical order, directories descended (never through a symlink), everything
        # else matched against the pattern; scandir's d_type spares a stat per entry (a search of "/"
        # walks the whole view: /usr, /proc, /sys)
        try:
            st0 = self.lstat(sabs)
        except GoError as e:
            raise handle_file_error(e) from None
        if not stat.S_ISDIR(st0.st_mode):
            visit_file(sabs, st0)
            return found

        def listing(sp: str) -> Any:
            """(sandbox path, its entries, the fd they stat through): every directory opened through
            the root (fd()), never by a host path a swap could redirect."""
            try:
                dfd = self.fd(sp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            except (OSError, ValueError):
                return sp, iter(()), -1
            try:
                with os.scandir(dfd) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError:
                entries = []
            return sp, iter(entries), dfd

        stack = [listing(sabs)]
        try:
            while stack:
                sp, it, _ = stack[-1]
                ent = next(it, None)
                if ent is None:
                    dfd = stack.pop()[2]
                    if dfd >= 0:
                        os.close(dfd)
                    continue
                child = posixpath.join(sp, ent.name)
                try:
                    if ent.is_dir(follow_symlinks=False):
                        stack.append(listing(child))  # descended before the next name
                    else:
                        visit_file(child, ent)
                except FileNotFoundError:
                    continue
        finally:
            for _, _, dfd in stack:
                if dfd >= 0:
                    os.close(dfd)
        return found

    # -- rename ---------------------------------------------------------------------------------
    def rename(self, src_in: str, dest_in: str) -> None:
        """RenameFile; errors go through handleFileError."""
        try:
            src = self.abs_or(src_in, "invalid source path: ")
            dest = self.abs_or(dest_in, "invalid destination path: ")
            try:
                self.stat(src)
            except GoError as e:
                if e.not_exist:
                    raise e.wrap(f"source path not found: {src_in}: ") from None
            try:
                self.mkdir_all(posixpath.dirname(dest))
            except GoError as e:
                raise GoError(f"failed to create destination directory: {e}") from None
            try:
                self.stat(dest)
                raise GoError(f"destination path already exists: {dest_in}")
            except GoError as e:
                if e.text.startswith("destination path already exists"):
                    raise
            ps = pd = -1
            try:
                ps, ns = self.parent(src)
                pd, nd = self.parent(dest)
                if not ns:
                    raise OSError(errno.EBUSY, "device or resource busy")
                os.rename(ns, nd or ".", src_dir_fd=ps, dst_dir_fd=pd)
            except (OSError, ValueError) as exc:
                if isinstance(exc, ValueError):
                    exc = OSError(errno.EINVAL, "invalid argument")
                raise GoError(
                    f"failed to rename file: rename {src} {dest}: {errno_text(exc)}", exc.errno == errno.ENOENT
                ) from None
            finally:
                for fd in (ps, pd):
                    if fd >= 0:
                        os.close(fd)
        except GoError as e:
            raise handle_file_error(e) from None

    # -- permissions / replace ------------------------------------------------------------------
    def chmod(self, p: str, perm: Mapping[str, Any]) -> None:
        try:
            self.chmod_file(p, perm)
        except GoError as e:
            raise ExecdError(500, RUNTIME_ERROR, f"error changing permissions for {p}. {e}") from None

    def replace(self, p: str, old: str, new: str) -> int:
        """ReplaceContent for one file: returns the replaced count."""
        try:
            sabs = self.expand_abs(p)
            self.stat(sabs)
            content = self._fdcall("read", sabs, os.O_RDONLY, _read_fd)
            st = self.stat(sabs)
        except GoError as e:
            raise handle_file_error(e) from None
        if not old:
            raise ExecdError(400, INVALID_REQUEST, "old content must not be empty")
        ob, nb = old.encode("utf-8", "surrogateescape"), new.encode("utf-8", "surrogateescape")
        try:
            self._fdcall(
                "open",
                sabs,
                os.O_WRONLY | os.O_TRUNC,
                lambda fd: _write_fd(fd, content.replace(ob, nb), stat.S_IMODE(st.st_mode)),
            )
        except GoError as e:
            raise handle_file_error(e) from None
        return content.count(ob)

    # -- upload ---------------------------------------------------------------------------------
    def upload(self, target: str, data: bytes | Iterable[bytes | bytearray], perm: Mapping[str, Any]) -> None:
        """processUploadPair after the metadata was parsed: resolve, MkdirAll the parent, write
        (O_TRUNC, 0777 &^ umask for a new file), ChmodFile."""
        if not target:
            raise ExecdError(400, INVALID_FILE_METADATA, "metadata path is empty")
        try:
            spath = self.expand(target)
        except GoError as e:
            raise ExecdError(500, RUNTIME_ERROR, f"error resolving target path {target}. {e}") from None
        sdir = posixpath.dirname(spath) or "."
        try:
            self.mkdir_all(clean(sdir if sdir.startswith("/") else "/" + sdir))
        except GoError as e:
            raise ExecdError(500, RUNTIME_ERROR, f"error creating target directory {sdir}. {e}") from None
        try:
            sabs = self._expanded(spath)
            fd, created = self._open_upload(sabs)
            try:
                if created:
                    os.fchmod(fd, MKDIR_MODE)
                _write_over(fd, [data] if isinstance(data, (bytes, bytearray, memoryview)) else data, not created)
            finally:
                os.close(fd)
        except (OSError, ValueError) as exc:
            raise ExecdError(
                500, RUNTIME_ERROR, f"error opening destination file {spath}. {GoError.path('open', spath, exc)}"
            ) from None
        try:
            self.chmod_file(sabs, perm)
        except GoError as e:
            raise ExecdError(500, RUNTIME_ERROR, f"error chmoding file {spath}. {e}") from None

    def _open_upload(self, sabs: str) -> tuple[int, bool]:
        """(fd, created) of an upload's target: Go's OpenFile(O_WRONLY|O_CREATE|O_TRUNC, 0777) without the
        O_TRUNC (``_write_over`` cuts the file to what it wrote). An existing file takes one open; a new one is
        made with O_EXCL, so the mock knows to give it execd's mode; a dangling symlink (EEXIST there) is
        followed by O_CREAT as Go's open follows it."""
        try:
            return self.fd(sabs, os.O_WRONLY), False
        except FileNotFoundError:
            pass
        try:
            return self.fd(sabs, os.O_WRONLY | os.O_CREAT | os.O_EXCL, MKDIR_MODE), True
        except FileExistsError:
            return self.fd(sabs, os.O_WRONLY | os.O_CREAT, MKDIR_MODE), False

    # -- download -------------------------------------------------------------------------------
    def open_for_download(self, p: str) -> tuple[str, Any]:
        """ExpandPath + os.Open: (resolved sandbox path, open binary file)."""
        try:
            rp = self.expand(p)
        except GoError as e:
            raise ExecdError(500, RUNTIME_ERROR, f"error resolving file path: {p}. {e}") from None
        try:
            sabs = self._expanded(rp)
            fd = self.fd(sabs, os.O_RDONLY)
        except (OSError, ValueError) as exc:
            raise handle_file_error(GoError.path("open", rp, exc)) from None
        try:
            st = os.fstat(fd)
        except OSError:  # pragma: no cover - fstat of an open fd
            st = None
        if st is not None and stat.S_ISDIR(st.st_mode):
            return rp, _DirHandle(fd)  # Go opens a directory fine; reading it fails later
        fh = os.fdopen(fd, "rb")
        return rp, fh
