"""Turn raw recorded exchanges into fixture exchanges with placeholders.

The same scrubber serves ``python -m record convert`` (the one-time conversion of the live
recordings) and the recorder (new recordings), so both produce the same fixture format.

Placeholder scheme (see fixtures/README.md):

* secrets (mock_opensandbox/workbench/scrub.py, the scrubber the journal and the fault proxy use too): the
  value of a credential header (``OPEN-SANDBOX-API-KEY``, ``X-EXECD-ACCESS-TOKEN``, ``Authorization``,
  ``Cookie``, ...) and every occurrence of a known secret -> ``<api-key>`` /
  ``<execd-token>`` / ``<redacted>``. Values listed in ``PUBLIC_WRONG_CREDENTIALS`` (keys sent on
  purpose to provoke a 401) are kept, so a replay can send them again.
* sandbox ids (UUIDs other than the all-zero UUID) -> ``{{sandbox_id:N}}``
* command ids (32-hex ids learnt from SSE ``init`` events and command routes) -> ``{{command_id:N}}``
* host ports: the lifecycle server's -> ``{{lifecycle_port}}``; execd's -> ``{{execd_port}}``,
  ``{{execd_port:2}}``...; any other published port -> ``{{port:N}}``. Container-side ports
  (44772, 8080 in ``/endpoints/8080``...) are not host ports and stay literal.
* ``x-request-id`` header values -> ``{{request_id}}``
* HTTP dates (``Date``, ``Last-Modified``, ``Expires`` headers) -> ``{{http_date}}``
* RFC 3339 date-times: in responses ``{{datetime}}``; in requests ``{{datetime:+S}}`` / ``{{datetime:-S}}``
  (seconds relative to the server's ``Date`` of that exchange, so a replay can send a time that is
  as far in the future or the past as the recorded one)
* SSE ``"timestamp":<epoch ms>`` -> ``"timestamp":{{epoch_ms}}``

Numbering is by first appearance (request before response, exchange by exchange), so the same
input always gives byte-identical output. Nothing else is changed: bodies stay raw text with their
exact framing.
"""

from __future__ import annotations

import copy
import email.utils
import re
from datetime import datetime, timezone
from typing import Any, Iterable

from mock_opensandbox.workbench.scrub import MIN_SECRET, SECRET_HEADERS, strip_secrets

__all__ = [
    "Scrubber",
    "scrub_exchanges",
    "find_secret_leaks",
    "SECRET_HEADERS",
    "PUBLIC_WRONG_CREDENTIALS",
    "header",
    "is_lifecycle_path",
    "utc_now_iso",
]

# Deliberately wrong credentials sent by scenario 02 (not secrets; a replay must send them again).
PUBLIC_WRONG_CREDENTIALS = frozenset({"wrong-key"})
DATE_HEADERS = {"date", "last-modified", "expires"}
REQUEST_ID_HEADERS = {"x-request-id"}
NIL_UUID = "00000000-0000-0000-0000-000000000000"
EXECD_CONTAINER_PORT = "44772"

UUID_RE = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")
HEX32 = r"[0-9a-f]{32}"
INIT_RE = re.compile(r'"type"\s*:\s*"init"\s*,\s*"text"\s*:\s*"(' + HEX32 + r')"')
CMD_PATH_RES = (
    re.compile(r"/command/status/(" + HEX32 + r")\b"),
    re.compile(r"/command/(" + HEX32 + r")/logs\b"),
    re.compile(r"[?&]id=(" + HEX32 + r")\b"),
)
CMD_STATUS_ID_RE = re.compile(r'^\{"id"\s*:\s*"(' + HEX32 + r')"')
ISO_RE = re.compile(r"\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})")
EPOCH_MS_RE = re.compile(r'("timestamp"\s*:\s*)(\d{12,14})\b')
ENDPOINT_RE = re.compile(r'"endpoint"\s*:\s*"([^"/:]+|\[[^\]]+\]):(\d{1,5})(/[^"]*)?"')
PLACEHOLDER_RE = re.compile(r"\{\{([a-z_]+)(?::([+-]?\d+))?\}\}")

LIFECYCLE_PATH_RE = re.compile(r"^/(v1/|health\b|version\b|sandboxes\b|snapshots\b)")


def header(headers: dict[str, str], name: str) -> str | None:
    name = name.lower()
    for k, v in headers.items():
        if k.lower() == name:
            return v
    return None


def is_lifecycle_path(path: str) -> bool:
    """Lifecycle routes (``/v1/...``, ``/health``, ``/version``); everything else is execd's."""
    return bool(LIFECYCLE_PATH_RE.match(path))


def _parse_iso(value: str) -> datetime | None:
    v = value.replace("Z", "+00:00")
    m = re.match(r"^(.*T\d{2}:\d{2}:\d{2})(\.\d+)?([+-]\d{2}:\d{2})$", v)
    if not m:
        return None
    frac = (m.group(2) or "")[:7]  # microseconds at most
    try:
        return datetime.fromisoformat(m.group(1) + frac + m.group(3))
    except ValueError:
        return None


class Scrubber:
    """Scrubs one scenario (a list of raw exchanges). Create a new one per scenario."""

    def __init__(self, secrets: Iterable[str] = (), hosts: Iterable[str] = ()):
        self.secrets = {s for s in secrets if s}
        self.hosts = set(hosts) | {"127.0.0.1", "localhost"}
        self.sandbox_ids: dict[str, str] = {}
        self.command_ids: dict[str, str] = {}
        self.lifecycle_ports: set[str] = set()
        self.execd_ports: dict[str, str] = {}
        self.other_ports: dict[str, str] = {}

    # -- pass 1: learn ids and ports in order of first appearance -----------------------------------
    def _learn_sandbox_ids(self, text: str | None) -> None:
        for m in UUID_RE.finditer(text or ""):
            v = m.group(0)
            if v != NIL_UUID and v not in self.sandbox_ids:
                self.sandbox_ids[v] = "{{sandbox_id:%d}}" % (len(self.sandbox_ids) + 1)

    def _learn_command_id(self, cid: str) -> None:
        if cid not in self.command_ids:
            self.command_ids[cid] = "{{command_id:%d}}" % (len(self.command_ids) + 1)

    def _learn_port(self, port: str, kind: str) -> None:
        if port in self.lifecycle_ports or port in self.execd_ports or port in self.other_ports:
            return
        if kind == "lifecycle":
            self.lifecycle_ports.add(port)
        elif kind == "execd":
            n = len(self.execd_ports) + 1
            self.execd_ports[port] = "{{execd_port}}" if n == 1 else "{{execd_port:%d}}" % n
        else:
            self.other_ports[port] = "{{port:%d}}" % (len(self.other_ports) + 1)

    def _learn_host_header(self, req: dict[str, Any]) -> None:
        host = header(req.get("headers") or {}, "Host")
        if not host or ":" not in host:
            return
        h, _, port = host.rpartition(":")
        if not port.isdigit():
            return
        self.hosts.add(h)
        path = req.get("path") or "/"
        self._learn_port(port, "lifecycle" if is_lifecycle_path(path) else "execd")

    def _learn_endpoints(self, body: str | None) -> None:
        for m in ENDPOINT_RE.finditer(body or ""):
            host, port, rest = m.group(1), m.group(2), m.group(3) or ""
            self.hosts.add(host)
            if rest.startswith("/v1/") or rest.startswith("/sandboxes/"):
                self._learn_port(port, "lifecycle")
            elif rest.startswith("/proxy/"):
                self._learn_port(port, "execd")
            else:
                self._learn_port(port, "other")

    def learn(self, exchanges: list[dict[str, Any]]) -> None:
        for ex in exchanges:
            req, resp = ex["request"], ex["response"]
            self._learn_host_header(req)
            for text in (req.get("path"), *(req.get("headers") or {}).values(), req.get("body")):
                self._learn_sandbox_ids(text)
            for rx in CMD_PATH_RES:
                for m in rx.finditer(req.get("path") or ""):
                    self._learn_command_id(m.group(1))
            body = resp.get("body")
            self._learn_endpoints(body)
            for text in (*(resp.get("headers") or {}).values(), body):
                self._learn_sandbox_ids(text)
            for m in INIT_RE.finditer(body or ""):
                self._learn_command_id(m.group(1))
            m = CMD_STATUS_ID_RE.match(body or "")
            if m:
                self._learn_command_id(m.group(1))

    # -- pass 2: substitute ----------------------------------------------------------------------
    def _sub_ids(self, text: str) -> str:
        text = strip_secrets(text, self.secrets, "<api-key>")
        if self.sandbox_ids:
            text = UUID_RE.sub(lambda m: self.sandbox_ids.get(m.group(0), m.group(0)), text)
        if self.command_ids:
            text = re.sub(HEX32, lambda m: self.command_ids.get(m.group(0), m.group(0)), text)
        return text

    def _sub_ports(self, text: str) -> str:
        def repl(m: re.Match[str]) -> str:
            host, port = m.group(1), m.group(2)
            if port in self.lifecycle_ports:
                return f"{host}:{{{{lifecycle_port}}}}"
            if port in self.execd_ports:
                return f"{host}:{self.execd_ports[port]}"
            if port in self.other_ports:
                return f"{host}:{self.other_ports[port]}"
            return m.group(0)

        hosts = "|".join(re.escape(h) for h in sorted(self.hosts, key=len, reverse=True))
        return re.sub(r"(?<![\w.-])(" + hosts + r"):(\d{1,5})\b", repl, text)

    def _sub_text(self, text: str | None) -> str | None:
        if text is None:
            return None
        return self._sub_ports(self._sub_ids(text))

    @staticmethod
    def _reference_time(resp_headers: dict[str, str]) -> datetime | None:
        d = header(resp_headers, "Date")
        if not d:
            return None
        try:
            return email.utils.parsedate_to_datetime(d)
        except (TypeError, ValueError):
            return None

    def _sub_request_times(self, text: str, ref: datetime | None) -> str:
        def repl(m: re.Match[str]) -> str:
            t = _parse_iso(m.group(0))
            if t is None or ref is None:
                return "{{datetime:+0}}"
            off = int(round((t - ref).total_seconds()))
            return "{{datetime:%+d}}" % off

        return ISO_RE.sub(repl, text)

    def scrub_headers(self, headers: dict[str, str], *, response: bool) -> dict[str, str]:
        out: dict[str, str] = {}
        for k, v in headers.items():
            lk = k.lower()
            if lk in SECRET_HEADERS:
                v = v if v in PUBLIC_WRONG_CREDENTIALS or v == SECRET_HEADERS[lk] else SECRET_HEADERS[lk]
            elif lk in DATE_HEADERS:
                v = "{{http_date}}"
            elif lk in REQUEST_ID_HEADERS:
                v = "{{request_id}}"
            else:
                v = self._sub_text(v) or ""
                if response:
                    v = ISO_RE.sub("{{datetime}}", v)
            out[k] = v
        return out

    def scrub_exchange(self, ex: dict[str, Any]) -> dict[str, Any]:
        req, resp = ex["request"], ex["response"]
        ref = self._reference_time(resp.get("headers") or {})
        new_req: dict[str, Any] = {
            "method": req["method"],
            "path": self._sub_text(req["path"]),
            "headers": self.scrub_headers(req.get("headers") or {}, response=False),
            "body": None,
        }
        if req.get("body") is not None:
            new_req["body"] = self._sub_request_times(self._sub_text(req["body"]) or "", ref)
        elif req.get("body_b64") is not None:
            new_req.pop("body")
            new_req["body_b64"] = req["body_b64"]
        new_req["path"] = self._sub_request_times(new_req["path"], ref)
        new_resp: dict[str, Any] = {
            "status": resp["status"],
            "headers": self.scrub_headers(resp.get("headers") or {}, response=True),
        }
        if resp.get("body_b64") is not None:
            new_resp["body_b64"] = resp["body_b64"]
        else:
            body = self._sub_text(resp.get("body"))
            if body is not None:
                body = ISO_RE.sub("{{datetime}}", body)
                body = EPOCH_MS_RE.sub(lambda m: m.group(1) + "{{epoch_ms}}", body)
            new_resp["body"] = body
        out: dict[str, Any] = {}
        for k, v in ex.items():  # keep extra keys (wait_before_s, note) in their place
            if k == "request":
                out[k] = new_req
            elif k == "response":
                out[k] = new_resp
            else:
                out[k] = copy.deepcopy(v)
        return out

    def scrub(self, exchanges: list[dict[str, Any]]) -> list[dict[str, Any]]:
        self.learn(exchanges)
        return [self.scrub_exchange(ex) for ex in exchanges]


def scrub_exchanges(
    exchanges: list[dict[str, Any]], *, secrets: Iterable[str] = (), hosts: Iterable[str] = ()
) -> list[dict[str, Any]]:
    """Scrub one scenario's raw exchanges (see the module docstring for the placeholder scheme)."""
    return Scrubber(secrets, hosts).scrub(exchanges)


def find_secret_leaks(text: str, secrets: Iterable[str]) -> list[str]:
    """Secrets (len >= 4) that still occur in ``text``; used as a last check before writing."""
    return [s for s in secrets if s and len(s) >= MIN_SECRET and s in text]


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
