"""Replay a fixture against a server (the mock, or a live one) and score how closely it answers.

The recorded requests are sent in order. Placeholders in a request are filled from the bindings made
so far (ids and ports the server returned, matched against the recorded templates); a sandbox id or
execd port the scenario uses without creating/resolving it (recordings 06-14 used the sandbox from
05) is provided by an unrecorded setup step: create a sandbox with the recorded default body and
resolve its execd endpoint. Each answer is compared with ``record.compare``.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from datetime import datetime, timedelta, timezone
from typing import Any
from urllib.parse import urlsplit

import httpx

from record.compare import PH_RE, Bindings, Check, Comparer, sample_value, score
from record.scrub import header, is_lifecycle_path

# The body the live recording 05 created its sandbox with (the sandbox 06-14 then used).
SETUP_CREATE = {
    "image": {"uri": "local/python:3-slim"},
    "entrypoint": ["tail", "-f", "/dev/null"],
    "timeout": 1800,
    "resourceLimits": {"cpu": "500m", "memory": "512Mi"},
    "metadata": {"purpose": "live-recording"},
}
DROP_REQUEST_HEADERS = {"host", "content-length", "transfer-encoding", "connection", "accept-encoding"}
MAX_WAIT = 5.0


@dataclasses.dataclass
class ScenarioResult:
    scenario: str
    checks: list[Check]
    exchanges: int
    skipped: str = ""

    @property
    def passed(self) -> int:
        return score(self.checks)[0]

    @property
    def total(self) -> int:
        return score(self.checks)[1]

    @property
    def percent(self) -> float:
        return 100.0 * self.passed / self.total if self.total else 100.0

    def differences(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]

    def exchanges_matched(self) -> int:
        bad = {c.index for c in self.checks if not c.ok}
        return self.exchanges - len(bad)


class ReplayError(RuntimeError):
    pass


def _port_owners(fx: dict[str, Any]) -> dict[str, str]:
    """execd port placeholder -> the sandbox placeholder whose endpoint returned it."""
    owners: dict[str, str] = {}
    for ex in fx["exchanges"]:
        m = re.search(r"\{\{sandbox_id:\d+\}\}", ex["request"]["path"])
        body = ex["response"].get("body") or ""
        if m and "/endpoints/" in ex["request"]["path"]:
            for pm in re.finditer(r"\{\{execd_port(?::\d+)?\}\}", body):
                owners.setdefault(pm.group(0), m.group(0))
    return owners


def _setup_body(fx: dict[str, Any]) -> dict[str, Any]:
    body = json.loads(json.dumps(SETUP_CREATE))
    for ex in fx["exchanges"]:  # use the image this scenario's own creates used, if any
        r = ex["request"]
        if r["method"] == "POST" and r["path"] == "/v1/sandboxes" and r.get("body"):
            try:
                uri = json.loads(r["body"])["image"]["uri"]
            except (ValueError, KeyError, TypeError):
                continue
            if isinstance(uri, str):
                body["image"]["uri"] = uri
                break
    return body


class Replayer:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        execd_token: str | None = None,
        client: httpx.Client | None = None,
        max_wait: float = MAX_WAIT,
        timeout: float = 30.0,
    ):
        base = base_url.rstrip("/")
        if base.endswith("/v1"):
            base = base[:-3]
        self.base = base
        parts = urlsplit(base)
        self.scheme = parts.scheme
        self.lifecycle_port = str(parts.port or (443 if parts.scheme == "https" else 80))
        self.lifecycle_host = parts.hostname or "127.0.0.1"
        self.api_key = api_key
        self.execd_token = execd_token
        self.max_wait = max_wait
        self._own_client = client is None
        # one connection per request, like the recording client (see record.client.Session)
        self.client = client or httpx.Client(
            timeout=timeout, headers={"Accept-Encoding": "identity"}, limits=httpx.Limits(max_keepalive_connections=0)
        )

    def close(self) -> None:
        if self._own_client:
            self.client.close()

    # -- setup -------------------------------------------------------------------------------------
    def _lc(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return self.client.request(method, self.base + path, headers={"OPEN-SANDBOX-API-KEY": self.api_key}, **kw)

    def _setup_sandbox(self, ph: str, st: "_State") -> str:
        r = self._lc("POST", "/v1/sandboxes", json=st.setup_body)
        if r.status_code not in (200, 201, 202):
            raise ReplayError(f"setup: creating a sandbox failed with HTTP {r.status_code}")
        sid = r.json()["id"]
        st.bindings[ph] = sid
        st.created.append(sid)
        return sid

    def _setup_execd_port(self, ph: str, st: "_State") -> str:
        owner = st.port_owners.get(ph, "{{sandbox_id:1}}")
        sid = st.bindings.get(owner) or self._setup_sandbox(owner, st)
        r = self._lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772")
        if r.status_code != 200:
            raise ReplayError(f"setup: resolving the execd endpoint failed with HTTP {r.status_code}")
        ep = r.json()["endpoint"]
        hostport = ep.split("://", 1)[-1].split("/", 1)[0]
        host, _, port = hostport.rpartition(":")
        st.execd_host = host or st.execd_host
        st.bindings[ph] = port
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # wait until execd answers, like the recorder's setup
            try:
                if self.client.get(f"{self.scheme}://{hostport}/ping").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        return port

    # -- request materialisation -------------------------------------------------------------------
    def _fill(self, text: str | None, st: "_State", problems: list[str]) -> str | None:
        if text is None:
            return None
        text = text.replace("<api-key>", self.api_key)
        if self.execd_token is not None:
            text = text.replace("<execd-token>", self.execd_token)

        def repl(m: re.Match[str]) -> str:
            ph, kind, arg = m.group(0), m.group(1), m.group(2)
            if ph in st.bindings:
                return st.bindings[ph]
            if kind == "sandbox_id":
                return self._setup_sandbox(ph, st)
            if kind == "execd_port":
                return self._setup_execd_port(ph, st)
            if kind == "datetime":
                t = datetime.now(timezone.utc) + timedelta(seconds=int(arg or 0))
                return t.strftime("%Y-%m-%dT%H:%M:%SZ")
            if kind in ("command_id", "port"):
                problems.append(f"request uses {ph} before the server returned it")
            return sample_value(ph, kind, arg, datetime.now(timezone.utc))

        return PH_RE.sub(repl, text)

    # -- the replay --------------------------------------------------------------------------------
    def replay(self, fx: dict[str, Any]) -> ScenarioResult:
        st = _State(
            Bindings({"{{lifecycle_port}}": self.lifecycle_port}),
            _port_owners(fx),
            _setup_body(fx),
            self.lifecycle_host,
        )
        comparer = Comparer(st.bindings)
        checks: list[Check] = []
        try:
            for i, ex in enumerate(fx["exchanges"]):
                wait = float(ex.get("wait_before_s") or 0)
                if wait:
                    time.sleep(min(wait, self.max_wait))
                checks.extend(self._one(i, ex, st, comparer))
        finally:
            for sid in set(st.created) | {v for k, v in st.bindings.items() if k.startswith("{{sandbox_id")}:
                try:
                    self._lc("DELETE", f"/v1/sandboxes/{sid}")
                except httpx.HTTPError:
                    pass
        return ScenarioResult(fx["scenario"], checks, len(fx["exchanges"]))

    def _one(self, i: int, ex: dict[str, Any], st: "_State", comparer: Comparer) -> list[Check]:
        req = ex["request"]
        problems: list[str] = []
        path = self._fill(req["path"], st, problems) or "/"
        headers = {
            k: self._fill(v, st, problems) or ""
            for k, v in (req.get("headers") or {}).items()
            if k.lower() not in DROP_REQUEST_HEADERS
        }
        if req.get("body_b64") is not None:
            import base64

            content: bytes | None = base64.b64decode(req["body_b64"])
        else:
            body = self._fill(req.get("body"), st, problems)
            content = body.encode("utf-8") if body is not None else None
        host_header = self._fill(header(req.get("headers") or {}, "Host") or "", st, problems) or ""
        if is_lifecycle_path(path):
            url = self.base + path
        else:
            port = host_header.rpartition(":")[2] if ":" in host_header else ""
            if not port.isdigit():
                port = (
                    self._setup_execd_port("{{execd_port}}", st)
                    if "{{execd_port}}" not in st.bindings
                    else st.bindings["{{execd_port}}"]
                )
            url = f"{self.scheme}://{st.execd_host}:{port}{path}"
        if problems:
            return [Check(i, "request", False, "; ".join(problems))]
        try:
            with self.client.stream(req["method"], url, headers=headers, content=content) as resp:
                data = resp.read()
                status, rheaders = resp.status_code, list(resp.headers.multi_items())
        except httpx.HTTPError as exc:
            return [Check(i, "request", False, f"{req['method']} {path}: {type(exc).__name__}: {exc}")]
        return comparer.compare(i, ex["response"], status, rheaders, data)


@dataclasses.dataclass
class _State:
    bindings: Bindings
    port_owners: dict[str, str]
    setup_body: dict[str, Any]
    execd_host: str
    created: list[str] = dataclasses.field(default_factory=list)


def replay_fixture(fx: dict[str, Any], base_url: str, api_key: str, **kw: Any) -> ScenarioResult:
    r = Replayer(base_url, api_key, **kw)
    try:
        return r.replay(fx)
    finally:
        r.close()


def format_table(results: list[ScenarioResult]) -> list[str]:
    """Per-scenario score lines plus the total (what the test session prints)."""
    lines = []
    tp = tt = 0
    for r in results:
        if r.skipped:
            lines.append(f"  {r.scenario:<42} skipped: {r.skipped}")
            continue
        tp += r.passed
        tt += r.total
        lines.append(
            f"  {r.scenario:<42} {r.percent:6.1f}%  ({r.passed}/{r.total} checks, "
            f"{r.exchanges_matched()}/{r.exchanges} exchanges exact)"
        )
    pct = 100.0 * tp / tt if tt else 100.0
    lines.append(f"  {'TOTAL':<42} {pct:6.1f}%  ({tp}/{tt} checks)")
    return lines
