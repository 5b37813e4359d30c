"""Readiness waits on any fd number (a leaf: standard library only, imports nothing of the mock).

``select.select`` refuses fd numbers at or above FD_SETSIZE (1024: "filedescriptor out of range in
select()"), a number a few hundred sandboxes pass; ``select.poll`` has no such ceiling."""

from __future__ import annotations

import select
from typing import Any, Iterable

__all__ = ["readable"]

_IN = select.POLLIN | select.POLLPRI


def readable(objs: Iterable[Any], timeout: float | None) -> list[Any]:
    """The members of ``objs`` (fds, or objects with ``fileno()``) readable within ``timeout`` seconds
    (None: wait without end), as ``select.select(objs, [], [], timeout)[0]`` answers. A hang-up, an
    error or a closed fd counts as readable: the next read reports it, as after select. A closed
    socket object (``fileno()`` -1) raises ValueError, as select does."""
    poller = select.poll()
    by_fd: dict[int, Any] = {}
    for obj in objs:
        fd = obj if isinstance(obj, int) else obj.fileno()
        if fd < 0:
            raise ValueError("file descriptor cannot be a negative integer")
        by_fd[fd] = obj
        poller.register(fd, _IN)
    ms = None if timeout is None else max(0, int(timeout * 1000 + 0.999))
    return [by_fd[fd] for fd, _ in poller.poll(ms) if fd in by_fd]
