"""networkPolicy as a server with an egress image runs it ([egress] image + mode, server
services/docker/networking.py at 3bb6fad): one EgressSidecar (sidecar.py) per sandbox created with a
policy, in that sandbox's network namespace. Settings: mode off | dns | dns+nft (``--egress-mode``;
off = a server without an egress image), the DNS upstream (``--egress-dns-upstream``) and the
server's sidecar ready wait (``--egress-ready-timeout``, 30 s as the server). Standard library only.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import time
from dataclasses import dataclass, replace
from typing import Any

from mock_opensandbox.docker.egress import policy as P
from mock_opensandbox.docker.egress.nat import Filter
from mock_opensandbox.docker.egress.realbin import RealSidecar, binary_problem
from mock_opensandbox.docker.egress.sidecar import AUTH_HEADER, EgressSidecar, token
from mock_opensandbox.docker.volumes import START_FAILED, _bad
from mock_opensandbox.runtime.janitor import Janitor
from mock_opensandbox.runtime.netns import resolv_conf

EGRESS_MODES = ("off", "dns", "dns+nft")
DEFAULT_EGRESS_MODE = "dns"  # the server's example config: [egress] mode = "dns"
READY_TIMEOUT = 30.0  # networking.py _wait_for_egress_sidecar_ready(timeout_seconds=30.0)
# the server's last urllib error polling the exited sidecar's published /healthz (docker-proxy resets the
# connection): fixtures/26_network_policy.json, live with local/egress:src3bb6fad
NOT_READY_CAUSE = "[Errno 104] Connection reset by peer"

__all__ = [
    "AUTH_HEADER",
    "DEFAULT_EGRESS_MODE",
    "EGRESS_MODES",
    "EgressSettings",
    "EgressSidecar",
    "mode_problem",
    "parse_upstream",
    "start_for",
    "stop_for",
]


def parse_upstream(addr: str | None) -> tuple[str, int]:
    """ "HOST[:PORT]" (IPv4) -> (host, port); None -> the host's first non-loopback nameserver (what
    the sidecar reads from the container's resolv.conf: Docker's copy of the host's), else 8.8.8.8."""
    if addr is None:
        for line in resolv_conf().splitlines():
            words = line.split()
            if words[:1] == ["nameserver"] and len(words) > 1:
                return words[1], 53
        return "8.8.8.8", 53
    host, _, port = addr.strip().rpartition(":") if ":" in addr else (addr.strip(), "", "53")
    try:
        ipaddress.IPv4Address(host)
        n = int(port)
        if not 0 < n < 65536:
            raise ValueError
    except ValueError:
        raise ValueError("egress DNS upstream must be IPv4[:PORT], not %r" % addr) from None
    return host, n


def nameservers() -> tuple[str, ...]:
    """The IPv4 nameservers of a container's resolv.conf (Docker's copy of the host's), at most 10
    (constants.ResolvNameserverCap): what the real sidecar lets through in dns+nft."""
    out = []
    for line in resolv_conf().splitlines():
        w = line.split()
        if w[:1] == ["nameserver"] and len(w) > 1:
            try:
                ipaddress.IPv4Address(w[1])
            except ValueError:
                continue
            out.append(w[1])
    return tuple(dict.fromkeys(out))[:10]


def mode_problem(mode: str, network: str) -> str:
    """Why this mock cannot run sidecars in `mode` ("" = it can). dns+nft needs nft."""
    if mode == "off":
        return ""
    if network != "bridge":
        return ""  # networkPolicy is refused per request (400), as the server does with network_mode=host
    if os.geteuid() != 0:
        return "egress mode %s needs root (the resolver binds port 53 inside each sandbox's network namespace)" % mode
    if mode == "dns+nft" and not shutil.which("nft"):
        return "egress mode dns+nft needs nft (nftables), which is not installed"
    return ""


@dataclass(frozen=True)
class EgressSettings:
    """The egress settings of one mock, what the provisioner (docker/provisioner.py) starts sidecars with:
    ``mode`` in force ("off" = no egress image), the DNS ``upstream``, the server's ``ready_timeout``, the real
    sidecar's ``binary`` (--egress-bin) or None, and ``note``: why networkPolicy is refused on this host ("" when
    it is not). configure() makes them; check_host() at start decides ``mode`` and ``note``."""

    mode: str
    upstream: tuple[str, int]
    ready_timeout: float
    binary: str | None = None
    note: str = ""

    def checked(self, mode_given: str | None, network: str) -> "EgressSettings":
        """These settings with the mode in force on this host and its note (check_host)."""
        mode, note = check_host(mode_given, network, self.binary)
        return replace(self, mode=mode, note=note)


def configure(
    mode: str | None, upstream: str | None, ready_timeout: float, binary: str | None = None
) -> EgressSettings:
    """MockOpenSandbox's egress settings -> (mode, upstream, ready wait): [egress] mode "dns" (the server's
    example config) unless given, "off" = no egress image (400 to every networkPolicy); None = "dns" where
    this host can run it, else "off" with the reason in egress_note (check_host: the banner and
    x-mock-isolation). The server waits 30 s for a sidecar's /healthz (networking.py): a shorter wait
    only by this option. ``binary``: --egress-bin, the real sidecar (realbin.py) in place of sidecar.py."""
    if binary is not None and (not isinstance(binary, str) or not binary):
        raise ValueError("egress_bin must be the path of an egress binary")
    if mode is not None and mode not in EGRESS_MODES:
        raise ValueError("egress_mode must be one of %s, not %r" % (", ".join(EGRESS_MODES), mode))
    if isinstance(ready_timeout, bool) or not isinstance(ready_timeout, (int, float)) or not 0 <= ready_timeout <= 600:
        raise ValueError("egress_ready_timeout must be a number of seconds between 0 and 600")
    return EgressSettings(mode or DEFAULT_EGRESS_MODE, parse_upstream(upstream), float(ready_timeout), binary)


def check_host(mode_given: str | None, network: str, binary: str | None) -> tuple[str, str]:
    """At start(): a mode this host cannot run is refused when asked for (RuntimeError); the default turns
    off. Returns (the mode in force, why it is off or "")."""
    why = mode_problem(mode_given or DEFAULT_EGRESS_MODE, network)
    bin_why = "" if why else binary_problem(binary, mode_given or DEFAULT_EGRESS_MODE)
    if bin_why:
        raise RuntimeError("cannot start: %s" % bin_why)
    if why and (mode_given is not None or binary):
        raise RuntimeError("cannot start: %s (use --egress-mode off)" % why)
    return ("off" if why else (mode_given or DEFAULT_EGRESS_MODE)), why


def payload(network_policy: dict[str, Any]) -> str:
    """The sidecar's OPENSANDBOX_EGRESS_RULES: model_dump(by_alias=True, exclude_none=True)."""
    out: dict[str, Any] = {}
    if network_policy.get("default_action") is not None:
        out["defaultAction"] = network_policy["default_action"]
    out["egress"] = [{"action": r["action"], "target": r["target"]} for r in network_policy.get("egress") or []]
    return json.dumps(out)


def start_for(
    sb: Any, runtime: Any, egress: EgressSettings, janitor: Janitor | None = None
) -> EgressSidecar | RealSidecar:
    """Start the sandbox's sidecar after its PID 1 (the holder of its network namespace). Raises the
    server's MockError: a policy the sidecar refuses -> after the ready wait, 500 'did not become ready'."""
    if egress.binary:
        return _start_real(sb, runtime, egress.binary, egress, janitor)
    try:
        pol = P.parse_policy(payload(sb.network_policy))
    except P.PolicyError:
        # the sidecar exits at start-up (main.go: policy.ParsePolicy of OPENSANDBOX_EGRESS_RULES), so
        # /healthz never answers; the server polls it for its whole ready wait
        time.sleep(egress.ready_timeout)
        raise _not_ready(egress, sb) from None
    holder = runtime.pid1.holder
    net = getattr(holder, "net", None)
    netns_fd = getattr(net, "netns_fd", None)
    if holder is None or netns_fd is None:
        raise _bad(START_FAILED, "Egress sidecar container failed to start.", 500)
    sc = EgressSidecar(pol, mode=egress.mode, token=token(), upstream=egress.upstream)
    try:
        if egress.mode == "dns+nft":
            filt = Filter(holder.pid, ("127.0.0.1",) + nameservers())
            filt.apply_static(pol)
            sc.on_policy, sc.on_resolved = filt.apply_static, filt.add_resolved
        sc.start(netns_fd, runtime.listen)
        with open("/proc/%d/root/etc/resolv.conf" % holder.pid, "w") as fh:
            fh.write("nameserver 127.0.0.1\n")
    except OSError as exc:
        sc.close()
        raise _bad(START_FAILED, "Egress sidecar container failed to start. (%s)" % exc, 500) from None
    return sc


def _not_ready(egress: EgressSettings, sb: Any) -> Exception:
    return _bad(
        START_FAILED,
        "Egress sidecar did not become ready within %.0fs for sandbox %s: %s"
        % (egress.ready_timeout, sb.id, NOT_READY_CAUSE),
        500,
    )


def _start_real(sb: Any, runtime: Any, binary: str, egress: EgressSettings, janitor: Janitor | None) -> RealSidecar:
    """--egress-bin: the real sidecar in the sandbox's namespace; a policy it refuses (it exits at start-up)
    gives the server's 500 after the ready wait, as the server's /healthz poll does."""

    holder = runtime.pid1.holder
    netns_fd = getattr(getattr(holder, "net", None), "netns_fd", None)
    if holder is None or netns_fd is None:
        raise _bad(START_FAILED, "Egress sidecar container failed to start.", 500)
    sc = RealSidecar(
        binary,
        payload(sb.network_policy),
        mode=egress.mode,
        token=token(),
        upstream=egress.upstream,
        janitor=janitor,
    )
    try:
        sc.start(holder.pid, netns_fd)
        ready = sc.wait_ready(egress.ready_timeout, runtime.connect)
        if ready:
            with open("/proc/%d/root/etc/resolv.conf" % holder.pid, "w") as fh:
                fh.write("nameserver 127.0.0.1\n")
    except OSError as exc:
        sc.close()
        raise _bad(START_FAILED, "Egress sidecar container failed to start. (%s)" % exc, 500) from None
    if not ready:
        sc.close()
        raise _not_ready(egress, sb)
    return sc


def stop_for(sidecar: Any) -> None:
    """Stop a sidecar start_for made (the provisioner keeps it in the sandbox's ContainerState)."""
    sidecar.close()
