"""What the differential harness observes of an answer: a target's substitutions (root, port, ids,
times), an HTTP exchange or an SSE stream as comparable fields, a directory tree, and the router.go route a
request exercises. Standard library only."""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Any

from differential.client import Response
from differential.routes import ROUTES
from differential.targets import Target

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


def body_text(b: bytes) -> str:
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
        o["body_text"] = norm.text(body_text(body))
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
                ent["bytes"] = norm.text(body_text(data))
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
