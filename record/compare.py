"""Compare a recorded (templated) response with an actual one.

Used by the replay (recorded fixture vs what the mock answers) and by ``python -m record --check``
(committed fixture vs a fresh recording, materialised). What is compared, per exchange ("aspects"):

* ``status``        the status code
* ``content-type``  the Content-Type value (case and spaces ignored)
* ``headers``       presence of x-request-id; value of Execd-Commands-Tail-Cursor and Content-Range
* JSON bodies: ``body-shape`` (key sets, value types, array lengths) and ``body-values`` (strings that
  hold placeholders must match their template, which also binds ids/ports; values under the keys in
  ``SEMANTIC_KEYS`` must be equal)
* event streams: ``sse-framing`` (every frame is one bare JSON object followed by a blank line),
  ``sse-events`` (event types in order with pings removed and stdout/stderr runs merged, per-type
  key sets and value types, a heartbeat ping present iff recorded), ``sse-output`` (the stdout
  texts and the stderr texts, each in order) and ``sse-values`` (init id, error ename/evalue/traceback)
* other bodies: ``body`` (exact, after placeholders)

Things that depend on timing or on the host are not compared: timestamps (format only), durations,
ping count/position, the relative order of stdout vs stderr events, sizes of directories.
"""

from __future__ import annotations

import dataclasses
import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable

PH_RE = re.compile(r"\{\{([a-z_]+)(?::([+-]?\d+))?\}\}")
BINDING_KINDS = {"sandbox_id", "command_id", "execd_port", "port", "lifecycle_port"}
FORMATS = {
    "sandbox_id": r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
    "command_id": r"[0-9a-f]{32}",
    "execd_port": r"\d{1,5}",
    "port": r"\d{1,5}",
    "lifecycle_port": r"\d{1,5}",
    "request_id": r"[0-9a-f]{32}",
    "http_date": r"[A-Z][a-z]{2}, \d{2} [A-Z][a-z]{2} \d{4} \d{2}:\d{2}:\d{2} GMT",
    "datetime": r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})",
    "epoch_ms": r"\d{12,14}",
}
# Values compared exactly wherever they occur in a JSON body (everything else: key sets and types).
SEMANTIC_KEYS = frozenset(
    {
        "code",
        "message",
        "state",
        "reason",
        "status",
        "version",
        "type",
        "ename",
        "evalue",
        "traceback",
        "exit_code",
        "running",
        "error",
        "content",
        "path",
        "mode",
        "entrypoint",
        "metadata",
        "page",
        "pageSize",
        "totalItems",
        "totalPages",
        "hasNextPage",
        "text",
    }
)
# Keys whose presence depends on timing: Go's omitempty drops execution_time when it is 0 ms
# (recording 10: a background command's execution_complete has it once and lacks it once).
OPTIONAL_EVENT_KEYS = frozenset({"execution_time"})


@dataclasses.dataclass
class Check:
    index: int
    aspect: str
    ok: bool
    detail: str = ""

    def text(self) -> str:
        return f"#{self.index} {self.aspect}: {self.detail}"


class Bindings(dict):
    """placeholder text (``{{sandbox_id:1}}``) -> actual value, filled as templates are matched."""

    def _regex(self, template: str) -> tuple[str, list[tuple[str, str]]]:
        out, pos, groups, seen = [], 0, [], {}
        for m in PH_RE.finditer(template):
            out.append(re.escape(template[pos : m.start()]))
            pos = m.end()
            ph, kind = m.group(0), m.group(1)
            fmt = FORMATS.get(kind, r".+?")
            if kind in BINDING_KINDS and ph in self:
                out.append(re.escape(self[ph]))
            elif kind in BINDING_KINDS:
                if ph in seen:
                    out.append(f"(?P={seen[ph]})")
                else:
                    g = f"g{len(groups)}"
                    seen[ph] = g
                    groups.append((g, ph))
                    out.append(f"(?P<{g}>{fmt})")
            else:
                out.append(f"(?:{fmt})")
        out.append(re.escape(template[pos:]))
        return "".join(out), groups

    def match(self, template: str, actual: str) -> str | None:
        """None if ``actual`` fits ``template`` (binding new placeholders), else why not."""
        if "{{" not in template:
            return None if template == actual else f"expected {template!r}, got {actual!r}"
        rx, groups = self._regex(template)
        m = re.fullmatch(rx, actual, re.S)
        if not m:
            return f"expected {template!r}, got {actual!r}"
        for g, ph in groups:
            val = m.group(g)
            kind = PH_RE.fullmatch(ph).group(1)  # type: ignore[union-attr]
            for other, v in self.items():
                if v == val and other != ph and PH_RE.fullmatch(other).group(1) == kind:  # type: ignore[union-attr]
                    return f"{val!r} matches {ph} but is already {other}"
            self[ph] = val
        return None


# -- materialising templates -------------------------------------------------------------------------
def sample_value(ph: str, kind: str, arg: str | None, now: datetime | None = None) -> str:
    """A deterministic concrete value for a placeholder (used to turn a template into raw data)."""
    n = int(arg) if arg and arg.lstrip("+-").isdigit() else 1
    now = now or datetime(2000, 1, 1, tzinfo=timezone.utc)
    if kind == "sandbox_id":
        return f"{n:08x}-0000-4000-8000-{n:012x}"
    if kind in ("command_id", "request_id"):
        return f"{n:032x}"
    if kind == "execd_port":
        return str(40000 + n)
    if kind == "port":
        return str(41000 + n)
    if kind == "lifecycle_port":
        return "48080"
    if kind == "http_date":
        return now.strftime("%a, %d %b %Y %H:%M:%S GMT")
    if kind == "datetime":
        return (now + timedelta(seconds=int(arg or 0))).strftime("%Y-%m-%dT%H:%M:%SZ")
    if kind == "epoch_ms":
        return str(int(now.timestamp() * 1000))
    return ph


def materialize(text: str | None, bindings: dict[str, str] | None = None) -> str | None:
    if text is None or "{{" not in text:
        return text
    bindings = bindings or {}

    def repl(m: re.Match[str]) -> str:
        if m.group(0) in bindings:
            return bindings[m.group(0)]
        return sample_value(m.group(0), m.group(1), m.group(2))

    return PH_RE.sub(repl, text)


# -- helpers -----------------------------------------------------------------------------------------
def hget(headers: dict[str, str] | Iterable[tuple[str, str]], name: str) -> str | None:
    items = headers.items() if isinstance(headers, dict) else headers
    name = name.lower()
    for k, v in items:
        if k.lower() == name:
            return v
    return None


def norm_ct(v: str | None) -> str | None:
    return None if v is None else re.sub(r"\s+", "", v).lower()


def jtype(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    if isinstance(v, int):
        return "integer"
    if isinstance(v, float):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "array"
    return "object"


def parse_json_template(text: str) -> Any:
    """Parse a templated JSON body: bare numeric placeholders become sample numbers."""
    return json.loads(
        PH_RE.sub(
            lambda m: sample_value(m.group(0), m.group(1), m.group(2)) if m.group(1) == "epoch_ms" else m.group(0), text
        )
    )


def split_sse(body: str) -> tuple[list[str], str | None]:
    """Frames of a bare-JSON event stream, and a framing problem (None if the framing is exact)."""
    if body == "":
        return [], None
    if not body.endswith("\n\n"):
        return [f for f in body.split("\n\n") if f], "stream does not end with a blank line"
    frames = body[:-2].split("\n\n")
    for f in frames:
        if not f:
            return frames, "empty frame (extra blank line)"
        if f.startswith("data:") or f.startswith("event:") or f.startswith("id:"):
            return frames, f"frame is not bare JSON: {f[:40]!r}"
        if "\n" in f:
            return frames, f"frame spans several lines: {f[:40]!r}"
    return frames, None


def _events(frames: list[str], template: bool) -> tuple[list[dict[str, Any]], str | None]:
    out = []
    for f in frames:
        try:
            obj = parse_json_template(f) if template else json.loads(f)
        except ValueError:
            return out, f"frame is not JSON: {f[:60]!r}"
        if not isinstance(obj, dict):
            return out, f"frame is not a JSON object: {f[:60]!r}"
        out.append(obj)
    return out, None


def _norm_types(events: list[dict[str, Any]]) -> list[str]:
    seq: list[str] = []
    for e in events:
        t = e.get("type")
        if t == "ping":
            continue
        t = "output" if t in ("stdout", "stderr") else str(t)
        if t == "output" and seq and seq[-1] == "output":
            continue
        seq.append(t)
    return seq


def _keyshape(e: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, jtype(v)) for k, v in e.items() if k not in OPTIONAL_EVENT_KEYS))


# -- the comparison ----------------------------------------------------------------------------------
class Comparer:
    def __init__(self, bindings: Bindings | None = None):
        self.bindings = bindings if bindings is not None else Bindings()

    def compare(
        self,
        index: int,
        expected: dict[str, Any],
        status: int,
        headers: dict[str, str] | list[tuple[str, str]],
        body: bytes,
    ) -> list[Check]:
        checks: list[Check] = []

        def add(aspect: str, problems: list[str]) -> None:
            checks.append(
                Check(
                    index,
                    aspect,
                    not problems,
                    "; ".join(problems[:6]) + (f" (+{len(problems) - 6} more)" if len(problems) > 6 else ""),
                )
            )

        exp_h = expected.get("headers") or {}
        add("status", [] if expected["status"] == status else [f"expected {expected['status']}, got {status}"])
        ect, act = norm_ct(hget(exp_h, "Content-Type")), norm_ct(hget(headers, "Content-Type"))
        add("content-type", [] if ect == act else [f"expected {ect}, got {act}"])
        hp: list[str] = []
        if (hget(exp_h, "x-request-id") is None) != (hget(headers, "x-request-id") is None):
            hp.append("x-request-id " + ("missing" if hget(headers, "x-request-id") is None else "unexpected"))
        for name in ("Execd-Commands-Tail-Cursor", "Content-Range"):
            ev, av = hget(exp_h, name), hget(headers, name)
            if ev != av and not (ev is not None and av is not None and self.bindings.match(ev, av) is None):
                hp.append(f"{name}: expected {ev!r}, got {av!r}")
        add("headers", hp)

        exp_body = expected.get("body")
        if exp_body is None and expected.get("body_b64") is not None:
            import base64

            ok = base64.b64decode(expected["body_b64"]) == body
            add("body", [] if ok else ["binary body differs"])
            return checks
        exp_body = exp_body or ""
        act_text = body.decode("utf-8", "replace")
        if ect and ect.startswith("text/event-stream"):
            self._compare_sse(exp_body, act_text, add)
            return checks
        try:
            exp_json = parse_json_template(exp_body) if exp_body.strip() else None
        except ValueError:
            exp_json = None
        if exp_json is not None and isinstance(exp_json, (dict, list)):
            try:
                act_json = json.loads(act_text)
            except ValueError:
                add("body-shape", [f"expected a JSON body, got {act_text[:80]!r}"])
                add("body-values", ["not JSON"])
                return checks
            shape: list[str] = []
            values: list[str] = []
            self._json_diff(exp_json, act_json, "$", False, shape, values)
            add("body-shape", shape)
            add("body-values", values)
            return checks
        why = self.bindings.match(exp_body, act_text)
        add("body", [] if why is None else [why[:300]])
        return checks

    def _json_diff(self, exp: Any, act: Any, path: str, exact: bool, shape: list[str], values: list[str]) -> None:
        """Key sets and types everywhere; values inside a SEMANTIC_KEYS subtree; templates always."""
        te, ta = jtype(exp), jtype(act)
        if te != ta:
            shape.append(f"{path}: expected {te}, got {ta}")
            return
        if te == "object":
            missing = [k for k in exp if k not in act]
            extra = [k for k in act if k not in exp]
            if missing:
                shape.append(f"{path}: missing keys {missing}")
            if extra:
                shape.append(f"{path}: unexpected keys {extra}")
            for k in exp:
                if k in act:
                    self._json_diff(exp[k], act[k], f"{path}.{k}", exact or k in SEMANTIC_KEYS, shape, values)
            return
        if te == "array":
            if len(exp) != len(act):
                shape.append(f"{path}: expected {len(exp)} items, got {len(act)}")
            for i, (e, a) in enumerate(zip(exp, act, strict=False)):
                self._json_diff(e, a, f"{path}[{i}]", exact, shape, values)
            return
        if te == "string" and "{{" in exp:
            why = self.bindings.match(exp, act)
            if why:
                values.append(f"{path}: {why}")
            return
        if exact and exp != act:
            values.append(f"{path}: expected {exp!r}, got {act!r}")

    def _compare_sse(self, exp_body: str, act_body: str, add: Any) -> None:
        eframes, _ = split_sse(exp_body)
        aframes, framing = split_sse(act_body)
        add("sse-framing", [framing] if framing else [])
        ev, _ = _events(eframes, template=True)
        av, why = _events(aframes, template=False)
        if why:
            add("sse-events", [why])
            add("sse-output", ["unparsable stream"])
            add("sse-values", ["unparsable stream"])
            return
        probs: list[str] = []
        es, as_ = _norm_types(ev), _norm_types(av)
        if es != as_:
            probs.append(f"event types {es} != {as_}")
        if any(e.get("type") == "ping" for e in ev) != any(a.get("type") == "ping" for a in av):
            probs.append("heartbeat ping " + ("missing" if any(e.get("type") == "ping" for e in ev) else "unexpected"))
        shapes: dict[str, set] = {}
        for e in ev:
            shapes.setdefault(str(e.get("type")), set()).add(_keyshape(e))
        for a in av:
            t = str(a.get("type"))
            if t in shapes and _keyshape(a) not in shapes[t]:
                probs.append(
                    f"{t} event keys/types {dict(_keyshape(a))} not as recorded {[dict(s) for s in shapes[t]]}"
                )
                shapes[t].add(_keyshape(a))  # report each shape once
            for k in OPTIONAL_EVENT_KEYS:
                if k in a and jtype(a[k]) != "integer":
                    probs.append(f"{t}.{k} is {jtype(a[k])}, expected integer")
        add("sse-events", probs)
        out: list[str] = []
        for stream in ("stdout", "stderr"):
            et = [e.get("text") for e in ev if e.get("type") == stream]
            at = [a.get("text") for a in av if a.get("type") == stream]
            if et != at:
                out.append(
                    f"{stream} {et[:8]!r}{'...' if len(et) > 8 else ''} != {at[:8]!r}{'...' if len(at) > 8 else ''}"
                )
        add("sse-output", out)
        vals: list[str] = []
        ei = [e for e in ev if e.get("type") == "init"]
        ai = [a for a in av if a.get("type") == "init"]
        if ei and ai and isinstance(ei[0].get("text"), str) and isinstance(ai[0].get("text"), str):
            w = self.bindings.match(ei[0]["text"], ai[0]["text"])
            if w:
                vals.append(f"init text: {w}")
        ee = [e.get("error") for e in ev if e.get("type") == "error"]
        ae = [a.get("error") for a in av if a.get("type") == "error"]
        if ee != ae:
            vals.append(f"error {ee!r} != {ae!r}")
        add("sse-values", vals)


def score(checks: list[Check]) -> tuple[int, int]:
    return sum(1 for c in checks if c.ok), len(checks)
