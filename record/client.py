"""A small recording HTTP client (httpx) for the scenarios: every request made through a
``Session`` is appended to ``session.exchanges`` in the raw recording format
(``{request: {method, path, headers, body}, response: {status, headers, body}}``), unless it is a
setup/teardown request made with ``record=False``.
"""
from __future__ import annotations

import base64
import json as _json
import time
from typing import Any, Iterable
from urllib.parse import urlsplit

import httpx

API_KEY_HEADER = "OPEN-SANDBOX-API-KEY"
EXECD_PORT = 44772


def _text_or_b64(data: bytes) -> dict[str, str]:
    try:
        return {"body": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body_b64": base64.b64encode(data).decode("ascii")}


class Response:
    """What a scenario sees: status, headers, raw body, and helpers."""

    def __init__(self, status: int, headers: httpx.Headers, body: bytes):
        self.status = status
        self.headers = headers
        self.body = body

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        return _json.loads(self.body.decode("utf-8"))

    def sse_events(self) -> list[dict[str, Any]]:
        """Events of a bare-JSON (or ``data:``-prefixed) event stream; frames that do not parse are skipped."""
        out = []
        for frame in self.body.decode("utf-8", "replace").split("\n\n"):
            frame = frame.strip()
            if frame.startswith("data:"):
                frame = frame[5:].strip()
            if not frame:
                continue
            try:
                obj = _json.loads(frame)
            except ValueError:
                continue
            if isinstance(obj, dict):
                out.append(obj)
        return out


class RecorderError(RuntimeError):
    """A scenario could not run (server unreachable, setup failed...). Never carries secrets."""


class Session:
    """Talks to one OpenSandbox deployment: lifecycle at ``base_url``, execd at resolved endpoints."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 60.0,
                 transport: httpx.BaseTransport | None = None):
        base = base_url.rstrip("/")
        if base.endswith("/v1"):
            base = base[:-3]
        parts = urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise RecorderError(f"--base-url must look like http://host:port, got {base_url!r}")
        self.base_url = base
        self.scheme = parts.scheme
        self.api_key = api_key
        self.exchanges: list[dict[str, Any]] = []
        self._pending_wait: float | None = None
        # One connection per request, like the client that made the live recordings (http.client); a
        # recording is about HTTP semantics, not connection reuse.
        self.client = httpx.Client(timeout=timeout, transport=transport, follow_redirects=False,
                                   headers={"Accept-Encoding": "identity"},
                                   limits=httpx.Limits(max_keepalive_connections=0))

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- recording ---------------------------------------------------------------------------------
    def start_scenario(self) -> None:
        self.exchanges = []
        self._pending_wait = None

    def sleep(self, seconds: float) -> None:
        """Pause, and note the pause on the next recorded exchange (a replay pauses the same)."""
        time.sleep(seconds)
        self._pending_wait = round((self._pending_wait or 0) + seconds, 3)

    def request(self, method: str, url: str, *, headers: dict[str, str] | None = None,
                json: Any = None, json_compact: bool = False, content: bytes | str | Iterable[bytes] | None = None,
                record: bool = True) -> Response:
        hdrs = dict(headers or {})
        body: bytes | Iterable[bytes] | None
        if json is not None:
            seps = (",", ":") if json_compact else (", ", ": ")
            body = _json.dumps(json, separators=seps).encode("utf-8")
            hdrs.setdefault("Content-Type", "application/json")
        elif isinstance(content, str):
            body = content.encode("utf-8")
        else:
            body = content
        sent_body: bytes | None
        if body is not None and not isinstance(body, (bytes, bytearray)):
            chunks = [bytes(c) for c in body]  # stream it chunked, record the concatenation
            sent_body = b"".join(chunks)
            req = self.client.build_request(method, url, headers=hdrs, content=iter(chunks))
        else:
            sent_body = bytes(body) if body is not None else None
            req = self.client.build_request(method, url, headers=hdrs, content=sent_body)
        try:
            resp = self.client.send(req, stream=True)
            try:
                data = resp.read()
            finally:
                resp.close()
        except httpx.HTTPError as exc:
            raise RecorderError(f"{method} {req.url.copy_with(query=None)}: {type(exc).__name__}: {exc}") from None
        if record:
            rec_req: dict[str, Any] = {
                "method": method,
                "path": req.url.raw_path.decode("ascii"),
                "headers": {k.decode("latin-1"): v.decode("latin-1") for k, v in req.headers.raw},
                "body": None,
            }
            if sent_body is not None:
                rec_req.pop("body")
                rec_req.update(_text_or_b64(sent_body))
            rec_resp: dict[str, Any] = {"status": resp.status_code,
                                        "headers": {k.decode("latin-1"): v.decode("latin-1")
                                                    for k, v in resp.headers.raw}}
            rec_resp.update(_text_or_b64(data))
            ex: dict[str, Any] = {"request": rec_req, "response": rec_resp}
            if self._pending_wait:
                ex["wait_before_s"] = self._pending_wait
            self._pending_wait = None
            self.exchanges.append(ex)
        return Response(resp.status_code, resp.headers, data)

    # -- lifecycle ---------------------------------------------------------------------------------
    def lc(self, method: str, path: str, *, auth: bool | str = True, headers: dict[str, str] | None = None,
           **kw: Any) -> Response:
        """A lifecycle request. ``auth``: True = the API key, False = none, a string = that key."""
        hdrs: dict[str, str] = {}
        if auth is True:
            hdrs[API_KEY_HEADER] = self.api_key
        elif isinstance(auth, str):
            hdrs[API_KEY_HEADER] = auth
        hdrs.update(headers or {})
        return self.request(method, self.base_url + path, headers=hdrs, **kw)

    def create_sandbox(self, body: dict[str, Any], *, record: bool = False) -> str:
        r = self.lc("POST", "/v1/sandboxes", json=body, record=record)
        if r.status not in (200, 201, 202):
            raise RecorderError(f"creating a sandbox failed: HTTP {r.status}")
        return r.json()["id"]

    def delete_sandbox(self, sandbox_id: str) -> None:
        try:
            self.lc("DELETE", f"/v1/sandboxes/{sandbox_id}", record=False)
        except RecorderError:
            pass

    def execd_endpoint(self, sandbox_id: str) -> "Execd":
        r = self.lc("GET", f"/v1/sandboxes/{sandbox_id}/endpoints/{EXECD_PORT}", record=False)
        if r.status != 200:
            raise RecorderError(f"resolving the execd endpoint failed: HTTP {r.status}")
        data = r.json()
        return Execd(self, data["endpoint"], data.get("headers") or {})

    def wait_ready(self, execd: "Execd", timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            try:
                if execd.get("/ping", record=False).status == 200:
                    return
            except RecorderError:
                pass
            if time.monotonic() > deadline:
                raise RecorderError("execd did not answer /ping in time")
            time.sleep(0.2)


class Execd:
    """One sandbox's execd, addressed like the recordings: ``host:port`` + the ``/proxy/44772`` prefix."""

    def __init__(self, session: Session, endpoint: str, headers: dict[str, str]):
        if "://" not in endpoint:
            endpoint = f"{session.scheme}://{endpoint}"
        parts = urlsplit(endpoint)
        self.session = session
        self.origin = f"{parts.scheme}://{parts.netloc}"
        self.prefix = parts.path.rstrip("/")
        self.headers = dict(headers)

    def request(self, method: str, path: str, *, prefix: bool = True, headers: dict[str, str] | None = None,
                **kw: Any) -> Response:
        hdrs = dict(self.headers)
        hdrs.update(headers or {})
        return self.session.request(method, self.origin + (self.prefix if prefix else "") + path,
                                    headers=hdrs, **kw)

    def get(self, path: str, **kw: Any) -> Response:
        return self.request("GET", path, **kw)

    def command(self, body: dict[str, Any], **kw: Any) -> Response:
        hdrs = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        hdrs.update(kw.pop("headers", None) or {})
        return self.request("POST", "/command", json=body, headers=hdrs, **kw)
