"""Differential case: the mock's egress sidecar (mock_opensandbox/docker/egress/sidecar.py) against the real one
(``../shared/opensandbox/egress/egress``, or $OSB_DIFF_EGRESS_BIN, run by the mock's ``--egress-bin`` in the
sandbox's network namespace). The same /policy requests through the endpoint of 18080 and the same DNS
queries from inside a sandbox, on two mocks sharing one stub resolver: status, content type and body of
every answer; rcode, flags and A records of every DNS answer. Skips without the binary, root or iptables."""

from __future__ import annotations

import json
import os

import pytest

from mock_opensandbox.docker.egress.realbin import binary_problem
from tiers.toolkit import rest
from tiers.toolkit.dnsserver import StubResolver

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("OSB_DIFF_EGRESS_BIN") or os.path.join(
    os.path.dirname(REPO), "shared", "opensandbox", "egress", "egress"
)
WHY = binary_problem(BIN, "dns") if os.path.exists(BIN) else "no egress binary at %s" % BIN
pytestmark = pytest.mark.skipif(bool(WHY), reason="egress differential: %s" % WHY)

RECORDS = {"allowed.test": "10.1.2.3", "a.wild.test": "10.1.2.4", "wild.test": "10.1.2.6", "other.test": "10.1.2.5"}
BODY = {
    "image": {"uri": "python:3"},
    "entrypoint": ["sleep", "300"],
    "resourceLimits": {},
    "timeout": 600,
    "networkPolicy": {"defaultAction": "deny", "egress": [{"action": "allow", "target": "allowed.test"}]},
}
POLICY_CALLS = [
    ("GET", "/policy", None, False),
    ("GET", "/policy", None, True),
    ("GET", "/healthz", None, True),
    ("PATCH", "/policy", [], True),
    ("PATCH", "/policy", [{"action": "allow", "target": "other.test"}], True),
    ("PATCH", "/policy", [{"action": "deny", "target": "OTHER.test"}], True),
    ("PATCH", "/policy", "not json", True),
    ("PATCH", "/policy", [{"action": "maybe", "target": "x.test"}], True),
    ("PATCH", "/policy", [{"action": "allow", "target": ""}], True),
    ("PATCH", "/policy", [{"action": "allow", "target": "*.wild.test"}], True),
    ("GET", "/policy", None, True),
    ("DELETE", "/policy", ["allowed.test", "unknown.test"], True),
    ("DELETE", "/policy", ["nothing.test"], True),
    ("DELETE", "/policy", "", True),
    ("DELETE", "/policy", "x", True),
    ("GET", "/policy", None, True),
    ("POST", "/policy", {"defaultAction": "allow", "egress": [{"action": "deny", "target": "other.test"}]}, True),
    ("POST", "/policy", {"defaultAction": "whatever"}, True),
    ("POST", "/policy", {"egress": [{"action": "maybe", "target": "x"}]}, True),
    ("PUT", "/policy", {"defaultAction": "deny", "egress": [{"action": "allow", "target": "10.0.0.0/8"}]}, True),
    ("GET", "/policy", None, True),
    ("POST", "/policy", "", True),
    ("GET", "/policy", None, True),
    ("OPTIONS", "/policy", None, True),
    ("GET", "/nothing", None, True),
    ("GET", "/policy?x=1", None, True),
]
DNS_POLICY = {
    "defaultAction": "deny",
    "egress": [
        {"action": "allow", "target": "allowed.test"},
        {"action": "allow", "target": "*.wild.test"},
        {"action": "allow", "target": "missing.test"},
    ],
}
QUERIES = [
    ("allowed.test", 1),
    ("ALLOWED.test", 1),
    ("allowed.test", 28),
    ("allowed.test", 15),
    ("other.test", 1),
    ("a.wild.test", 1),
    ("wild.test", 1),
    ("missing.test", 1),
    ("other.test", 28),
]
# Inside the sandbox: one UDP query each to its resolver (127.0.0.1:53), the answer's flags, rcode and A records.
DIG = r"""
import json, socket, struct, sys
out = []
for i, (name, qtype) in enumerate(json.loads(sys.argv[1])):
    q = struct.pack("!HHHHHH", 4660 + i, 0x0100, 1, 0, 0, 0) + b"".join(
        bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0" + struct.pack("!HH", qtype, 1)
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(6); s.sendto(q, ("127.0.0.1", 53))
    try:
        r, _ = s.recvfrom(4096)
    except OSError as e:
        out.append([name, qtype, "no answer"]); continue
    flags, qd, an = struct.unpack("!HHH", r[2:8])
    j = 12
    while r[j]: j += 1 + r[j]
    j += 5; ips = []
    for _ in range(an):
        if r[j] & 0xC0 == 0xC0: j += 2
        else:
            while r[j]: j += 1 + r[j]
            j += 1
        t, c, ttl, n = struct.unpack("!HHIH", r[j:j + 10]); j += 10
        if t == 1: ips.append(socket.inet_ntoa(r[j:j + 4]))
        j += n
    out.append([name, qtype, "flags=%04x rcode=%d an=%d" % (flags & 0xFFF0, flags & 15, an), sorted(ips)])
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def mocks():
    from mock_opensandbox.server import MockOpenSandbox

    with StubResolver(RECORDS) as dns:
        with (
            MockOpenSandbox(egress_dns_upstream=dns.address, execd_close_delay=0) as ours,
            MockOpenSandbox(egress_dns_upstream=dns.address, execd_close_delay=0, egress_bin=BIN) as real,
        ):
            yield {"mock": ours, "real": real}


def _sandbox(m):
    h = {"OPEN-SANDBOX-API-KEY": m.api_key}
    r = rest.call(m.base_url, "POST", "/v1/sandboxes", BODY, h)
    assert r.status == 202, r.body
    sid = r.json()["id"]
    ep = rest.call(m.base_url, "GET", "/v1/sandboxes/%s/endpoints/18080" % sid, headers=h).json()
    hostport, _, prefix = ep["endpoint"].partition("/")
    return sid, hostport, "/" + prefix, ep["headers"]


def _policy_answers(m):
    _sid, hostport, prefix, auth = _sandbox(m)
    out = []
    for method, path, body, with_auth in POLICY_CALLS:
        r = rest.call(hostport, method, prefix + path, body, auth if with_auth else {})
        out.append(
            {
                "call": "%s %s %s" % (method, path, json.dumps(body)),
                "status": r.status,
                "type": r.headers.get("Content-Type"),
                "body": r.body.decode("utf-8", "replace"),
            }
        )
    return out


def test_the_policy_api_answers_as_the_real_sidecar(mocks):
    ours, real = _policy_answers(mocks["mock"]), _policy_answers(mocks["real"])
    diffs = [(a["call"], a, b) for a, b in zip(ours, real, strict=True) if a != b]
    assert diffs == []


def _dns_answers(m):
    from opensandbox.sync.sandbox import SandboxSync

    from tiers.toolkit.sdk import sdk_config

    sid, hostport, prefix, auth = _sandbox(m)
    assert rest.call(hostport, "PUT", prefix + "/policy", DNS_POLICY, auth).status == 200
    sb = SandboxSync.connect(sid, connection_config=sdk_config(m, sync=True))
    ex = sb.commands.run("python3 -c %s '%s'" % (_quote(DIG), json.dumps(QUERIES)))
    return json.loads("".join(x.text for x in ex.logs.stdout))


def _quote(s: str) -> str:
    import shlex

    return shlex.quote(s)


def test_the_dns_answers_agree_with_the_real_sidecar(mocks):
    pytest.importorskip("opensandbox")
    ours, real = _dns_answers(mocks["mock"]), _dns_answers(mocks["real"])
    assert [a for a, b in zip(ours, real, strict=True) if a != b] == [], (ours, real)
