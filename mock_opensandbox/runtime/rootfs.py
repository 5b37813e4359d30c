"""A sandbox's root file system when it has an image (docs/IMAGES.md; QUIRKS.md, Image store): the image's own
tree with a writable layer of the sandbox's own over it, and the image config the container gets.

* ``overlay`` (root, every layer's whiteouts in overlayfs form): the sandbox directory holds ``upper/``
  and ``work/``; view.py mounts ``overlay`` with the image's layers as lower dirs and ``upper/`` as the
  upper dir *on* ``upper/`` itself, inside the sandbox's mount namespace before pivot_root (the host
  sees only what the sandbox wrote there; a mount over its own upper dir is what lets the mock keep
  writing /opt/opensandbox into the sandbox's root before PID 1 starts, as the server copies execd in
  before the container starts). Docker's overlay2 driver does the same with its diff/ and work/.
* ``copy`` (not root, or whiteouts not in overlayfs form): ``rootfs/`` is a copy of the flattened image
  (``cp -a --reflink=auto``: never hard links into the cache, the sandbox would write into it).

The container's settings from the image (server 1.1.1 passes Docker no User/WorkingDir, so Docker
takes the image's): ``Env`` under the container's variables, ``WorkingDir`` for PID 1 and every command
without a ``cwd``, ``User`` for every process (PID 1, execd, commands), ``HOME`` from that user's passwd
entry when neither the image nor the request sets it (moby oci defaults / runc).
"""

from __future__ import annotations

import os
import stat
import subprocess
from typing import Protocol

OVERLAY_OPTS_MAX = 4000  # overlay mount options live in one page (4096 bytes) with upperdir/workdir
DOCKER_DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # moby oci.DefaultPathEnv
VIEW_IMAGE_ENV = "OSB_MOCK_IMAGE"  # view.py: "overlay LOWER WORK FILES" | "copy - - FILES"
VIEW_USER_ENV = "OSB_MOCK_USER"  # view.py / nsexec.py: "UID GID G1,G2" (every process of the sandbox)
VIEW_WORKDIR_ENV = "OSB_MOCK_WORKDIR"  # view.py: PID 1's working directory


class RootfsError(OSError):
    """The sandbox's root could not be built (a copy or a directory failed): the create fails like a
    container Docker cannot create."""


class UserNotFound(ValueError):
    """The image's User names an account its /etc/passwd (or /etc/group) does not have."""


class ImageTree(Protocol):
    """What a sandbox's root reads of its image (images/store.py Image: the runtime layer never imports it): its
    layers as overlayfs lower dirs (None: not usable so), the flattened tree, and its config."""

    @property
    def env(self) -> list[str]: ...
    @property
    def working_dir(self) -> str: ...
    @property
    def user(self) -> str: ...
    def lowerdirs(self) -> list[str] | None: ...
    def rootfs(self) -> str: ...


class ImageRoot:
    """What one sandbox gets of its image: its root directory (``root``), how view.py mounts it, the
    image's environment, user and working directory."""

    def __init__(self, home: str, image: ImageTree, *, overlay: bool | None = None):
        self.home = home  # the sandbox's own directory (upper/ + work/, or rootfs/)
        self.image = image
        lower = image.lowerdirs()
        if overlay is None:
            overlay = os.geteuid() == 0 and lower is not None
        if overlay and lower is not None and len(":".join(lower)) + 2 * len(home) + 64 > OVERLAY_OPTS_MAX:
            lower = [image.rootfs()]  # too many layers for one page of options: the flattened tree
        if lower is not None and any(c in p for p in lower + [home] for c in ":, \t\n\\"):
            lower = None  # a cache path overlayfs options cannot carry (scripts.root_is_safe): a copy
        self.mode = "overlay" if overlay and lower is not None else "copy"
        self.lower = lower if self.mode == "overlay" else None
        self.root = os.path.join(home, "upper" if self.mode == "overlay" else "rootfs")
        self.work = os.path.join(home, "work") if self.mode == "overlay" else ""
        self.files = os.path.join(home, "etc")  # /etc/hostname, hosts, resolv.conf: bound, never in the layer

    def prepare(self) -> None:
        """Make the directories (overlay) or the copy; raises RootfsError."""
        try:
            os.makedirs(self.home, 0o755, exist_ok=True)
            os.mkdir(self.files, 0o755)
            if self.mode == "overlay":
                os.mkdir(self.root, 0o755)
                os.mkdir(self.work, 0o700)
                # "/" of the merged tree is the upper dir's: the image's own (live local/busybox:latest has
                # a 0700 "./": a non-root uid gets "fork/exec /bin/sh: permission denied")
                st = os.stat(self.lower[0] if self.lower else self.root)
                os.chown(self.root, st.st_uid, st.st_gid)
                os.chmod(self.root, stat.S_IMODE(st.st_mode))
                return
            src = self.image.rootfs()
            r = subprocess.run(
                ["cp", "-a", "--reflink=auto", "--", src, self.root],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=600,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise RootfsError(getattr(exc, "errno", None) or 5, "cannot make the sandbox's root: %s" % exc) from None
        if r.returncode != 0:
            raise RootfsError(
                5,
                "cannot copy the image into the sandbox's root: %s"
                % r.stderr.decode("utf-8", "replace").strip()[-200:],
            )

    # -- what view.py gets ----------------------------------------------------------------------
    def view_env(self, user: tuple[int, int, list[int]] | None) -> dict[str, str]:
        out = {
            VIEW_IMAGE_ENV: "%s %s %s %s"
            % (self.mode, ":".join(self.lower) if self.lower else "-", self.work or "-", self.files),
            VIEW_WORKDIR_ENV: self.working_dir(),
        }
        if user is not None:
            out[VIEW_USER_ENV] = user_word(user)
        return out

    def changes(self) -> tuple[str, str]:
        return self.root, "overlay" if self.mode == "overlay" else "full"

    # -- the image config -------------------------------------------------------------------------
    def working_dir(self) -> str:
        wd = self.image.working_dir or "/"
        return wd if wd.startswith("/") else "/" + wd

    def image_file(self, rel: str) -> bytes | None:
        """A small file of the image as the sandbox starts with it (top layer first; the copy)."""
        dirs = [self.root] if self.mode == "copy" else list(self.lower or [])
        for d in dirs:
            p = os.path.join(d, rel)
            if os.path.islink(p):
                return None  # an /etc/passwd symlink: not followed on the host
            try:
                with open(p, "rb") as fh:
                    return fh.read(1 << 20)
            except FileNotFoundError:
                continue
            except OSError:
                return None
        return None

    def user(self) -> tuple[int, int, list[int], str]:
        """(uid, gid, groups, home) for the image's User ("" = uid 0; groups: the primary gid first, then
        those of /etc/group naming the user, as live `id` shows them: ``groups=0(root)``). Raises
        UserNotFound like runc ("unable to find user ...")."""
        spec = self.image.user.strip() or "0"
        name, _, group = spec.partition(":")
        passwd = _table(self.image_file("etc/passwd"))
        groups = _table(self.image_file("etc/group"))
        home = "/"
        if name.isdigit():
            uid = int(name)
            entry = next((e for e in passwd if len(e) > 3 and e[2] == name), None)
            gid = int(entry[3]) if entry and entry[3].isdigit() else 0
            if entry and len(entry) > 5:
                home = entry[5] or "/"
            uname = entry[0] if entry else None
        else:
            entry = next((e for e in passwd if e[0] == name and len(e) > 3), None)
            if entry is None or not entry[2].isdigit():
                raise UserNotFound("unable to find user %s: no matching entries in passwd file" % name)
            uid, gid = int(entry[2]), int(entry[3]) if entry[3].isdigit() else 0
            home = (entry[5] if len(entry) > 5 else "") or "/"
            uname = name
        if group:
            if group.isdigit():
                gid = int(group)
            else:
                g = next((e for e in groups if e[0] == group and len(e) > 2 and e[2].isdigit()), None)
                if g is None:
                    raise UserNotFound("unable to find group %s: no matching entries in group file" % group)
                gid = int(g[2])
        extra = sorted(_member_gids(groups, uname) - {gid}) if uname and not group else []
        return uid, gid, [gid] + extra, home

    def env(self, home: str | None) -> dict[str, str]:
        """The image's Env (later entries win), PATH by Docker's default when the image has none, HOME
        from the user's passwd entry (or /root) when the image does not set it."""
        out: dict[str, str] = {}
        for item in self.image.env:
            k, sep, v = str(item).partition("=")
            if k and sep:
                out[k] = v
        out.setdefault("PATH", DOCKER_DEFAULT_PATH)
        out.setdefault("HOME", home or "/root")
        return out


def lookup_uid(uid: int, passwd: bytes | None, group: bytes | None) -> tuple[int, list[int]]:
    """execd's buildCredential for a uid: (primary gid, sorted groups) from the sandbox's account files, (0, [])
    when the uid has no passwd entry."""
    entry = next((e for e in _table(passwd) if len(e) > 3 and e[2] == str(uid) and e[3].isdigit()), None)
    if entry is None:
        return 0, []
    gid = int(entry[3])
    return gid, sorted({gid} | _member_gids(_table(group), entry[0]))


def _member_gids(groups: list[list[str]], name: str) -> set[int]:
    """The gids of the /etc/group rows whose member list names ``name``."""
    return {int(e[2]) for e in groups if len(e) > 3 and e[2].isdigit() and name in e[3].split(",")}


def user_word(user: tuple[int, int, list[int]] | tuple[int, int, list[int], str]) -> str:
    return "%d %d %s" % (user[0], user[1], ",".join(str(g) for g in user[2]) or "-")


def _table(data: bytes | None) -> list[list[str]]:
    if not data:
        return []
    return [
        line.split(":") for line in data.decode("utf-8", "replace").splitlines() if line and not line.startswith("#")
    ]
