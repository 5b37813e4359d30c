"""Fault injection for the mock's listeners: rules (plain data), matching, and the injector that
``httpcore.Handler._handle`` calls for every request on every listener.

Real deployments time out, answer with a proxy's HTML 502, rate-limit with 429, reset connections
mid-stream and stall. A rule makes the mock do one of those on chosen requests::

    osb.faults.add(kind="status", status=503, method="GET", path=r"/files/info$", sandbox=sid, count=1)
    osb.faults.add(kind="reset_body", after_bytes=100, path=r"/command$", probability=0.5, seed=7)
    osb.faults.clear()

or over HTTP on the lifecycle port (``GET/POST/DELETE /__mock__/faults``, API key required), or with
``python -m mock_opensandbox --fault '<json rule>'``. docs/FAULTS.md is the user guide.

Kinds (the toxics of WireMock / MockServer / Toxiproxy that an OpenSandbox client meets):

* ``delay``      wait ``delay`` seconds (uniform in [delay, delay_max] when delay_max is given), then
                 answer normally. ``delay``/``delay_max`` also work as a pre-wait on every other kind.
* ``status``     answer ``status`` at once with ``body`` (default: an nginx-style HTML page), extra
                 ``headers``, ``retry_after`` (a Retry-After header); ``echo_headers`` puts the
                 request's headers into the body, ``echo_body`` its body (a debugging proxy, or a
                 validation error that quotes its input; used by the secret-canary tests).
* ``reset``      reset the connection (TCP RST) before any byte of the answer.
* ``reset_body`` answer normally but reset the connection after ``after_bytes`` bytes of the body.
* ``truncate``   answer normally but close the connection cleanly after ``after_bytes`` bytes of the
                 body: the Content-Length (or the missing last chunk) promises more than arrives.
* ``dribble``    answer normally but send the body ``chunk`` bytes every ``interval`` seconds.
* ``stall``      never answer; the connection is held until the client leaves or the mock stops.
* ``pod``        (``runtime="kubernetes"`` creates) the route answers, but the new sandbox's pod does ``pod``:
                 ``ready`` after ``after`` seconds Pending, ``failed`` after ``after`` seconds (a container
                 waiting on ``reason``: 500 KUBERNETES::POD_FAILED) or ``unschedulable`` (Pending until the
                 create timeout: 504 KUBERNETES::POD_READY_TIMEOUT). Default match: POST /sandboxes.

Body byte counts are of the body as written on the wire (chunk framing included); a body of at most
``after_bytes`` bytes goes through intact. Matching: ``method`` (None or "*" = any; "GET|DELETE" or a
list for several), ``path`` (a regular expression searched in the path without the query string; on
an execd listener it is also tried with the ``/proxy/44772`` prefix removed), ``listener``
("lifecycle", "execd" or "port" for a sandbox's published 8080; None = any) and ``sandbox`` (an id:
its execd and port listeners, and lifecycle paths under ``/sandboxes/<id>``). Rules are tried in the
order they were added; the first that matches and fires applies, one fault per request. ``count``
limits a rule to its next N firings; ``probability`` fires it at random with a reproducible ``seed``.
The admin routes under ``/__mock__/`` are never faulted. Faulted answers the mock makes up (status,
reset, stall) are not passed to the traffic observers (httpcore.OBSERVERS); answers that only get
delayed, cut or slowed are observed as the route produced them.

The rules and the registry are here; the injector that carries a fired rule out on a connection is
workbench/faultinject.py. Standard library only. Nothing here imports the rest of the mock.
"""

from __future__ import annotations

import os
import random
import re
import sys
import threading
import time
from collections import deque
from typing import Any, Callable, Iterable

from mock_opensandbox.wire.listener import Fault, RequestHandler

__all__ = ["KINDS", "LISTENERS", "FaultError", "Rule", "FaultRegistry", "parse_rule"]

KINDS = ("delay", "status", "reset", "reset_body", "truncate", "dribble", "stall", "pod")
# kind pod: what a create's pod does (lifecycle/k8s_workloads.py PodOutcome; the Kubernetes oracle's pods)
POD_OUTCOMES = ("ready", "failed", "unschedulable", "quota", "capacity")
POD_CREATE_PATH = r"^(/v1)?/sandboxes$"
LISTENERS = ("lifecycle", "execd", "port")
EXECD_PREFIX = "/proxy/44772"  # execd serves every route bare and under this prefix (recording 06)
ADMIN_PREFIX = "/__mock__/"
MAX_DELAY = 3600.0
_METHOD_RE = re.compile(r"[A-Z]+|\*")
_COMMON = (
    "id",
    "kind",
    "method",
    "path",
    "listener",
    "sandbox",
    "count",
    "probability",
    "seed",
    "delay",
    "delay_max",
    "note",
)
_PARAMS = {
    "delay": (),
    "status": ("status", "body", "content_type", "headers", "retry_after", "echo_headers", "echo_body"),
    "reset": (),
    "reset_body": ("after_bytes",),
    "truncate": ("after_bytes",),
    "dribble": ("chunk", "interval"),
    "stall": (),
    "pod": ("pod", "reason", "after"),
}


class FaultError(ValueError):
    """A rule that cannot be used (bad kind, field, type or range)."""


# =====================================================================================================
# rules
# =====================================================================================================
def _number(value: Any, name: str, lo: float, hi: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
        raise FaultError("%s must be a number" % name)
    if not lo <= value <= hi:
        raise FaultError("%s must be between %g and %g" % (name, lo, hi))
    return float(value)


def _integer(value: Any, name: str, lo: int, hi: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise FaultError("%s must be an integer" % name)
    if not lo <= value <= hi:
        raise FaultError("%s must be between %d and %d" % (name, lo, hi))
    return value


def _header_text(value: Any, name: str) -> str:
    if not isinstance(value, str) or any(c in value for c in "\r\n\x00"):
        raise FaultError("%s must be a string without CR, LF or NUL" % name)
    return value


class Rule:
    """One fault rule. Plain data plus its random generator and hit bookkeeping."""

    def __init__(
        self,
        kind: str,
        *,
        id: str = "",
        method: Any = None,
        path: str | None = None,
        listener: str | None = None,
        sandbox: str | None = None,
        count: int | None = None,
        probability: float = 1.0,
        seed: int | None = None,
        delay: float = 0.0,
        delay_max: float | None = None,
        note: str = "",
        status: int | None = None,
        body: str | None = None,
        content_type: str | None = None,
        headers: dict[str, str] | None = None,
        retry_after: Any = None,
        echo_headers: bool = False,
        echo_body: bool = False,
        after_bytes: int = 0,
        chunk: int = 1,
        interval: float = 0.1,
        pod: str = "",
        reason: str = "ImagePullBackOff",
        after: float = 0.0,
    ):
        if kind not in KINDS:
            raise FaultError("kind must be one of %s, not %r" % (", ".join(KINDS), kind))
        self.kind = kind
        self.id = id
        if kind == "pod":  # a create's pod: POST /sandboxes unless the rule says otherwise
            method = "POST" if method is None else method
            path = POD_CREATE_PATH if path is None else path
        self.methods = self._methods(method)
        if path is not None and not isinstance(path, str):
            raise FaultError("path must be a regular expression string")
        try:
            self.path_re = re.compile(path) if path else None
        except re.error as e:
            raise FaultError("path is not a valid regular expression: %s" % e) from None
        self.path = path or None
        if listener is not None and listener not in LISTENERS:
            raise FaultError("listener must be one of %s" % ", ".join(LISTENERS))
        self.listener = listener
        if sandbox is not None and (not isinstance(sandbox, str) or not sandbox):
            raise FaultError("sandbox must be a sandbox id")
        self.sandbox = sandbox
        self.count = None if count is None else _integer(count, "count", 0, 1 << 31)
        self.probability = _number(probability, "probability", 0.0, 1.0)
        if seed is None:
            seed = int.from_bytes(os.urandom(4), "big")
        self.seed = _integer(seed, "seed", -(1 << 63), 1 << 63)
        self.rng = random.Random(self.seed)
        self.delay = _number(delay, "delay", 0.0, MAX_DELAY)
        self.delay_max = None if delay_max is None else _number(delay_max, "delay_max", self.delay, MAX_DELAY)
        self.note = note if isinstance(note, str) else ""
        # status
        self.status = None
        self.body = None
        self.content_type = None
        self.headers: dict[str, str] = {}
        self.retry_after: str | None = None
        self.echo_headers = False
        self.echo_body = False
        if kind == "status":
            if status is None:
                raise FaultError("a status rule needs status (e.g. 503)")
            self.status = _integer(status, "status", 200, 599)
            if body is not None and not isinstance(body, str):
                raise FaultError("body must be a string")
            self.body = body
            self.content_type = None if content_type is None else _header_text(content_type, "content_type")
            if headers is not None:
                if not isinstance(headers, dict):
                    raise FaultError("headers must be an object of header names to values")
                for k, v in headers.items():
                    if not isinstance(k, str) or not re.fullmatch(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+", k):
                        raise FaultError("header name %r is not a valid token" % (k,))
                    self.headers[k] = _header_text(v, "header %s" % k)
            if retry_after is not None:
                if isinstance(retry_after, bool):
                    raise FaultError("retry_after must be seconds or an HTTP date")
                if isinstance(retry_after, (int, float)):
                    self.retry_after = str(int(_number(retry_after, "retry_after", 0, 1 << 31)))
                else:
                    self.retry_after = _header_text(retry_after, "retry_after")
            if not isinstance(echo_headers, bool) or not isinstance(echo_body, bool):
                raise FaultError("echo_headers and echo_body must be true or false")
            self.echo_headers = echo_headers
            self.echo_body = echo_body
        self.pod, self.reason, self.after = "", "", 0.0
        if kind == "pod":
            if pod not in POD_OUTCOMES:
                raise FaultError("pod must be one of %s" % ", ".join(POD_OUTCOMES))
            if not isinstance(reason, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9]{0,63}", reason):
                raise FaultError("reason must be a container waiting reason like ImagePullBackOff")
            self.pod, self.reason = pod, reason
            self.after = _number(after, "after", 0.0, MAX_DELAY)
        self.after_bytes = _integer(after_bytes, "after_bytes", 0, 1 << 40)
        self.chunk = _integer(chunk, "chunk", 1, 1 << 20)
        self.interval = _number(interval, "interval", 0.0, 60.0)
        self.hits = 0
        self.hit_times: deque[float] = deque(maxlen=256)  # time.monotonic() of each firing

    @staticmethod
    def _methods(method: Any) -> frozenset[str] | None:
        if method is None or method == "*" or method == "":
            return None
        items: Iterable[Any] = method.split("|") if isinstance(method, str) else method
        if not isinstance(items, (list, tuple, set, frozenset)) and not isinstance(method, str):
            raise FaultError("method must be a string like GET, GET|DELETE or a list")
        out = set()
        for m in items:
            if not isinstance(m, str) or not _METHOD_RE.fullmatch(m.strip().upper()):
                raise FaultError("method %r is not an HTTP method" % (m,))
            out.add(m.strip().upper())
        return frozenset(out) if out and "*" not in out else None

    # -- matching -----------------------------------------------------------------------------------
    def matches(self, method: str, path: str, listener: str, sandbox: str | None) -> bool:
        if self.count is not None and self.count <= 0:
            return False
        if self.methods is not None and method not in self.methods:
            return False
        if self.listener is not None and listener != self.listener:
            return False
        if self.sandbox is not None and sandbox != self.sandbox:
            return False
        if self.path_re is not None:
            if self.path_re.search(path):
                return True
            if listener == "execd" and path.startswith(EXECD_PREFIX + "/"):
                return bool(self.path_re.search(path[len(EXECD_PREFIX) :]))
            return False
        return True

    def fire(self) -> bool:
        """Decide (and count) whether a matching request gets the fault. Caller holds the registry lock."""
        if self.probability < 1.0 and self.rng.random() >= self.probability:
            return False
        if self.count is not None:
            self.count -= 1
        self.hits += 1
        self.hit_times.append(time.monotonic())
        return True

    def pre_wait(self) -> float:
        if self.delay_max is not None:
            return self.rng.uniform(self.delay, self.delay_max)
        return self.delay

    @property
    def active(self) -> bool:
        return self.count is None or self.count > 0

    # -- JSON ---------------------------------------------------------------------------------------
    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "kind": self.kind}
        out["method"] = "|".join(sorted(self.methods)) if self.methods else "*"
        out["path"] = self.path
        out["listener"] = self.listener
        out["sandbox"] = self.sandbox
        out["count"] = self.count
        out["probability"] = self.probability
        out["seed"] = self.seed
        if self.delay or self.delay_max is not None:
            out["delay"] = self.delay
            if self.delay_max is not None:
                out["delay_max"] = self.delay_max
        if self.kind == "status":
            out["status"] = self.status
            for key in ("body", "content_type", "retry_after"):
                if getattr(self, key) is not None:
                    out[key] = getattr(self, key)
            if self.headers:
                out["headers"] = dict(self.headers)
            if self.echo_headers:
                out["echo_headers"] = True
            if self.echo_body:
                out["echo_body"] = True
        if self.kind in ("reset_body", "truncate"):
            out["after_bytes"] = self.after_bytes
        if self.kind == "dribble":
            out["chunk"] = self.chunk
            out["interval"] = self.interval
        if self.kind == "pod":
            out["pod"] = self.pod
            if self.pod == "failed":
                out["reason"] = self.reason
            out["after"] = self.after
        if self.note:
            out["note"] = self.note
        out["hits"] = self.hits
        out["active"] = self.active
        return out


def parse_rule(obj: Any) -> Rule:
    """A Rule from its JSON object; unknown fields and fields of another kind are errors."""
    if not isinstance(obj, dict):
        raise FaultError("a fault rule must be a JSON object")
    kind = obj.get("kind")
    if not isinstance(kind, str) or kind not in KINDS:
        raise FaultError("kind must be one of %s" % ", ".join(KINDS))
    allowed = set(_COMMON) | set(_PARAMS[kind]) | {"hits", "active"}
    unknown = sorted(str(k) for k in obj if k not in allowed)
    if unknown:
        raise FaultError("unknown field(s) for a %s rule: %s" % (kind, ", ".join(unknown)))
    fields = {k: v for k, v in obj.items() if k not in ("kind", "hits", "active")}
    if fields.get("id") in ("", None):
        fields.pop("id", None)  # no id yet: the registry gives one
    elif not isinstance(fields["id"], str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", fields["id"]):
        raise FaultError("id must be 1-64 letters, digits, '.', '_' or '-'")
    try:
        return Rule(kind, **fields)
    except TypeError as e:  # pragma: no cover - allowed-field check above keeps this out
        raise FaultError(str(e)) from None


# =====================================================================================================
# the registry
# =====================================================================================================
class FaultRegistry:
    """The fault rules of one mock (shared by its lifecycle, execd and port listeners)."""

    def __init__(
        self,
        *,
        verbose: bool = False,
        log: Callable[[str], None] | None = None,
        injector: Callable[[RequestHandler, str, "FaultRegistry"], Fault | None] | None = None,
    ):
        """``injector(handler, method, registry) -> fault | None`` starts the fault a rule makes of a request
        (workbench/faultinject.py inject); whoever builds the registry plugs it in (server.py, proxy.py).
        Without one, the rules are kept and listed but no listener's request is faulted."""
        self.injector = injector
        self._rules: list[Rule] = []
        self._lock = threading.Lock()
        self._next = 1
        self.verbose = verbose
        self._log = log or (lambda msg: print(msg, file=sys.stderr, flush=True))
        self.closed = threading.Event()  # set when the mock stops: ends stalls, delays and dribbles
        self.armed = False  # fast path for the HTTP hook: any rule that can still fire?
        self._active = 0
        self._idle = threading.Condition(self._lock)
        self.history: deque[dict[str, Any]] = deque(maxlen=500)

    # -- rules --------------------------------------------------------------------------------------
    def add(self, rule: Rule | dict[str, Any] | None = None, **fields: Any) -> Rule:
        """Add one rule: a Rule, a JSON-style dict, or keyword fields (``kind=...`` required)."""
        if rule is None:
            rule = parse_rule(fields)
        elif isinstance(rule, dict):
            rule = parse_rule({**rule, **fields})
        elif fields:
            raise TypeError("pass either a rule or keyword fields")
        with self._lock:
            if not rule.id:
                rule.id = "f%d" % self._next
                self._next += 1
            elif any(r.id == rule.id for r in self._rules):
                raise FaultError("a fault rule with id %r exists already" % rule.id)
            self._rules.append(rule)
            self._rearm()
        return rule

    def add_json(self, payload: Any) -> list[Rule]:
        """Rules from a JSON object or a list of them (all or nothing)."""
        items = payload if isinstance(payload, list) else [payload]
        if not items:
            raise FaultError("no fault rule given")
        rules = [parse_rule(item) for item in items]
        added: list[Rule] = []
        try:
            for r in rules:
                added.append(self.add(r))
        except FaultError:
            for r in added:
                self.remove(r.id)
            raise
        return added

    def remove(self, rule_id: str) -> bool:
        with self._lock:
            before = len(self._rules)
            self._rules = [r for r in self._rules if r.id != rule_id]
            self._rearm()
            return len(self._rules) != before

    def clear(self) -> None:
        with self._lock:
            self._rules = []
            self._rearm()

    @property
    def rules(self) -> list[Rule]:
        with self._lock:
            return list(self._rules)

    def get(self, rule_id: str) -> Rule | None:
        with self._lock:
            return next((r for r in self._rules if r.id == rule_id), None)

    def to_json(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r.to_json() for r in self._rules]

    def _rearm(self) -> None:
        self.armed = any(r.active for r in self._rules)

    # -- matching -----------------------------------------------------------------------------------
    def inject(self, handler: RequestHandler, method: str) -> Fault | None:
        """wire/listener.py FaultRules: the injector's fault for this request, or None."""
        return self.injector(handler, method, self) if self.injector is not None else None

    def match(self, method: str, path: str, listener: str, sandbox: str | None) -> Rule | None:
        if path.startswith(ADMIN_PREFIX):
            return None
        with self._lock:
            for r in self._rules:
                if r.matches(method, path, listener, sandbox) and r.fire():
                    self._rearm()
                    self.history.append(
                        {
                            "rule": r.id,
                            "kind": r.kind,
                            "method": method,
                            "path": path,
                            "listener": listener,
                            "sandbox": sandbox,
                            "at": time.monotonic(),
                        }
                    )
                    self._active += 1
                    return r
        return None

    def _done(self) -> None:
        with self._lock:
            self._active -= 1
            if self._active <= 0:
                self._active = 0
                self._idle.notify_all()

    @property
    def active(self) -> int:
        """Requests currently inside a fault (waiting, stalled, dribbling...)."""
        with self._lock:
            return self._active

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until no request is inside a fault any more (e.g. after clear(), before the next step)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._active > 0:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._idle.wait(left)
            return True

    # -- mock start/stop ----------------------------------------------------------------------------
    def close(self) -> None:
        """The mock stops: every stalled, delayed or dribbling request ends now (rules are kept)."""
        self.closed.set()

    def reopen(self) -> None:
        self.closed.clear()

    def log(self, msg: str) -> None:
        if self.verbose:
            try:
                self._log(msg)
            except Exception:  # pragma: no cover - logging must never break a request
                pass
