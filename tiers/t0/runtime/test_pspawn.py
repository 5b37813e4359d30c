"""runtime/pspawn.py on the host (no sandbox): a PTY shell's child leads its own session with the terminal opened
by its path as its controlling terminal and stdin, in its directory, with nothing but 0-2; a failed start is
Popen's OSError (the directory's name when the chdir failed, the first error other than ENOENT on a PATH)."""

from __future__ import annotations

import errno
import os
import subprocess

import pytest

from mock_opensandbox.runtime import pspawn

pytestmark = pytest.mark.skipif(not pspawn.available(), reason="this libc has no posix_spawn closefrom/chdir")


@pytest.fixture
def tty():
    master, slave = os.openpty()
    yield master, slave, os.ttyname(slave)
    for fd in (master, slave):
        try:
            os.close(fd)
        except OSError:
            pass


def _read_all(fd: int) -> bytes:
    out = b""
    while True:
        try:
            data = os.read(fd, 4096)
        except OSError:  # EIO: the last holder of the terminal closed it
            return out
        if not data:
            return out
        out += data


def test_the_shell_leads_a_session_on_its_terminal(tmp_path, tty):
    master, slave, name = tty
    null = os.open("/dev/null", os.O_RDONLY | os.O_CLOEXEC)
    leak = os.dup2(null, 200, inheritable=True)  # another thread's, a moment before: the shell must not hold it
    os.close(null)
    try:
        script = 'echo "$(cut -d" " -f6,7 /proc/$$/stat) $(tty) $(pwd) $(ls /proc/$$/fd | tr "\\n" ,)"'
        p = pspawn.SpawnedPopen(
            ["sh", "-c", script],
            cwd=str(tmp_path),
            env={"PATH": "/nonexistent:/usr/bin:/bin"},
            stdin=slave,
            stdout=slave,
            stderr=slave,
            ctty=name,
        )
    finally:
        os.close(leak)
    os.close(slave)
    assert p.wait(10) == 0
    session, tty_nr, path, cwd, fds = _read_all(master).decode().split()
    assert int(session) == p.pid and int(tty_nr) != 0 and path == name and cwd == str(tmp_path)
    assert fds == "0,1,2,3,", fds  # 3: the read end of the shell's own command substitution


@pytest.mark.parametrize(
    "case, code, in_name",
    [("no directory", errno.ENOENT, "cwd"), ("no program", errno.ENOENT, None), ("not executable", errno.EACCES, None)],
)
def test_a_failed_start_is_popens_oserror(tmp_path, tty, case, code, in_name):
    _, slave, name = tty
    plain = tmp_path / "plain"
    plain.write_text("echo\n")
    argv, cwd = ["sh"], str(tmp_path)
    if case == "no directory":
        cwd = str(tmp_path / "missing")
    elif case == "no program":
        argv = ["no-such-program-here"]
    else:
        argv = [str(plain)]
    with pytest.raises(OSError) as err:
        pspawn.SpawnedPopen(
            argv,
            cwd=cwd,
            env={"PATH": "/usr/bin:/bin"},
            stdin=slave,
            stdout=subprocess.DEVNULL,
            stderr=slave,
            ctty=name,
        )
    assert err.value.errno == code
    assert err.value.filename == (cwd if in_name == "cwd" else None)
