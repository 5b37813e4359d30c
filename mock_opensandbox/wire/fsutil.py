"""Host file-system helpers shared by execd's file operations (execd/files.py) and the image unpacker
(images/unpack.py). A leaf: standard library only, imports nothing of the mock."""

from __future__ import annotations

import os
import shutil
import stat

__all__ = ["remove_all"]


def remove_all(path: str) -> None:
    """os.RemoveAll: whatever is at ``path`` goes (a directory with its tree); missing is fine, a symlink
    is removed, never followed."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)
    else:
        os.unlink(path)
