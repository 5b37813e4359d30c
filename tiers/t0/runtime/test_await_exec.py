"""runtime/_util.py await_exec: a process read in the middle of its execve shows an empty cmdline (the new
image's arguments are not on its stack yet); that is not "gone", the wait goes on until the command shows."""

from __future__ import annotations

import subprocess

from mock_opensandbox.runtime import _util

WRAPPER = b'/bin/sh\0-c\0exec "$@"\0'


class _Proc:
    pid = 4242

    def poll(self) -> None:
        return None


def _run(monkeypatch, reads: list[bytes | None], gone: bool) -> list[bytes | None]:
    seen: list[bytes | None] = []

    def read(pid: int) -> bytes | None:
        seen.append(reads[min(len(seen), len(reads) - 1)])
        return seen[-1]

    monkeypatch.setattr(_util, "read_cmdline", read)
    monkeypatch.setattr(_util, "_gone", lambda pid: gone)
    monkeypatch.setattr(_util.time, "sleep", lambda s: None)
    proc: subprocess.Popen = _Proc()  # type: ignore[assignment]
    _util.await_exec(proc, (False, {WRAPPER}), timeout=5.0)
    return seen


def test_an_empty_cmdline_mid_exec_is_waited_past(monkeypatch):
    seen = _run(monkeypatch, [WRAPPER, b"", b"", b"/bin/sh\0-c\0sleep 30\0"], gone=False)
    assert seen == [WRAPPER, b"", b"", b"/bin/sh\0-c\0sleep 30\0"]


def test_an_empty_cmdline_of_a_zombie_ends_the_wait(monkeypatch):
    assert _run(monkeypatch, [WRAPPER, b""], gone=True) == [WRAPPER, b""]


def test_a_process_gone_ends_the_wait(monkeypatch):
    assert _run(monkeypatch, [WRAPPER, None], gone=True) == [WRAPPER, None]
