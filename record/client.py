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
    """A scenario could not run (server unreachable, setup failed...). Never carries secrets.

    ``fix`` says what to do about it; the command line prints ``scenario: request: what happened; fix: ...``
    on one line."""

    def __init__(self, message: str, fix: str = ""):
        super().__init__(message)
        self.fix = fix


FIX_SERVER = "is the server up? ./local-up.sh status; check --base-url (OPENSANDBOX_BASE_URL)"
FIX_KEY = 'pass the server\'s API key: --api-key or OPENSANDBOX_API_KEY (eval "$(./local-up.sh env)")'
FIX_IMAGE = (
    "use images the server has: --image / --busybox-image, or OPENSANDBOX_IMAGE / OPENSANDBOX_BUSYBOX_IMAGE "
    "(no registry: OSB_LOCAL_IMAGES=1 ./local-up.sh up builds local/python:3-slim and local/busybox:latest)"
)
FIX_EXECD = (
    "execd never answered /ping: check the server's execd_image (OSB_EXECD_IMAGE) and the sandbox's "
    "container log (docker logs), or raise --ready-timeout"
)


def _error_message(r: "Response") -> str:
    try:
        data = r.json()
    except ValueError:
        return r.text[:200]
    if isinstance(data, dict):
        return str(data.get("message") or data.get("detail") or data)[:200]
    return str(data)[:200]


def created_id(r: "Response", what: str = "POST /v1/sandboxes") -> str:
    """The id of a sandbox a create answered with, or a RecorderError saying why there is none."""
    if r.status in (200, 201, 202):
        try:
            return str(r.json()["id"])
        except (ValueError, KeyError, TypeError):
            raise RecorderError(f"{what} answered HTTP {r.status} without an id: {r.text[:200]!r}") from None
    if r.status == 401:
        fix = FIX_KEY
    elif r.status in (400, 422):
        fix = "the server refused the create body (its schema changed?): compare the scenario with the server's OpenAPI"
    else:
        fix = FIX_IMAGE
    raise RecorderError(f"{what} answered HTTP {r.status}: {_error_message(r)}", fix)


class Session:
    """Talks to one OpenSandbox deployment: lifecycle at ``base_url``, execd at resolved endpoints."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        timeout: float = 60.0,
        transport: httpx.BaseTransport | None = None,
        ready_timeout: float = 60.0,
    ):
        base = base_url.rstrip("/")
        if base.endswith("/v1"):
            base = base[:-3]
        parts = urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.netloc:
            raise RecorderError(f"--base-url must look like http://host:port, got {base_url!r}")
        self.base_url = base
        self.scheme = parts.scheme
        self.api_key = api_key
        self.ready_timeout = ready_timeout
        self.last_request = ""
        self.exchanges: list[dict[str, Any]] = []
        self._pending_wait: float | None = None
        # One connection per request, like the client that made the live recordings (http.client); a
        # recording is about HTTP semantics, not connection reuse.
        self.client = httpx.Client(
            timeout=timeout,
            transport=transport,
            follow_redirects=False,
            headers={"Accept-Encoding": "identity"},
            limits=httpx.Limits(max_keepalive_connections=0),
        )

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

    def request(
        self,
        method: str,
        url: str,
        *,
        headers: dict[str, str] | None = None,
        json: Any = None,
        json_compact: bool = False,
        content: bytes | str | Iterable[bytes] | None = None,
        record: bool = True,
    ) -> Response:
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
        self.last_request = f"{method} {req.url.raw_path.decode('ascii').split('?', 1)[0]}"
        try:
            resp = self.client.send(req, stream=True)
            try:
                data = resp.read()
            finally:
                resp.close()
        except httpx.HTTPError as exc:
            raise RecorderError(
                f"{method} {req.url.copy_with(query=None)}: {type(exc).__name__}: {exc}", FIX_SERVER
            ) from None
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
            rec_resp: dict[str, Any] = {
                "status": resp.status_code,
                "headers": {k.decode("latin-1"): v.decode("latin-1") for k, v in resp.headers.raw},
            }
            rec_resp.update(_text_or_b64(data))
            ex: dict[str, Any] = {"request": rec_req, "response": rec_resp}
            if self._pending_wait:
                ex["wait_before_s"] = self._pending_wait
            self._pending_wait = None
            self.exchanges.append(ex)
        return Response(resp.status_code, resp.headers, data)

    # -- lifecycle ---------------------------------------------------------------------------------
    def lc(
        self, method: str, path: str, *, auth: bool | str = True, headers: dict[str, str] | None = None, **kw: Any
    ) -> Response:
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
        return created_id(r, "POST /v1/sandboxes (setup)")

    def delete_sandbox(self, sandbox_id: str) -> None:
        try:
            self.lc("DELETE", f"/v1/sandboxes/{sandbox_id}", record=False)
        except RecorderError:
            pass

    def execd_endpoint(self, sandbox_id: str) -> "Execd":
        r = self.lc("GET", f"/v1/sandboxes/{sandbox_id}/endpoints/{EXECD_PORT}", record=False)
        return execd_from(self, r)

    def wait_ready(self, execd: "Execd", timeout: float | None = None) -> None:
        """Unrecorded GET /ping until it answers 200, like the plugin: through refused connections (nothing
        listens yet) and accepted-then-dropped ones (Docker's published port before execd listens) until the
        deadline (``ready_timeout``, 60 s like the plugin's ready_timeout)."""
        budget = self.ready_timeout if timeout is None else timeout
        deadline = time.monotonic() + budget
        last = "no answer"
        while True:
            try:
                r = execd.get("/ping", record=False)
                if r.status == 200:
                    return
                last = f"HTTP {r.status}"
            except RecorderError as exc:
                last = str(exc).split(": ", 1)[-1]  # drop the "GET url" part: it is in the message below
            if time.monotonic() > deadline:
                raise RecorderError(
                    f"GET {execd.origin}{execd.prefix}/ping: no 200 within {budget:g} s (last: {last})", FIX_EXECD
                )
            time.sleep(0.2)


def execd_from(session: Session, r: Response) -> "Execd":
    """The Execd of an endpoints/44772 answer, or a RecorderError saying why there is none."""
    try:
        data = r.json() if r.status == 200 else None
        endpoint = data["endpoint"] if isinstance(data, dict) else None
    except (ValueError, KeyError):
        endpoint = None
    if not isinstance(endpoint, str) or not endpoint:
        raise RecorderError(
            f"GET /v1/sandboxes/<id>/endpoints/{EXECD_PORT} answered HTTP {r.status}: {_error_message(r)}",
            "the sandbox is not Running (see its status), or the server is "
            'not configured for direct endpoints ([ingress] mode = "direct")',
        )
    return Execd(session, endpoint, (data or {}).get("headers") or {})


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

    def request(
        self, method: str, path: str, *, prefix: bool = True, headers: dict[str, str] | None = None, **kw: Any
    ) -> Response:
        hdrs = dict(self.headers)
        hdrs.update(headers or {})
        return self.session.request(method, self.origin + (self.prefix if prefix else "") + path, headers=hdrs, **kw)

    def get(self, path: str, **kw: Any) -> Response:
        return self.request("GET", path, **kw)

    def command(self, body: dict[str, Any], **kw: Any) -> Response:
        hdrs = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        hdrs.update(kw.pop("headers", None) or {})
        return self.request("POST", "/command", json=body, headers=hdrs, **kw)
