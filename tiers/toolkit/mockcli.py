"""The mock's command line as a test drives it: ``Cli`` (``python -m mock_opensandbox`` in the foreground,
read up to its banner; stop / kill) and the ``cli_factory`` fixture (t1's conftest offers it)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import Sequence

import pytest

from tiers.toolkit import rest
from tiers.toolkit.procs import alive, descendants

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Cli:
    """``python -m mock_opensandbox --port 0 *args`` in the foreground, once it printed its banner: ``url``,
    ``port``, ``key`` (the generated API key, or None), ``root``. ``launcher``: what runs the module instead
    of this interpreter (e.g. setpriv ... python), with ``env``."""

    def __init__(self, *args: str, launcher: Sequence[str] = (), env: dict[str, str] | None = None):
        argv = [*(launcher or [sys.executable]), "-m", "mock_opensandbox", "--port", "0", *args]
        self.proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.lines: list[str] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line.rstrip("\n"))
            if line.startswith("Sandbox roots under"):
                break
        text = "\n".join(self.lines)
        m = re.search(r"listening on (http://127\.0\.0\.1:(\d+))", text)
        if not m:  # no banner: nothing is left running
            err = self.proc.stderr.read() if self.proc.poll() is not None else ""
            self.proc.kill()
            self.proc.communicate()
            raise AssertionError((text, err))
        self.url, self.port = m.group(1), int(m.group(2))
        k = re.search(r"API key \(generated for this run, header OPEN-SANDBOX-API-KEY\): (\S+)", text)
        self.key = k.group(1) if k else None
        self.root = re.search(r"Sandbox roots under (.+?)\. Press", text).group(1)

    def call(self, method: str, path: str, body=None, key=True):
        r = rest.call(self.url, method, path, body, {"OPEN-SANDBOX-API-KEY": self.key} if key and self.key else {})
        return r.status, r.body

    def stop(self, sig=signal.SIGINT, timeout=30) -> tuple[int, str, str]:
        self.proc.send_signal(sig)
        out, err = self.proc.communicate(timeout=timeout)
        return self.proc.returncode, out, err

    def kill(self) -> None:
        """Teardown, also after a failed test: a graceful stop first (the CLI removes its temp root and
        ends its sandboxes), then SIGKILL for what is left, then the root itself."""
        if self.proc.poll() is None:
            kids = descendants(self.proc.pid)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.communicate(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.communicate()
            for pid in kids:
                if alive(pid):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except OSError:
                        pass
        if self.root.startswith(tempfile.gettempdir()) and os.path.isdir(self.root):
            shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture
def cli_factory():
    """Cli(*args) for a test; each is stopped (kill()) at teardown."""
    made: list[Cli] = []

    def make(*args: str) -> Cli:
        c = Cli(*args)
        made.append(c)
        return c

    yield make
    for c in made:
        c.kill()
