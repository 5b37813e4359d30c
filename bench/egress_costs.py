"""What a networkPolicy costs: ``python -m bench.egress_costs [--n N] [URL KEY IMAGE]``.

* create -> ready with a policy (``defaultAction: deny``, one allowed name) vs without, interleaved in a
  shuffled order per round (official SDK opensandbox 1.1.1, ``SandboxSync.create`` waits for execd);
* a DNS lookup inside the sandbox (``socket.gethostbyname`` of an allowed name, 50 per command, timed inside,
  so the command round trip is not in it): through the policy resolver vs without a policy.

Without URL the in-process mock (``--egress-mode dns``) with a stub resolver on 127.0.0.1 (its sandboxes have
no outbound network without slirp4netns, so a sandbox without a policy cannot look anything up there): the
baseline of the lookup is then the same lookup from the host straight to that resolver, the floor the
policy resolver adds its hop to. Prints one Markdown table of medians and ratios.
"""

from __future__ import annotations

import os
import random
import socket
import sys
import time
from typing import Any, Callable, Dict, List, Optional

from bench.stats import median, p90

NAME = "pypi.org"
PER_CMD = 50
LOOKUP_OF = (
    "python3 -c \"import socket,time\nt=time.perf_counter()\nfor _ in range(%d): socket.gethostbyname('%%s')\n"
    'print((time.perf_counter()-t)/%d)"' % (PER_CMD, PER_CMD)
)
LOOKUP = LOOKUP_OF % NAME
FLOOR = LOOKUP_OF % "localhost"  # /etc/hosts: the same call without any DNS query (glibc's own cost)


def _sdk(url: str, key: str) -> Any:
    from tiers.flows.docker.egress_steps import sdk_conn

    return sdk_conn(url, key)


def _create(conn: Any, image: str, policy: bool) -> tuple[float, Any]:
    from opensandbox.models.sandboxes import NetworkPolicy, NetworkRule
    from opensandbox.sync.sandbox import SandboxSync

    kw = {}
    if policy:
        kw["network_policy"] = NetworkPolicy(default_action="deny", egress=[NetworkRule(action="allow", target=NAME)])
    t0 = time.perf_counter()
    sb = SandboxSync.create(image, connection_config=conn, **kw)
    return time.perf_counter() - t0, sb


def _lookup_inside(sb: Any, cmd: str = LOOKUP) -> Optional[float]:
    out = "".join(m.text for m in sb.commands.run(cmd).logs.stdout).strip()
    try:
        return float(out)
    except ValueError:
        return None


def _lookup_host(resolver: tuple[str, int]) -> float:
    """The floor on the mock: one A query from the host to the stub resolver, as the policy resolver forwards it."""
    from tiers.toolkit.dnsserver import query

    t0 = time.perf_counter()
    for _ in range(PER_CMD):
        query(resolver, NAME)
    return (time.perf_counter() - t0) / PER_CMD


def measure(url: str, key: str, image: str, n: int, host_floor: Optional[Callable[[], float]] = None) -> Dict[str, Any]:
    conn = _sdk(url, key)
    rng = random.Random(28)
    create: Dict[bool, List[float]] = {True: [], False: []}
    lookup: Dict[bool, List[float]] = {True: [], False: []}
    floor: List[float] = []
    for _ in range(n):
        sides = [True, False]
        rng.shuffle(sides)
        for pol in sides:
            s, sb = _create(conn, image, pol)
            try:
                create[pol].append(s)
                if pol or host_floor is None:
                    v = _lookup_inside(sb)
                    if v is not None:
                        lookup[pol].append(v)
                if pol:
                    v = _lookup_inside(sb, FLOOR)
                    if v is not None:
                        floor.append(v)
            finally:
                sb.kill()
            if not pol and host_floor is not None:
                lookup[False].append(host_floor())
    return {"create": create, "lookup": lookup, "floor": floor}


def table(res: Dict[str, Any], where: str, baseline: str) -> str:
    def ms(xs: List[float]) -> str:
        return "%.2f (p90 %.2f, n=%d)" % (median(xs) * 1e3, p90(xs) * 1e3, len(xs)) if xs else "-"

    def ratio(a: List[float], b: List[float]) -> str:
        return "%.2fx" % (median(a) / median(b)) if a and b else "-"

    c, lk = res["create"], res["lookup"]
    return "\n".join(
        [
            "| %s | with a policy, ms | %s, ms | ratio |" % (where, baseline),
            "|---|---:|---:|---:|",
            "| create -> ready | %s | %s | %s |" % (ms(c[True]), ms(c[False]), ratio(c[True], c[False])),
            "| one DNS lookup inside | %s | %s | %s |" % (ms(lk[True]), ms(lk[False]), ratio(lk[True], lk[False])),
            "| `localhost` (/etc/hosts, no query) inside the policy sandbox | %s | | |" % ms(res["floor"]),
        ]
    )


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    n = 10
    if "--n" in args:
        i = args.index("--n")
        n = int(args[i + 1])
        del args[i : i + 2]
    if args:
        url, key, image = args
        print(table(measure(url, key, image, n), "live", "without a policy"))
        return 0
    from mock_opensandbox.server import MockOpenSandbox
    from tiers.toolkit.dnsserver import StubResolver

    real = os.path.join(
        os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
        "shared",
        "opensandbox",
        "egress",
        "egress",
    )
    for label, binary in (("mock, its own sidecar", None), ("mock, the real sidecar (--egress-bin)", real)):
        if binary and not os.access(binary, os.X_OK):
            continue
        with StubResolver({NAME: "203.0.113.80"}) as dns:
            with MockOpenSandbox(
                egress_mode="dns", egress_dns_upstream=dns.address, execd_close_delay=0, egress_bin=binary
            ) as m:
                res = measure(
                    m.base_url, m.api_key, "python:3", n, host_floor=lambda: _lookup_host(("127.0.0.1", dns.port))
                )
        print(table(res, label, "without (create) / host -> resolver (lookup)") + "\n")
    return 0


if __name__ == "__main__":
    socket.setdefaulttimeout(60)
    sys.exit(main())
