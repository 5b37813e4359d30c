"""Shared helpers for the execd t1 tests: its fixtures reach every t1 file through tiers/t1/conftest.py;
import the helpers by name (``from tiers.t1.conftest_execd import Client, outputs``).

Everything talks plain HTTP/1.1 to a real ExecdServer on 127.0.0.1:<ephemeral> over a real
SandboxRuntime in a temporary root; every fixture cleans up its processes, ports and directories.
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any, Iterator

import pytest

from mock_opensandbox.execd.server import ExecdServer
from mock_opensandbox.runtime import SandboxRuntime
from tiers.toolkit import rest
from tiers.toolkit.procs import live_pids  # noqa: F401 - re-exported for the execd tests

Resp = rest.Reply  # status, headers (any case), body, json(), text, events(), header()


class Client:
    def __init__(self, port: int, prefix: str = "/proxy/44772", headers: dict[str, str] | None = None):
        self.port, self.prefix, self.headers = port, prefix, dict(headers or {})

    def request(
        self,
        method: str,
        path: str,
        body: bytes | str | Any = None,
        headers: dict[str, str] | None = None,
        timeout: float = 30,
        raw_path: bool = False,
    ) -> Resp:
        if body is not None and not isinstance(body, (bytes, str, dict, list)):
            body = json.dumps(body)
        return rest.call(
            self.port,
            method,
            path if raw_path else self.prefix + path,
            body,
            {**self.headers, **(headers or {})},
            timeout=timeout,
        )

    def get(self, path: str, **kw: Any) -> Resp:
        return self.request("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Resp:
        return self.request("POST", path, body, **kw)

    def delete(self, path: str, **kw: Any) -> Resp:
        return self.request("DELETE", path, **kw)

    def run(self, command: str | None = None, **fields: Any) -> Resp:
        body: dict[str, Any] = dict(fields)
        if command is not None:
            body["command"] = command
        return self.post("/command", body)


@pytest.fixture
def sandbox_root() -> Iterator[str]:
    d = tempfile.mkdtemp(prefix="osb-t1-")
    yield d
    # SandboxRuntime.cleanup() normally removes it; make sure nothing stays behind
    if os.path.exists(d):
        from mock_opensandbox.runtime._util import rmtree as _rmtree

        _rmtree(d)


@pytest.fixture
def runtime(sandbox_root: str) -> Iterator[SandboxRuntime]:
    rt = SandboxRuntime(sandbox_root)
    yield rt
    rt.cleanup()


@pytest.fixture
def make_execd(runtime: SandboxRuntime):
    servers: list[ExecdServer] = []

    def make(**kw: Any) -> ExecdServer:
        kw.setdefault("close_delay", 0)
        s = ExecdServer(runtime, **kw)
        s.start()
        servers.append(s)
        return s

    yield make
    for s in servers:
        s.stop()


def outputs(events: list[dict[str, Any]], kind: str = "stdout") -> list[str]:
    return [e["text"] for e in events if e.get("type") == kind]
