"""Command timeouts of the mock execd on one thread (per process), not a threading.Timer per command.

The real execd arms a Go timer per command (a context deadline): it costs nothing worth measuring.
A threading.Timer starts a thread for every command given a ``timeout``, about 0.35 ms of the mock's
CPU per command on the bench machine, which bench/ case 2 charged to the plugin (it sends the
host's timeout; the direct client does not). Behaviour is unchanged: ``fn`` runs once, at the
deadline, unless cancelled first.
"""

from __future__ import annotations

import heapq
import itertools
import threading
import time
from typing import Callable


class Deadline:
    __slots__ = ("when", "seq", "fn")

    def __init__(self, when: float, seq: int, fn: Callable[[], object]):
        self.when, self.seq = when, seq
        self.fn: Callable[[], object] | None = fn

    def __lt__(self, other: "Deadline") -> bool:
        return (self.when, self.seq) < (other.when, other.seq)

    def cancel(self) -> None:
        self.fn = None  # left in the heap; skipped (and dropped) when it comes up


class Deadlines:
    def __init__(self) -> None:
        self._heap: list[Deadline] = []
        self._cond = threading.Condition()
        self._seq = itertools.count()
        self._thread: threading.Thread | None = None

    def add(self, delay: float, fn: Callable[[], object]) -> Deadline:
        d = Deadline(time.monotonic() + delay, next(self._seq), fn)
        with self._cond:
            heapq.heappush(self._heap, d)
            if self._heap[0] is d:
                self._cond.notify()
            if len(self._heap) > 64 and len(self._heap) > 2 * sum(1 for x in self._heap if x.fn is not None):
                self._heap = [x for x in self._heap if x.fn is not None]  # mostly cancelled ones
                heapq.heapify(self._heap)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, daemon=True, name="execd-deadlines")
                self._thread.start()
        return d

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    while self._heap and self._heap[0].fn is None:
                        heapq.heappop(self._heap)
                    if not self._heap:
                        self._cond.wait()
                        continue
                    left = self._heap[0].when - time.monotonic()
                    if left <= 0:
                        fn = heapq.heappop(self._heap).fn
                        break
                    self._cond.wait(left)
            if fn is not None:
                try:
                    fn()
                except Exception:  # noqa: BLE001 - one failing callback must not stop the others
                    pass


DEADLINES = Deadlines()
