"""Lifecycle routes of the mock OpenSandbox server (FastAPI/uvicorn in reality).

/health, /version, /v1/sandboxes... (also served without /v1), the server-side proxy
/v1/sandboxes/{id}/proxy/{port}/{path}, and the unimplemented snapshot/template/egress routes.
Request validation reproduces FastAPI/pydantic 422 bodies for the shapes the recordings show.
"""
from __future__ import annotations

import email.utils
import hmac
import http.client
import json
import re
import socket
import sys
import traceback
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterator
from urllib.parse import parse_qsl

from . import quirks
from .faults import FaultError, FaultRegistry
from .httpcore import OBSERVERS, Handler, Request, Router, host_allowed, new_request_id
from .model import SandboxStore, format_ts, validate_metadata
from .quirks import MockError


# =====================================================================================================
# pydantic-style validation (FastAPI 422 bodies: {"detail":[{type,loc,msg,input[,ctx]}]}, recording 03)
# =====================================================================================================
class ValidationFailed(Exception):
    def __init__(self, errors: list[dict[str, Any]]):
        super().__init__("validation failed")
        self.errors = errors


def _err(type_: str, loc: list, msg: str, input_: Any, ctx: dict | None = None) -> dict[str, Any]:
    e: dict[str, Any] = {"type": type_, "loc": loc, "msg": msg, "input": input_}
    if ctx is not None:
        e["ctx"] = ctx
    return e


_INT_STR_RE = re.compile(r"^[+-]?\d+(?:_\d+)*(?:\.0+)?$")
# Unicode White_Space (what pydantic-core's Rust trim() removes; narrower than str.strip())
_WS = "\t\n\x0b\x0c\r \x85\xa0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007\u2008\u2009\u200a" \
      "\u2028\u2029\u202f\u205f\u3000"
_TRUE = {"1", "on", "t", "true", "y", "yes"}
_FALSE = {"0", "off", "f", "false", "n", "no"}


def _int(value: Any, loc: list, errors: list) -> int | None:
    """pydantic lax int: int, bool, integral float, numeric string (whitespace, sign, '_', '.0' allowed)."""
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            errors.append(_err("finite_number", loc, "Input should be a finite number", value))
            return None
        if value != int(value):
            errors.append(_err("int_from_float", loc, "Input should be a valid integer, got a number with a "
                                                      "fractional part", value))
            return None
        if abs(value) > 2 ** 63:
            errors.append(_err("int_parsing_size", loc, "Unable to parse input string as an integer, exceeded "
                                                        "maximum size", value))
            return None
        return int(value)
    if isinstance(value, str):
        s = value.strip(_WS)
        if _INT_STR_RE.match(s) and s.isascii():
            return int(s.split(".", 1)[0].replace("_", ""))
        errors.append(_err("int_parsing", loc, "Input should be a valid integer, unable to parse string as an "
                                               "integer", value))
        return None
    errors.append(_err("int_type", loc, "Input should be a valid integer", value))
    return None


def _bool(value: Any, loc: list, errors: list) -> bool | None:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)):
        if value in (0, 1):
            return bool(value)
        errors.append(_err("bool_parsing", loc, "Input should be a valid boolean, unable to interpret input", value))
        return None
    if isinstance(value, str):
        if value.lower() in _TRUE:
            return True
        if value.lower() in _FALSE:
            return False
        errors.append(_err("bool_parsing", loc, "Input should be a valid boolean, unable to interpret input", value))
        return None
    errors.append(_err("bool_type", loc, "Input should be a valid boolean", value))
    return None


def _str(value: Any, loc: list, errors: list) -> str | None:
    if isinstance(value, str):
        return value
    errors.append(_err("string_type", loc, "Input should be a valid string", value))
    return None


def _str_dict(value: Any, loc: list, errors: list, *, nullable_values: bool = False) -> dict | None:
    if not isinstance(value, dict):
        errors.append(_err("dict_type", loc, "Input should be a valid dictionary", value))
        return None
    out = {}
    for k, v in value.items():
        if v is None and nullable_values:
            out[k] = None
        else:
            s = _str(v, loc + [k], errors)
            if s is not None:
                out[k] = s
    return out


def _model_obj(value: Any, loc: list, errors: list, cls: str) -> dict | None:
    if isinstance(value, dict):
        return value
    errors.append(_err("model_type", loc, "Input should be a valid dictionary or instance of %s" % cls, value,
                       {"class_name": cls}))
    return None


# -- datetime (pydantic/speedate) ---------------------------------------------------------------------
_DT_RE = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})"
    r"(?:[Tt ](\d{2}):(\d{2})(?::(\d{2})(?:[.,](\d{1,9})\d*)?)?"
    r"(?:([Zz])|([+-])(\d{2}):?(\d{2}))?)?$")
_NUM_RE = re.compile(r"^[+-]?(?:\d+\.?\d*|\.\d+)$")
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _date_error(s: str) -> str:
    """The reason speedate gives when a string is neither a datetime nor a date."""
    if len(s) < 10:
        return "input is too short"
    if not s[0:4].isdigit() or not s[0:4].isascii():
        return "invalid character in year"
    if s[4] != "-":
        return "invalid date separator, expected `-`"
    if not (s[5:7].isdigit() and s[5:7].isascii()):
        return "invalid character in month"
    if s[7] != "-":
        return "invalid date separator, expected `-`"
    if not (s[8:10].isdigit() and s[8:10].isascii()):
        return "invalid character in day"
    if not 1 <= int(s[5:7]) <= 12:
        return "month value is outside expected range of 1-12"
    try:
        datetime(int(s[0:4]), int(s[5:7]), int(s[8:10]))
    except ValueError:
        return "day value is outside expected range"
    return "unexpected extra characters at the end of the input"


def parse_datetime(value: Any, loc: list, errors: list) -> datetime | None:
    """pydantic v2 lax datetime from JSON: RFC 3339 / ISO strings, a bare date, or unix seconds."""
    if isinstance(value, bool) or value is None or not isinstance(value, (int, float, str)):
        errors.append(_err("datetime_type", loc, "Input should be a valid datetime", value))
        return None
    if isinstance(value, (int, float)) or _NUM_RE.match(value):
        num = float(value) if not isinstance(value, int) else value
        if abs(num) > 2e10:  # pydantic reads large numbers as milliseconds
            num = num / 1000
        try:
            return _EPOCH + timedelta(seconds=num)
        except OverflowError:
            errors.append(_err("datetime_parsing", loc, "Input should be a valid datetime, dates after 9999 are "
                                                        "not supported as unix timestamps", value,
                               {"error": "dates after 9999 are not supported as unix timestamps"}))
            return None
    m = _DT_RE.match(value)
    if m and m.group(4) is not None:
        y, mo, d, hh, mi = (int(m.group(i)) for i in range(1, 6))
        ss = int(m.group(6) or 0)
        frac = (m.group(7) or "")[:6].ljust(6, "0")
        try:
            tz = None
            if m.group(8):
                tz = timezone.utc
            elif m.group(9):
                oh, om = int(m.group(10)), int(m.group(11))
                if oh > 23 or om > 59:
                    raise ValueError("offset")
                off = timedelta(hours=oh, minutes=om)
                tz = timezone(off if m.group(9) == "+" else -off)
            if ss == 60:
                raise ValueError("leap second")
            return datetime(y, mo, d, hh, mi, ss, int(frac), tzinfo=tz)
        except ValueError:
            pass
    elif m:  # date only -> midnight (naive)
        try:
            return datetime(int(m.group(1)), int(m.group(2)), int(m.group(3)))
        except ValueError:
            pass
    reason = _date_error(value)
    errors.append(_err("datetime_from_date_parsing", loc, "Input should be a valid datetime or date, " + reason,
                       value, {"error": reason}))
    return None


# -- request bodies -------------------------------------------------------------------------------------
def parse_json_body(req: Request) -> Any:
    """FastAPI body decoding: missing body -> 422 missing, bad JSON -> 422 json_invalid (recording 03)."""
    raw = req.body
    if not raw:
        raise ValidationFailed([_err("missing", ["body"], "Field required", None)])
    try:
        return json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise ValidationFailed([_err("json_invalid", ["body", e.start], "JSON decode error", {},
                                     {"error": "invalid utf-8"})]) from None
    except json.JSONDecodeError as e:
        raise ValidationFailed([_err("json_invalid", ["body", e.pos], "JSON decode error", {},
                                     {"error": e.msg})]) from None


def validate_create(body: Any) -> dict[str, Any]:
    """CreateSandboxRequest as the server's pydantic model validates it (server api/schema.py)."""
    errors: list = []
    body = _model_obj(body, ["body"], errors, "CreateSandboxRequest")
    if body is None:
        raise ValidationFailed(errors)
    out: dict[str, Any] = {}
    img = body.get("image")
    if img is not None:
        img_d = _model_obj(img, ["body", "image"], errors, "ImageSpec")
        if img_d is not None:
            if "uri" not in img_d:
                errors.append(_err("missing", ["body", "image", "uri"], "Field required", img_d))
            else:
                uri = _str(img_d["uri"], ["body", "image", "uri"], errors)
                if uri is not None:
                    out["image"] = {"uri": uri}
            auth = img_d.get("auth")
            if auth is not None:
                _model_obj(auth, ["body", "image", "auth"], errors, "ImageAuth")
    snap = body.get("snapshotId")
    if snap is not None:
        out["snapshotId"] = _str(snap, ["body", "snapshotId"], errors)
    plat = body.get("platform")
    if plat is not None:
        p = _model_obj(plat, ["body", "platform"], errors, "PlatformSpec")
        if p is not None:
            for f in ("os", "arch"):
                if f not in p:
                    errors.append(_err("missing", ["body", "platform", f], "Field required", p))
                else:
                    _str(p[f], ["body", "platform", f], errors)
    t = body.get("timeout")
    if t is not None:
        ti = _int(t, ["body", "timeout"], errors)
        if ti is not None:
            if ti < quirks.MIN_TIMEOUT:
                errors.append(_err("greater_than_equal", ["body", "timeout"], "Input should be greater than or "
                                   "equal to %d" % quirks.MIN_TIMEOUT, t, {"ge": quirks.MIN_TIMEOUT}))
            else:
                out["timeout"] = ti
    rl = body.get("resourceLimits")
    if rl is not None:
        out["resourceLimits"] = _str_dict(rl, ["body", "resourceLimits"], errors)
    env = body.get("env")
    if env is not None:
        out["env"] = _str_dict(env, ["body", "env"], errors, nullable_values=True)
    md = body.get("metadata")
    if md is not None:
        out["metadata"] = _str_dict(md, ["body", "metadata"], errors)
    ep = body.get("entrypoint")
    if ep is not None:
        if not isinstance(ep, list):
            errors.append(_err("list_type", ["body", "entrypoint"], "Input should be a valid list", ep))
        else:
            items = [_str(x, ["body", "entrypoint", i], errors) for i, x in enumerate(ep)]
            if not ep:
                errors.append(_err("too_short", ["body", "entrypoint"], "List should have at least 1 item after "
                                   "validation, not 0", ep,
                                   {"field_type": "List", "min_length": 1, "actual_length": 0}))
            out["entrypoint"] = items
    np_ = body.get("networkPolicy")
    if np_ is not None:
        out["networkPolicy"] = _model_obj(np_, ["body", "networkPolicy"], errors, "NetworkPolicy")
    if "secureAccess" in body:
        out["secureAccess"] = _bool(body["secureAccess"], ["body", "secureAccess"], errors)
    vols = body.get("volumes")
    if vols is not None:
        if not isinstance(vols, list):
            errors.append(_err("list_type", ["body", "volumes"], "Input should be a valid list", vols))
        else:
            out["volumes"] = vols
    ext = body.get("extensions")
    if ext is not None:
        out["extensions"] = _str_dict(ext, ["body", "extensions"], errors)
    if errors:
        raise ValidationFailed(errors)
    # model_validator(mode="after") (server api/schema.py CreateSandboxRequest.validate_source_and_entrypoint)
    has_pool = bool((out.get("extensions") or {}).get("poolRef", "").strip())
    if not has_pool:
        has_image = "image" in out and bool(out["image"]["uri"].strip())
        has_snap = bool((out.get("snapshotId") or "").strip())
        msg = None
        if has_image == has_snap:
            msg = "Exactly one of image or snapshotId must be provided."
        elif has_image and not out.get("entrypoint"):
            msg = "Entrypoint is required when image is provided."
        elif out.get("resourceLimits") is None:
            msg = "resourceLimits is required when poolRef is not provided."
        if msg:
            raise ValidationFailed([_err("value_error", ["body"], "Value error, " + msg, body, {"error": {}})])
    return out


# =====================================================================================================
# reverse proxy (server api/proxy.py): any method, filtered headers, streamed body and response
# =====================================================================================================
HOP_BY_HOP = {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
              "transfer-encoding", "upgrade"}
SENSITIVE = {"authorization", "cookie", "open-sandbox-api-key", "opensandbox-secure-access"}
FORWARDED = {"forwarded", "x-forwarded-for", "x-forwarded-host", "x-forwarded-port", "x-forwarded-proto",
             "x-real-ip"}


class _BodyReader:
    """File-like view of the first ``n`` bytes of the client's body stream (for http.client)."""

    def __init__(self, rfile: Any, n: int):
        self._f, self._left = rfile, n

    def read(self, size: int = -1) -> bytes:
        if self._left <= 0:
            return b""
        size = self._left if size is None or size < 0 else min(size, self._left)
        data = self._f.read(size)
        self._left -= len(data)
        if not data:
            self._left = 0
        return data


def _chunked_body(rfile: Any) -> Iterator[bytes]:
    while True:
        line = rfile.readline(65537)
        if not line:
            return
        size = int(line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            while rfile.readline(65537) not in (b"\r\n", b"\n", b""):
                pass
            return
        yield rfile.read(size)
        rfile.readline(3)


class BackendError(Exception):
    """The backend (execd or a sandbox app) failed after the connection was made."""


def forward(req: Request, target: str, rest: str, *, extra_headers: dict[str, str] | None = None,
            client_facing: bool = True, on_connect_error: Callable[[Exception], None] | None = None,
            location_prefix: str | None = None) -> None:
    """Forward ``req`` to ``http://<target>/<rest>?<query>`` and stream the answer back.

    ``client_facing`` = the lifecycle server's proxy: strip auth/forwarding headers, add X-Forwarded-*,
    and answer with uvicorn's headers; otherwise a transparent port mapping (the 8080 listener)."""
    h = req.handler
    hostport, _, base_path = target.partition("/")
    host, _, port_s = hostport.rpartition(":")
    path = "/" + base_path.rstrip("/") if base_path else ""
    rest = rest.lstrip("/")
    if rest:
        path += "/" + rest
    path = path or "/"
    query = req.raw_path.partition("?")[2]
    if query:
        path += "?" + query
    conn_tokens = {t.strip().lower() for t in (req.headers.get("Connection") or "").split(",") if t.strip()}
    headers: list[tuple[str, str]] = []
    for k, v in req.headers.items():
        kl = k.lower()
        if kl in ("host", "content-length") or kl in HOP_BY_HOP or kl in conn_tokens:
            continue
        if client_facing and (kl in SENSITIVE or kl in FORWARDED):
            continue
        headers.append((k, v))
    for k, v in (extra_headers or {}).items():
        headers = [(a, b) for a, b in headers if a.lower() != k.lower()]
        headers.append((k, v))
    if client_facing:
        headers.append(("X-Forwarded-Proto", "http"))
        if req.headers.get("Host"):
            headers.append(("X-Forwarded-Host", req.headers["Host"]))
        headers.append(("X-Forwarded-For", h.client_address[0]))
    body: Any = None
    chunked = False
    if req._body is not None:
        body = req._body
        headers.append(("Content-Length", str(len(body))))
    elif "chunked" in (req.headers.get("Transfer-Encoding") or "").lower():
        body, chunked = _chunked_body(h.rfile), True
        headers.append(("Transfer-Encoding", "chunked"))
        req._body = b""
    else:
        n = int(req.headers.get("Content-Length") or 0)
        if n > 0:
            body = _BodyReader(h.rfile, n)
            headers.append(("Content-Length", str(n)))
        elif req.method in ("POST", "PUT", "PATCH"):
            headers.append(("Content-Length", "0"))
        req._body = b""
    conn = http.client.HTTPConnection(host, int(port_s), timeout=10)
    try:
        try:
            conn.connect()
        except OSError as e:
            if on_connect_error is None:
                raise
            on_connect_error(e)
            return
        conn.sock.settimeout(None)
        try:
            conn.putrequest(req.method, path, skip_host=True, skip_accept_encoding=True)
            conn.putheader("Host", hostport)
            for k, v in headers:
                conn.putheader(k, v)
            conn.endheaders()
            if body is not None:
                if isinstance(body, (bytes, bytearray)):
                    conn.send(body)
                elif chunked:
                    for chunk in body:
                        if chunk:
                            conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    conn.send(b"0\r\n\r\n")
                else:
                    while True:
                        data = body.read(65536)
                        if not data:
                            break
                        conn.send(data)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException) as e:
            raise BackendError(str(e)) from e
        _relay_response(req, resp, client_facing, location_prefix)
    finally:
        conn.close()


def _relay_response(req: Request, resp: http.client.HTTPResponse, client_facing: bool,
                    location_prefix: str | None) -> None:
    h = req.handler
    conn_tokens = {t.strip().lower() for t in (resp.getheader("Connection") or "").split(",") if t.strip()}
    out: list[tuple[str, str]] = []
    length: int | None = None
    for k, v in resp.getheaders():
        kl = k.lower()
        if kl in HOP_BY_HOP or kl in conn_tokens:
            continue
        if client_facing and kl in ("server", "date"):
            continue  # uvicorn writes its own (server api/proxy.py SERVER_GENERATED_RESPONSE_HEADERS)
        if kl == "content-length":
            try:
                length = int(v)
            except ValueError:
                continue
        if kl == "location" and location_prefix and v.startswith("/") and not v.startswith("//"):
            v = location_prefix + v
        out.append((kl if client_facing else k, v))
    no_body = req.method == "HEAD" or resp.status in (204, 304) or 100 <= resp.status < 200
    use_chunked = length is None and not no_body
    if client_facing:
        h.send_response(resp.status)  # server: uvicorn + date
        extra = h.base_headers()
    else:
        h.send_response_only(resp.status)
        extra = {}
    for k, v in out:
        h.send_header(k, v)
    for k, v in extra.items():
        h.send_header(k, v)
    if use_chunked:
        h.send_header("transfer-encoding" if client_facing else "Transfer-Encoding", "chunked")
    h.end_headers()
    h.wfile.flush()
    req.responded = True
    capture = bool(OBSERVERS)
    if capture:
        req.sent_status = resp.status
        req.sent_headers = dict(out)
        req.sent_headers.update(extra)
    if no_body:
        return
    while True:
        try:
            data = resp.read1(65536)
        except (OSError, http.client.HTTPException):  # the backend broke off: so does the answer
            h.close_connection = True
            return
        if not data:
            break
        if use_chunked:
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        else:
            h.wfile.write(data)
        h.wfile.flush()
        if capture:
            req.sent_body += data
    if use_chunked:
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()
    elif length is not None and resp.length:  # backend closed early: the client must not wait for more
        h.close_connection = True


# =====================================================================================================
# the application
# =====================================================================================================
EXEMPT_PREFIXES = ("/health", "/version", "/docs", "/redoc", "/openapi.json")  # server middleware/auth.py
_PROXY_PATH_RE = re.compile(r"^(/v1)?/sandboxes/[^/]+/proxy/\d+(/|$)")


class LifecycleApp:
    """Routes + policy of the lifecycle listener. ``provisioner`` answers endpoint questions
    (``endpoint(sb, port) -> (endpoint, headers|None)``)."""

    def __init__(self, store: SandboxStore, provisioner: Any, *, api_key: str | None,
                 bind_host: str = "127.0.0.1", verbose: bool = False, check_host: bool = True,
                 reject_origin: bool = True, faults: FaultRegistry | None = None):
        self.store = store
        self.faults = faults  # fault injection rules (faults.py); the admin API below edits them
        self.provisioner = provisioner
        self.api_key = api_key
        self.bind_host = bind_host
        self.verbose = verbose
        self.check_host = check_host
        self.reject_origin = reject_origin
        self.router = Router()
        r = self.router
        for prefix in ("/v1", ""):
            r.add("POST", prefix + "/sandboxes", self.create)
            r.add("GET", prefix + "/sandboxes", self.list)
            r.add("GET", prefix + "/sandboxes/{sid}", self.get)
            r.add("DELETE", prefix + "/sandboxes/{sid}", self.delete)
            r.add("PATCH", prefix + "/sandboxes/{sid}/metadata", self.patch_metadata)
            r.add("POST", prefix + "/sandboxes/{sid}/pause", self.pause)
            r.add("POST", prefix + "/sandboxes/{sid}/resume", self.resume)
            r.add("POST", prefix + "/sandboxes/{sid}/renew-expiration", self.renew)
            r.add("GET", prefix + "/sandboxes/{sid}/endpoints/{port}", self.endpoint)
            any_method = ("GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS")
            r.add(any_method, prefix + "/sandboxes/{sid}/proxy/{port}", self.proxy)
            r.add(any_method, prefix + "/sandboxes/{sid}/proxy/{port}/{rest:path}", self.proxy)
            r.add("POST", prefix + "/sandboxes/{sid}/snapshots", self.snapshots_unsupported)
            r.add("GET", prefix + "/snapshots", self.snapshots_unsupported)
            r.add(("GET", "DELETE"), prefix + "/snapshots/{snap}", self.snapshots_unsupported)
            r.add(("GET", "POST"), prefix + "/templates", self.templates_unsupported)
            r.add(("GET", "DELETE"), prefix + "/templates/{tid}", self.templates_unsupported)
            r.add(("GET", "PATCH", "PUT"), prefix + "/sandboxes/{sid}/networkpolicy", self.egress_unsupported)
        r.add("GET", "/health", self.health)
        r.add("GET", "/version", self.version)
        if faults is not None:
            # mock-only admin API [choice, docs/FAULTS.md]: behind the API key like every other route
            r.add("GET", "/__mock__/faults", self.faults_list)
            r.add("POST", "/__mock__/faults", self.faults_add)
            r.add("DELETE", "/__mock__/faults", self.faults_clear)
            r.add("GET", "/__mock__/faults/{fid}", self.faults_get)
            r.add("DELETE", "/__mock__/faults/{fid}", self.faults_remove)

    # -- dispatch -------------------------------------------------------------------------------------
    def handle(self, req: Request) -> None:
        h = req.handler
        raw_rid = req.headers.get("X-Request-ID")
        h.request_id = (raw_rid and raw_rid.strip()) or new_request_id()  # server middleware/request_id.py
        try:
            if self.check_host and not self._host_allowed(req.headers.get("Host")):
                raise MockError(quirks.HOST_NOT_ALLOWED, host=(req.headers.get("Host") or "")[:200])
            if self.reject_origin and req.headers.get("Origin") is not None:
                raise MockError(quirks.ORIGIN_NOT_ALLOWED)
            self._authenticate(req)
            fn, params, path_seen = self.router.match(req.method, req.path)
            if fn is None:
                if path_seen:
                    req.send_json(405, quirks.FASTAPI_METHOD_NOT_ALLOWED)
                else:
                    req.send_json(404, quirks.FASTAPI_NOT_FOUND)
                return
            req.params = params
            fn(req)
        except MockError as e:
            if not req.responded:
                req.send_json(e.status, e.body())
        except ValidationFailed as e:
            if not req.responded:
                req.send_json(422, {"detail": e.errors})
        except (BrokenPipeError, ConnectionResetError, socket.timeout):
            raise
        except Exception:  # FastAPI's answer to an unhandled exception
            if self.verbose:
                traceback.print_exc(file=sys.stderr)
            if not req.responded:
                req.send_text(500, "Internal Server Error")
            else:
                h.close_connection = True

    def _host_allowed(self, host: str | None) -> bool:
        return host_allowed(host, self.bind_host)

    def _authenticate(self, req: Request) -> None:
        path = req.path
        if path.startswith(EXEMPT_PREFIXES):
            return
        if ".." not in path and _PROXY_PATH_RE.match(path):
            return
        if self.api_key is None:
            return
        key = req.headers.get("OPEN-SANDBOX-API-KEY")
        if not key:
            raise MockError(quirks.MISSING_API_KEY)
        if not hmac.compare_digest(key.encode("utf-8", "surrogateescape"), self.api_key.encode("utf-8")):
            raise MockError(quirks.INVALID_API_KEY)

    # -- routes ---------------------------------------------------------------------------------------
    def health(self, req: Request) -> None:
        # body exactly as recorded (rec 01); the mock-only isolation detail rides in a header [choice]
        req.send_json(200, quirks.HEALTH_BODY, headers={"x-mock-isolation": self.isolation()})

    def isolation(self) -> str:
        note = getattr(self.provisioner, "isolation", None)
        try:
            return note() if callable(note) else "unknown"
        except Exception:  # pragma: no cover
            return "unknown"

    def version(self, req: Request) -> None:
        req.send_json(200, quirks.VERSION_BODY)

    def create(self, req: Request) -> None:
        data = validate_create(parse_json_body(req))
        if data.get("snapshotId"):
            raise MockError(quirks.SNAPSHOTS_UNSUPPORTED)
        validate_metadata(data.get("metadata"))
        if data.get("secureAccess"):
            raise MockError(quirks.SECURE_ACCESS_UNSUPPORTED)
        if data.get("networkPolicy") is not None:
            raise MockError(quirks.NETWORK_POLICY_UNSUPPORTED)
        if data.get("volumes"):
            raise MockError(quirks.VOLUMES_UNSUPPORTED)
        env = {k: v for k, v in (data.get("env") or {}).items() if v is not None}
        sb = self.store.create(image=data["image"], entrypoint=data["entrypoint"], env=env,
                               metadata=data.get("metadata"), resource_limits=data.get("resourceLimits"),
                               timeout=data.get("timeout"))
        req.send_json(202, sb.create_json())

    def list(self, req: Request) -> None:
        errors: list = []
        states = req.query.get("state") or None
        md_raw = req.q("metadata")
        page = _int(req.q("page"), ["query", "page"], errors) if req.q("page") is not None else 1
        size = _int(req.q("pageSize"), ["query", "pageSize"], errors) if req.q("pageSize") is not None \
            else quirks.DEFAULT_PAGE_SIZE
        if page is not None and page < 1:
            errors.append(_err("greater_than_equal", ["query", "page"], "Input should be greater than or equal "
                               "to 1", req.q("page"), {"ge": 1}))
        if size is not None and size < 1:
            errors.append(_err("greater_than_equal", ["query", "pageSize"], "Input should be greater than or "
                               "equal to 1", req.q("pageSize"), {"ge": 1}))
        elif size is not None and size > quirks.MAX_PAGE_SIZE:
            errors.append(_err("less_than_equal", ["query", "pageSize"], "Input should be less than or equal to "
                               "%d" % quirks.MAX_PAGE_SIZE, req.q("pageSize"), {"le": quirks.MAX_PAGE_SIZE}))
        if errors:
            raise ValidationFailed(errors)
        md = None
        if md_raw:
            try:
                md = dict(parse_qsl(md_raw, keep_blank_values=True, strict_parsing=True))
            except ValueError as e:
                raise MockError(quirks.INVALID_METADATA_FORMAT, error=str(e)) from None
        items, pagination = self.store.list(states=states, metadata=md or None, page=page, page_size=size)
        req.send_json(200, {"items": [sb.to_json() for sb in items], "pagination": pagination})

    def get(self, req: Request) -> None:
        req.send_json(200, self.store.get(req.params["sid"]).to_json())

    def delete(self, req: Request) -> None:
        self.store.delete(req.params["sid"])
        req.send(204)

    def pause(self, req: Request) -> None:
        self.store.pause(req.params["sid"])
        req.send(202)

    def resume(self, req: Request) -> None:
        self.store.resume(req.params["sid"])
        req.send(202)

    def renew(self, req: Request) -> None:
        errors: list = []
        body = _model_obj(parse_json_body(req), ["body"], errors, "RenewSandboxExpirationRequest")
        when = None
        if body is not None:
            if "expiresAt" not in body:
                errors.append(_err("missing", ["body", "expiresAt"], "Field required", body))
            else:
                when = parse_datetime(body["expiresAt"], ["body", "expiresAt"], errors)
        if errors:
            raise ValidationFailed(errors)
        assert when is not None
        new = self.store.renew(req.params["sid"], when)
        req.send_json(200, {"expiresAt": format_ts(new)})

    def patch_metadata(self, req: Request) -> None:
        """JSON Merge Patch of metadata (spec PATCH /sandboxes/{id}/metadata; server api/lifecycle.py)."""
        errors: list = []
        body = parse_json_body(req)
        patch = _str_dict(body, ["body"], errors, nullable_values=True)
        if errors:
            raise ValidationFailed(errors)
        assert patch is not None
        sb = self.store.get(req.params["sid"])
        with sb.lock:
            merged = dict(sb.metadata or {})
            for k, v in patch.items():
                if v is None:
                    merged.pop(k, None)
                else:
                    merged[k] = v
            validate_metadata({k: v for k, v in patch.items() if v is not None})
            sb.metadata = merged
        req.send_json(200, sb.to_json())

    def _port_param(self, req: Request, errors: list) -> int | None:
        return _int(req.params["port"], ["path", "port"], errors)

    def endpoint(self, req: Request) -> None:
        errors: list = []
        port = self._port_param(req, errors)
        usp_raw = req.q("use_server_proxy")
        use_proxy = _bool(usp_raw, ["query", "use_server_proxy"], errors) if usp_raw is not None else False
        exp_raw = req.q("expires")
        expires = _int(exp_raw, ["query", "expires"], errors) if exp_raw is not None else None
        if errors:
            raise ValidationFailed(errors)
        assert port is not None
        if use_proxy and expires is not None:
            raise MockError(quirks.SERVER_PROXY_WITH_EXPIRES)
        if expires is not None:
            raise MockError(quirks.SIGNED_ROUTES_UNSUPPORTED)
        if not 1 <= port <= 65535:
            raise MockError(quirks.INVALID_PORT)
        sid = req.params["sid"]
        sb = self.store.get(sid)
        endpoint, headers = self.provisioner.endpoint(sb, port)
        if use_proxy:
            # server api/lifecycle.py: same host and mount prefix the client used, no scheme
            mount = req.path.split("/sandboxes/", 1)[0]
            endpoint = "%s%s/sandboxes/%s/proxy/%d" % (req.headers.get("Host") or "", mount, sid, port)
            if headers:
                headers = {k: v for k, v in headers.items() if k.lower() != quirks.INGRESS_HEADER.lower()} or None
        out: dict[str, Any] = {"endpoint": endpoint}
        if headers:
            out["headers"] = headers
        req.send_json(200, out)

    def proxy(self, req: Request) -> None:
        errors: list = []
        port = self._port_param(req, errors)
        if errors:
            raise ValidationFailed(errors)
        assert port is not None
        if (req.headers.get("Upgrade") or "").lower() == "websocket":
            req.send_json(400, {"detail": quirks.WEBSOCKET_UNSUPPORTED_DETAIL})
            return
        if not 1 <= port <= 65535:
            raise MockError(quirks.INVALID_PORT)
        sid = req.params["sid"]
        sb = self.store.get(sid)
        endpoint, headers = self.provisioner.endpoint(sb, port)
        proxy_suffix = "/sandboxes/%s/proxy/%s" % (sid, req.params["port"])
        idx = req.path.find(proxy_suffix)
        location_prefix = req.path[: idx + len(proxy_suffix)] if idx >= 0 else None

        def connect_failed(e: Exception) -> None:
            req.send_json(502, quirks.BACKEND_CONNECTION_FAILED.body(endpoint=endpoint,
                                                                     error="All connection attempts failed"))

        hdrs = {k: v for k, v in (headers or {}).items() if k.lower() != "opensandbox-secure-access"}
        try:
            forward(req, endpoint, req.params.get("rest", ""), extra_headers=hdrs, client_facing=True,
                    on_connect_error=connect_failed, location_prefix=location_prefix)
        except BackendError as e:
            if req.responded:  # the answer was already streaming: cut it, the client sees a short body
                req.handler.close_connection = True
                return
            # server api/proxy.py: any other httpx error -> 500 {"detail": "An internal error occurred ..."}
            req.send_json(500, {"detail": "An internal error occurred in the proxy: %s" % (e.__cause__ or e)})

    # -- fault injection admin API (mock only, docs/FAULTS.md) ------------------------------------------
    def faults_list(self, req: Request) -> None:
        assert self.faults is not None
        req.send_json(200, {"rules": self.faults.to_json()})

    def faults_get(self, req: Request) -> None:
        assert self.faults is not None
        rule = self.faults.get(req.params["fid"])
        if rule is None:
            req.send_json(404, {"code": "MOCK::FAULT_NOT_FOUND", "message": "No fault rule %s." % req.params["fid"][:64]})
            return
        req.send_json(200, rule.to_json())

    def faults_add(self, req: Request) -> None:
        assert self.faults is not None
        try:
            payload = json.loads(req.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            req.send_json(400, {"code": "MOCK::INVALID_FAULT", "message": "The body must be a JSON fault rule "
                                                                         "or a list of them."})
            return
        try:
            added = self.faults.add_json(payload)
        except FaultError as e:
            req.send_json(400, {"code": "MOCK::INVALID_FAULT", "message": str(e)})
            return
        req.send_json(201, {"rules": [r.to_json() for r in added]})

    def faults_clear(self, req: Request) -> None:
        assert self.faults is not None
        self.faults.clear()
        req.send(204)

    def faults_remove(self, req: Request) -> None:
        assert self.faults is not None
        if not self.faults.remove(req.params["fid"]):
            req.send_json(404, {"code": "MOCK::FAULT_NOT_FOUND", "message": "No fault rule %s." % req.params["fid"][:64]})
            return
        req.send(204)

    def snapshots_unsupported(self, req: Request) -> None:
        raise MockError(quirks.SNAPSHOTS_UNSUPPORTED)

    def templates_unsupported(self, req: Request) -> None:
        raise MockError(quirks.TEMPLATES_UNSUPPORTED)

    def egress_unsupported(self, req: Request) -> None:
        self.store.get(req.params["sid"])
        raise MockError(quirks.NETWORK_POLICY_ROUTE_UNSUPPORTED)


class LifecycleHandler(Handler):
    flavor = "uvicorn"
    browser_guard = False  # LifecycleApp.handle answers these with ErrorResponse bodies (quirks.py)
    request_id = ""

    def base_headers(self) -> dict[str, str]:
        # CORS middleware adds vary: Origin; request-id middleware adds x-request-id (recording 01)
        return {"vary": "Origin", "x-request-id": self.request_id or new_request_id()}

    def dispatch(self, req: Request) -> None:
        self.server.app.handle(req)

    def date_time_string(self, timestamp: float | None = None) -> str:
        # the Date header is the server's clock: with MockOpenSandbox(clock=) it follows that clock
        if timestamp is None:
            timestamp = self.server.app.store.clock().timestamp()
        return email.utils.formatdate(timestamp, usegmt=True)


class PortForwardApp:
    """The per-sandbox listener standing in for Docker's published container port 8080: forwards
    everything to the sandbox's port 8080 (through execd's /proxy/8080 route)."""

    def __init__(self, target: Callable[[], tuple[str, dict[str, str]]], verbose: bool = False):
        self.target = target
        self.verbose = verbose


class PortForwardHandler(Handler):
    flavor = "gin"

    def dispatch(self, req: Request) -> None:
        app: PortForwardApp = self.server.app
        try:
            target, headers = app.target()
        except Exception:
            self.close_connection = True
            return

        def refused(e: Exception) -> None:
            self.close_connection = True  # like a published port with nothing behind it: the connection drops

        try:
            forward(req, target, req.raw_path.partition("?")[0], extra_headers=headers, client_facing=False,
                    on_connect_error=refused)
        except BackendError:
            self.close_connection = True
