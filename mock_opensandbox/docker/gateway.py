"""OpenSandbox's ingress gateway in front of the sandboxes (``components/ingress/pkg/proxy/`` at 3bb6fad), for the
mock with ``runtime="kubernetes"`` and ``gateway=True``: a listener on 127.0.0.1 (ephemeral port) that routes each
request by its ``OpenSandbox-Ingress-To`` header (route mode ``header``) or its first two path segments (``uri``) to
the sandbox's port, checks secure access, and reverse-proxies (QUIRKS.md, "Kubernetes runtime: gateway and secure
access").

* Routing, host.go getSandboxHostDefinition: header mode takes ``OpenSandbox-Ingress-To``, else the deprecated
  ``OPEN-SANDBOX-INGRESS``, else ``Host``, and parses its first DNS label (host_route_parse.go parseHostRoute:
  ``<id>-<port>`` or a signed ``<id>-<port>-<expires_b36>-<signature>``); uri mode parses
  ``/<id>/<port>/<expires_b36>/<signature>/<rest>`` (signed) or ``/<id>/<port>/<rest>`` and forwards ``/<rest>``.
  A bad route is 400, an unknown sandbox 404, one not Ready 503 (errors.go), secure-access refusals 401
  (signature/ingress_access.go): ``http.Error`` text ``OpenSandbox Ingress: <error>``.
* Forwarding, proxy.go/http.go: ``OpenSandbox-Ingress-To`` and ``OpenSandbox-Secure-Access`` are deleted before
  the sandbox sees the request, Host becomes the target, X-Forwarded-For is appended, hop-by-hop headers go
  (httputil.ReverseProxy), the answer gets ``Reverse-Proxy-Server-PowerBy: OpenSandbox-ingress`` and streams as
  it arrives (lifecycle/proxy.py forward: every read flushed, so SSE is unbuffered).
* WebSocket (websocket.go): a GET with ``Upgrade: websocket`` and ``Connection: Upgrade`` is dialled to the
  sandbox with only Origin, Sec-WebSocket-Protocol, Cookie, Host, X-Forwarded-For/-Proto (plus the handshake),
  then the frames are joined byte for byte [choice: gorilla re-frames messages; their payloads are the same].

The sandbox's port is reached as the Docker provisioner reaches it (its execd listener, ``/proxy/<port>``, the
8080 listener): the pod IP of a cluster is not there. Standard library only.
"""

from __future__ import annotations

import socket
import threading
from typing import Any, Protocol

from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.lifecycle.ingress import Ingress
from mock_opensandbox.lifecycle.model import Sandbox, SandboxStore
from mock_opensandbox.lifecycle.proxy import BackendError, forward
from mock_opensandbox.lifecycle.signing import (
    SECURE_ACCESS_HEADER,
    RouteError,
    check_access,
    parse_expires_b36,
    parse_port_segment,
    parse_route_token,
    validate_signature_format,
)
from mock_opensandbox.wire import relay
from mock_opensandbox.wire.http1 import Handler, Request
from mock_opensandbox.wire.listener import App, Server

DEPRECATED_HEADER = "OPEN-SANDBOX-INGRESS"  # header.go DeprecatedSandboxIngress
NAMESPACE = "opensandbox"  # [choice] the namespace named in "sandbox not ready" (the oracle's)
POWERED_BY = {"Reverse-Proxy-Server-PowerBy": "OpenSandbox-ingress"}  # http.go ModifyResponse
# http.go Director / proxy.go ServeHTTP delete these; httputil.ReverseProxy drops hop-by-hop ones both ways
STRIPPED = relay.HOP_BY_HOP | {quirks.INGRESS_HEADER.lower(), SECURE_ACCESS_HEADER.lower()}
WS_FORWARDED = ("Origin", "Sec-WebSocket-Protocol", "Cookie")  # websocket.go ServeHTTP's requestHeader


def parse_host_route(s: str) -> tuple[str, int, str, str]:
    """host_route_parse.go parseHostRoute."""
    label = s.removeprefix("https://").removeprefix("http://").split(".")[0]
    try:
        return parse_route_token(label)
    except RouteError:
        pass
    parts = label.split("-")
    if len(parts) <= 1 or not parts[0]:
        raise RouteError("invalid host: %s" % s)
    try:
        port = int(parts[-1])
    except ValueError:
        raise RouteError('invalid port format: strconv.Atoi: parsing "%s": invalid syntax' % parts[-1]) from None
    return "-".join(parts[:-1]), port, "", ""


def parse_uri_route(path: str, legacy: bool = False) -> tuple[str, int, str, str, str, bool]:
    """host_route_parse.go parseURIRoute / parseURILegacy: (id, port, expires_b36, signature, request URI, OSEP)."""
    parts = path.removeprefix("/").split("/", 4)
    if not legacy and len(parts) >= 4 and parts[0]:
        try:
            port = parse_port_segment(parts[1])
            parse_expires_b36(parts[2])
            validate_signature_format(parts[3])
            rest = "/" + parts[4] if len(parts) == 5 and parts[4] else "/"
            return parts[0], port, parts[2], parts[3], rest, True
        except RouteError:
            pass
    parts = path.removeprefix("/").split("/", 2)
    if len(parts) < 2:
        raise RouteError(
            "invalid URI path format: expected '/<sandbox-id>/<sandbox-port>/<path-to-request>', got: %s" % path
        )
    if not parts[0]:
        raise RouteError("missing sandbox-id or sandbox-port in URI path")
    try:
        port = parse_port_segment(parts[1])
    except RouteError as e:
        raise RouteError("invalid port format: %s" % e) from None
    return parts[0], port, "", "", "/" + parts[2] if len(parts) >= 3 and parts[2] else "/", False


class Endpoints(Protocol):
    """Where a sandbox's port is reached (provisioner.py MockProvisioner.endpoint): ("host:port[/path]", headers)."""

    def endpoint(self, sb: Sandbox, port: int) -> tuple[str, dict[str, str] | None]: ...


class GatewayApp(App):
    fault_listener = "gateway"

    def __init__(self, store: SandboxStore, endpoints: Endpoints, ingress: Ingress, verbose: bool = False):
        """``store``: the sandboxes it routes to; ``endpoints``: where a sandbox's port is reached (the Docker
        provisioner's ``endpoint``)."""
        self.store, self.endpoints, self.ingress, self.verbose = store, endpoints, ingress, verbose

    def resolve(self, sid: str) -> Any:
        """sandbox/batchsandbox_provider.go GetEndpoint: 404 unknown, 503 not Ready."""
        try:
            sb = self.store.get(sid)
        except quirks.MockError:
            sb = None
        if sb is None:
            self.ingress.forget(sid)
            raise RouteError("sandbox not found: %s" % sid, 404)
        if sb.state not in ("Running", "Paused"):
            raise RouteError("sandbox not ready: %s/%s (ready: 0/1)" % (NAMESPACE, sid), 503)
        return sb

    def route(self, req: Request) -> tuple[Any, int, str]:
        """host.go getSandboxHostDefinition: (sandbox, port, request URI or "" to keep the path)."""
        if self.ingress.route == "header":
            target = req.headers.get(quirks.INGRESS_HEADER) or req.headers.get(DEPRECATED_HEADER)
            target = target or req.headers.get("Host") or ""
            if not target:
                raise RouteError("missing header '%s' or 'Host'" % quirks.INGRESS_HEADER)
            try:
                sid, port, exp, sig = parse_host_route(target)
            except RouteError as e:
                raise RouteError("invalid ingress route: %s" % e) from None
            uri, osep = "", False
        else:
            if not req.path:
                raise RouteError("missing URI path")
            try:
                sid, port, exp, sig, uri, osep = parse_uri_route(req.path)
            except RouteError as e:
                raise RouteError("invalid ingress route: %s" % e) from None
        sb = self.resolve(sid)
        token = self.ingress.token(sid)
        if self.ingress.route == "uri" and not token and osep:
            sid, port, exp, sig, uri, osep = parse_uri_route(req.path, legacy=True)
        if token:
            header = req.headers.get(SECURE_ACCESS_HEADER)
            check_access(token, header, exp, sig, sid, port, self.ingress.keys)
        return sb, port, uri


class GatewayHandler(Handler):
    flavor = "gin"  # Go's net/http
    browser_guard = False  # websocket.go CheckOrigin: any Origin

    def dispatch(self, req: Request) -> None:
        app: Any = self.server.app  # a GatewayApp
        try:
            sb, port, uri = app.route(req)
            target, _ = app.endpoints.endpoint(sb, port)
        except RouteError as e:
            self._error(req, e.status, "OpenSandbox Ingress: %s" % e)
            return
        except quirks.MockError as e:
            self._error(req, 404, "OpenSandbox Ingress: sandbox not found: %s" % e)
            return
        rest = uri or req.raw_path.partition("?")[0]
        if self._is_websocket(req):
            self._websocket(req, target, rest)
            return
        for name in (quirks.INGRESS_HEADER, SECURE_ACCESS_HEADER):
            del req.headers[name]
        prior = req.headers.get_all("X-Forwarded-For") or []
        del req.headers["X-Forwarded-For"]
        req.headers["X-Forwarded-For"] = ", ".join(list(prior) + [self.client_address[0]])

        def unreachable(e: Exception) -> None:  # httputil.ReverseProxy's ErrorHandler: 502, empty body
            req.send(502)

        try:
            forward(
                req,
                target,
                rest,
                client_facing=False,
                on_connect_error=unreachable,
                hop_by_hop=frozenset(STRIPPED),
                host=target.partition("/")[0],
                response_headers=POWERED_BY,
            )
        except BackendError:
            if not req.responded:
                req.send(502)
            else:
                self.close_connection = True

    def _error(self, req: Request, status: int, text: str) -> None:
        """Go's http.Error."""
        req.send_text(status, text + "\n", "text/plain; charset=utf-8", {"X-Content-Type-Options": "nosniff"})

    @staticmethod
    def _is_websocket(req: Request) -> bool:
        """proxy.go isWebSocketRequest: exact values, the first of each header."""
        return (
            req.method == "GET"
            and req.headers.get("Upgrade") == "websocket"
            and (req.headers.get("Connection") == "Upgrade")
        )

    def _websocket(self, req: Request, target: str, rest: str) -> None:
        hostport, _, base = target.partition("/")
        host, _, port_s = hostport.rpartition(":")
        path = ("/" + base.rstrip("/") if base else "") + "/" + rest.lstrip("/")
        query = req.raw_path.partition("?")[2]
        lines = ["GET %s%s HTTP/1.1" % (path, "?" + query if query else ""), "Host: " + hostport]
        lines += ["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13"]
        lines.append("Sec-WebSocket-Key: " + (req.headers.get("Sec-WebSocket-Key") or ""))
        for name in WS_FORWARDED:
            lines += ["%s: %s" % (name, v) for v in req.headers.get_all(name) or []]
        lines.append(
            "X-Forwarded-For: " + ", ".join((req.headers.get_all("X-Forwarded-For") or []) + [self.client_address[0]])
        )
        lines.append("X-Forwarded-Proto: http")
        try:
            back = socket.create_connection((host, int(port_s)), timeout=10)
        except OSError:
            req.send_text(
                503, "Service Unavailable\n", "text/plain; charset=utf-8", {"X-Content-Type-Options": "nosniff"}
            )
            return
        req.responded = True
        self.close_connection = True
        try:
            back.sendall(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"))
            back.settimeout(None)
            head = b""
            while b"\r\n\r\n" not in head:
                data = back.recv(65536)
                if not data:
                    return
                head += data
            self.connection.sendall(head)  # the 101 (or the refusal, copyResponse) and any frames after it
            if not head.startswith(b"HTTP/1.1 101"):
                relay.pump(back, self.connection)
                return
            t = threading.Thread(target=self._client_to_backend, args=(back,), name="gateway-ws", daemon=True)
            t.start()
            relay.pump(back, self.connection)
            t.join(timeout=5)
        except OSError:
            return
        finally:
            back.close()

    def _client_to_backend(self, back: socket.socket) -> None:
        try:
            while True:
                data = self.rfile.read1(65536)  # what the handler's reader buffered first
                if not data:
                    break
                back.sendall(data)
        except (OSError, ValueError):
            pass
        try:
            back.shutdown(socket.SHUT_WR)
        except OSError:
            pass


class Gateway:
    """The listener: ``start()`` binds 127.0.0.1:0 and sets ``ingress.address``; ``stop()`` closes it."""

    def __init__(
        self,
        store: SandboxStore,
        endpoints: Endpoints,
        ingress: Ingress,
        host: str = "127.0.0.1",
        verbose: bool = False,
    ):
        self.server = Server((host, 0), GatewayHandler, GatewayApp(store, endpoints, ingress, verbose))
        ingress.address = "%s:%d" % (host, self.server.port)

    def start(self) -> None:
        self.server.start(name="mock-osb-gateway")

    def stop(self) -> None:
        self.server.stop()
