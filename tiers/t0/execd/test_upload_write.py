"""files._write_over: an upload's data written over an existing file, then the file cut to it (what O_TRUNC
and the writes leave), also when a write fails part way."""

from __future__ import annotations

import os

import pytest

from mock_opensandbox.execd.files import _write_over


def _file(tmp_path, data: bytes) -> str:
    p = tmp_path / "f.bin"
    p.write_bytes(data)
    return str(p)


@pytest.mark.parametrize("old,new", [(b"a" * 100, b"bcd"), (b"ab", b"x" * 50), (b"same", b"SAME"), (b"old", b"")])
def test_an_existing_file_holds_exactly_the_new_bytes(tmp_path, old, new):
    p = _file(tmp_path, old)
    fd = os.open(p, os.O_WRONLY)
    try:
        _write_over(fd, [new[:2], bytearray(new[2:])], True)
    finally:
        os.close(fd)
    assert open(p, "rb").read() == new


def test_a_failed_write_leaves_what_o_trunc_would_have_left(tmp_path):
    p = _file(tmp_path, b"z" * 1000)

    def pieces():
        yield b"first"
        raise OSError(28, "no space left on device")

    fd = os.open(p, os.O_WRONLY)
    try:
        with pytest.raises(OSError):
            _write_over(fd, pieces(), True)
    finally:
        os.close(fd)
    assert open(p, "rb").read() == b"first"


def test_a_new_file_and_a_device_are_not_cut(tmp_path):
    p = str(tmp_path / "new.bin")
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        _write_over(fd, [b"hello"], False)
    finally:
        os.close(fd)
    assert open(p, "rb").read() == b"hello"
    fd = os.open("/dev/null", os.O_WRONLY)
    try:
        _write_over(fd, [b"gone"], True)  # ftruncate would fail on a character device: it is not called
    finally:
        os.close(fd)
