"""``--egress-bin PATH``: the real egress sidecar (``components/egress`` at 3bb6fad, e.g.
../shared/opensandbox/egress/egress) run in a sandbox's network namespace instead of the mock's own
resolver and policy API (sidecar.py), the way the server runs it: a process that shares the sandbox's
network namespace and nothing else (not in the sandbox's ``ps``), with the environment of
``services/docker/networking.py`` ``_start_egress_sidecar``: OPENSANDBOX_EGRESS_RULES, _MODE, _TOKEN.

What differs from a container, and why:

* it runs in the mock's mount namespace (the host's iptables/nft binaries, no /var/egress/rules files);
* its upstream (OPENSANDBOX_EGRESS_DNS_UPSTREAM) is a UDP relay on 127.0.0.1:<ephemeral> inside the
  namespace that forwards to the mock's ``--egress-dns-upstream`` from the mock's own namespace: a mock
  sandbox has no route out without slirp4netns;
* the sandbox's /etc/resolv.conf names 127.0.0.1 (as with the mock's resolver), which the sidecar's
  iptables REDIRECT of port 53 to its 15353 catches; a Docker container keeps Docker's copy, which has a
  route there.

It is stopped with SIGTERM (it removes its iptables rules and nft table itself), SIGKILL after a grace
period, and the janitor (runtime/janitor.py) kills it should the mock die first. Root only (nsenter).
Standard library only.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from typing import Any, Callable

from mock_opensandbox.docker.egress.sidecar import API_PORT, forward_udp, reply_rcode, udp_socket_in
from mock_opensandbox.runtime.janitor import Janitor

GRACE = 10.0  # SIGTERM -> SIGKILL (the supervisor's --grace-period is 20 s; the sidecar is done in < 1 s)


def binary_problem(path: str | None, mode: str) -> str:
    """Why --egress-bin cannot run here ("" = it can): the file, root, iptables (its DNS redirect), nft."""
    if not path:
        return ""
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        return "--egress-bin %s is not an executable file" % path
    if os.geteuid() != 0:
        return "--egress-bin needs root (the sidecar installs iptables rules in each sandbox's namespace)"
    for tool in ("nsenter", "iptables") + (("nft",) if mode == "dns+nft" else ()):
        if not shutil.which(tool):
            return "--egress-bin needs %s, which is not installed" % tool
    return ""


class UpstreamRelay:
    """A UDP socket on 127.0.0.1:<ephemeral> in the namespace; every query is sent on from the mock's namespace."""

    def __init__(self, netns_fd: int, upstream: tuple[str, int]):
        self.upstream = upstream
        self.sock = udp_socket_in(netns_fd)
        self.sock.bind(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="mock-osb-egress-relay", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._closed:
            try:
                pkt, peer = self.sock.recvfrom(65535)
            except OSError:
                return
            if pkt and not self._closed:
                threading.Thread(target=self._one, args=(pkt, peer), daemon=True).start()

    def _one(self, pkt: bytes, peer: Any) -> None:
        resp = forward_udp(pkt, self.upstream)
        if resp is None:
            resp = reply_rcode(pkt, 2) if len(pkt) > 12 else b""
        try:
            if resp:
                self.sock.sendto(resp, peer)
        except OSError:
            pass

    def close(self) -> None:
        self._closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        self._thread.join(timeout=5)


class RealSidecar:
    """One sandbox's real egress process (the ``token`` is what the endpoint of 18080 hands out)."""

    def __init__(
        self,
        binary: str,
        rules_json: str,
        *,
        mode: str,
        token: str,
        upstream: tuple[str, int],
        janitor: Janitor | None = None,
        log_path: str | None = None,
    ):
        self.binary, self.rules_json, self.mode, self.token = binary, rules_json, mode, token
        self.upstream = upstream
        self.janitor = janitor
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.relay: UpstreamRelay | None = None
        self._tracked = ""

    def start(self, holder_pid: int, netns_fd: int) -> None:
        self.relay = UpstreamRelay(netns_fd, self.upstream)
        env = {
            "PATH": os.environ.get("PATH", "/usr/sbin:/usr/bin:/sbin:/bin"),
            "OPENSANDBOX_EGRESS_RULES": self.rules_json,
            "OPENSANDBOX_EGRESS_MODE": self.mode,
            "OPENSANDBOX_EGRESS_TOKEN": self.token,
            "OPENSANDBOX_EGRESS_DNS_UPSTREAM": "127.0.0.1:%d" % self.relay.port,
        }
        out: Any = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(
                [shutil.which("nsenter") or "nsenter", "--net=/proc/%d/ns/net" % holder_pid, "--", self.binary],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                close_fds=True,
            )
        finally:
            if out is not subprocess.DEVNULL:
                out.close()
        if self.janitor is not None:
            self.janitor.track_pid(self.proc.pid)
            try:
                with open("/proc/%d/stat" % self.proc.pid, "rb") as fh:
                    self._tracked = "%d:%s" % (self.proc.pid, fh.read().rsplit(b")", 1)[1].split()[19].decode())
            except (OSError, IndexError):
                self._tracked = ""

    def wait_ready(self, timeout: float, connect: Callable[[int], socket.socket]) -> bool:
        """networking.py _wait_for_egress_sidecar_ready: GET /healthz until 200, for at most `timeout` s (the
        server polls for the whole wait even when the sidecar has exited: it asks over HTTP, not Docker)."""
        deadline = time.monotonic() + timeout
        while True:
            if self.proc is not None and self.proc.poll() is None:
                try:
                    s = connect(API_PORT)
                    try:
                        s.settimeout(2.0)
                        s.sendall(b"GET /healthz HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
                        if s.recv(64).split(b" ", 2)[1:2] == [b"200"]:
                            return True
                    finally:
                        s.close()
                except OSError:
                    pass
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))

    def close(self) -> None:
        p = self.proc
        if p is not None and p.poll() is None:
            try:
                p.send_signal(signal.SIGTERM)
                p.wait(timeout=GRACE)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
            except OSError:
                pass
        if p is not None and self.janitor is not None and self._tracked:
            self.janitor.untrack("pid", self._tracked)
        if self.relay is not None:
            self.relay.close()
            self.relay = None
