"""The egress sidecar's policy model (components/egress/pkg/policy/policy.go, domain_index.go and
policy_utils.go at 3bb6fad): parse + normalise, first-match domain evaluation, PATCH merge, DELETE by
target, and the mode word of the /policy answers. Standard library only."""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from mock_opensandbox.wire.gojson import unmarshal_value  # Go encoding/json: the texts of its decoding errors

ALLOW, DENY = "allow", "deny"


class PolicyError(ValueError):
    """What ParsePolicy / normalizePolicy refuse (the sidecar answers 400, or exits at start-up)."""


def _kind(target: str) -> str:
    try:
        ipaddress.ip_address(target)
        return "ip"
    except ValueError:
        pass
    try:
        ipaddress.ip_network(target, strict=False)  # netip.ParsePrefix: "10.0.0.1/8" is a prefix too
        if "/" in target:
            return "cidr"
    except ValueError:
        pass
    return "domain"


class Policy:
    """A normalised NetworkPolicy: defaultAction + egress rules [(action, target, kind)]."""

    def __init__(
        self, default_action: str = DENY, egress: list[dict[str, Any]] | None = None, egress_null: bool = False
    ):
        self.default_action = default_action
        self.rules: list[tuple[str, str, str]] = [(r["action"], r["target"], _kind(r["target"])) for r in egress or []]
        self.egress_null = egress_null  # Go marshals a nil slice as null
        self._exact: dict[str, tuple[int, str]] = {}
        self._wild: dict[str, tuple[int, str]] = {}
        for i, (action, target, kind) in enumerate(self.rules):  # compileDomainIndex: the first rule wins
            if kind != "domain":
                continue
            pat = target.strip().lower()
            if pat.startswith("*."):
                self._wild.setdefault(pat[1:], (i, action))
            elif pat:
                self._exact.setdefault(pat, (i, action))

    def evaluate(self, name: str) -> str:
        """Evaluate(): the lowest-index matching rule (exact or "*.suffix", never the bare suffix),
        else defaultAction (an unknown word stays as it is: only "deny" blocks)."""
        domain = name.lower().rstrip(".")
        best = self._exact.get(domain)
        cursor = domain
        while "." in cursor:
            suffix = cursor[cursor.index(".") :]
            hit = self._wild.get(suffix)
            if hit is not None and (best is None or hit[0] < best[0]):
                best = hit
            cursor = suffix[1:]
        if best is not None:
            return best[1] or DENY
        return self.default_action or DENY

    def to_json(self) -> dict[str, Any]:
        egress = None if self.egress_null and not self.rules else [{"action": a, "target": t} for a, t, _ in self.rules]
        return {"egress": egress, "defaultAction": self.default_action}

    def static_ips(self) -> tuple[list[str], list[str]]:
        """StaticIPSets (IPv4 only: IPv6 is off in the sandbox): allowed and denied IP/CIDR targets."""
        allow: list[str] = []
        deny: list[str] = []
        for action, target, kind in self.rules:
            if kind in ("ip", "cidr") and ipaddress.ip_network(target, strict=False).version == 4:
                (allow if action == ALLOW else deny).append(target)
        return allow, deny

    def mode(self) -> str:
        """policy_utils.go modeFromPolicy."""
        if self.default_action == ALLOW and not self.rules:
            return "allow_all"
        if self.default_action == DENY and not self.rules:
            return "deny_all"
        return "enforcing"


def _rules_from(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise PolicyError(
            "json: cannot unmarshal %s into Go struct field NetworkPolicy.egress of type "
            "[]policy.EgressRule" % _go_type(value)
        )
    out = []
    for r in value:
        if r is None:
            r = {}
        if not isinstance(r, dict):
            raise PolicyError(
                "json: cannot unmarshal %s into Go struct field NetworkPolicy.egress of type "
                "policy.EgressRule" % _go_type(r)
            )
        out.append(r)
    return out


def _go_type(v: Any) -> str:
    return {bool: "bool", int: "number", float: "number", str: "string", list: "array", dict: "object"}.get(
        type(v), "value"
    )


def normalize_rules(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """normalizePolicy's rule part: lower-cased action ("" -> deny), allow|deny only, non-empty target."""
    out = []
    for r in rules:
        action, target = r.get("action") or "", r.get("target") or ""
        if not isinstance(action, str) or not isinstance(target, str):
            raise PolicyError(
                "json: cannot unmarshal %s into Go struct field EgressRule.egress.%s of type string"
                % (
                    _go_type(action if not isinstance(action, str) else target),
                    "action" if not isinstance(action, str) else "target",
                )
            )
        action = action.strip().lower() or DENY
        if action not in (ALLOW, DENY):
            raise PolicyError("unsupported action %s" % json.dumps(action))
        target = target.strip()
        if not target:
            raise PolicyError("egress target cannot be empty")
        out.append({"action": action, "target": target})
    return out


def parse_policy(raw: str) -> Policy:
    """ParsePolicy: ""/null/{} -> default deny; defaultAction lower-cased ("" -> deny)."""
    text = raw.strip()
    if text in ("", "null", "{}"):
        return Policy(DENY, None, egress_null=True)
    try:
        doc = unmarshal_value(text.encode("utf-8"))
    except ValueError as e:
        raise PolicyError(str(e)) from None
    if doc is None:
        return Policy(DENY, None, egress_null=True)
    if not isinstance(doc, dict):
        raise PolicyError("json: cannot unmarshal %s into Go value of type policy.NetworkPolicy" % _go_type(doc))
    da = doc.get("defaultAction")
    if da is not None and not isinstance(da, str):
        raise PolicyError(
            "json: cannot unmarshal %s into Go struct field NetworkPolicy.defaultAction of type string" % _go_type(da)
        )
    rules = normalize_rules(_rules_from(doc.get("egress")))
    return Policy((da or "").strip().lower() or DENY, rules, egress_null=doc.get("egress") is None)


def patch(base: Policy, raw: str) -> Policy:
    """handlePatch + patchMergedPolicy: the patch's rules first (first per target wins), then the base's
    rules for other targets; defaultAction kept."""
    try:
        rules = unmarshal_value(raw.encode("utf-8"))
    except ValueError as e:
        raise PolicyError("invalid patch rules: %s" % e) from None
    if not isinstance(rules, list):
        raise PolicyError(
            "invalid patch rules: json: cannot unmarshal %s into Go value of type []policy.EgressRule" % _go_type(rules)
        )
    if not rules:
        raise PolicyError("invalid patch rules: empty array")
    try:
        additions = [
            {"action": (r or {}).get("action") or "", "target": (r or {}).get("target") or ""}
            for r in _rules_from(rules)
        ]
    except PolicyError as e:
        raise PolicyError("invalid patch rules: %s" % e) from None
    seen: set[str] = set()
    merged = []
    for r in additions + [{"action": a, "target": t} for a, t, _ in base.rules]:
        key = r["target"].lower() if isinstance(r["target"], str) else r["target"]
        if key in seen:
            continue
        seen.add(key)
        merged.append(r)
    try:
        return Policy(base.default_action, normalize_rules(merged))
    except PolicyError as e:
        raise PolicyError("invalid merged policy: %s" % e) from None


def delete(base: Policy, raw: str) -> tuple[Policy, int]:
    """handleDelete + removeRulesByTarget: case-insensitive, unknown targets ignored."""
    try:
        targets = unmarshal_value(raw.encode("utf-8"))
    except ValueError as e:
        raise PolicyError("invalid delete targets: %s" % e) from None
    if not isinstance(targets, list) or not all(isinstance(t, str) for t in targets):
        raise PolicyError("invalid delete targets: json: cannot unmarshal into Go value of type []string")
    if not targets:
        raise PolicyError("invalid delete targets: empty array")
    drop = {t.strip().lower() for t in targets if t.strip()}
    kept = [{"action": a, "target": t} for a, t, _ in base.rules if t.lower() not in drop]
    return Policy(base.default_action, kept), len(base.rules) - len(kept)
