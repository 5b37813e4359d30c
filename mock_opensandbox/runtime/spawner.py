"""A sandbox's spawner: one thread of the mock that sits in the sandbox's cgroups (v1) for as long as
the sandbox lives, so that every process it forks is born there without a move.

Why: a process (or thread) moved between cgroup v1 hierarchies waits for an RCU grace period
(``cgroup_threadgroup_rwsem``: percpu_down_write -> rcu_sync_enter, ~5-15 ms on this machine) unless
another move happened a moment before. Moving the spawning thread in and out around every fork
(``Cgroup.thread_inside``) paid that on every command that came more than a few ms after the previous
one (a command round trip of ~21 ms instead of ~7 with 50 ms between commands). The spawner moves once,
in the background, when the sandbox is made; a fork it does (``call``) is born in the cgroups, and
subprocess's vfork stays possible (no preexec_fn).

What it changes: a thread of the mock is a member of the sandbox's cgroups. Its CPU time while it forks
counts against the sandbox's CPU quota, its kernel memory against its memory limit and it is one task
of ``pids.current`` (like ``runc exec``'s init process, which also runs in the container's cgroup);
``cgroup.procs`` of the host lists the mock's pid (inside the sandbox's PID namespace it is not
visible); the memory cgroup's OOM killer never picks it (it scans thread-group leaders only).
It leaves before the cgroups are removed (``stop``); it dies with the mock.
Standard library only.
"""

from __future__ import annotations

import _thread
import os
import queue
import threading
import time
from typing import Any, Callable, Literal, TypeVar

from mock_opensandbox.runtime.cgroups import Cgroup

_T = TypeVar("_T")


class Spawner:
    """A daemon thread that joins ``cgroup`` (a cgroups.Cgroup whose ``thread_join`` is True) once and then
    runs the callables given to ``call`` (forks of the sandbox's processes)."""

    def __init__(
        self, cgroup: Cgroup | None, name: str = "osb-sandbox-spawner", enter: Callable[[], None] | None = None
    ):
        self._cgroup = cgroup  # None: no cgroup to join (a contained thread without limits: contained.py)
        self._enter = enter  # run in the thread after the cgroup join, before any call (contained.py)
        self.identity: tuple[int, int, list[int]] | None = None  # (uid, gid, groups) its forks have (contained.py)
        self._work: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._ready = threading.Event()
        self._error: OSError | None = None
        self._tid: int | None = None
        self._stopped = False
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self._tid = threading.get_native_id()
        try:
            if self._cgroup is not None:
                self._cgroup.enter_thread()
            if self._enter is not None:
                self._enter()
        except OSError as exc:
            self._error = exc
        finally:
            self._ready.set()
        if self._error is not None and self._enter is not None:
            return  # half entered: it forks nothing (call raises; the caller falls back)
        while True:
            item = self._work.get()
            if item is None:
                return  # the thread ends: the kernel takes it out of the cgroups
            fn, box, done = item
            try:
                box.append((True, fn()))
            except BaseException as exc:  # handed back to the caller
                box.append((False, exc))
            done.release()

    @property
    def stopped(self) -> bool:
        """stop() was called, or the thread could not join or enter (it forks nothing)."""
        return self._stopped or (self._ready.is_set() and self._error is not None)

    def ok(self, timeout: float | None = None) -> bool:
        """The thread joined (and entered) and takes calls; waits for that at most timeout."""
        return self._ready.wait(timeout) and self._error is None and not self._stopped

    def call(self, fn: Callable[[], _T]) -> _T:
        """fn() run in the spawner thread, once it is in the cgroups. Raises what fn raises, or OSError
        when the thread could not join (no process is started outside the sandbox's cgroups)."""
        self._ready.wait()
        if self._error is not None:
            raise OSError(
                self._error.errno, "cannot join the sandbox's cgroup: %s" % (self._error.strerror or self._error)
            )
        box: list[tuple[Literal[True], _T] | tuple[Literal[False], BaseException]] = []
        # a bare lock, taken here and released by the thread when fn returned: the caller's wait is one C-level
        # acquire (threading.Event's Condition costs ~35 us more per call, cold: bench/README.md)
        done = _thread.allocate_lock()
        done.acquire()
        with self._lock:
            if self._stopped:
                raise OSError(3, "the sandbox's spawner has stopped")  # ESRCH
            self._work.put((fn, box, done))
        done.acquire()
        answer = box[0]
        if not answer[0]:
            raise answer[1]
        return answer[1]

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread and wait until the kernel has let it go (its cgroups can be removed then).
        Idempotent."""
        with self._lock:
            if self._stopped:
                return
            self._stopped = True
            self._work.put(None)
        if self._thread is not threading.current_thread():
            self._thread.join(timeout)
        tid, deadline = self._tid, time.monotonic() + timeout
        while tid is not None and os.path.exists("/proc/self/task/%d" % tid) and time.monotonic() < deadline:
            time.sleep(0.0005)
