"""The baseline: a minimal standard-library OpenSandbox client (http.client, nothing else).

It does exactly what the plugin has to do on the wire and no more: one keep-alive connection per
host, POST /command read until the terminal SSE event (then the connection is dropped, exactly as
the plugin does, so neither side waits out execd's ~1 s close), multipart upload, download. No
validation, no error mapping, no cache: the floor any client pays on this server.
"""

from __future__ import annotations

import http.client
import json
import os
import urllib.parse

EXECD_PORT = 44772
# The one image knob of every live path (./local-up.sh env): a server whose images are local has no python:3.12-slim.
IMAGE = os.environ.get("OPENSANDBOX_IMAGE") or "python:3.12-slim"


class HttpFailure(Exception):
    pass


def _split(url: str) -> tuple[str, int, str]:
    p = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
    return p.hostname or "127.0.0.1", p.port or 80, p.path.rstrip("/")


class Conn:
    """One keep-alive connection to one origin, reopened when the server dropped it."""

    def __init__(self, url: str, headers: dict | None = None, timeout: float = 60.0):
        self.host, self.port, self.prefix = _split(url)
        self.headers = dict(headers or {})
        self.timeout = timeout
        self._c: http.client.HTTPConnection | None = None

    def _conn(self) -> http.client.HTTPConnection:
        if self._c is None:
            self._c = http.client.HTTPConnection(self.host, self.port, timeout=self.timeout)
        return self._c

    def drop(self) -> None:
        if self._c is not None:
            self._c.close()
            self._c = None

    def open(self, method: str, path: str, body: bytes | None = None, headers: dict | None = None):
        hdrs = {**self.headers, **(headers or {})}
        for attempt in (0, 1):
            conn = self._conn()
            try:
                conn.request(method, self.prefix + path, body=body, headers=hdrs)
                return conn.getresponse()
            except (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError):
                self.drop()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    def request(
        self, method: str, path: str, body: bytes | None = None, headers: dict | None = None, ok=(200, 201, 202, 204)
    ) -> tuple[int, dict, bytes]:
        resp = self.open(method, path, body, headers)
        data = resp.read()
        if resp.will_close:
            self.drop()
        if resp.status not in ok:
            raise HttpFailure(f"{method} {path}: HTTP {resp.status}: {data[:300]!r}")
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data

    def json(self, method: str, path: str, payload=None, **kw):
        body = json.dumps(payload).encode() if payload is not None else None
        headers = {"Content-Type": "application/json"} if body is not None else {}
        _, _, data = self.request(method, path, body, headers, **kw)
        return json.loads(data) if data else None


class Lifecycle:
    """POST/GET/DELETE /v1/sandboxes... with the API key."""

    def __init__(self, base_url: str, api_key: str | None):
        base = base_url.rstrip("/")
        if base.endswith("/v1"):
            base = base[:-3]
        headers = {"OPEN-SANDBOX-API-KEY": api_key} if api_key else {}
        self.conn = Conn(base + "/v1", headers)
        self.base_url = base

    def create(self, image: str = "", timeout: int = 900) -> str:
        body = {
            "image": {"uri": image or IMAGE},
            "entrypoint": ["tail", "-f", "/dev/null"],
            "resourceLimits": {"cpu": "500m", "memory": "512Mi"},
            "timeout": timeout,
        }
        return str(self.conn.json("POST", "/sandboxes", body)["id"])

    def get(self, sid: str) -> dict:
        return self.conn.json("GET", f"/sandboxes/{sid}")

    def delete(self, sid: str) -> None:
        self.conn.request("DELETE", f"/sandboxes/{sid}", ok=(200, 202, 204, 404))

    def execd(self, sid: str) -> tuple[str, dict]:
        ep = self.conn.json("GET", f"/sandboxes/{sid}/endpoints/{EXECD_PORT}")
        url = ep["endpoint"]
        if "://" not in url:
            url = "http://" + url
        headers = ep.get("headers") if isinstance(ep.get("headers"), dict) else {}
        return url, headers

    def close(self) -> None:
        self.conn.drop()


def iter_sse(resp, chunk: int = 65536):
    """Yield the JSON events of an execd SSE body (bare-JSON frames or data: lines)."""
    buf = b""
    while True:
        data = resp.read1(chunk)
        if not data:
            break
        buf += data
        while True:
            cut = buf.find(b"\n\n")
            if cut < 0:
                break
            frame, buf = buf[:cut], buf[cut + 2 :]
            frame = frame.strip()
            if not frame:
                continue
            if frame.startswith(b"data:"):
                frame = b"\n".join(ln[5:].strip() for ln in frame.split(b"\n") if ln.startswith(b"data:"))
            yield json.loads(frame)


class Execd:
    def __init__(self, url: str, headers: dict | None = None):
        self.url = url
        self.conn = Conn(url, headers)

    def ping(self) -> None:
        self.conn.request("GET", "/ping")

    def run(self, command: str, on_output=None) -> int:
        """POST /command; stop at the terminal event and drop the connection (like the plugin).
        ``on_output(kind, text)`` sees each stdout/stderr event. Returns the exit code."""
        body = json.dumps({"command": command}).encode()
        resp = self.conn.open(
            "POST", "/command", body, {"Content-Type": "application/json", "Accept": "text/event-stream"}
        )
        try:
            if resp.status != 200:
                raise HttpFailure(f"POST /command: HTTP {resp.status}: {resp.read()[:300]!r}")
            for ev in iter_sse(resp):
                kind = ev.get("type")
                if kind in ("stdout", "stderr"):
                    if on_output is not None:
                        on_output(kind, ev.get("text", ""))
                elif kind == "execution_complete":
                    return 0
                elif kind == "error":
                    try:
                        return int(ev["error"]["evalue"])
                    except (KeyError, TypeError, ValueError):
                        return -1
            raise HttpFailure("the SSE stream ended without a terminal event")
        finally:
            self.conn.drop()  # the body is not finished: never reuse this connection

    def upload(self, path: str, data: bytes) -> None:
        boundary = "bench" + os.urandom(12).hex()
        meta = json.dumps({"path": path}).encode()
        name = path.rsplit("/", 1)[-1] or "file"
        body = b"".join(
            [
                b"--%s\r\n" % boundary.encode(),
                b'Content-Disposition: form-data; name="metadata"; filename="metadata"\r\n',
                b"Content-Type: application/json\r\n\r\n",
                meta,
                b"\r\n",
                b"--%s\r\n" % boundary.encode(),
                b'Content-Disposition: form-data; name="file"; filename="%s"\r\n' % name.encode(),
                b"Content-Type: application/octet-stream\r\n\r\n",
                data,
                b"\r\n",
                b"--%s--\r\n" % boundary.encode(),
            ]
        )
        self.conn.request("POST", "/files/upload", body, {"Content-Type": f"multipart/form-data; boundary={boundary}"})

    def download(self, path: str) -> bytes:
        _, _, data = self.conn.request("GET", "/files/download?" + urllib.parse.urlencode({"path": path}))
        return data

    def close(self) -> None:
        self.conn.drop()
