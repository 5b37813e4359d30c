"""One sandbox's egress sidecar, in the mock process (components/egress at 3bb6fad, run by the server's
services/docker/networking.py ``_start_egress_sidecar`` in the sandbox's network namespace):

* a DNS resolver on 127.0.0.1:53 *inside* the sandbox's network namespace (the sandbox's
  /etc/resolv.conf names it): names the policy denies get NXDOMAIN, the others are forwarded to the
  upstream from the mock's own namespace (pkg/dnsproxy/proxy.go serveDNS; SERVFAIL when it fails);
* the policy API on 0.0.0.0:18080 inside the namespace (policy_server.go: GET/POST/PUT/PATCH/DELETE
  /policy, /healthz), token-checked with OPENSANDBOX-EGRESS-AUTH;
* in dns+nft mode, a nat.py filter (the addresses of allowed names, literal IP/CIDR rules).

Sockets made in the namespace and threads of the mock: nothing in the sandbox's PID namespace (its
``ps``), gone when the sandbox stops (close()) and with the mock. Standard library only.
"""

from __future__ import annotations

import json
import secrets
import socket
import socketserver
import struct
import threading
from typing import Any, Callable

from mock_opensandbox.docker.egress import policy as P
from mock_opensandbox.runtime.holder import setns_function
from mock_opensandbox.runtime.netns import own_netns_fd
from mock_opensandbox.wire import http1 as httpcore
from mock_opensandbox.wire.listener import App, Server

AUTH_HEADER = "OPENSANDBOX-EGRESS-AUTH"  # server services/constants.py OPEN_SANDBOX_EGRESS_AUTH_HEADER
API_PORT = 18080  # pkg/constants/configuration.go DefaultEgressServerAddr
DNS_PORT = 53
MAX_BODY = 1 << 20  # policy_utils.go maxPolicyBodyBytes
UPSTREAM_TIMEOUT = 5.0  # DefaultDNSUpstreamTimeoutSec
CLONE_NEWNET = 0x40000000


def forward_udp(pkt: bytes, upstream: Any) -> bytes | None:
    """One DNS query to ``upstream`` from the mock's own namespace: the answer with the query's id, or
    None when none came within UPSTREAM_TIMEOUT (or the socket failed)."""
    up = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        up.settimeout(UPSTREAM_TIMEOUT)
        up.sendto(pkt, upstream)
        while True:
            resp, _ = up.recvfrom(65535)
            if resp[:2] == pkt[:2]:
                return resp
    except OSError:
        return None
    finally:
        up.close()


def udp_socket_in(netns_fd: int) -> socket.socket:
    """A UDP socket made in the given network namespace (root: setns around socket())."""

    setns = setns_function()
    setns(netns_fd, CLONE_NEWNET)
    try:
        return socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    finally:
        setns(own_netns_fd(), CLONE_NEWNET)


def query_name(pkt: bytes) -> str | None:
    """The first question's name of a DNS message, or None when there is none / it is malformed."""
    if len(pkt) < 12 or struct.unpack("!H", pkt[4:6])[0] < 1:
        return None
    i = 12
    labels: list[str] = []
    while i < len(pkt):
        n = pkt[i]
        if n == 0:
            return ".".join(labels) + "."
        if n & 0xC0 or i + 1 + n > len(pkt):
            return None
        labels.append(pkt[i + 1 : i + 1 + n].decode("ascii", "replace"))
        i += 1 + n
    return None


def _question_end(pkt: bytes) -> int:
    i = 12
    while pkt[i]:
        i += 1 + pkt[i]
    return i + 5  # the zero label, QTYPE, QCLASS


def reply_rcode(pkt: bytes, rcode: int) -> bytes:
    """miekg/dns Msg.SetRcode(r, rcode): same id/opcode/RD, QR set, the question, no records."""
    qid, flags = struct.unpack("!HH", pkt[:4])
    out_flags = 0x8000 | (flags & 0x7900) | (rcode & 0xF)  # QR, opcode, RD
    q = pkt[12 : _question_end(pkt)]
    return struct.pack("!HHHHHH", qid, out_flags, 1, 0, 0, 0) + q


def answer_ips(pkt: bytes) -> list[str]:
    """The A records of a DNS answer (for dns+nft's allowed addresses)."""
    try:
        an = struct.unpack("!H", pkt[6:8])[0]
        i = _question_end(pkt)
        out = []
        for _ in range(an):
            if pkt[i] & 0xC0 == 0xC0:
                i += 2
            else:
                while pkt[i]:
                    i += 1 + pkt[i]
                i += 1
            rtype, _cls, _ttl, rdlen = struct.unpack("!HHIH", pkt[i : i + 10])
            i += 10
            if rtype == 1 and rdlen == 4:
                out.append(socket.inet_ntoa(pkt[i : i + 4]))
            i += rdlen
        return out
    except (IndexError, struct.error):
        return []


class EgressSidecar:
    """The policy, its DNS resolver and its API for one sandbox."""

    def __init__(
        self,
        pol: P.Policy,
        *,
        mode: str,
        token: str,
        upstream: tuple[str, int],
        on_resolved: Callable[[list[str]], None] | None = None,
        on_policy: Callable[[P.Policy], None] | None = None,
    ):
        self.policy = pol
        self.mode = mode
        self.token = token
        self.upstream = upstream
        self.on_resolved = on_resolved
        self.on_policy = on_policy
        self.lock = threading.Lock()
        self.dns: socket.socket | None = None
        self.http: _ApiServer | None = None
        self._threads: list[threading.Thread] = []
        self._closed = False

    # -- start / stop ---------------------------------------------------------------------------
    def start(self, netns_fd: int, listen: Callable[[int], socket.socket]) -> None:
        self.dns = udp_socket_in(netns_fd)
        self.dns.bind(("127.0.0.1", DNS_PORT))
        t = threading.Thread(target=self._serve_dns, name="mock-osb-egress-dns", daemon=True)
        t.start()
        self._threads.append(t)
        self.http = _ApiServer(listen(API_PORT), PolicyApp(self))
        self.http.start("mock-osb-egress-api")

    def close(self) -> None:
        with self.lock:
            if self._closed:
                return
            self._closed = True
        if self.http is not None:
            self.http.stop()
        if self.dns is not None:
            try:
                self.dns.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.dns.close()
        for t in self._threads:
            t.join(timeout=5)

    # -- DNS ------------------------------------------------------------------------------------
    def _serve_dns(self) -> None:
        sock = self.dns
        assert sock is not None
        while not self._closed:
            try:
                pkt, peer = sock.recvfrom(4096)
            except OSError:
                return
            if not pkt or self._closed:
                if self._closed:
                    return
                continue
            threading.Thread(target=self._answer, args=(pkt, peer), daemon=True).start()

    def _answer(self, pkt: bytes, peer: Any) -> None:
        name = query_name(pkt)
        try:
            if name is None:
                return  # serveDNS: an empty message for no question; a malformed one is dropped by miekg/dns
            with self.lock:
                pol = self.policy
            if pol.evaluate(name) == P.DENY:
                out = reply_rcode(pkt, 3)  # NXDOMAIN
            else:
                out = self._forward(pkt)
                if self.on_resolved is not None:
                    ips = answer_ips(out)
                    if ips:
                        self.on_resolved(ips)
            self.dns.sendto(out, peer)  # type: ignore[union-attr]
        except (OSError, IndexError, AttributeError):
            pass

    def _forward(self, pkt: bytes) -> bytes:
        resp = forward_udp(pkt, self.upstream)
        return reply_rcode(pkt, 2) if resp is None else resp  # SERVFAIL

    # -- the policy API -------------------------------------------------------------------------
    def commit(self, pol: P.Policy) -> None:
        if self.on_policy is not None:
            self.on_policy(pol)
        with self.lock:
            self.policy = pol

    def status(self, mode: str, reason: str = "", with_policy: bool = False) -> dict[str, Any]:
        """policyStatusResponse (omitempty fields)."""
        out: dict[str, Any] = {"status": "ok", "mode": mode, "enforcementMode": self.mode}
        if reason:
            out["reason"] = reason
        if with_policy:
            out["policy"] = self.policy.to_json()
        return out


class PolicyApp(App):
    """The policy API's httpcore application: one sidecar's policy (no faults, no journal)."""

    def __init__(self, sc: "EgressSidecar"):
        self.sidecar = sc


class _ApiServer(Server):
    """An httpcore Server on a socket made in the sandbox's namespace (never binds on the host)."""

    def __init__(self, sock: socket.socket, app: PolicyApp):
        self.app = app
        self._init_state(0.0)
        socketserver.BaseServer.__init__(self, sock.getsockname(), PolicyHandler)
        self.socket = sock


class PolicyHandler(httpcore.Handler):
    """policy_server.go: Go net/http (no Server header), http.Error texts with a newline, writeJSON."""

    flavor = "gin"  # Go's header style: canonical names, no Server header
    server: _ApiServer

    def dispatch(self, req: httpcore.Request) -> None:
        app = self.server.app
        assert isinstance(app, PolicyApp)
        sc: EgressSidecar = app.sidecar

        def error(code: int, msg: str, extra: dict[str, Any] | None = None) -> None:  # net/http http.Error
            req.send(
                code,
                (msg + "\n").encode(),
                "text/plain; charset=utf-8",
                dict({"X-Content-Type-Options": "nosniff"}, **(extra or {})),
            )

        def send_json(code: int, doc: dict[str, Any]) -> None:  # writeJSON: json.Encoder, a trailing newline
            req.send(code, (json.dumps(doc, separators=(",", ":")) + "\n").encode(), "application/json")

        def commit(new: P.Policy) -> bool:
            try:
                sc.commit(new)
                return True
            except OSError as e:  # commitPolicy: the nftables apply failed
                error(500, "failed to apply nftables policy: %s" % e)
                return False

        if req.path == "/healthz":
            req.send(200, b"ok", "text/plain; charset=utf-8")
            return
        if req.path != "/policy":
            error(404, "404 page not found")
            return
        if sc.token and req.headers.get(AUTH_HEADER, "") != sc.token:
            error(401, "unauthorized")
            return
        m = req.method
        if m == "GET":
            with sc.lock:
                send_json(200, sc.status(sc.policy.mode(), with_policy=True))
            return
        if m not in ("POST", "PUT", "PATCH", "DELETE"):
            error(405, "method not allowed", {"Allow": "GET, POST, PUT, PATCH, DELETE"})
            return
        try:
            raw = req.body[:MAX_BODY].decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            error(400, "failed to read body")
            return
        with sc.lock:
            base = sc.policy
        try:
            if m in ("POST", "PUT"):
                if raw == "":
                    if commit(P.Policy(P.DENY, None, egress_null=True)):
                        send_json(
                            200, {"status": "ok", "mode": "deny_all", "reason": "policy reset to default deny-all"}
                        )
                    return
                try:
                    new = P.parse_policy(raw)
                except P.PolicyError as e:
                    raise P.PolicyError("invalid policy: %s" % e) from None
            elif raw == "":
                raise P.PolicyError("empty body")
            elif m == "PATCH":
                new = P.patch(base, raw)
            else:
                new, removed = P.delete(base, raw)
                if not removed:
                    send_json(200, sc.status(base.mode(), "no matching targets found"))
                    return
        except P.PolicyError as e:
            error(400, str(e))
            return
        if commit(new):
            send_json(200, sc.status(new.mode()))


def token() -> str:
    return secrets.token_urlsafe(24)  # server services/endpoint_auth.py generate_egress_token
