"""The mock's root of sandbox trees is a top directory for ext2/3/4's Orlov allocator (runtime/_util.py
``spread_subdirs``, ``chattr +T``): each sandbox's tree goes to a block group of its own, so its files are not made
in a group where earlier sandboxes' trees were just removed (bench/README.md)."""

from __future__ import annotations

import fcntl
import os
import struct
import tempfile

import pytest

from mock_opensandbox.runtime import _util


def _flags(path: str) -> int | None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return struct.unpack("i", fcntl.ioctl(fd, _util._FS_IOC_GETFLAGS, struct.pack("i", 0)))[0]
    except OSError:
        return None
    finally:
        os.close(fd)


def test_the_ioctl_numbers_are_linux_fs_h():
    # _IOR('f', 1, long) and _IOW('f', 2, long) with an 8-byte long (x86_64, aarch64)
    if struct.calcsize("l") == 8:
        assert (_util._FS_IOC_GETFLAGS, _util._FS_IOC_SETFLAGS) == (0x80086601, 0x40086602)


def test_the_flag_is_set_where_the_file_system_has_it(tmp_path):
    before = _flags(str(tmp_path))
    ok = _util.spread_subdirs(str(tmp_path))
    after = _flags(str(tmp_path))
    if not ok:
        assert after is None or not after & _util._FS_TOPDIR_FL
        pytest.skip("no FS_TOPDIR_FL on this file system (%s)" % tmp_path)
    assert after is not None and after & _util._FS_TOPDIR_FL
    assert after & ~_util._FS_TOPDIR_FL == (before or 0) & ~_util._FS_TOPDIR_FL  # nothing else changed
    assert _util.spread_subdirs(str(tmp_path)) is True  # again: already set
    sub = tmp_path / "sub"
    sub.mkdir()
    assert not (_flags(str(sub)) or 0) & _util._FS_TOPDIR_FL  # not inherited


def test_no_directory_no_flag(tmp_path):
    f = tmp_path / "file"
    f.write_bytes(b"")
    assert _util.spread_subdirs(str(f)) is False
    assert _util.spread_subdirs(str(tmp_path / "missing")) is False
    link = tmp_path / "link"
    link.symlink_to(tmp_path)
    assert _util.spread_subdirs(str(link)) is False  # never through a symlink


@pytest.mark.skipif(not os.path.isdir("/dev/shm"), reason="no /dev/shm")
def test_tmpfs_has_no_such_flag():
    d = tempfile.mkdtemp(dir="/dev/shm")
    try:
        assert _util.spread_subdirs(d) is False
    finally:
        os.rmdir(d)
