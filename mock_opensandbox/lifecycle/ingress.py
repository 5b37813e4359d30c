"""The Kubernetes runtime's ``[ingress] mode = "gateway"``: what the endpoint route answers and the secure-access
tokens of ``secureAccess`` sandboxes (QUIRKS.md, "Kubernetes runtime: gateway and secure access").

``Ingress`` holds the gateway's address (the mock's own gateway listener, docker/gateway.py, once it listens), its
route mode (``header`` or ``uri``), the signing keys (lifecycle/signing.py) and a token per secureAccess sandbox
(the server keeps it in the BatchSandbox annotation ``opensandbox.io/secure-access-token``). ``endpoint()`` answers
``GET /sandboxes/{id}/endpoints/{port}`` in the order of server ``api/lifecycle.py`` get_sandbox_endpoint and
``services/k8s/kubernetes_service.py`` get_endpoint, formatting as ``services/helpers.py`` format_ingress_endpoint
and adding headers as ``services/k8s/endpoint_resolver.py`` does. Standard library only.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.lifecycle.quirks import MockError
from mock_opensandbox.lifecycle.signing import SECURE_ACCESS_HEADER, KeyRing, generate_token

ROUTES = ("header", "uri")
INVALID_PARAMETER = "SANDBOX::INVALID_PARAMETER"
MAX_UINT64 = 2**64 - 1


def _bad(message: str) -> MockError:
    return MockError(quirks.Quirk(400, INVALID_PARAMETER, message, "server services/k8s/kubernetes_service.py"))


class Ingress:
    def __init__(self, route: str = "header", keys: str | None = None, active_key: str = ""):
        if route not in ROUTES:
            raise ValueError("gateway route must be one of %s, not %r" % (", ".join(ROUTES), route))
        self.route = route
        self.keys = KeyRing(keys, active_key)
        self.address = ""  # host:port of the gateway, set once it listens
        self._tokens: dict[str, str] = {}
        self._lock = threading.Lock()

    # -- secure access tokens (server services/k8s/batchsandbox_provider.py: the workload's annotation) ---------------
    def grant(self, sandbox_id: str) -> str:
        token = generate_token()
        with self._lock:
            self._tokens[sandbox_id] = token
        return token

    def token(self, sandbox_id: str) -> str:
        with self._lock:
            return self._tokens.get(sandbox_id, "")

    def forget(self, sandbox_id: str) -> None:
        with self._lock:
            self._tokens.pop(sandbox_id, None)

    # -- answers ---------------------------------------------------------------------------------------------------------
    def format(self, sandbox_id: str, port: int, expires_b36: str = "", signature: str = "") -> dict[str, Any]:
        """server services/helpers.py format_ingress_endpoint (header and uri route modes)."""
        if self.route == "uri":
            tail = "/%s/%s" % (expires_b36, signature) if signature else ""
            return {"endpoint": "%s/%s/%d%s" % (self.address, sandbox_id, port, tail)}
        value = "%s-%d" % (sandbox_id, port) + ("-%s-%s" % (expires_b36, signature) if signature else "")
        return {"endpoint": self.address, "headers": {quirks.INGRESS_HEADER: value}}

    def endpoint(
        self, store: Any, req: Any, sandbox_id: str, port: int, use_proxy: bool, expires: int | None
    ) -> dict[str, Any]:
        """The endpoint document, or MockError with the server's 400/404 (the checks in the server's order)."""
        if use_proxy and expires is not None:
            raise MockError(quirks.SERVER_PROXY_WITH_EXPIRES)
        if not 1 <= port <= 65535:  # services/sandbox_service.py validate_port (ensure_valid_port)
            raise MockError(quirks.INVALID_PORT)
        if expires is not None:
            now = int(time.time())
            if expires < 0:
                raise _bad("expires must be a non-negative Unix timestamp (uint64).")
            if expires <= now:
                raise _bad("expires (%d) must be greater than current time (%d)." % (expires, now))
            if expires > MAX_UINT64:
                raise _bad("expires exceeds uint64 maximum value.")
        store.get(sandbox_id)  # the sandbox's 404
        if expires is not None:
            e, sig = self.keys.sign(sandbox_id, port, expires)
            out = self.format(sandbox_id, port, e, sig)  # a signed route carries no access-token header
        else:
            out = self.format(sandbox_id, port)
            token = self.token(sandbox_id)
            if token:  # endpoint_resolver.py _attach_secure_access_headers
                out["headers"] = dict(out.get("headers") or {}, **{SECURE_ACCESS_HEADER: token})
        if use_proxy:  # api/lifecycle.py: the server's proxy URL; the routing header goes, the token stays
            mount = req.path.split("/sandboxes/", 1)[0]
            out["endpoint"] = "%s%s/sandboxes/%s/proxy/%d" % (req.headers.get("Host") or "", mount, sandbox_id, port)
            headers = {
                k: v for k, v in (out.get("headers") or {}).items() if k.lower() != quirks.INGRESS_HEADER.lower()
            }
            out.pop("headers", None)
            if headers:
                out["headers"] = headers
        return out
