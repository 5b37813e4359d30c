"""Shared helpers for the execd t1 tests: its fixtures reach every t1 file through tiers/t1/conftest.py;
import the helpers by name (``from tiers.t1.conftest_execd import Client, outputs``).

Everything talks plain HTTP/1.1 to a real ExecdServer on 127.0.0.1:<ephemeral> over a real
SandboxRuntime in a temporary root; every fixture cleans up its processes, ports and directories.
"""
from __future__ import annotations

import http.client
import json
import os
import tempfile
from typing import Any, Iterator

import pytest

from mock_opensandbox import sse
from mock_opensandbox.execd.server import ExecdServer
from mock_opensandbox.runtime import SandboxRuntime
from tiers.toolkit.procs import live_pids  # noqa: F401 - re-exported for the execd tests


class Resp:
    def __init__(self, status: int, headers: dict[str, str], body: bytes):
        self.status, self.headers, self.body = status, headers, body

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")

    def events(self) -> list[dict[str, Any]]:
        return list(sse.parse_stream([self.body]))

    def header(self, name: str) -> str | None:
        for k, v in self.headers.items():
            if k.lower() == name.lower():
                return v
        return None


class Client:
    def __init__(self, port: int, prefix: str = "/proxy/44772", headers: dict[str, str] | None = None):
        self.port, self.prefix, self.headers = port, prefix, dict(headers or {})

    def request(self, method: str, path: str, body: bytes | str | Any = None, headers: dict[str, str] | None = None,
                timeout: float = 30, raw_path: bool = False) -> Resp:
        h = dict(self.headers)
        h.update(headers or {})
        if body is not None and not isinstance(body, (bytes, str)):
            body = json.dumps(body)
            h.setdefault("Content-Type", "application/json")
        if isinstance(body, str):
            body = body.encode("utf-8")
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path if raw_path else self.prefix + path, body=body, headers=h)
            r = conn.getresponse()
            data = r.read()
            return Resp(r.status, dict(r.getheaders()), data)
        finally:
            conn.close()

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
        from mock_opensandbox.runtime import _rmtree
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
