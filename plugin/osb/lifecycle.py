"""The OpenSandbox lifecycle server (``/v1/sandboxes...``) and the per-sandbox state that must
outlive a plugin process (execd endpoint, execd framing), kept under ABX_PROVIDER_DATA_DIR only.

``OpenSandbox.execd(sandbox_id)`` gives the data-plane client of one sandbox (execd.py).
Facts quoted in comments: ``rec NN`` = recording NN, fixtures/NN_*.json; the others are rows of mock_opensandbox/QUIRKS.md.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
import time
import urllib.parse

from errors import SECRETS

from .retries import with_retries
from .transport import Http, HttpError, Reply, register_endpoint_secrets

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Iterable

    from .execd import Execd

    Query = dict[str, Any] | list[tuple[str, str]] | None  # urlencode() takes either

EXECD_PORT = 44772  # rec 05: GET .../endpoints/44772 is execd


# --------------------------------------------------------------------------- per-sandbox state


class SandboxCache:
    """Small JSON records per (server, sandbox) under ``<data_dir>/sandboxes``.

    The host starts a new plugin process for most calls (epp-host-reference §1.7), so the execd
    endpoint and the detected execd framing are kept here. Nothing is written when there is no data
    dir, and nothing is ever written outside it.
    """

    MAX_AGE = 14 * 86400

    def __init__(self, data_dir: str | None, server: str):
        self.dir = os.path.join(data_dir, "sandboxes") if data_dir else None
        self.server = server
        self._mem: dict[str, dict[str, Any]] = {}
        self._lock = threading.Lock()

    def _file(self, sandbox_id: str) -> str | None:
        if not self.dir:
            return None
        digest = hashlib.sha256(f"{self.server}\0{sandbox_id}".encode()).hexdigest()[:40]
        return os.path.join(self.dir, digest + ".json")

    def get(self, sandbox_id: str) -> dict[str, Any]:
        with self._lock:
            if sandbox_id in self._mem:
                return dict(self._mem[sandbox_id])
        path = self._file(sandbox_id)
        rec: dict[str, Any] = {}
        if path:
            try:
                with open(path, encoding="utf-8") as fh:
                    loaded = json.load(fh)
                if isinstance(loaded, dict) and loaded.get("sandbox_id") == sandbox_id:
                    rec = loaded
            except (OSError, ValueError):
                rec = {}
        with self._lock:
            self._mem[sandbox_id] = rec
        return dict(rec)

    def update(self, sandbox_id: str, **values: Any) -> None:
        rec = self.get(sandbox_id)
        rec.update(values)
        rec["sandbox_id"] = sandbox_id
        with self._lock:
            self._mem[sandbox_id] = rec
        path = self._file(sandbox_id)
        if not path:
            return
        try:
            os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
            tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(rec, fh)
            os.replace(tmp, path)
        except OSError:
            pass  # a cache, not a source of truth

    def drop(self, sandbox_id: str, *keys: str) -> None:
        """Forget ``keys`` of a sandbox (all of it when none are given)."""
        if keys:
            rec = self.get(sandbox_id)
            for k in keys:
                rec.pop(k, None)
            with self._lock:
                self._mem[sandbox_id] = rec
            if rec and self._file(sandbox_id):
                self.update(sandbox_id)
                return
        with self._lock:
            self._mem.pop(sandbox_id, None)
        path = self._file(sandbox_id)
        if path:
            try:
                os.remove(path)
            except OSError:
                pass

    def prune(self) -> None:
        """Remove records untouched for two weeks (sandboxes that expired on their own)."""
        if not self.dir or not os.path.isdir(self.dir):
            return
        cutoff = time.time() - self.MAX_AGE
        try:
            for name in os.listdir(self.dir):
                path = os.path.join(self.dir, name)
                try:
                    if os.path.getmtime(path) < cutoff:
                        os.remove(path)
                except OSError:
                    pass
        except OSError:
            pass


# --------------------------------------------------------------------------- lifecycle client


class OpenSandbox:
    """The lifecycle server (``/v1/sandboxes...``) plus execd access for its sandboxes."""

    def __init__(
        self,
        server: str,
        *,
        api_key: str = "",
        http: Http | None = None,
        data_dir: str | None = None,
        use_server_proxy: bool = False,
        execd_token: str = "",
        scheme: str = "",
    ):
        self.server = server.rstrip("/")  # root URL, without /v1
        self.api = self.server + "/v1"
        self.api_key = api_key
        self.http = http or Http()
        self.use_server_proxy = use_server_proxy
        self.execd_token = execd_token
        self.scheme = scheme or urllib.parse.urlsplit(self.server).scheme or "http"
        self.cache = SandboxCache(data_dir, self.server)
        self._execd: dict[str, Execd] = {}  # by sandbox id
        self._lock = threading.Lock()
        SECRETS.add(api_key, execd_token)

    # ---- plumbing

    def _headers(self, has_body: bool) -> dict[str, Any]:
        h = {"Accept": "application/json"}
        if self.api_key:
            h["OPEN-SANDBOX-API-KEY"] = self.api_key
        if has_body:
            h["Content-Type"] = "application/json"
        return h

    def call(
        self,
        method: str,
        path: str,
        *,
        query: Query = None,
        body: object = None,
        what: str,
        timeout: float | None = None,
        ok: tuple[int, ...] = (200, 201, 202, 204),
        retry: bool | None = None,
    ) -> Reply:
        """One lifecycle call. GET and DELETE are retried (with_retries); other methods only when
        the caller says the call is idempotent (renew sets an absolute time)."""
        url = self.api + path
        if query:
            url += "?" + urllib.parse.urlencode(query, doseq=True)
        data = json.dumps(body).encode("utf-8") if body is not None else None

        def once() -> Reply:
            reply = self.http.request(method, url, self._headers(data is not None), data, timeout, what)
            if reply.status not in ok:
                raise HttpError(reply.status, reply.reason, reply.body, reply.headers, what, "lifecycle")
            return reply

        if retry is None:
            retry = method in ("GET", "DELETE")
        return with_retries(once, self.http.timeout) if retry else once()

    @staticmethod
    def sid(sandbox_id: str) -> str:
        return urllib.parse.quote(sandbox_id, safe="")

    # ---- lifecycle (rec 05, 14, 15)

    def create(self, body: dict[str, Any], timeout: float | None = None) -> Reply:
        return self.call("POST", "/sandboxes", body=body, what="create sandbox", timeout=timeout)

    def get(self, sandbox_id: str) -> Reply:
        return self.call("GET", f"/sandboxes/{self.sid(sandbox_id)}", what="get sandbox")

    def list_page(self, *, page: int, page_size: int, states: Iterable[str] = (), metadata: str = "") -> dict[str, Any]:
        query: list[tuple[str, str]] = [("state", s) for s in states]
        if metadata:
            query.append(("metadata", metadata))
        query += [("page", str(page)), ("pageSize", str(page_size))]
        body = self.call("GET", "/sandboxes", query=query, what="list sandboxes").json()
        return body if isinstance(body, dict) else {}

    def delete(self, sandbox_id: str) -> None:
        self.call("DELETE", f"/sandboxes/{self.sid(sandbox_id)}", what="delete sandbox")
        self.forget(sandbox_id)

    def pause(self, sandbox_id: str) -> None:
        self.call("POST", f"/sandboxes/{self.sid(sandbox_id)}/pause", what="pause sandbox")

    def resume(self, sandbox_id: str) -> None:
        self.call("POST", f"/sandboxes/{self.sid(sandbox_id)}/resume", what="resume sandbox")

    def renew(self, sandbox_id: str, expires_at: str) -> Reply:
        return self.call(
            "POST",
            f"/sandboxes/{self.sid(sandbox_id)}/renew-expiration",
            body={"expiresAt": expires_at},
            what="renew sandbox expiration",
            retry=True,
        )

    def endpoint(self, sandbox_id: str, port: int, server_proxy: bool | None = None) -> tuple[str, dict[str, Any]]:
        """(URL with scheme, headers to send). Endpoints come without a scheme (rec 05)."""
        proxy = self.use_server_proxy if server_proxy is None else server_proxy
        query = {"use_server_proxy": "true"} if proxy else None
        body = self.call(
            "GET",
            f"/sandboxes/{self.sid(sandbox_id)}/endpoints/{int(port)}",
            query=query,
            what=f"resolve endpoint for port {port}",
        ).json()
        if not isinstance(body, dict) or not isinstance(body.get("endpoint"), str) or not body["endpoint"]:
            raise HttpError(
                502,
                "Bad Gateway",
                b'{"message":"endpoint response without an endpoint"}',
                {},
                f"resolve endpoint for port {port}",
                "lifecycle",
            )
        url = body["endpoint"].rstrip("/")
        if "://" not in url:
            url = f"{self.scheme}://{url}"
        raw = body.get("headers")
        headers = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, dict) else {}
        register_endpoint_secrets(headers)
        return url, headers

    # ---- execd

    def execd(self, sandbox_id: str, *, refresh: bool = False) -> Execd:
        key = "execd_proxy" if self.use_server_proxy else "execd_direct"
        with self._lock:
            cached = None if refresh else self._execd.get(sandbox_id)
        if cached is not None:
            return cached
        rec = {} if refresh else self.cache.get(sandbox_id)
        ep = rec.get(key)
        if not (isinstance(ep, dict) and isinstance(ep.get("url"), str) and isinstance(ep.get("headers"), dict)):
            url, headers = self.endpoint(sandbox_id, EXECD_PORT)
            ep = {"url": url, "headers": headers}
            self.cache.update(sandbox_id, **{key: ep})
        from .execd import Execd

        ex = Execd(self, sandbox_id, ep["url"], ep["headers"])
        with self._lock:
            self._execd[sandbox_id] = ex
        return ex

    def forget(self, sandbox_id: str) -> None:
        with self._lock:
            self._execd.pop(sandbox_id, None)
        self.cache.drop(sandbox_id)
