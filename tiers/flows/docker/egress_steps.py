"""The networkPolicy steps run the same way on a mock and on the live server with the egress image (official SDK
opensandbox 1.1.1 plus raw requests), answering one comparable dict: which names resolve inside the sandbox
after each step, what ``get_egress_policy`` reads, the validation answers of a raw create, whether a literal
address is reachable, whether the sidecar shows in ``ps``.

Names: ``NAMES`` are the ones this machine's resolver answers (live sandboxes use it); a mock test gives them
to its stub resolver (tiers/toolkit/dnsserver.py), so only allow/deny is compared, never addresses.

``python -m tiers.flows.docker.egress_steps URL KEY IMAGE [--slow]`` prints the answers as JSON (the step table of the
notes); ``--slow`` adds the invalid-action create, which takes the server's whole 30 s ready wait.
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any, Callable, Dict, List, Optional

from tiers.toolkit import rest

ALLOWED = "pypi.org"  # allowed by name
WILD = ("deb.debian.org", "security.debian.org")  # allowed by "*.debian.org"
OTHER = "files.pythonhosted.org"  # resolvable, not in the policy
NAMES = (ALLOWED,) + WILD + (OTHER,)
RECORDS = {ALLOWED: "203.0.113.80", WILD[0]: "203.0.113.81", WILD[1]: "203.0.113.82", OTHER: "203.0.113.83"}
BODY = {"image": {"uri": ""}, "entrypoint": ["sleep", "600"], "resourceLimits": {}, "timeout": 600}
SETTLE = 5.0  # how long a PATCH/DELETE may take to show inside (live: within 2 s)


# What the steps answer with the real sidecar (live, server 1.1.1 + local/egress:src3bb6fad; tiers/t4/docker/
# test_live_egress.py checks them there) and what the mock must answer too. "s" (how long a change took to show)
# is not compared.
EXPECTED: Dict[str, Any] = {
    "deny_default": {ALLOWED: True, WILD[0]: True, WILD[1]: True, OTHER: False, "debian.org": False, "localhost": True},
    "own_hostname": True,
    "get": [["allow", ALLOWED], ["allow", "*.debian.org"]],
    "get_default": "deny",
    "sidecar_in_ps": False,
    "patch_allow": {"resolves": True},
    "get_after_patch": [["allow", OTHER], ["allow", ALLOWED], ["allow", "*.debian.org"]],
    "patch_same_target_other_case": {"resolves": False},
    "get_after_case_patch": [["deny", OTHER.upper()], ["allow", ALLOWED], ["allow", "*.debian.org"]],
    "delete": {"resolves": False},
    "get_after_delete": [["deny", OTHER.upper()], ["allow", "*.debian.org"]],
    "allow_default": {ALLOWED: False, OTHER: True},
    "first_match_wins": {WILD[0]: False, WILD[1]: True},
    "get_without_policy": "SandboxApiException",
    "validation": {
        "unknown_default": {"status": 202},
        "no_egress_list": {"status": 202},
        "empty_target": {"status": 422, "type": "string_too_short"},
        "not_an_object": {"status": 422, "type": "model_attributes_type"},
        "invalid_action": {"status": 500, "code": "DOCKER::SANDBOX_START_FAILED"},
    },
}
LITERAL = {
    "dns": {"denied_address": "open", "after_allow_rule": "open"},  # dns: addresses are not filtered
    "dns+nft": {"denied_address": "closed", "after_allow_rule": "open"},
}


def _pick(got: Any, want: Any) -> Any:
    """got, narrowed to the keys want names (timings and messages are not compared)."""
    if isinstance(want, dict) and isinstance(got, dict):
        return {k: _pick(got.get(k), w) for k, w in want.items()}
    return got


def differences(got: Dict[str, Any], mode: str, ready_s: float = 30.0) -> List[str]:
    """The steps whose answer is not EXPECTED (the validation cases that ran; dns+nft's literal address
    when it ran)."""
    want = dict(EXPECTED, literal_address=LITERAL[mode])
    want["validation"] = {k: v for k, v in EXPECTED["validation"].items() if k in got.get("validation", {})}
    out = [
        "%s: got %s, want %s" % (k, json.dumps(_pick(got.get(k), v), sort_keys=True), json.dumps(v, sort_keys=True))
        for k, v in want.items()
        if (k in got or k != "literal_address") and _pick(got.get(k), v) != v
    ]
    inv = got.get("validation", {}).get("invalid_action")
    msg = str((inv or {}).get("message", ""))
    if inv and not (
        msg.startswith("Egress sidecar did not become ready within %.0fs for sandbox " % ready_s)
        and msg.endswith(": [Errno 104] Connection reset by peer")
    ):  # live, fixtures/26
        out.append("validation.invalid_action.message: %r" % inv.get("message"))
    return out


def resolves(sb: Any, name: str) -> bool:
    ex = sb.commands.run("getent hosts %s >/dev/null && echo yes || echo no" % name)
    return "".join(m.text for m in ex.logs.stdout).strip() == "yes"


def settle(sb: Any, name: str, want: bool) -> Dict[str, Any]:
    """Poll until the name's lookup gives `want` (at most SETTLE s): the answer and how long it took."""
    t0 = time.monotonic()
    while True:
        got = resolves(sb, name)
        if got == want or time.monotonic() - t0 > SETTLE:
            return {"resolves": got, "s": round(time.monotonic() - t0, 1)}
        time.sleep(0.2)


def sdk_conn(url: str, key: str) -> Any:
    from datetime import timedelta

    from opensandbox.config.connection_sync import ConnectionConfigSync

    return ConnectionConfigSync(
        api_key=key,
        domain=url.split("://", 1)[-1].rstrip("/").removesuffix("/v1"),
        protocol="http",
        request_timeout=timedelta(seconds=60),
    )


def rules(pol: Any) -> List[List[str]]:
    return [[r.action, r.target] for r in (pol.egress or [])]


def raw_create(url: str, key: str, image: str, policy: Any) -> Dict[str, Any]:
    """A raw create with this networkPolicy: status, code / first 422 type, the message; deletes what it made."""
    h = {"OPEN-SANDBOX-API-KEY": key}
    body = dict(BODY, image={"uri": image}, networkPolicy=policy)
    t0 = time.monotonic()
    r = rest.call(url, "POST", "/v1/sandboxes", body, h, timeout=120)
    out: Dict[str, Any] = {"status": r.status, "s": round(time.monotonic() - t0)}
    try:
        doc = r.json()
    except ValueError:
        doc = {}
    if r.status == 202:
        rest.call(url, "DELETE", "/v1/sandboxes/" + doc["id"], headers=h)
    elif r.status == 422:
        out["type"] = doc["detail"][0]["type"]
    else:
        out["code"], out["message"] = doc.get("code"), doc.get("message")
    return out


def validation(url: str, key: str, image: str, slow: bool) -> Dict[str, Any]:
    cases = {
        "unknown_default": {"defaultAction": "whatever"},
        "no_egress_list": {"defaultAction": "deny"},
        "empty_target": {"egress": [{"action": "allow", "target": ""}]},
        "not_an_object": "deny",
    }
    if slow:
        cases["invalid_action"] = {"egress": [{"action": "maybe", "target": "x.test"}]}
    return {k: raw_create(url, key, image, v) for k, v in cases.items()}


def literal_address(url: str, key: str, image: str, conn: Any, make: Callable) -> Dict[str, Any]:
    """A second sandbox without a policy listens on a port; a policy sandbox (deny, no rules) tries its
    address, then again after a PATCH allowing that address: reachable or not."""
    from opensandbox.models.sandboxes import NetworkRule
    from opensandbox.sync.sandbox import SandboxSync

    target = SandboxSync.create(image, connection_config=conn, entrypoint=["python3", "-m", "http.server", "8099"])
    try:
        ip = "".join(m.text for m in target.commands.run("hostname -i").logs.stdout).split()[0]
        sb = make("deny", [(("allow", ALLOWED))])
        probe = (
            'python3 -c "import socket,sys; s=socket.socket(); s.settimeout(3)\n'
            "try: s.connect(('%s', 8099)); print('open')\nexcept OSError as e: print('closed', e)\"" % ip
        )

        def reach() -> str:
            return "".join(m.text for m in sb.commands.run(probe).logs.stdout).strip()

        before = reach()
        sb.patch_egress_rules([NetworkRule(action="allow", target=ip)])
        time.sleep(0.5)
        return {"denied_address": before.split(" ")[0], "after_allow_rule": reach().split(" ")[0]}
    finally:
        target.kill()


def run(url: str, key: str, image: str, *, slow: bool = False, literal: bool = True) -> Dict[str, Any]:
    from opensandbox.models.sandboxes import NetworkPolicy, NetworkRule
    from opensandbox.sync.sandbox import SandboxSync

    conn = sdk_conn(url, key)
    made: List[Any] = []
    out: Dict[str, Any] = {}

    def make(default: str, rs: List[tuple]) -> Any:
        pol = NetworkPolicy(default_action=default, egress=[NetworkRule(action=a, target=t) for a, t in rs])
        t0 = time.monotonic()
        sb = SandboxSync.create(image, connection_config=conn, network_policy=pol)
        out.setdefault("create_s", []).append(round(time.monotonic() - t0, 2))
        made.append(sb)
        return sb

    try:
        sb = make("deny", [("allow", ALLOWED), ("allow", "*.debian.org")])
        out["deny_default"] = {n: resolves(sb, n) for n in NAMES + ("debian.org", "localhost")}
        out["own_hostname"] = resolves(sb, "$(hostname)")
        out["get"] = rules(sb.get_egress_policy())
        out["get_default"] = sb.get_egress_policy().default_action
        out["resolv_conf"] = "".join(
            m.text for m in sb.commands.run("grep ^nameserver /etc/resolv.conf").logs.stdout
        ).strip()
        ps = "".join(m.text for m in sb.commands.run("ps -eo args").logs.stdout)
        out["sidecar_in_ps"] = "egress" in ps
        sb.patch_egress_rules([NetworkRule(action="allow", target=OTHER)])
        out["patch_allow"] = settle(sb, OTHER, True)
        out["get_after_patch"] = rules(sb.get_egress_policy())
        sb.patch_egress_rules([NetworkRule(action="deny", target=OTHER.upper())])
        out["patch_same_target_other_case"] = settle(sb, OTHER, False)
        out["get_after_case_patch"] = rules(sb.get_egress_policy())
        sb.delete_egress_rules([ALLOWED, "unknown.invalid"])
        out["delete"] = settle(sb, ALLOWED, False)
        out["get_after_delete"] = rules(sb.get_egress_policy())
        sb2 = make("allow", [("deny", ALLOWED)])
        out["allow_default"] = {n: resolves(sb2, n) for n in (ALLOWED, OTHER)}
        sb3 = make("deny", [("deny", WILD[0]), ("allow", "*.debian.org")])
        out["first_match_wins"] = {n: resolves(sb3, n) for n in WILD}
        plain = SandboxSync.create(image, connection_config=conn)
        made.append(plain)
        try:
            plain.get_egress_policy()
            out["get_without_policy"] = "ok"
        except Exception as exc:  # the SDK's own error type and message
            out["get_without_policy"] = type(exc).__name__
            out["get_without_policy_message"] = str(exc)[:300]
        if literal:
            out["literal_address"] = literal_address(url, key, image, conn, make)
    finally:
        for s in made:
            try:
                s.kill()
            except Exception:
                pass
    out["validation"] = validation(url, key, image, slow)
    return out


def table(out: Dict[str, Any]) -> str:
    """One line per step: ``step: answer`` (JSON), sorted; the validation cases one line each."""
    lines = []
    for k in sorted(out):
        if k == "validation":
            lines += ["validation.%s: %s" % (c, json.dumps(v, sort_keys=True)) for c, v in sorted(out[k].items())]
        else:
            lines.append("%s: %s" % (k, json.dumps(out[k], sort_keys=True)))
    return "\n".join(lines)


def main(argv: Optional[List[str]] = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    slow = "--slow" in args
    args = [a for a in args if a != "--slow"]
    url, key, image = args
    print(table(run(url, key, image, slow=slow)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
