"""Spec guard: validate mock traffic against the OpenAPI specs (openapi-core 0.23.1).

``tiers/conftest.py`` installs ``SpecGuard.observe`` into ``mock_opensandbox.wire.http1.OBSERVERS`` once
per test session, so every request a test sends to any mock listener and every response the mock
produces is checked against ``sandbox-lifecycle.yml`` / ``execd-api.yaml`` without per-test code.
The observer never raises into the mock: it records violations, and the session fails at the end if
any violation is not covered by the ``spec`` entries of ``tiers/t2/ALLOWED_DIFFERENCES``.

Rules:
* responses are always validated (status known to the operation, headers, body schema);
* requests are validated when the server accepted them (status < 400): a request the spec forbids
  and the server rejects is exactly what error-path tests do on purpose, whereas a request the spec
  forbids that is *accepted* means a lenient mock or a client sending out-of-spec requests;
* lifecycle traffic under ``/v1/sandboxes/{id}/proxy/44772/...`` is execd traffic (server proxy);
  execd traffic under ``/proxy/44772`` is validated without the prefix; traffic proxied to any other
  port is application traffic and is not validated;
* event streams are split into frames: the framing must be bare JSON + blank line (what execd
  sends; a spec-conformant ``data:`` stream is reported as a difference from the recordings too) and
  every frame must validate against the operation's event schema.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import threading
from typing import Any, Iterable

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPEC_FILES = ("sandbox-lifecycle.yml", "execd-api.yaml")
ALLOW_FILE = os.path.join(REPO, "tiers", "t2", "ALLOWED_DIFFERENCES")
SPEC_PIN_FILE = os.path.join(REPO, "tiers", "SPEC_PIN")
EXECD_PORT = "44772"
LIFECYCLE_HOST = "http://localhost:8080"  # sandbox-lifecycle.yml servers: http://localhost:8080/v1
EXECD_HOST = "http://localhost:44772"  # execd-api.yaml servers: http://localhost:44772
CREDENTIAL_HEADER = {"lifecycle": "OPEN-SANDBOX-API-KEY", "execd": "X-EXECD-ACCESS-TOKEN"}
EXECD_TOP = re.compile(r"^/(ping|command|files|directories|code|session|metrics|pty)(/|$)")
# What tiers/conftest.py installed for this session: {"guard": SpecGuard|None, "observer", "skip_reason"}.
SESSION: dict[str, Any] = {"guard": None, "observer": None, "skip_reason": ""}
SERVER_PROXY = re.compile(r"^/(?:v1/)?sandboxes/[^/]+/proxy/(\d+)(/.*)?$")


def spec_dir() -> str:
    """<repo>/../shared/specs, or $OSB_SPECS_DIR."""
    return os.environ.get("OSB_SPECS_DIR") or os.path.normpath(os.path.join(REPO, "..", "shared", "specs"))


def specs_available(directory: str | None = None) -> bool:
    d = directory or spec_dir()
    return all(os.path.isfile(os.path.join(d, f)) for f in SPEC_FILES)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 16), b""):
            h.update(block)
    return h.hexdigest()


def read_pin(path: str = SPEC_PIN_FILE) -> dict[str, str]:
    """``<sha256>  <file name>`` lines (``#`` comments ignored)."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                digest, name = line.split(None, 1)
                out[name.strip()] = digest
    return out


# -- allow-list --------------------------------------------------------------------------------------
@dataclasses.dataclass
class SpecAllow:
    where: "re.Pattern[str]"
    what: "re.Pattern[str]"
    reason: str
    line: int

    def matches(self, where: str, what: str) -> bool:
        return bool(self.where.search(where) and self.what.search(what))


@dataclasses.dataclass
class ReplayAllow:
    scenario: "re.Pattern[str]"
    indices: set[int] | None  # None = any exchange
    what: "re.Pattern[str]"
    reason: str
    line: int

    def matches(self, scenario: str, index: int, what: str) -> bool:
        return bool(
            self.scenario.search(scenario)
            and (self.indices is None or index in self.indices)
            and self.what.search(what)
        )


class AllowListError(ValueError):
    pass


def _indices(text: str, line: int) -> set[int] | None:
    text = text.strip()
    if text == "*":
        return None
    out: set[int] = set()
    for part in text.split(","):
        part = part.strip().lstrip("#")
        try:
            if "-" in part:
                a, b = part.split("-", 1)
                out.update(range(int(a), int(b) + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise AllowListError(f"ALLOWED_DIFFERENCES:{line}: bad exchange index {text!r}") from None
    return out


def load_allow_list(path: str = ALLOW_FILE) -> tuple[list[SpecAllow], list[ReplayAllow]]:
    """Parse ALLOWED_DIFFERENCES: ``spec | where | what | reason`` and
    ``replay | scenario | exchanges | what | reason`` (fields separated by `` | ``)."""
    spec: list[SpecAllow] = []
    replay: list[ReplayAllow] = []
    with open(path, encoding="utf-8") as f:
        for n, raw in enumerate(f, 1):
            line = raw.rstrip("\n")
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            fields = [x.strip() for x in line.split(" | ")]
            try:
                if fields[0] == "spec" and len(fields) == 4:
                    spec.append(SpecAllow(re.compile(fields[1]), re.compile(fields[2]), fields[3], n))
                elif fields[0] == "replay" and len(fields) == 5:
                    replay.append(
                        ReplayAllow(re.compile(fields[1]), _indices(fields[2], n), re.compile(fields[3]), fields[4], n)
                    )
                else:
                    raise AllowListError(
                        f"ALLOWED_DIFFERENCES:{n}: expected 'spec | where | what | reason' or "
                        f"'replay | scenario | exchanges | what | reason'"
                    )
            except re.error as exc:
                raise AllowListError(f"ALLOWED_DIFFERENCES:{n}: bad regex: {exc}") from None
            if not fields[-1] or len(fields[-1]) < 10:
                raise AllowListError(f"ALLOWED_DIFFERENCES:{n}: every entry needs a reason")
    return spec, replay


# -- violations --------------------------------------------------------------------------------------
@dataclasses.dataclass
class Violation:
    side: str  # request | response
    api: str  # lifecycle | execd
    method: str
    path: str  # the path as validated (spec-relative for execd)
    status: int
    error: str  # openapi-core error class or our own (SSEFraming...)
    detail: str
    test: str = ""

    @property
    def where(self) -> str:
        return f"{self.api} {self.method} {normalize_path(self.path)} {self.status}"

    @property
    def what(self) -> str:
        return f"{self.side} {self.error}: {self.detail}"

    def text(self) -> str:
        return f"{self.where} :: {self.what}" + (f"   [{self.test}]" if self.test else "")


def _short(text: str, limit: int = 160) -> str:
    text = re.sub(r"\s+", " ", text)
    return text if len(text) <= limit else text[:60] + " ... " + text[-(limit - 65) :]


def _err_detail(err: BaseException) -> str:
    """One line: the error's own message without the (possibly huge) offending value, then the
    schema errors as ``<json path>: <message>`` with long values shortened."""
    head = str(err)
    head = re.sub(
        r"Value .* not valid for schema of type (\w+).*$", r"value not valid for schema of type \1", head, flags=re.S
    )
    name = getattr(err, "name", None)
    if isinstance(name, str) and name not in head:
        head = f"{head} (header {name})" if "Header" in type(err).__name__ else f"{head} ({name})"
    parts = [_short(head, 200)]
    cause = err.__cause__
    depth = 0
    while cause is not None and depth < 3:
        sub = getattr(cause, "schema_errors", None)
        if sub:
            for e in list(sub)[:4]:
                path = "/".join(str(p) for p in getattr(e, "absolute_path", []) or [])
                parts.append(f"{path or '$'}: {_short(getattr(e, 'message', str(e)))}")
        else:
            parts.append(
                _short(
                    re.sub(
                        r"Value .* not valid for schema of type (\w+).*$",
                        r"value not valid for schema of type \1",
                        str(cause),
                        flags=re.S,
                    )
                )
            )
        cause = cause.__cause__
        depth += 1
    return " | ".join(p for p in parts if p)[:600]


def _sse_frames(body: bytes) -> tuple[list[bytes], bool, str | None]:
    """(JSON payloads, bare framing?, framing problem). execd sends bare JSON objects separated by a
    blank line (recordings 07-18); a standard ``data: <json>`` frame is accepted too."""
    if not body:
        return [], False, None
    if not body.endswith(b"\n\n"):
        return [], False, "stream does not end with a blank line"
    payloads: list[bytes] = []
    bare = False
    for f in body[:-2].split(b"\n\n"):
        if not f:
            return [], False, "empty frame (extra blank line)"
        lines = f.split(b"\n")
        if all(ln.startswith((b"data:", b"event:", b"id:", b"retry:", b":")) for ln in lines):
            data = b"\n".join(ln[5:].lstrip(b" ") for ln in lines if ln.startswith(b"data:"))
            if data:
                payloads.append(data)
        elif len(lines) == 1:
            bare = True
            payloads.append(f)
        else:
            return [], False, "frame is neither one bare JSON line nor SSE field lines"
    return payloads, bare, None


_ID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}|\b[0-9a-f]{32}\b")


def normalize_path(path: str) -> str:
    """Ids out of paths so allow-list patterns and summaries stay short: uuid/32-hex -> {id}."""
    return _ID_RE.sub("{id}", path)


class SpecGuard:
    """Validates exchanges; thread-safe; parses the specs once (lazily, on first use)."""

    def __init__(self, directory: str | None = None, allow: Iterable[SpecAllow] | None = None):
        self.directory = directory or spec_dir()
        self.allow = list(allow) if allow is not None else load_allow_list()[0]
        self._apps: dict[str, Any] | None = None
        self._load_lock = threading.Lock()
        self._lock = threading.Lock()
        self.violations: list[Violation] = []
        self.allowed_hits: dict[int, int] = {}
        self.exempt_hits: dict[str, int] = {}
        self.checked = 0
        # responses the mock wrote around Request.send (status 0 in the Exchange): not validatable
        self.unobserved: dict[str, int] = {}
        self.current_test = ""
        self.exempt_reason = ""

    # -- across pytest-xdist workers (tiers/toolkit/session_report.py) --------------------------------
    def export(self) -> dict[str, Any]:
        """What this guard counted, as JSON-able data (a worker's share of the session)."""
        with self._lock:
            return {
                "checked": self.checked,
                "violations": [dataclasses.asdict(v) for v in self.violations],
                "allowed_hits": {str(k): n for k, n in self.allowed_hits.items()},
                "exempt_hits": dict(self.exempt_hits),
                "unobserved": dict(self.unobserved),
            }

    def absorb(self, data: dict[str, Any]) -> None:
        """Add a worker's export() to this guard's counts."""
        with self._lock:
            self.checked += int(data.get("checked", 0))
            self.violations.extend(Violation(**v) for v in data.get("violations", []))
            for field, target in (("exempt_hits", self.exempt_hits), ("unobserved", self.unobserved)):
                for k, n in (data.get(field) or {}).items():
                    target[k] = target.get(k, 0) + n
            for k, n in (data.get("allowed_hits") or {}).items():
                self.allowed_hits[int(k)] = self.allowed_hits.get(int(k), 0) + n

    # -- spec loading ------------------------------------------------------------------------------
    def apps(self) -> dict[str, Any]:
        if self._apps is None:
            with self._load_lock:
                if self._apps is None:
                    from openapi_core import Config, OpenAPI

                    cfg = Config(
                        extra_media_type_deserializers={
                            # one event-stream frame at a time (see _validate_response)
                            "text/event-stream": lambda data: json.loads(data),
                            # a binary download is a string of bytes for the schema (type: string, format: binary)
                            "application/octet-stream": lambda data: (
                                data.decode("latin-1") if isinstance(data, (bytes, bytearray)) else data
                            ),
                        }
                    )
                    self._apps = {
                        "lifecycle": OpenAPI.from_file_path(os.path.join(self.directory, SPEC_FILES[0]), config=cfg),
                        "execd": OpenAPI.from_file_path(os.path.join(self.directory, SPEC_FILES[1]), config=cfg),
                    }
        return self._apps

    # -- mapping traffic to a spec -----------------------------------------------------------------
    @staticmethod
    def route(server_kind: str, path: str) -> tuple[str, str] | None:
        """(api, spec-relative path) or None when the traffic is not covered by either spec (the workbench's own
        /__mock__/ API is the mock's, not OpenSandbox's: a stream of it that ends after its test, the dashboard's
        /__mock__/events, was checked under the next test)."""
        if path.startswith("/__mock__"):
            return None
        if server_kind == "uvicorn":
            m = SERVER_PROXY.match(path)
            if m:
                if m.group(1) != EXECD_PORT:
                    return None
                return "execd", m.group(2) or "/"
            if path.startswith("/v1/") or path == "/v1":
                return "lifecycle", path
            if path.startswith("/sandboxes") or path.startswith("/snapshots"):
                return "lifecycle", "/v1" + path  # routes are also served without /v1 (QUIRKS.md, Wire format)
            return "lifecycle", path
        if path.startswith("/proxy/"):
            rest = path[len("/proxy/") :]
            port, _, tail = rest.partition("/")
            if port != EXECD_PORT:
                return None
            return "execd", "/" + tail
        if EXECD_TOP.match(path):
            return "execd", path
        return None  # e.g. application traffic on a published port

    # -- validation --------------------------------------------------------------------------------
    def check(
        self,
        server_kind: str,
        method: str,
        path: str,
        query: dict[str, list[str]] | Iterable[tuple[str, str]],
        request_headers: dict[str, str],
        request_body: bytes | None,
        status: int,
        response_headers: dict[str, str],
        response_body: bytes,
    ) -> list[Violation]:
        routed = self.route(server_kind, path)
        if routed is None:
            return []
        api, spath = routed
        from openapi_core.testing import MockRequest
        from werkzeug.datastructures import MultiDict

        app = self.apps()[api]
        host = LIFECYCLE_HOST if api == "lifecycle" else EXECD_HOST
        if isinstance(query, dict):
            pairs = [(k, v) for k, vs in query.items() for v in vs]
        else:
            pairs = list(query)

        def hval(headers: dict[str, str], name: str) -> str:
            for k, v in headers.items():
                if k.lower() == name:
                    return v
            return ""

        req = MockRequest(
            host,
            method,
            spath,
            args=MultiDict(pairs),
            headers=dict(request_headers),
            data=request_body,
            content_type=hval(request_headers, "content-type"),
        )
        out: list[Violation] = []
        seen: set[str] = set()

        def add(side: str, err: BaseException | None, error: str = "", detail: str = "") -> None:
            v = Violation(side, api, method, spath, status, error or type(err).__name__, detail or _err_detail(err))  # type: ignore[arg-type]
            if v.what not in seen:
                seen.add(v.what)
                out.append(v)

        if status < 400:
            try:
                errors = list(app.iter_request_errors(req))
                if any(type(e).__name__ == "SecurityValidationError" for e in errors):
                    # openapi-core stops at a failed security check; validate the rest of the request
                    # with a stand-in credential so parameters and bodies are still checked
                    hdrs = dict(request_headers)
                    hdrs[CREDENTIAL_HEADER[api]] = "spec-guard-stand-in"
                    req2 = MockRequest(
                        host,
                        method,
                        spath,
                        args=MultiDict(pairs),
                        headers=hdrs,
                        data=request_body,
                        content_type=hval(request_headers, "content-type"),
                    )
                    errors = [e for e in errors if type(e).__name__ == "SecurityValidationError"]
                    errors += list(app.iter_request_errors(req2))
                body_sent = not request_body and (
                    hval(request_headers, "content-length") not in ("", "0")
                    or hval(request_headers, "transfer-encoding") != ""
                )
                for err in errors:
                    if body_sent and type(err).__name__ == "MissingRequiredRequestBody":
                        continue  # the body went by without being captured (streamed through a proxy)
                    add("request", err)
            except Exception as exc:  # a validator crash is reported, never raised into the mock
                add("request", exc, "ValidatorCrash")
        ctype = hval(response_headers, "content-type")
        if ctype.split(";")[0].strip().lower() == "text/event-stream":
            frames, bare, problem = _sse_frames(response_body)
            if problem:
                add("response", None, "SSEFraming", problem)
                return out
            if bare:
                add("response", None, "SSEBareJSON", "frames are bare JSON objects without 'data:' field lines")
            for fr in frames:  # every frame against the event schema (headers are checked each time, deduped)
                self._validate_response(app, req, fr, status, response_headers, ctype, add)
        else:
            self._validate_response(app, req, response_body, status, response_headers, ctype, add)
        return out

    @staticmethod
    def _validate_response(
        app: Any, req: Any, data: bytes, status: int, headers: dict[str, str], ctype: str, add: Any
    ) -> None:
        from openapi_core.testing import MockResponse

        resp = MockResponse(data, status, headers=dict(headers), content_type=ctype)
        try:
            for err in app.iter_response_errors(req, resp):
                add("response", err)
        except Exception as exc:
            add("response", exc, "ValidatorCrash")

    # -- the observer ------------------------------------------------------------------------------
    def observe(self, ex: Any) -> None:
        """``mock_opensandbox.wire.http1.OBSERVERS`` entry. Never raises."""
        if not ex.status:
            key = f"{ex.server_kind} {ex.method} {normalize_path(ex.path)}"
            with self._lock:
                self.unobserved[key] = self.unobserved.get(key, 0) + 1
            return
        try:
            found = self.check(
                ex.server_kind,
                ex.method,
                ex.path,
                ex.query,
                ex.request_headers,
                ex.request_body,
                ex.status,
                ex.response_headers,
                ex.response_body,
            )
        except Exception as exc:  # pragma: no cover - the guard must never break the mock
            found = [Violation("guard", "?", ex.method, ex.path, ex.status, "GuardCrash", repr(exc)[:300])]
        with self._lock:
            self.checked += 1
            test = self.current_test
            for v in found:
                v.test = test
                entry = self.allowed(v)
                if entry is not None:
                    self.allowed_hits[entry.line] = self.allowed_hits.get(entry.line, 0) + 1
                elif self.exempt_reason:
                    self.exempt_hits[test] = self.exempt_hits.get(test, 0) + 1
                else:
                    self.violations.append(v)

    def allowed(self, v: Violation) -> SpecAllow | None:
        for a in self.allow:
            if a.matches(v.where, v.what):
                return a
        return None

    def unexplained(self, violations: Iterable[Violation]) -> list[Violation]:
        return [v for v in violations if self.allowed(v) is None]

    def summary(self, limit: int = 40) -> list[str]:
        with self._lock:
            vs = list(self.violations)
            checked = self.checked
            hits = dict(self.allowed_hits)
        lines = [
            f"spec guard: {checked} exchanges validated, {len(vs)} unexplained violation(s), "
            f"{sum(hits.values())} allowed ({len(hits)}/{len(self.allow)} allow-list entries used)"
        ]
        grouped: dict[str, list[Violation]] = {}
        for v in vs:
            grouped.setdefault(f"{v.where} :: {normalize_path(v.what)}", []).append(v)
        for key, items in list(grouped.items())[:limit]:
            tests = sorted({i.test for i in items if i.test})
            lines.append(f"  {key}  (x{len(items)}; e.g. {tests[0] if tests else '?'})")
        if len(grouped) > limit:
            lines.append(f"  ... {len(grouped) - limit} more")
        with self._lock:
            unobserved = dict(self.unobserved)
        if unobserved:
            lines.append(
                "spec guard: not validated (the mock wrote these responses without reporting their "
                "status to OBSERVERS): " + ", ".join(f"{k} x{n}" for k, n in sorted(unobserved.items()))
            )
        return lines
