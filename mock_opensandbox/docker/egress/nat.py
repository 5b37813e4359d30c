"""dns+nft: only the addresses of allowed names and the policy's literal IP/CIDR allow rules are
reachable from the sandbox; everything else is dropped, in the sandbox's own network namespace
(components/egress/pkg/nftables/manager.go at 3bb6fad: table inet opensandbox, an output chain with
allow/deny sets, the DNS answers' addresses added as the resolver forwards them). nft is run with
``nsenter --net=/proc/PID/ns/net`` (root). Loopback stays open (the resolver and the policy API are
there). Standard library only."""

from __future__ import annotations

import ipaddress
import shutil
import subprocess
import threading
from typing import Any

TABLE = "opensandbox"


def _elements(xs: list[str]) -> str:
    return ("elements = { %s }" % ", ".join(xs)) if xs else ""


def _covered(ip: str, nets: list[str]) -> bool:
    a = ipaddress.ip_network(ip, strict=False)
    return any(a.subnet_of(ipaddress.ip_network(n, strict=False)) for n in nets)  # type: ignore[arg-type]


class Filter:
    def __init__(self, pid: int, always_allow: tuple[str, ...] = ()):
        self.pid = pid
        # main.go: "whitelisting proxy listen + N nameserver(s) for nft" (127.0.0.1 and the container's
        # resolv.conf nameservers) are merged into the allow set
        self.always_allow = always_allow
        nft = shutil.which("nft")
        if not nft:
            raise OSError(95, "nft is not installed (dns+nft needs it in this mock)")
        self.nft: str = nft
        self.nsenter = shutil.which("nsenter") or "nsenter"
        self.lock = threading.Lock()
        self.resolved: set[str] = set()  # kept across a policy change (the table is made anew)

    def _run(self, script: str) -> None:
        out = subprocess.run(
            [self.nsenter, "--net=/proc/%d/ns/net" % self.pid, self.nft, "-f", "-"],
            input=script.encode(),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=30,
        )
        if out.returncode != 0:
            raise OSError(5, "nft: %s" % out.stderr.decode("utf-8", "replace").strip()[:200])

    def apply_static(self, pol: Any) -> None:
        """ApplyStatic: the table anew with the policy's IP/CIDR sets and its default."""
        allow, deny = pol.static_ips()
        allow = allow + [ip for ip in self.always_allow if not _covered(ip, allow)]
        default = "accept" if pol.default_action == "allow" else "drop"
        script = (
            "table inet %(t)s\ndelete table inet %(t)s\n"
            "table inet %(t)s {\n"
            " set allow_v4 { type ipv4_addr; flags interval; %(a)s }\n"
            " set deny_v4 { type ipv4_addr; flags interval; %(d)s }\n"
            " set dyn_allow_v4 { type ipv4_addr; flags timeout; %(r)s }\n"
            " chain output { type filter hook output priority 0; policy accept;\n"
            '  oifname "lo" accept\n  ct state established,related accept\n'
            "  ip daddr @deny_v4 drop\n  ip daddr @allow_v4 accept\n  ip daddr @dyn_allow_v4 accept\n"
            "  meta nfproto ipv6 drop\n  %(def)s\n }\n}\n"
        ) % {
            "t": TABLE,
            "a": _elements(allow),
            "d": _elements(deny),
            "def": default,
            "r": _elements(["%s timeout 300s" % ip for ip in sorted(self.resolved)]),
        }
        with self.lock:
            self._run(script)

    def add_resolved(self, ips: list[str]) -> None:
        """AddResolvedIPs: an allowed name's A records (timeout 300 s, as the DNS TTL cap)."""
        if not ips:
            return
        with self.lock:
            self.resolved.update(ips)
            self._run(
                "add element inet %s dyn_allow_v4 { %s }\n" % (TABLE, ", ".join("%s timeout 300s" % ip for ip in ips))
            )
