"""model.FileInfo as the files API reports it, and the owner/group names in it: the sandbox's own
users and groups (Accounts, with the user namespace's id mapping), else the host's."""

from __future__ import annotations

import grp
import os
import pwd
import stat
from typing import Any

from mock_opensandbox.wire.gojson import go_time

__all__ = ["Accounts", "file_info"]


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


def file_info(spath: str, st: os.stat_result, names: "Accounts | None" = None) -> dict[str, Any]:
    """model.FileInfo (recording 13): mode is the permission bits written as octal digits, created_at
    is the ctime (syscall_linux.go getFileCreateTime). Owner and group are named by the sandbox's
    accounts (``names``) or, without a view of the sandbox's own, the host's."""
    return {
        "path": spath,
        "type": _ftype(st),
        "size": st.st_size,
        "modified_at": go_time(st.st_mtime_ns),
        "created_at": go_time(st.st_ctime_ns),
        "owner": names.owner(st.st_uid) if names else _owner(st.st_uid),
        "group": names.group(st.st_gid) if names else _group(st.st_gid),
        "mode": int(oct(stat.S_IMODE(st.st_mode) & 0o777)[2:]),
    }


def _map_id(rows: list[tuple[int, int, int]], ident: int, outward: bool) -> int:
    """An id through a user namespace's map (inside -> outside when outward); 65534 (the overflow
    id) when unmapped; unchanged without a map."""
    if not rows:
        return ident
    for inside, outside, count in rows:
        a, b = (inside, outside) if outward else (outside, inside)
        if a <= ident < a + count:
            return b + ident - a
    return 65534


class Accounts:
    """The sandbox's own users and groups, as execd inside the container sees them (Go's os/user reads
    the container's /etc/passwd and /etc/group), with the user namespace's id mapping applied."""

    def __init__(
        self, passwd: bytes, group: bytes, uid_map: list[tuple[int, int, int]], gid_map: list[tuple[int, int, int]]
    ):
        def table(text: bytes) -> dict[str, int]:
            out: dict[str, int] = {}
            for line in text.decode("utf-8", "replace").splitlines():
                f = line.split(":")
                if len(f) >= 3 and f[2].isdigit() and f[0] not in out:
                    out[f[0]] = int(f[2])
            return out

        self.users, self.groups = table(passwd), table(group)
        self._uid_names = {v: k for k, v in reversed(list(self.users.items()))}
        self._gid_names = {v: k for k, v in reversed(list(self.groups.items()))}
        self.uid_map, self.gid_map = uid_map, gid_map

    def owner(self, host_uid: int) -> str:
        uid = _map_id(self.uid_map, host_uid, False)
        return self._uid_names.get(uid, str(uid))

    def group(self, host_gid: int) -> str:
        gid = _map_id(self.gid_map, host_gid, False)
        return self._gid_names.get(gid, str(gid))

    def host_uid(self, name: str) -> int | None:
        uid = self.users.get(name)
        return None if uid is None else _map_id(self.uid_map, uid, True)

    def host_gid(self, name: str) -> int | None:
        gid = self.groups.get(name)
        return None if gid is None else _map_id(self.gid_map, gid, True)
