"""Runs a corpus case against two execd targets, normalises what each answered and lists the
differences field by field. Standard library only."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable
from urllib.parse import quote, urlencode

from differential.client import Response, build_request, raw_request
from differential.observe import Normalizer, body_text, observe_http, route_of, snapshot
from differential.targets import Target

__all__ = ["Case", "case_collector", "Ctx", "Accepted", "CaseResult", "run_case", "load_accepted", "compare"]


@dataclass
class Case:
    name: str
    routes: tuple[str, ...]
    fn: Callable[["Ctx"], None]
    token: bool = False  # run against the access-token targets
    slow: bool = False


def case_collector(cases: list[Case]) -> Callable[..., Callable[[Callable[["Ctx"], None]], Callable[["Ctx"], None]]]:
    """A ``@case(name, *routes, token=False, slow=False)`` decorator that appends each case to ``cases``
    in the order the module defines them (the corpus modules' registries)."""

    def case(
        name: str, *routes: str, token: bool = False, slow: bool = False
    ) -> Callable[[Callable[["Ctx"], None]], Callable[["Ctx"], None]]:
        def deco(fn: Callable[["Ctx"], None]) -> Callable[["Ctx"], None]:
            cases.append(Case(name, routes, fn, token=token, slow=slow))
            return fn

        return deco

    return case


@dataclass
class Accepted:
    case: str
    field: str
    reason: str

    def matches(self, case: str, fld: str) -> bool:
        return fnmatch.fnmatchcase(case, self.case) and fnmatch.fnmatchcase(fld, self.field)


def load_accepted(quirks_md: str) -> list[Accepted]:
    """Rows of QUIRKS.md's "Accepted differences" table: | `diff:<case glob>` | `<field glob>` | reason |"""
    out: list[Accepted] = []
    try:
        text = open(quirks_md, encoding="utf-8").read()
    except OSError:
        return out
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`diff:"):
            out.append(Accepted(cells[0].strip("`")[5:], cells[1].strip("`"), "|".join(cells[2:]).strip()))
    return out


class Ctx:
    """What a case function talks to: one target, a per-case sandbox directory, the recorded
    observations."""

    def __init__(self, target: Target, case: Case, tag: str = ""):
        self.target = target
        self.case = case
        self.norm = Normalizer(target)
        self.obs: list[tuple[str, dict[str, Any]]] = []
        self._labels: dict[str, int] = {}
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", case.name + tag)
        self.dir = f"/diff/{safe}"  # every generated path lives under here
        os.makedirs(target.host(self.dir), exist_ok=True)
        self.token = target.access_token
        self.vars: dict[str, Any] = {}
        self.routes: dict[str, str] = {}  # observation label -> the router.go route it exercised

    @property
    def hostport(self) -> str:
        return f"127.0.0.1:{self.target.port}"

    def _label(self, label: str) -> str:
        n = self._labels.get(label, 0) + 1
        self._labels[label] = n
        return label if n == 1 else f"{label}#{n}"

    def record(self, label: str, value: Any, route: str | None = None) -> None:
        lab = self._label(label)
        self.obs.append((lab, value))
        self.routes[lab] = route or (self.case.routes[0] if self.case.routes else "")

    # -- requests ------------------------------------------------------------------------------
    def req(
        self,
        method: str,
        path: str,
        *,
        query: Iterable[tuple[str, str]] | dict | None = None,
        headers: list[tuple[str, str]] | None = None,
        body: bytes | str | None = None,
        json_body: Any = None,
        label: str | None = None,
        record: bool = True,
        stop: Callable[[list[bytes]], bool] | None = None,
        timeout: float = 20.0,
        token: bool = True,
        raw: bytes | None = None,
        half_close: bool = False,
    ) -> Response:
        target = path
        if query:
            items = list(query.items()) if isinstance(query, dict) else list(query)
            target += "?" + urlencode(items, quote_via=quote)
        hdrs = list(headers or [])
        if json_body is not None:
            body = json.dumps(json_body)
            if not any(k.lower() == "content-type" for k, _ in hdrs):
                hdrs.append(("Content-Type", "application/json"))
        if isinstance(body, str):
            body = body.encode("utf-8", "surrogateescape")
        if token and self.token and not any(k.lower() == "x-execd-access-token" for k, _ in hdrs):
            hdrs.append(("X-EXECD-ACCESS-TOKEN", self.token))
        data = raw if raw is not None else build_request(method, target, self.hostport, hdrs, body)
        resp = raw_request(self.target.port, data, method=method, timeout=timeout, stop=stop, half_close=half_close)
        if record:
            route = "* accessToken" if self.case.token else route_of(method, path)
            self.record(label or f"{method} {path}", observe_http(resp, self.norm, method), route)
        return resp

    def get(self, path: str, **kw: Any) -> Response:
        return self.req("GET", path, **kw)

    def post(self, path: str, json_body: Any = None, **kw: Any) -> Response:
        return self.req("POST", path, json_body=json_body, **kw)

    def delete(self, path: str, **kw: Any) -> Response:
        return self.req("DELETE", path, **kw)

    def ws(
        self,
        path: str,
        *,
        label: str,
        headers: list[tuple[str, str]] | None = None,
        send: list[dict[str, Any]] | None = None,
        key: str = "dGhlIHNhbXBsZSBub25jZQ==",
        timeout: float = 10.0,
    ) -> dict[str, Any]:
        """A WebSocket handshake on path; after a 101 the text frames up to "connected", then each
        frame of ``send`` (a JSON text frame) and the next text frame it draws. Binary frames (shell
        output, replay: timing dependent) are not compared. Returns and records the observation."""
        import base64
        import os as _os
        import socket
        import struct

        hdrs = [("Upgrade", "websocket"), ("Connection", "Upgrade"), ("Sec-WebSocket-Version", "13")]
        if key:
            hdrs.append(("Sec-WebSocket-Key", key))
        names = {k.lower() for k, _ in headers or []}
        hdrs = [h for h in hdrs if h[0].lower() not in names] + list(headers or [])
        if self.token:
            hdrs.append(("X-EXECD-ACCESS-TOKEN", self.token))
        sock = socket.create_connection(("127.0.0.1", self.target.port), timeout=timeout)
        obs: dict[str, Any] = {}
        try:
            sock.sendall(build_request("GET", path, self.hostport, hdrs, None))
            buf = b""
            while b"\r\n\r\n" not in buf:
                chunk = sock.recv(4096)
                if not chunk:
                    break
                buf += chunk
            head, _, rest = buf.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            status = int(lines[0].split(" ")[1]) if lines and lines[0].startswith("HTTP/") else 0
            hv = {}
            for ln in lines[1:]:
                k, _, v = ln.partition(":")
                hv[k.strip().lower()] = v.strip()
            obs["status"] = status
            obs["headers"] = {
                k: self.norm.text(hv[k.lower()])
                for k in ("Upgrade", "Connection", "Sec-WebSocket-Accept", "Content-Type", "Sec-WebSocket-Version")
                if k.lower() in hv
            }
            if status != 101:
                n = int(hv.get("content-length", "0") or 0)
                while len(rest) < n:
                    chunk = sock.recv(4096)
                    if not chunk:
                        break
                    rest += chunk
                try:
                    obs["body"] = self.norm.value(json.loads(rest[:n]))
                except ValueError:
                    obs["body_text"] = self.norm.text(body_text(rest[:n]))
                return obs
            state = {"buf": rest}

            def frame() -> tuple[int, bytes] | None:
                def need(n: int) -> bytes:
                    while len(state["buf"]) < n:
                        chunk = sock.recv(65536)
                        if not chunk:
                            raise EOFError
                        state["buf"] += chunk
                    out, state["buf"] = state["buf"][:n], state["buf"][n:]
                    return out

                try:
                    b0, b1 = need(2)
                    ln = b1 & 0x7F
                    if ln == 126:
                        ln = struct.unpack(">H", need(2))[0]
                    elif ln == 127:
                        ln = struct.unpack(">Q", need(8))[0]
                    return b0 & 0x0F, need(ln)
                except (EOFError, OSError):
                    return None

            def text_frame() -> Any:
                while True:
                    f = frame()
                    if f is None:
                        return "<closed>"
                    op, data = f
                    if op == 1:
                        try:
                            v = json.loads(data)
                        except ValueError:
                            return self.norm.text(body_text(data))
                        if isinstance(v, dict):
                            v = {k: x for k, x in v.items() if k not in ("timestamp", "offset")}
                        return self.norm.value(v)
                    if op == 8:
                        return {"close": struct.unpack(">H", data[:2])[0] if len(data) >= 2 else None}

            frames = []
            while True:
                v = text_frame()
                frames.append(v)
                if not isinstance(v, dict) or v.get("type") in ("connected", "error") or "close" in v:
                    break
            obs["frames"] = frames
            replies = []
            for msg in send or []:
                payload = json.dumps(msg).encode()
                mask = _os.urandom(4)
                hdr = bytes([0x81]) + (
                    bytes([0x80 | len(payload)])
                    if len(payload) < 126
                    else bytes([0x80 | 126]) + struct.pack(">H", len(payload))
                )
                sock.sendall(hdr + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(payload)))
                replies.append(text_frame())
            if send:
                obs["replies"] = replies
            try:
                mask = _os.urandom(4)
                sock.sendall(bytes([0x88, 0x82]) + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(b"\x03\xe8")))
            except OSError:
                pass
            _ = base64
            return obs
        finally:
            sock.close()
            self.record(label, obs, "* accessToken" if self.case.token else route_of("GET", path))

    # -- sandbox setup (host side, identical for both targets) ----------------------------------
    def p(self, rel: str = "") -> str:
        return self.dir + ("/" + rel if rel else "")

    def write(self, rel: str, data: bytes | str, mode: int = 0o644) -> str:
        hp = self.target.host(self.p(rel))
        os.makedirs(os.path.dirname(hp), exist_ok=True)
        with open(hp, "wb") as fh:
            fh.write(data.encode() if isinstance(data, str) else data)
        os.chmod(hp, mode)
        return self.p(rel)

    def mkdir(self, rel: str, mode: int = 0o755) -> str:
        hp = self.target.host(self.p(rel))
        os.makedirs(hp, exist_ok=True)
        os.chmod(hp, mode)
        return self.p(rel)

    def symlink(self, rel: str, target: str) -> str:
        hp = self.target.host(self.p(rel))
        os.makedirs(os.path.dirname(hp), exist_ok=True)
        os.symlink(target, hp)
        return self.p(rel)

    def snapshot(self, rel: str = "", label: str = "fs") -> None:
        self.record(label, snapshot(self.target.host(self.p(rel)), self.norm))

    def note(self, label: str, value: Any) -> None:
        self.record(label, self.norm.value(value))


# ---------------------------------------------------------------------------------------------


def compare(a: Any, b: Any, path: str = "") -> list[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in list(a) + [k for k in b if k not in a]:
            sub = f"{path}.{k}" if path else str(k)
            if k not in a:
                out.append((sub, "<absent>", b[k]))
            elif k not in b:
                out.append((sub, a[k], "<absent>"))
            else:
                out += compare(a[k], b[k], sub)
        return out
    if a != b or type(a) is not type(b):
        return [(path, a, b)]
    return []


@dataclass
class Difference:
    field: str
    real: Any
    mock: Any
    accepted: Accepted | None = None


@dataclass
class CaseResult:
    case: Case
    observations: list[str] = field(default_factory=list)
    obs_status: dict[str, str] = field(default_factory=dict)  # label -> agree | accepted | differ
    differences: list[Difference] = field(default_factory=list)
    error: str | None = None
    obs_routes: dict[str, str] = field(default_factory=dict)
    real_obs: list[tuple[str, Any]] = field(default_factory=list)
    mock_obs: list[tuple[str, Any]] = field(default_factory=list)
    elapsed: float = 0.0

    @property
    def unexplained(self) -> list[Difference]:
        return [d for d in self.differences if d.accepted is None]


def _run_side(case: Case, target: Target, out: dict[str, Any], tag: str) -> None:
    try:
        ctx = Ctx(target, case, tag)
        out["ctx"] = ctx
        case.fn(ctx)
    except Exception:  # noqa: BLE001 - reported as a case error
        out["error"] = traceback.format_exc(limit=6)


def run_case(case: Case, real: Target, mock: Target, accepted: list[Accepted], tag: str = "") -> CaseResult:
    sides: dict[str, dict[str, Any]] = {"real": {}, "mock": {}}
    threads = [
        threading.Thread(target=_run_side, args=(case, t, sides[n], tag), daemon=True)
        for n, t in (("real", real), ("mock", mock))
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    res = CaseResult(case)
    errs = [f"{n}: {s['error']}" for n, s in sides.items() if "error" in s]
    if errs:
        res.error = "\n".join(errs)
    ro = sides["real"].get("ctx").obs if sides["real"].get("ctx") else []
    mo = sides["mock"].get("ctx").obs if sides["mock"].get("ctx") else []
    res.real_obs, res.mock_obs = ro, mo
    for side in ("mock", "real"):
        if sides[side].get("ctx"):
            res.obs_routes.update(sides[side]["ctx"].routes)
    n = max(len(ro), len(mo))
    for i in range(n):
        rl, rv = ro[i] if i < len(ro) else (f"#{i}", "<no observation>")
        ml, mv = mo[i] if i < len(mo) else (f"#{i}", "<no observation>")
        label = rl if i < len(ro) else ml
        res.observations.append(label)
        diffs = compare(rv, mv, label) if rl == ml else [(label, rl, ml)]
        status = "agree"
        for fld, a, b in diffs:
            acc = next((x for x in accepted if x.matches(case.name + tag, fld)), None)
            res.differences.append(Difference(fld, a, b, acc))
            status = "differ" if acc is None else ("accepted" if status != "differ" else status)
        res.obs_status[label] = status
    return res
