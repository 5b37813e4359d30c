"""Runs a corpus case against two execd targets, normalises what each answered and lists the
differences field by field. Standard library only."""

from __future__ import annotations

import fnmatch
import json
import os
import re
import stat
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable
from urllib.parse import quote, urlencode

from differential.client import Response, build_request, raw_request
from differential.routes import ROUTES
from differential.targets import Target

__all__ = ["Case", "case_collector", "Ctx", "Accepted", "CaseResult", "run_case", "load_accepted", "compare"]

# Headers a client reads (the rest - Date's value, Connection - is transport detail).
CLIENT_HEADERS = (
    "Content-Type",
    "Content-Length",
    "Transfer-Encoding",
    "Content-Range",
    "Accept-Ranges",
    "Content-Disposition",
    "Cache-Control",
    "X-Accel-Buffering",
    "Last-Modified",
    "Execd-Commands-Tail-Cursor",
    "X-Content-Type-Options",
    "Allow",
    "Location",
    "Content-Encoding",
    "Etag",
    "Server",
    "Date",
)
_PRESENCE_ONLY = {"Date", "Last-Modified"}

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_HEX32 = re.compile(r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])")
_HEX12 = re.compile(r"(?<![0-9a-f])[0-9a-f]{12}(?![0-9a-f])")  # a sandbox's random hostname
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)")
_TIME_KEYS = {"timestamp", "started_at", "finished_at", "modified_at", "created_at"}
_DROP_KEYS = {"execution_time"}  # omitempty + wall time: present or not depends on the clock
_METRIC_KEYS = {"cpu_count", "cpu_used_pct", "mem_total_mib", "mem_used_mib"}


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


class Normalizer:
    """Per-target substitutions: root path, port, ids (numbered by first appearance), times."""

    def __init__(self, target: Target):
        self.root = target.root
        self.port = str(target.port)
        self.ids: dict[str, str] = {}

    def _id(self, kind: str, value: str) -> str:
        if value not in self.ids:
            self.ids[value] = f"<{kind}#{len(self.ids) + 1}>"
        return self.ids[value]

    def text(self, s: str) -> str:
        if self.root:
            s = s.replace(self.root, "<ROOT>")
        s = s.replace(f"127.0.0.1:{self.port}", "<HOST>").replace(f":{self.port}", ":<PORT>")
        s = _UUID.sub(lambda m: self._id("uuid", m.group(0)), s)
        s = _HEX32.sub(lambda m: self._id("hex32", m.group(0)), s)
        s = _HEX12.sub("<hex12>", s)
        s = _TIME.sub("<TIME>", s)
        return s

    def value(self, v: Any, key: str | None = None) -> Any:
        if isinstance(v, dict):
            return {k: self.value(x, k) for k, x in v.items() if k not in _DROP_KEYS}
        if isinstance(v, list):
            return [self.value(x) for x in v]
        if key in _TIME_KEYS and v not in (None, "", 0):
            return "<TIME>"
        if key in _METRIC_KEYS:
            return "<number>" if isinstance(v, (int, float)) and not isinstance(v, bool) else f"<{type(v).__name__}>"
        if isinstance(v, str):
            return self.text(v)
        return v


def _body_text(b: bytes) -> str:
    try:
        return b.decode("utf-8")
    except UnicodeDecodeError:
        return "<bytes>" + b.hex()


def _events(body: bytes) -> list[Any] | None:
    """SSE frames ("{json}\n\n" each); a JSON object after the last frame (an error answer written
    into a stream whose headers were already sent) comes back as {"<tail>": obj}."""
    frames = body.split(b"\n\n")
    tail = frames.pop() if frames else b""
    out: list[Any] = []
    for f in frames:
        try:
            out.append(json.loads(f))
        except ValueError:
            return None
    if tail:
        try:
            out.append({"type": "<tail>", "body": json.loads(tail)})
        except ValueError:
            return None
    return out


def observe_http(resp: Response, norm: Normalizer, method: str) -> dict[str, Any]:
    o: dict[str, Any] = {"status": resp.status, "framing": resp.framing}
    if resp.error:
        o["error"] = resp.error
    heads: dict[str, Any] = {}
    ct = (resp.header("Content-Type") or "").lower()
    parsed: Any = None
    kind = "empty"
    body = resp.body
    if body:
        if "text/event-stream" in ct and resp.chunks is not None:
            evs = _events(body)
            if evs is not None and all(isinstance(e, dict) for e in evs):
                kind, parsed = "sse", evs
        if kind == "empty":
            try:
                parsed = json.loads(body)
                kind = "json"
            except ValueError:
                kind = "bytes"
        if kind == "bytes" and body.endswith(b"\n") and "text/event-stream" in ct:
            try:  # /metrics/watch: one JSON object per line
                parsed = [json.loads(x) for x in body.splitlines() if x.strip()]
                kind = "json"
            except ValueError:
                pass
    for name in CLIENT_HEADERS:
        v = resp.header(name)
        if v is None:
            continue
        if name in _PRESENCE_ONLY:
            v = "<present>"
        elif name == "Content-Length" and kind in ("json", "sse") and norm.value(parsed) != parsed:
            v = "<n>"  # ids/times of different lengths
        else:
            v = norm.text(v)
        heads[name] = v
    o["headers"] = heads
    if kind == "sse":
        o.update(_sse_fields(parsed, norm))
        o["frames_per_chunk"] = (
            "one" if all(c.endswith(b"\n\n") and c.count(b"\n\n") == 1 for c in resp.chunks or []) else "mixed"
        )
    elif kind == "json":
        o["body"] = norm.value(parsed)
    elif kind == "bytes":
        o["body_text"] = norm.text(_body_text(body))
    return o


def _sse_fields(events: list[dict[str, Any]], norm: Normalizer) -> dict[str, Any]:
    seq, other, out, err = [], [], [], []
    for ev in events:
        t = ev.get("type")
        if t == "ping":
            continue  # heartbeats from a goroutine (the first races the output, then every 3 s)
        if t == "stdout":
            out.append(ev.get("text"))
            seq.append("output")
            if seq[-2:] == ["output", "output"]:
                seq.pop()
            continue
        if t == "stderr":
            err.append(ev.get("text"))
            seq.append("output")
            if seq[-2:] == ["output", "output"]:
                seq.pop()
            continue
        seq.append(t)
        other.append(norm.value(ev))
    return {
        "event_sequence": seq,
        "events": other,
        "stdout": [norm.text(x) if isinstance(x, str) else x for x in out],
        "stderr": [norm.text(x) if isinstance(x, str) else x for x in err],
    }


def snapshot(host_dir: str, norm: Normalizer) -> dict[str, Any]:
    """Names, types, modes, owners, bytes and link targets under host_dir (mtimes left out)."""
    out: dict[str, Any] = {}
    if not os.path.lexists(host_dir):
        return {"<missing>": True}
    for dirpath, dirnames, filenames in os.walk(host_dir):
        dirnames.sort()
        for name in sorted(dirnames + filenames) + ([""] if dirpath == host_dir else []):
            p = os.path.join(dirpath, name) if name else dirpath
            rel = os.path.relpath(p, host_dir)
            st = os.lstat(p)
            ent: dict[str, Any] = {"mode": oct(stat.S_IMODE(st.st_mode)), "uid": st.st_uid, "gid": st.st_gid}
            if stat.S_ISLNK(st.st_mode):
                ent["type"], ent["target"] = "symlink", os.readlink(p)
            elif stat.S_ISDIR(st.st_mode):
                ent["type"] = "dir"
            elif stat.S_ISREG(st.st_mode):
                ent["type"] = "file"
                with open(p, "rb") as fh:
                    data = fh.read(1 << 16)
                ent["size"] = st.st_size
                ent["bytes"] = norm.text(_body_text(data))
            else:
                ent["type"] = "other"
            out[rel] = ent
    return out


_ROUTE_RX: list[tuple[str, str, "re.Pattern[str]"]] = []


def route_of(method: str, path: str) -> str:
    """The router.go route a request exercises: "GET /files/info"; the same path with another
    method counts for the route(s) of that path; no route at all -> "* unknown path"."""
    if not _ROUTE_RX:
        for r in ROUTES:
            m, p = r.split(" ", 1)
            _ROUTE_RX.append((m, r, re.compile("^" + re.sub(r":\w+", "[^/]+", p) + "$")))
    path = path.split("?", 1)[0]
    if path.startswith("/proxy/"):
        return "* /proxy/:port"
    hits = [(m, r) for m, r, rx in _ROUTE_RX if rx.match(path)]
    for m, r in hits:
        if m == method:
            return r
    return hits[0][1] if hits else "* unknown path"


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
                    obs["body_text"] = self.norm.text(_body_text(rest[:n]))
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
                            return self.norm.text(_body_text(data))
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
