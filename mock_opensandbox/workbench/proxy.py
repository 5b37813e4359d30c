"""A fault proxy in front of any OpenSandbox server (the mock or a real one).

    python -m mock_opensandbox.workbench.proxy --upstream http://127.0.0.1:8080 --port 9090 [--record DIR]

Clients talk to the proxy as if it were the server. Lifecycle traffic is forwarded to the upstream
as is (API key included). Endpoint answers (``GET /sandboxes/{id}/endpoints/{port}``) are rewritten so
the data plane passes through the proxy too: every upstream endpoint address (``host:port``) gets a
listener of its own on 127.0.0.1 that forwards to it, so paths stay exactly as the upstream's
(``/proxy/44772/command``); the endpoint's ``headers`` (gateway routing headers) and the execd
access token the client sends are passed through untouched. A ``use_server_proxy`` endpoint (the
upstream's own address) is rewritten to the proxy's address.

On every listener the proxy applies the same fault rules as the mock (workbench/faults.py, docs/FAULTS.md:
``listener`` "lifecycle" or "execd", ``sandbox`` scoping), keeps the same request journal and serves
the same admin API and dashboard under ``/__mock__/`` (workbench/admin.py). ``--record DIR`` writes every
upstream exchange (as the upstream saw and answered it, before any fault or rewrite) into
``DIR/<name>.json`` in the fixtures/ format with credentials scrubbed; ``python -m record compare
DIR`` replays it against the mock and reports every difference. WebSocket upgrades (execd PTY) are
tunnelled byte for byte. Standard library only.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import secrets
import sys
import threading
from typing import Any, Sequence, cast
from urllib.parse import urlsplit

from mock_opensandbox.wire.http1 import Handler, Request, host_allowed
from mock_opensandbox.wire.listener import App, Server
from mock_opensandbox.workbench.admin import AdminAPI, AdminLayer
from mock_opensandbox.workbench.assertions import assert_requested
from mock_opensandbox.workbench.cli import FAULT_ARG_HELP, parse_args, run_foreground
from mock_opensandbox.workbench.faultinject import inject
from mock_opensandbox.workbench.faults import FaultRegistry
from mock_opensandbox.workbench.journal import Journal
from mock_opensandbox.workbench.proxy_backend import ProxyBackend
from mock_opensandbox.workbench.proxy_forwarding import _Forwarder, _json_error
from mock_opensandbox.workbench.proxy_recording import Recorder
from mock_opensandbox.workbench.scrub import SECRET_HEADERS

_CREATE_RE = re.compile(r"^(?:/v1)?/sandboxes/?$")
_SANDBOX_RE = re.compile(r"^(?:/v1)?/sandboxes/([^/?]+)/?$")
_ADDR_RE = re.compile(r"^(?P<scheme>https?://)?(?P<host>\[[^\]]+\]|[^/:]+):(?P<port>\d{1,5})(?P<rest>/.*)?$")


class ProxyError(Exception):
    pass


# =====================================================================================================
# the apps (one lifecycle-facing listener, one listener per upstream endpoint address)
# =====================================================================================================
class _ProxyHandler(Handler):
    flavor = "uvicorn"
    browser_guard = False  # checked below (the admin API allows its own dashboard's requests)

    def dispatch(self, req: Request) -> None:
        cast(AdminLayer, self.server.app).handle(req)


class _EndpointHandler(_ProxyHandler):
    flavor = "gin"


class LifecycleProxyApp(App):
    fault_listener = "lifecycle"
    sandbox_id = None

    def __init__(self, proxy: "FaultProxy"):
        self.proxy = proxy
        self.faults = proxy.faults
        self.journal = proxy.journal
        self.verbose = proxy.verbose

    def handle(self, req: Request) -> None:  # behind an AdminLayer: /__mock__/ routes never get here
        p = self.proxy
        if not host_allowed(req.headers.get("Host"), p.host) or req.headers.get("Origin") is not None:
            _json_error(
                req,
                403,
                "PROXY::ORIGIN_NOT_ALLOWED",
                "Browser requests (an Origin header) and foreign "
                "Host names are refused by the fault proxy (DNS-rebinding protection).",
            )
            return
        p.forwarder.forward(req, p.upstream_host, p.upstream_port, lifecycle=True)


class EndpointProxyApp(App):
    fault_listener = "execd"

    def __init__(self, proxy: "FaultProxy", sandbox: str, host: str, port: int, container_port: int):
        self.proxy = proxy
        self.faults = proxy.faults
        self.journal = proxy.journal
        self.verbose = proxy.verbose
        self.sandbox_id = sandbox
        self.target = (host, port)
        self.container_port = container_port
        if container_port != 44772 and container_port:
            self.fault_listener = "port"

    def handle(self, req: Request) -> None:
        if not host_allowed(req.headers.get("Host"), "127.0.0.1") or req.headers.get("Origin") is not None:
            _json_error(req, 403, "PROXY::ORIGIN_NOT_ALLOWED", "Browser requests and foreign Host names are refused.")
            return
        self.proxy.forwarder.forward(req, self.target[0], self.target[1], sandbox=self.sandbox_id)


# =====================================================================================================
# the proxy
# =====================================================================================================
class FaultProxy:
    """The fault proxy as an in-process object (``start()``/``stop()``/context manager)."""

    def __init__(
        self,
        upstream: str,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        upstream_api_key: str | None = None,
        record: str | None = None,
        record_name: str = "proxy_recording",
        verbose: bool = False,
    ):
        parts = urlsplit(upstream)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError("--upstream must be an http:// URL, e.g. http://127.0.0.1:8080")
        self.upstream = upstream.rstrip("/")
        self.upstream_host = parts.hostname
        self.upstream_port = parts.port or 80
        prefix = parts.path.rstrip("/")
        if prefix.endswith("/v1"):
            prefix = prefix[:-3]
        self.upstream_prefix = prefix
        self.upstream_hostport = "%s:%d" % (self.upstream_host, self.upstream_port)
        self.host = host
        self.requested_port = port
        self.api_key = api_key if api_key is not None else secrets.token_urlsafe(24)
        self._upstream_key = upstream_api_key
        self.verbose = verbose
        self.faults = FaultRegistry(verbose=verbose, injector=inject)  # its listeners' requests are faulted
        self._seen_secrets: set[str] = set()
        self.journal = Journal(secrets=lambda: [self.api_key, *self._seen_secrets])
        self.admin = AdminAPI(
            ProxyBackend(self),
            self.journal,
            self.faults,
            api_key=lambda: self.api_key,
            bind_host=lambda: self.host,
            serve_faults=True,
        )
        self.recorder = Recorder(record, record_name, self.upstream, self.journal.secrets) if record else None
        self.forwarder = _Forwarder(self)
        self.known: dict[str, dict[str, Any]] = {}
        self.listeners: dict[tuple[str, str], tuple[Server, EndpointProxyApp]] = {}
        self.stopping = threading.Event()
        self._lock = threading.RLock()
        self._server: Server | None = None

    # -- the workbench (workbench/admin.py, workbench/journal.py) --------------------------------------
    def requests(
        self, method: Any = None, path: Any = None, sandbox: str | None = None, **filters: Any
    ) -> list[dict[str, Any]]:
        """Journal entries, oldest first. Filters: method ("GET", "GET|POST"), path (regex), sandbox,
        listener ("lifecycle", "execd", "port"), status (404, "4xx"), fault (rule id or "*"), since, limit."""
        return self.journal.entries(method=method, path=path, sandbox=sandbox, **filters)

    def assert_requested(
        self,
        method: Any = None,
        path: Any = None,
        sandbox: str | None = None,
        *,
        count: int | None = None,
        at_least: int | None = None,
        **filters: Any,
    ) -> list[dict[str, Any]]:
        """WireMock's verify: the journal holds requests matching these filters (exactly ``count``, or at
        least ``at_least``, default 1); AssertionError saying what was seen."""
        return assert_requested(
            self.journal, count=count, at_least=at_least, method=method, path=path, sandbox=sandbox, **filters
        )

    def reset(self, sandbox: str | None = None, *, keep_volumes: bool = False) -> dict[str, Any]:
        """Remove every sandbox (processes killed, roots removed), named volume (unless keep_volumes), fault
        rule and journal entry; or only one sandbox with its scoped rules and its journal entries."""
        return self.admin.reset(sandbox, keep_volumes=keep_volumes)

    def sandbox_state(self, sandbox_id: str) -> dict[str, Any] | None:
        """Internal state of one sandbox (processes, root, TTL left, paused, execd mode...), None if unknown."""
        return self.admin.backend.sandbox(sandbox_id)

    # -- properties -------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the proxy is not started")
        return self._server.port

    @property
    def base_url(self) -> str:
        return "http://%s:%d" % (self.host, self.port)

    @property
    def running_url(self) -> str | None:
        """base_url while the proxy listens, else None."""
        return self.base_url if self._server else None

    @property
    def lock(self) -> threading.RLock:
        """Guards ``known`` and ``listeners``."""
        return self._lock

    # -- start / stop -----------------------------------------------------------------------------
    def start(self) -> "FaultProxy":
        if self._server is None:
            self.stopping.clear()
            self.faults.reopen()
            app = AdminLayer(LifecycleProxyApp(self), self.admin)  # /__mock__/ workbench routes in front
            self._server = Server((self.host, self.requested_port), _ProxyHandler, app)
            self._server.start(name="osb-fault-proxy")
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.faults.close()
        with self._lock:
            listeners = list(self.listeners.values())
            self.listeners.clear()
        for srv, _ in listeners:
            srv.stop()
        if self._server is not None:
            self._server.stop()
            self._server = None

    def __enter__(self) -> "FaultProxy":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- bookkeeping ------------------------------------------------------------------------------
    def note_key(self, key: str) -> None:
        if key and key not in self._seen_secrets:
            self._seen_secrets.add(key)
        self._upstream_key = self._upstream_key or key

    def observe_lifecycle(self, req: Request, status: int, body: bytes) -> None:
        tok = req.headers.get("X-EXECD-ACCESS-TOKEN")
        if tok:
            self._seen_secrets.add(tok)
        if req.method == "POST" and _CREATE_RE.match(req.path) and status in (200, 201, 202):
            try:
                doc = json.loads(body.decode("utf-8"))
                sid = doc["id"]
            except (ValueError, KeyError, TypeError, UnicodeDecodeError):
                return
            try:
                image = json.loads(req.body.decode("utf-8")).get("image", {}).get("uri")
            except (ValueError, AttributeError, UnicodeDecodeError):
                image = None
            with self._lock:
                self.known[sid] = {"created": True, "image": image}
        m = _SANDBOX_RE.match(req.path)
        if m and req.method == "DELETE" and status in (200, 204):
            self.forget(m.group(1))

    def forget(self, sid: str) -> None:
        with self._lock:
            self.known.pop(sid, None)
            gone = [k for k in self.listeners if k[1] == sid]
            servers = [self.listeners.pop(k)[0] for k in gone]
        for srv in servers:
            threading.Thread(target=srv.stop, daemon=True).start()  # never from a request thread's own server

    def _listener_for(self, sid: str, host: str, port: int, container_port: int) -> int:
        key = ("%s:%d" % (host, port), sid)
        with self._lock:
            have = self.listeners.get(key)
            if have is not None:
                return have[0].port
            app = EndpointProxyApp(self, sid, host, port, container_port)
            srv = Server(("127.0.0.1", 0), _EndpointHandler, app)
            srv.start(name="osb-fault-proxy-%s" % sid[:8])
            self.listeners[key] = (srv, app)
            self.known.setdefault(sid, {"created": False})
            return srv.port

    def rewrite_endpoint(self, data: bytes, sid: str, container_port: int, client_host: str | None) -> bytes:
        """Point an endpoint document at the proxy; unknown shapes pass unchanged."""
        try:
            doc = json.loads(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError):
            return data
        if not isinstance(doc, dict) or not isinstance(doc.get("endpoint"), str):
            return data
        m = _ADDR_RE.match(doc["endpoint"])
        if not m:
            return data
        host, port, rest = m.group("host").strip("[]"), int(m.group("port")), m.group("rest") or ""
        scheme = m.group("scheme") or ""
        if "%s:%d" % (host, port) == self.upstream_hostport and ("/sandboxes/" in rest):
            new = "%s%s:%d%s" % (scheme, self.host, self.port, rest)  # use_server_proxy: the lifecycle
        else:
            local = self._listener_for(sid, host, port, container_port)
            new = "%s127.0.0.1:%d%s" % (scheme, local, rest)
        with self._lock:
            meta = self.known.setdefault(sid, {"created": False})
            if isinstance(doc.get("headers"), dict):
                meta["headers"] = {
                    k: ("<redacted>" if k.lower() in SECRET_HEADERS else v) for k, v in doc["headers"].items()
                }
        doc["endpoint"] = new
        return json.dumps(doc, separators=(",", ":"), ensure_ascii=False).encode("utf-8")

    def upstream_call(self, method: str, path: str) -> tuple[int, Any]:
        """A request of the proxy's own to the upstream lifecycle (admin state, reset); (0, None) if unreachable."""
        conn = http.client.HTTPConnection(self.upstream_host, self.upstream_port, timeout=15)
        try:
            headers = {"Accept": "application/json"}
            if self._upstream_key:
                headers["OPEN-SANDBOX-API-KEY"] = self._upstream_key
            conn.request(method, self.upstream_prefix + path, headers=headers)
            r = conn.getresponse()
            data = r.read()
            try:
                return r.status, json.loads(data) if data else None
            except ValueError:
                return r.status, None
        except (OSError, http.client.HTTPException):
            return 0, None
        finally:
            conn.close()


# =====================================================================================================
# command line
# =====================================================================================================
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mock_opensandbox.workbench.proxy",
        description="Fault proxy in front of an OpenSandbox server: forwards lifecycle and "
        "execd traffic, applies fault rules, journals, records.",
    )
    p.add_argument("--upstream", required=True, help="the OpenSandbox lifecycle URL, e.g. http://127.0.0.1:8080")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    p.add_argument("--port", type=int, default=0, help="port of the proxy (default: any free port)")
    p.add_argument(
        "--api-key",
        default=None,
        help="key of the /__mock__/ admin API (default: $OPENSANDBOX_API_KEY, else generated and printed)",
    )
    p.add_argument("--record", default=None, metavar="DIR", help="write the upstream exchanges to DIR/<name>.json")
    p.add_argument("--record-name", default="proxy_recording", help="scenario/file name of the recording")
    p.add_argument("--fault", action="append", default=[], metavar="JSON", help=FAULT_ARG_HELP)
    p.add_argument("--verbose", action="store_true", help="log every request to stderr")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(build_parser(), argv)
    if args is None:
        return 2
    env_key = os.environ.get("OPENSANDBOX_API_KEY") or None
    try:
        proxy = FaultProxy(
            args.upstream,
            host=args.host,
            port=args.port,
            api_key=args.api_key or env_key,
            upstream_api_key=env_key,
            record=args.record,
            record_name=args.record_name,
            verbose=args.verbose,
        )
    except (ValueError, OSError) as e:
        print("error: %s" % e, file=sys.stderr)
        return 2

    def banner() -> None:
        print("Fault proxy listening on %s -> %s" % (proxy.base_url, proxy.upstream), flush=True)
        if not (args.api_key or env_key):
            print("Admin API key (generated, header OPEN-SANDBOX-API-KEY): %s" % proxy.api_key, flush=True)
        print("Dashboard: %s/__mock__/?key=<admin key>" % proxy.base_url, flush=True)
        if proxy.recorder:
            print("Recording to %s" % proxy.recorder.path, flush=True)

    return run_foreground(proxy, args.fault, args.host, args.port, banner)


if __name__ == "__main__":
    sys.exit(main())
