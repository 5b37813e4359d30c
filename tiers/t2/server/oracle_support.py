"""What the server oracle's test modules share (test_server_oracle.py, test_server_oracle_generated.py,
test_server_oracle_sandboxes.py): the oracle itself, the real opensandbox-server 1.1.1 app (its own FastAPI routes,
middleware, exception handlers, pydantic models and validators; only the Docker client is a stand-in,
tiers/t2/clients/server_oracle_app.py) in its own pinned venv (.venv-server, requirements-server-oracle.txt,
created on first use); the fixtures (``oracle``, the ``mock`` with the oracle's storage configuration, two
``sandboxes`` both sides know, ``slow_only``); ``compare``, which sends one request to both and wants the same
answer, with the explained differences (``EXPLAINED``) and the counts (``STATS``) the report prints; the
hypothesis settings (``FAST`` in ``make test``, ``SLOW`` under ``-m slow``).

A test module takes the fixtures by name (``oracle, mock = support.oracle, support.mock``); they are module-scoped,
so each module starts its own oracle and mock.
"""

from __future__ import annotations

import json
import subprocess
import threading
import urllib.request
from typing import Any, Callable, Iterator

import pytest
from hypothesis import HealthCheck, settings

from mock_opensandbox.server import MockOpenSandbox
from tiers.t2.clients import REPO, Unavailable, python_env
from tiers.toolkit.procs import close_and_wait

APP = REPO + "/tiers/t2/clients/server_oracle_app.py"
FAST = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
SLOW = settings(max_examples=1500, deadline=None, suppress_health_check=list(HealthCheck))
STATS = {"compared": 0, "explained": 0}


class Oracle:
    def __init__(self) -> None:
        py = python_env("server", "requirements-server-oracle.txt")
        self.proc = subprocess.Popen(
            [py, APP], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO
        )
        hello = json.loads(self.proc.stdout.readline() or "{}")
        if not hello.get("ready"):
            self.close()
            raise Unavailable("the server oracle did not start")
        self.api_key = hello["api_key"]
        self.root = hello["root"]  # its [storage] allowed_host_paths = [root/host], named volumes in root/volumes
        self.lock = threading.Lock()

    def _call(self, msg: dict) -> dict:
        with self.lock:
            self.proc.stdin.write(json.dumps(msg) + "\n")
            self.proc.stdin.flush()
            return json.loads(self.proc.stdout.readline())

    def add(self, sid: str, timeout: bool) -> None:
        self._call({"op": "add", "id": sid, "timeout": timeout})

    def request(self, method: str, path: str, headers: dict, body: bytes | None) -> tuple[int, dict, bytes]:
        h = dict(headers)
        h.setdefault("OPEN-SANDBOX-API-KEY", self.api_key)
        r = self._call(
            {
                "op": "request",
                "method": method,
                "path": path,
                "headers": h,
                "body": body.decode("latin-1") if body is not None else None,
            }
        )
        return r["status"], {k.lower(): v for k, v in r["headers"].items()}, r["body"].encode("latin-1")

    def close(self) -> None:
        close_and_wait(self.proc, 10)


def started_or_skip(make: Callable[[], Any]) -> Iterator[Any]:
    """A module fixture's body for an oracle process: ``make()``'s oracle until the module ends (closed then), or a
    skip when its venv cannot be had (tiers/t2/k8s/conftest.py uses it for the Kubernetes oracle)."""
    try:
        o = make()
    except Unavailable as e:
        pytest.skip("server oracle unavailable: %s" % e)
    try:
        yield o
    finally:
        o.close()


@pytest.fixture(scope="module")
def oracle():
    yield from started_or_skip(Oracle)


@pytest.fixture
def slow_only(request):
    if "slow" not in (request.config.getoption("markexpr") or ""):
        pytest.skip("slow fuzzing: run with `make test-slow` (-m slow)")


@pytest.fixture(scope="module")
def mock(oracle):
    """Overrides the toolkit's ``mock`` (tiers/toolkit/fixtures.py): the oracle's storage configuration, the same
    host prefix and the same named-volume directory."""
    with MockOpenSandbox(
        egress_mode="off", volumes_dir=oracle.root + "/volumes", allowed_host_paths=[oracle.root + "/host"]
    ) as m:
        yield m


def urllib_exchange(url: str, method: str, headers: dict, body: bytes | None, timeout: float):
    """(status, lower-cased headers, body) of one request through urllib, error statuses included: how the corpus
    reaches the mock here and the live server in tiers/t4/server/test_live_oracle.py."""
    req = urllib.request.Request(url, data=body, method=method, headers=headers)
    if body is None and method in ("POST", "PUT", "PATCH"):
        req.add_header("Content-Length", "0")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, {k.lower(): v for k, v in r.headers.items()}, r.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()


def mock_request(m: MockOpenSandbox, method: str, path: str, headers: dict, body: bytes | None):
    h = dict(headers)
    h.setdefault("OPEN-SANDBOX-API-KEY", m.api_key)
    return urllib_exchange(m.base_url + path, method, h, body, 30)


@pytest.fixture(scope="module")
def sandboxes(mock, oracle):
    """Two mock sandboxes (with a timeout, and manual cleanup) the oracle knows under the same ids."""
    out = {}
    for name, body in (("timed", {"timeout": 3600}), ("manual", {})):
        body.update(
            {
                "image": {"uri": "local/python:3-slim"},
                "entrypoint": ["tail", "-f", "/dev/null"],
                "resourceLimits": {"cpu": "500m"},
            }
        )
        st_, _, raw = mock_request(
            mock, "POST", "/v1/sandboxes", {"Content-Type": "application/json"}, json.dumps(body).encode()
        )
        assert st_ == 202, raw
        sid = json.loads(raw)["id"]
        oracle.add(sid, timeout=name == "timed")
        out[name] = sid
    return out


def _norm(status: int, headers: dict, body: bytes) -> Any:
    ctype = headers.get("content-type", "")
    if not body:  # HEAD, 204
        return status, ""
    if status in (200, 202) and "json" in ctype:
        doc = json.loads(body)
        if isinstance(doc, dict):  # ids and timestamps differ; the shape must not
            return status, sorted(doc)
        return status, doc
    if "json" in ctype:
        return status, json.loads(body)
    return status, body.decode("utf-8", "replace")


def _cleanup(m: MockOpenSandbox, status: int, body: bytes) -> None:
    if status == 202 and body:
        sid = json.loads(body).get("id")
        if sid:
            mock_request(m, "DELETE", "/v1/sandboxes/" + sid, {}, None)


EXPLAINED: list[tuple[str, Any]] = [
    # (why, predicate on (oracle status, oracle body, mock status, mock body))
    (
        "windows: the mock runs Linux processes only [choice, QUIRKS.md]",
        lambda os_, ob, ms, mb: os_ == 202 and ms == 400 and b"'windows' is not supported by the mock" in mb,
    ),
    (
        "ossfs: the oracle's provisioning is a stand-in that mounts nothing; the mock fails as a server without "
        "ossfs installed [QUIRKS.md Volumes]",
        lambda os_, ob, ms, mb: os_ == 202 and ms == 500 and b"VOLUME::OSSFS_MOUNT_FAILED" in mb,
    ),
    (
        "a mount target Docker/runc refuse when the container starts (the oracle's container is a stand-in)",
        lambda os_, ob, ms, mb: os_ == 202 and ms == 500 and b"DOCKER::SANDBOX_START_FAILED" in mb,
    ),
]


def compare(
    mock, oracle, method: str, path: str, body: Any = None, headers: dict | None = None, raw: bytes | None = None
) -> tuple[int, Any]:
    headers = dict(headers or {})
    if raw is None and body is not None:
        raw = json.dumps(body).encode()
        headers.setdefault("Content-Type", "application/json")
    os_, oh, ob = oracle.request(method, path, headers, raw)
    ms, mh, mb = mock_request(mock, method, path, headers, raw)
    try:
        STATS["compared"] += 1
        for why, pred in EXPLAINED:
            if pred(os_, ob, ms, mb):
                STATS["explained"] += 1
                return os_, why
        want, got = _norm(os_, oh, ob), _norm(ms, mh, mb)
        assert got == want, "%s %s %r\n oracle: %s %s\n mock:   %s %s" % (
            method,
            path,
            raw,
            os_,
            ob[:600],
            ms,
            mb[:600],
        )
        if os_ == 405:  # Starlette's Allow header: the methods of the first route matching the path
            assert mh.get("allow") == oh.get("allow"), (method, path, mh.get("allow"), oh.get("allow"))
        if "x-request-id" in headers:
            assert mh.get("x-request-id") == oh.get("x-request-id") == headers["x-request-id"].strip()
        return os_, want
    finally:
        _cleanup(mock, ms, mb)


# a valid create body: the fixed corpus and the generated bodies vary it
GOOD = {
    "image": {"uri": "local/python:3-slim"},
    "entrypoint": ["tail", "-f", "/dev/null"],
    "resourceLimits": {"cpu": "500m", "memory": "512Mi"},
}
