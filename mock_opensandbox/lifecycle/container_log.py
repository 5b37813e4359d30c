"""A sandbox container's output as Docker keeps it: Docker's timestamps (``docker_ts``), what a sandbox container
prints as it boots (``boot_log``) and its log, bounded and timestamped like ``docker logs --timestamps``
(``ContainerLog``, fed by a reader thread on the entrypoint's output). lifecycle/model.py's ``Sandbox`` holds one;
docker/diagnostics.py reads it. No HTTP.
"""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import Any, Callable

from mock_opensandbox.lifecycle import quirks


def _utcnow() -> datetime:  # model.py's utcnow; model.py imports this module, not the other way round
    return datetime.now(timezone.utc)


def docker_ts(dt: datetime, fixed: bool = False) -> str:
    """Docker's timestamps: RFC3339Nano (trailing zeros trimmed: container Created/StartedAt/FinishedAt,
    live "Started: …35.9695341Z") or RFC3339NanoFixed (9 digits: ``docker logs --timestamps`` prefixes)."""
    head = dt.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    frac = "%06d000" % dt.microsecond
    if not fixed:
        frac = frac.rstrip("0")
    return head + ("." + frac if frac else "") + "Z"


def boot_log(now: datetime) -> bytes:
    """What a sandbox container prints before and around its entrypoint: bootstrap.sh's line and execd
    v1.0.19's banner and first log lines (live stack, diagnostics/logs of a fresh sandbox)."""
    ts = now.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.") + "%03dZ" % (now.microsecond // 1000)
    lines = [
        "starting OpenSandbox Execd daemon at /opt/opensandbox/execd.",
        "=" * 53,
        " OpenSandbox Execd",
        "-" * 53,
        " Version     : " + quirks.EXECD_BANNER["version"],
        " Git Commit  : " + quirks.EXECD_BANNER["commit"],
        " Build Time  : " + quirks.EXECD_BANNER["built"],
        " Go Version  : " + quirks.EXECD_BANNER["go"],
        " Platform    : linux/amd64",
        "=" * 53,
    ]
    for msg in ("Jupyter server host is: ", "Jupyter server token is: ****", "execd listening on :44772 (IPv4)"):
        lines.append('{"level":"info","ts":"%s","msg":"%s"}' % (ts, msg))
    return ("\n".join(lines) + "\n").encode()


class ContainerLog:
    """The container's stdout+stderr as ``docker logs --timestamps`` returns it: one timestamp per line,
    bounded (the oldest lines go first). Fed by a reader thread on the entrypoint's output pipe."""

    MAX_LINES = 10000
    MAX_LINE = 16384  # Docker splits longer lines at 16 KiB

    def __init__(self, clock: Callable[[], datetime] | None = None):
        self._clock = clock or _utcnow
        self._lines: list[str] = []
        self._partial = b""
        self._lock = threading.Lock()

    def feed(self, data: bytes) -> None:
        with self._lock:
            buf = self._partial + data
            parts = buf.split(b"\n")
            self._partial = parts.pop()
            while len(self._partial) >= self.MAX_LINE:
                parts.append(self._partial[: self.MAX_LINE])
                self._partial = self._partial[self.MAX_LINE :]
            for raw in parts:
                self._add(raw + b"\n")

    def close(self) -> None:
        with self._lock:
            if self._partial:
                self._add(self._partial)
                self._partial = b""

    def _add(self, raw: bytes) -> None:
        self._lines.append("%s %s" % (docker_ts(self._clock(), fixed=True), raw.decode("utf-8", "replace")))
        if len(self._lines) > self.MAX_LINES:
            del self._lines[: len(self._lines) - self.MAX_LINES]

    def pump(self, stream: Any) -> None:
        """Read ``stream`` (the entrypoint's stdout pipe) to EOF in a daemon thread."""

        def run() -> None:
            try:
                while True:
                    data = stream.read1(65536) if hasattr(stream, "read1") else stream.read(65536)
                    if not data:
                        break
                    self.feed(data)
            except (OSError, ValueError):
                pass
            finally:
                self.close()
                try:
                    stream.close()
                except OSError:  # pragma: no cover
                    pass

        threading.Thread(target=run, name="mock-osb-log", daemon=True).start()

    def tail(self, n: int) -> str:
        with self._lock:
            return "".join(self._lines[-n:]) if n > 0 else ""
