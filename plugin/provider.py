#!/usr/bin/env python3
"""OpenSandbox provider for Agent Sandbox: an EPP/1 exec plugin (JSON-RPC 2.0 over stdio, NDJSON).

Layout, top to bottom: the initialize contract (must equal abx-provider.toml), configuration,
errors, the EPP loop, one function per method, the method table, main(). The OpenSandbox client
(lifecycle + execd, SSE, multipart, endpoint cache) is ``_osb_http.py`` next to this file.

Standard library only, Python >= 3.10. Only protocol lines go to stdout. State that must outlive
this process lives in ABX_PROVIDER_DATA_DIR and nowhere else.
"""
from __future__ import annotations

import sys

if sys.pycache_prefix is None:          # launch.py caches bytecode in the data dir; never in the
    sys.dont_write_bytecode = True      # hashed plugin root

import json  # noqa: E402
import os  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402

# --------------------------------------------------------------------------- initialize contract
# Must equal abx-provider.toml, in the same order (the host compares them; tiers/t0 checks it).

PROTOCOL = "epp/1"
PLUGIN_NAME = "opensandbox"
PLUGIN_VERSION = "0.1.0"
OPERATION_CONTRACT_VERSION = 1
FEATURES = [
    "sandbox.lifecycle", "sandbox.timeout", "sandbox.pause", "exec.run", "exec.stream",
    "process.manage", "pty", "files.rw", "ports.url", "sessions",
]
_OPS = [
    "sandbox.create", "sandbox.get", "sandbox.list", "sandbox.delete", "sandbox.timeout",
    "sandbox.pause", "sandbox.resume", "exec.run", "exec.stream", "files.read", "files.write",
    "files.list", "files.stat", "files.remove", "files.move", "ports.resolve",
]
OPERATIONS = {"cli": list(_OPS), "python": list(_OPS)}
WORKFLOW_INPUTS = ["image"]
STARTUP_MODES = ["exec", "entrypoint"]

MAX_LINE_BYTES = 8 * 1024 * 1024        # the host kills a plugin that writes a longer line
MAX_READ_BYTES = 6_000_000              # base64 of this fits one line with room to spare
OUTPUT_CHUNK_CHARS = 1_000_000          # exec.output notifications are split at this size
STOP_GRACE = 3.0                        # seconds between an interrupt and giving up on the stream

# --------------------------------------------------------------------------- configuration

DEFAULT_BASE_URL = "http://127.0.0.1:8080"
DEFAULT_ENTRYPOINT = "tail -f /dev/null"
CODE_INTERPRETER_ENTRYPOINT = ["/opt/code-interpreter/code-interpreter.sh"]   # seed 000 §1.4
DEFAULTS = {
    "base_url": DEFAULT_BASE_URL, "api_key": "", "domain": "", "protocol": "",
    "use_server_proxy": False, "default_image": "python:3.12-slim",
    "image_aliases": "code=opensandbox/code-interpreter:v1.1.0", "entrypoint": DEFAULT_ENTRYPOINT,
    "ready_timeout": 60, "registry_username": "", "registry_password": "", "network_policy": "",
    "platform": "", "secure_access": False, "execd_access_token": "",
}
SECRET_FIELDS = ("api_key", "registry_password", "execd_access_token")
# Per-create `options` that may override the configuration for one sandbox (seed 002). Other keys
# (base_url, api_key, ...) already reached this process through initialize.config and are ignored.
CREATE_OPTIONS = ("default_image", "image_aliases", "entrypoint", "ready_timeout", "registry_username",
                  "registry_password", "network_policy", "platform", "secure_access")
_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}


class Config:
    """Coerced configuration. Values arrive raw: provider options are strings ("true", "60")."""

    def __init__(self, raw: dict, core: dict | None = None):
        self.raw = {k: v for k, v in (raw or {}).items() if v is not None}
        merged = {**DEFAULTS, **self.raw}
        core = core or {}
        self.api_key = _text(merged["api_key"])
        self.protocol = _text(merged["protocol"]).lower().removesuffix("://")
        if self.protocol not in ("", "http", "https"):
            raise config_error("protocol", "must be http or https")
        self.server = _server_url(_text(merged["base_url"]), _text(merged["domain"]), self.protocol)
        self.use_server_proxy = _bool("use_server_proxy", merged["use_server_proxy"])
        self.default_image = _text(merged["default_image"]) or DEFAULTS["default_image"]
        self.image_aliases = _aliases(merged["image_aliases"])
        self.entrypoint = _entrypoint(merged["entrypoint"])
        self.entrypoint_is_default = self.entrypoint == DEFAULT_ENTRYPOINT.split()
        self.ready_timeout = _int("ready_timeout", merged["ready_timeout"], 1, 3600)
        self.registry_username = _text(merged["registry_username"])
        self.registry_password = _text(merged["registry_password"])
        self.network_policy = _network_policy(merged["network_policy"])
        self.platform = _platform(merged["platform"])
        self.secure_access = _bool("secure_access", merged["secure_access"])
        self.execd_access_token = _text(merged["execd_access_token"])
        try:
            self.http_timeout = max(1.0, float(core.get("http_timeout") or 30.0))
        except (TypeError, ValueError):
            self.http_timeout = 30.0

    def with_options(self, options) -> Config:
        if not isinstance(options, dict) or not options:
            return self
        picked = {k: v for k, v in options.items() if k in CREATE_OPTIONS and v is not None}
        if not picked:
            return self
        clone = Config({**self.raw, **picked})
        clone.http_timeout = self.http_timeout
        return clone

    @property
    def secrets(self) -> list[str]:
        return [getattr(self, k) for k in SECRET_FIELDS if getattr(self, k, "")]


def _number(value) -> bool:
    """A real, finite JSON number (not a bool, not NaN/Infinity, which Python's json accepts)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == value \
        and value not in (float("inf"), float("-inf"))


def _text(value) -> str:
    return "" if value is None else str(value).strip()


def _bool(field: str, value) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    text = _text(value).lower()
    if text in _TRUE:
        return True
    if text in _FALSE or text == "":
        return False if text else bool(DEFAULTS.get(field))
    raise config_error(field, "must be true or false")


def _int(field: str, value, lo: int, hi: int) -> int:
    if isinstance(value, bool):
        raise config_error(field, "must be a whole number")
    try:
        number = float(value) if not isinstance(value, int) else value
    except (TypeError, ValueError):
        raise config_error(field, f"must be a whole number between {lo} and {hi}") from None
    if not _number(number) or number != int(number) or not lo <= number <= hi:
        raise config_error(field, f"must be a whole number between {lo} and {hi}")
    return int(number)


def _server_url(base_url: str, domain: str, protocol: str) -> str:
    """Server root without /v1. ``domain`` (host[:port]) is used when base_url is left at its default."""
    import urllib.parse
    url = base_url or DEFAULT_BASE_URL
    if domain and url.rstrip("/") in (DEFAULT_BASE_URL, DEFAULT_BASE_URL + "/v1"):
        url = domain if "://" in domain else f"{protocol or 'http'}://{domain}"
    if "://" not in url:
        url = f"{protocol or 'http'}://{url}"
    url = url.rstrip("/")
    if url.endswith("/v1"):
        url = url[:-3].rstrip("/")
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError on a bad port
    except ValueError:
        raise config_error("base_url", "is not a valid URL") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise config_error("base_url", "must look like http://host:port (a trailing /v1 is accepted)")
    return url


def _aliases(value) -> dict:
    if isinstance(value, dict):
        return {str(k).strip(): str(v).strip() for k, v in value.items()}
    items = value if isinstance(value, list) else _text(value).split(",")
    out = {}
    for item in items:
        item = str(item).strip()
        if not item:
            continue
        name, sep, image = item.partition("=")
        if not sep or not name.strip() or not image.strip():
            raise config_error("image_aliases", f"entry {item[:60]!r} is not name=image")
        out[name.strip()] = image.strip()
    return out


def _entrypoint(value) -> list[str]:
    if isinstance(value, list):
        argv = [str(v) for v in value]
    else:
        text = _text(value)
        if text.startswith("["):
            try:
                argv = json.loads(text)
            except ValueError:
                raise config_error("entrypoint", "is not a valid JSON list") from None
            if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
                raise config_error("entrypoint", "must be a list of strings")
        else:
            import shlex
            try:
                argv = shlex.split(text)
            except ValueError:
                raise config_error("entrypoint", "has unbalanced quotes") from None
    return argv or DEFAULT_ENTRYPOINT.split()


def _network_policy(value):
    if isinstance(value, dict):
        return value
    text = _text(value)
    if not text:
        return None
    try:
        policy = json.loads(text)
    except ValueError:
        raise config_error("network_policy", "is not valid JSON") from None
    if not isinstance(policy, dict):
        raise config_error("network_policy", 'must be a JSON object like {"defaultAction": "deny"}')
    return policy


def _platform(value):
    if isinstance(value, dict):
        return value
    text = _text(value).lower()
    if not text:
        return None
    osname, sep, arch = text.partition("/")
    if not sep:
        osname, arch = "linux", text
    if not osname or not arch or "/" in arch:
        raise config_error("platform", "must look like linux/amd64 or linux/arm64")
    return {"os": osname, "arch": arch}


# --------------------------------------------------------------------------- errors

class EppError(Exception):
    """A JSON-RPC error answer. ``sdk_code`` picks the host's exception class (epp-host-ref §4.1)."""

    def __init__(self, code: int, message: str, *, sdk_code: str | None = None,
                 suggestion: str | None = None, **data):
        super().__init__(message)
        self.code, self.message = code, message
        self.data = {k: v for k, v in data.items() if v not in (None, "")}
        if sdk_code:
            self.data["sdk_code"] = sdk_code
        if suggestion:
            self.data["suggestion"] = suggestion

    def to_json(self) -> dict:
        err = {"code": self.code, "message": self.message}
        if self.data:
            err["data"] = self.data
        return err


def config_error(field: str, problem: str) -> EppError:
    return EppError(-32006, f"Invalid opensandbox setting {field}: {problem}.",
                    suggestion=f"Fix ABX_OPENSANDBOX_{field.upper()} (or [providers.opensandbox] {field} "
                               "in ~/.abx/config.toml, or the provider option of the same name).",
                    field=field)


def bad_input(message: str, suggestion: str | None = None) -> EppError:
    return EppError(-32000, message, suggestion=suggestion)


def unsupported(feature: str, message: str, suggestion: str | None = None) -> EppError:
    return EppError(-32003, message, suggestion=suggestion, feature=feature, details={"feature": feature})


_SERVER_HINT = "Check that the OpenSandbox server is running and that base_url points at it."


def map_osb_error(exc: Exception, *, op: str, cfg: Config | None = None, target: str = "") -> EppError:
    """OpenSandbox failure -> EPP error. ``op`` is the kind of call: sandbox (an existing sandbox),
    create, list, files, exec, process or ports. Never raises; never includes a secret value."""
    import _osb_http as osb
    try:
        if isinstance(exc, EppError):
            return exc
        if isinstance(exc, osb.NetError):
            return _map_net_error(exc, cfg)
        if isinstance(exc, osb.HttpError):
            return _map_http_error(exc, op, target)
        if isinstance(exc, UnicodeError):       # e.g. a lone surrogate in an id or path: no URL can carry it
            return EppError(-32602, "Invalid params: a text parameter is not valid Unicode (it contains a lone "
                                    "surrogate) and cannot be sent to OpenSandbox.")
        return EppError(-32603 if isinstance(exc, (TypeError, AttributeError, KeyError)) else -32000,
                        f"opensandbox provider internal error: {type(exc).__name__}: {exc}",
                        suggestion="Please report this with the plugin's stderr output.")
    except Exception as bug:  # noqa: BLE001
        return EppError(-32000, f"opensandbox provider error ({type(bug).__name__})")


def _map_net_error(exc, cfg: Config | None) -> EppError:
    where = exc.target
    if exc.kind == "timeout":
        return EppError(-32000, f"OpenSandbox did not answer in time ({exc.what}, {where}).",
                        sdk_code="E3001", retryable=True,
                        suggestion="The server or sandbox may be overloaded or paused; retry, or raise "
                                   "http_timeout. A paused sandbox answers only after resume.")
    if exc.kind == "incomplete":
        return EppError(-32000, f"The answer from OpenSandbox at {where} was cut short ({exc.what}): {exc.detail}",
                        sdk_code="E5001", retryable=True,
                        suggestion="A proxy or the server closed the connection mid-answer; retry. Nothing "
                                   "partial was used.")
    if exc.kind in ("refused", "reset", "dns"):
        import _osb_http as osb
        server = osb._safe_url(cfg.server) if cfg is not None else ""
        if cfg is not None and not where.startswith(server):
            hint = ("Is the sandbox still running? If its ports are not reachable from this machine, "
                    "set use_server_proxy=true.")
        else:
            hint = _SERVER_HINT + (f" (now {server})." if server else "")
        what = {"refused": "connection refused", "reset": "connection reset",
                "dns": "host name not found"}[exc.kind]
        return EppError(-32000, f"Cannot reach OpenSandbox at {where} ({exc.what}): {what}.",
                        sdk_code="E5001", suggestion=hint, retryable=exc.kind != "dns")
    return EppError(-32000, f"Network error talking to OpenSandbox at {where} ({exc.what}): {exc.detail}",
                    sdk_code="E5000", suggestion=_SERVER_HINT)


def _map_http_error(exc, op: str, target: str) -> EppError:
    status, code, msg = exc.status, exc.code or "", exc.message
    plane = "execd" if exc.plane == "execd" else "OpenSandbox"
    text = f"{plane} HTTP {status} ({exc.what}): {msg}"
    extra = {"http_status": status, "osb_code": code or None, "request_id": exc.request_id or None}
    if status == 401:
        if exc.plane == "execd":
            return EppError(-32001, text, sdk_code="E1001", **extra,
                            suggestion="Set execd_access_token (ABX_OPENSANDBOX_EXECD_ACCESS_TOKEN) to the "
                                       "token execd was started with.")
        return EppError(-32001, text, sdk_code="E1001", **extra,
                        suggestion="Set api_key (ABX_OPENSANDBOX_API_KEY or OPEN_SANDBOX_API_KEY) to the "
                                   "server's API key.")
    if status == 403:
        if op == "files":
            return EppError(-32000, text, sdk_code="E4002", **extra,
                            suggestion="The sandbox user may not access this path.")
        return EppError(-32001, text, **extra, suggestion="The credentials are valid but not allowed to do this.")
    if "QUOTA" in code.upper():
        return EppError(-32004, text, **extra, suggestion="Delete unused sandboxes or raise the quota.")
    if "IMAGE_PULL" in code.upper():
        return EppError(-32000, text, sdk_code="E2001", **extra,
                        suggestion="Check the template (image name), the registry and "
                                   "registry_username/registry_password.")
    if status == 501 or code.upper().endswith("NOT_SUPPORTED"):
        return unsupported(op, text, "This OpenSandbox runtime does not offer the operation.")
    if status == 404:
        upper = code.upper()
        if upper.endswith("SANDBOX_NOT_FOUND") or (exc.plane == "lifecycle" and op != "ports"):
            return EppError(-32002, text, sdk_code="E2009", **extra,
                            suggestion="Run list to see the sandboxes; a killed or expired sandbox cannot be "
                                       "reconnected.")
        if upper == "FILE_NOT_FOUND" or op == "files":
            return EppError(-32002, text, sdk_code="E4001", **extra, path=target or None,
                            suggestion="Check the path; list the parent directory to see what exists.")
        if msg.strip() == "404 page not found":
            return EppError(-32000, text, **extra,
                            suggestion="This execd does not serve the route; use a newer execd image.")
        return EppError(-32002, text, **extra,
                        suggestion="It may have finished or been removed already; list it again.")
    if status == 409:
        return EppError(-32000, text, **extra, suggestion="The sandbox is not in a state that allows this now.")
    if status in (400, 422):
        return EppError(-32000, text, **extra, suggestion="OpenSandbox rejected the request; see the message.")
    if status == 429:
        import _osb_http as osb
        after = osb.retry_after_seconds(exc.headers.get("retry-after"))
        hint = f"Too many requests; retry in {after:g} s." if after is not None else "Too many requests; retry later."
        return EppError(-32000, text, retryable=True, retry_after=after, **extra, suggestion=hint)
    if status in (502, 503, 504):
        return EppError(-32000, text, retryable=True, **extra,
                        suggestion="The server, or a proxy in front of it, is unavailable; retry later.")
    if status >= 500:
        return EppError(-32000, text, **extra, suggestion="OpenSandbox failed; see the server log.")
    return EppError(-32000, text, **extra, suggestion="See the message; retry if the condition was temporary.")


def redact(value, secrets: list[str]):
    """Replace every secret (and its JSON/URL-escaped forms) in strings, recursively."""
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            if len(secret) < 3:
                continue
            forms = {secret, json.dumps(secret)[1:-1]}
            try:
                import urllib.parse
                forms.add(urllib.parse.quote(secret, safe=""))
            except Exception:  # noqa: BLE001
                pass
            for form in forms:
                if form:
                    value = value.replace(form, "***")
        return value
    if isinstance(value, dict):
        return {k: redact(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, secrets) for v in value]
    return value


# --------------------------------------------------------------------------- EPP loop

class Request:
    """One in-flight request: its id and its cancellation ($/cancel)."""

    def __init__(self, rid):
        self.id = rid
        self.cancelled = threading.Event()
        self._callbacks: list = []
        self._lock = threading.Lock()

    def on_cancel(self, fn) -> None:
        with self._lock:
            if not self.cancelled.is_set():
                self._callbacks.append(fn)
                return
        fn()

    def cancel(self) -> None:
        with self._lock:
            self.cancelled.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            try:
                fn()
            except Exception:  # noqa: BLE001
                pass


class Deferred:
    """A result sent now, plus work that continues afterwards (streaming after exec.start)."""

    def __init__(self, result: dict, then):
        self.result, self.then = result, then


class Server:
    def __init__(self, rfile, wfile):
        self.rfile, self.wfile = rfile, wfile
        self._wlock = threading.Lock()
        self._state_lock = threading.Lock()
        self.raw_config: dict = {}
        self.core: dict = {}
        self.data_dir = os.environ.get("ABX_PROVIDER_DATA_DIR") or None
        self.requests: dict = {}
        self.active_runs: set = set()
        self.closing = threading.Event()
        self._cfg: Config | None = None
        self._cfg_error: EppError | None = None
        self._osb = None

    # ---- output (the only writer of stdout)

    def send(self, msg: dict) -> None:
        msg = {"jsonrpc": "2.0", **msg}
        if "error" in msg:
            msg["error"] = redact(msg["error"], self.secrets())
        res = msg.get("result")
        if isinstance(res, dict) and len(res) == 1 and isinstance(res.get("content_b64"), bytes):
            # files.read: base64 is JSON-safe ASCII, so it is spliced into the line as it is instead of
            # json-encoding a multi-MB string (about 1.5x faster reads, measured in bench/)
            line = b"".join([b'{"jsonrpc":"2.0","id":', json.dumps(msg["id"]).encode(),
                             b',"result":{"content_b64":"', res["content_b64"], b'"}}'])
            msg = {"jsonrpc": "2.0", "id": msg["id"], "result": {}} if len(line) >= MAX_LINE_BYTES else None
        if msg is not None:
            try:
                line = json.dumps(msg, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            except UnicodeEncodeError:      # lone surrogates: fall back to \u escapes
                line = json.dumps(msg, separators=(",", ":")).encode("ascii")
        if len(line) >= MAX_LINE_BYTES:
            if "id" not in msg:
                self.log_stderr(f"dropped a {len(line)}-byte notification (EPP line limit)")
                return
            err = EppError(-32000, f"The answer is {len(line)} bytes, over EPP's 8 MiB line limit.",
                           suggestion="Ask for less data at once (files: use offset/length).")
            line = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": err.to_json()}).encode()
        with self._wlock:
            try:
                self.wfile.write(line + b"\n")
                self.wfile.flush()
            except (OSError, ValueError):
                self.closing.set()

    def respond(self, rid, result=None, error: EppError | None = None) -> None:
        if error is not None:
            self.send({"id": rid, "error": error.to_json()})
        else:
            self.send({"id": rid, "result": {} if result is None else result})

    def notify(self, method: str, params: dict) -> None:
        self.send({"method": method, "params": params})

    def log_stderr(self, text: str) -> None:
        try:
            sys.stderr.write(redact(f"opensandbox: {text}\n", self.secrets()))
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    def secrets(self) -> list[str]:
        values = [str(self.raw_config.get(k) or "") for k in SECRET_FIELDS]
        if self._cfg is not None:
            values += self._cfg.secrets
        return sorted({v for v in values if v}, key=len, reverse=True)

    # ---- configuration and client, built once per process on first use

    def config(self) -> Config:
        with self._state_lock:
            if self._cfg is None and self._cfg_error is None:
                try:
                    self._cfg = Config(self.raw_config, self.core)
                except EppError as exc:
                    self._cfg_error = exc
            if self._cfg_error is not None:
                raise self._cfg_error
            return self._cfg

    def osb(self):
        cfg = self.config()
        with self._state_lock:
            if self._osb is None:
                import _osb_http as osb
                self._osb = osb.OpenSandbox(
                    cfg.server, api_key=cfg.api_key, http=osb.Http(cfg.http_timeout),
                    data_dir=self.data_dir, use_server_proxy=cfg.use_server_proxy,
                    execd_token=cfg.execd_access_token, scheme=cfg.protocol)
                osb.add_secret(cfg.registry_password)     # error bodies may echo the create request
            return self._osb

    # ---- loop

    def serve(self) -> None:
        while True:
            try:
                line = self.rfile.readline()
            except (OSError, ValueError):
                break
            if not line:
                break
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except (ValueError, RecursionError):         # RecursionError: absurdly deep nesting
                self.log_stderr("ignored a line that is not JSON")
                continue
            if isinstance(msg, dict):
                self.dispatch(msg)
            else:
                self.log_stderr("ignored a line that is not a JSON object")
        self.finish()

    def dispatch(self, msg: dict) -> None:
        method, rid = msg.get("method"), msg.get("id")
        if isinstance(rid, (bool, float, list, dict)):
            return                                        # not a JSON-RPC id: there is nobody to answer
        if not isinstance(method, str):
            if rid is not None and "result" not in msg and "error" not in msg:
                self.respond(rid, error=EppError(-32600, "Invalid Request: method must be a string."))
            return
        raw_params = msg.get("params")
        if raw_params is not None and not isinstance(raw_params, dict):
            if rid is not None:
                self.respond(rid, error=EppError(-32602, "Invalid params: params must be an object."))
            return
        params = raw_params or {}
        if rid is None:                                   # a notification
            target = params.get("id")
            if method == "$/cancel" and isinstance(target, (int, str)) and not isinstance(target, bool):
                req = self.requests.get(target)
                if req is not None:
                    req.cancel()
            return
        if method == "initialize":                        # answered inline: cheap, no I/O
            self.respond(rid, m_initialize(self, params))
            return
        if method == "shutdown":
            self.closing.set()
            self.respond(rid, {})
            return
        req = Request(rid)
        self.requests[rid] = req
        threading.Thread(target=self._run, args=(req, method, params), daemon=True,
                         name=f"epp-{rid}").start()

    def _run(self, req: Request, method: str, params: dict) -> None:
        then = None
        try:
            fn = METHODS.get(method)
            if fn is None:
                raise EppError(-32601, f"Method not found: {method}")
            result = fn(self, req, params)
            if isinstance(result, Deferred):
                result, then = result.result, result.then
            self.respond(req.id, result)
        except EppError as exc:
            self.respond(req.id, error=exc)
        except Exception as exc:  # noqa: BLE001 - every failure becomes an answer
            cfg = self._cfg
            self.respond(req.id, error=map_osb_error(exc, op=_op_kind(method), cfg=cfg))
        finally:
            self.requests.pop(req.id, None)
        if then is not None:
            try:
                then()
            except Exception as exc:  # noqa: BLE001
                self.log_stderr(f"{method}: {type(exc).__name__}: {exc}")

    def finish(self) -> None:
        """stdin closed: stop foreground commands we still run (best effort, in parallel), give
        requests in flight up to 2 s to answer (the host waits 3 s before SIGTERM), then exit."""
        self.closing.set()
        threads = []
        for run in list(self.active_runs):
            t = threading.Thread(target=_quiet_interrupt, args=(run, 1.5), daemon=True)
            t.start()
            threads.append(t)
        deadline = time.monotonic() + 2.0
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        while self.requests and time.monotonic() < deadline:    # let answers in flight go out
            time.sleep(0.02)
        if "_pty" in sys.modules:           # end our terminals (their sessions are deleted in execd)
            sys.modules["_pty"].close_all()
        if self._osb is not None:
            self._osb.http.close()


def _op_kind(method: str) -> str:
    if method == "sandbox.create":
        return "create"
    if method == "sandbox.list":
        return "list"
    return {"files": "files", "exec": "exec", "process": "process", "ports": "ports"}.get(
        method.split(".", 1)[0], "sandbox")


# --------------------------------------------------------------------------- helpers for methods

def _sandbox_id(p: dict) -> str:
    sid = p.get("sandbox_id")
    if not isinstance(sid, str) or not sid.strip():
        raise EppError(-32602, "Invalid params: sandbox_id must be a non-empty string.")
    return sid.strip()


def _path(p: dict, key: str = "path") -> str:
    path = p.get(key)
    if not isinstance(path, str) or not path or "\0" in path:
        raise EppError(-32602, f"Invalid params: {key} must be a non-empty path.")
    return path


def _guard(fn, *, op: str, srv: Server, target: str = ""):
    """Run an OpenSandbox call and map its failure."""
    try:
        return fn()
    except EppError:
        raise
    except Exception as exc:  # noqa: BLE001
        raise map_osb_error(exc, op=op, cfg=srv._cfg, target=target) from None


def _is_http(exc, *statuses) -> bool:
    import _osb_http as osb
    return isinstance(exc, osb.HttpError) and exc.status in statuses


STATE_TO_STATUS = {  # seed 000 §2.5
    "Pending": "creating", "Running": "running", "Pausing": "paused", "Paused": "paused",
    "Resuming": "creating", "Stopping": "stopping", "Terminated": "stopped", "Failed": "error",
}
STATUS_TO_STATES = {
    "running": ["Running"], "paused": ["Paused", "Pausing"], "pausing": ["Pausing"],
    "creating": ["Pending", "Resuming"], "stopping": ["Stopping"], "stopped": ["Terminated"],
    "error": ["Failed"],
}


def _state(sb: dict) -> str:
    status = sb.get("status") if isinstance(sb.get("status"), dict) else {}
    return str(status.get("state") or "")


def to_record(sb: dict, template: str | None = None) -> dict:
    """OpenSandbox Sandbox -> EPP SandboxRecord (no url/envd_url: commands and files go over EPP)."""
    image = sb.get("image") if isinstance(sb.get("image"), dict) else {}
    status = sb.get("status") if isinstance(sb.get("status"), dict) else {}
    state = _state(sb)
    rec = {
        "sandbox_id": str(sb.get("id") or ""),
        "template": template or str(image.get("uri") or ""),
        "status": STATE_TO_STATUS.get(state, "error"),
        "metadata": sb.get("metadata") if isinstance(sb.get("metadata"), dict) else {},
        "region": "",
        "state": state,
    }
    for src, dst in (("createdAt", "created_at"), ("expiresAt", "expires_at")):
        if isinstance(sb.get(src), str) and sb[src]:
            rec[dst] = sb[src]
    if status.get("reason"):
        rec["state_reason"] = str(status["reason"])
    if status.get("message"):
        rec["state_message"] = str(status["message"])
    return rec


# --------------------------------------------------------------------------- methods: lifecycle

def m_initialize(srv: Server, p: dict) -> dict:
    srv.raw_config = p.get("config") if isinstance(p.get("config"), dict) else {}
    srv.core = p.get("core") if isinstance(p.get("core"), dict) else {}
    if isinstance(p.get("data_dir"), str) and p["data_dir"] and not srv.data_dir:
        srv.data_dir = p["data_dir"]
    return {
        "protocol": PROTOCOL,
        "plugin": {"name": PLUGIN_NAME, "version": PLUGIN_VERSION},
        "features": list(FEATURES),
        "operation_contract_version": OPERATION_CONTRACT_VERSION,
        "operations": {"cli": list(OPERATIONS["cli"]), "python": list(OPERATIONS["python"])},
        "workflow_inputs": list(WORKFLOW_INPUTS),
        "startup_modes": list(STARTUP_MODES),
    }


def m_sandbox_create(srv: Server, req: Request, p: dict) -> dict:
    import _osb_http as http
    cfg = srv.config().with_options(p.get("options"))
    osb = srv.osb()
    http.add_secret(cfg.registry_password)          # a per-create password: error bodies may echo it
    image = resolve_image(cfg, p.get("template"))
    body = create_body(cfg, p, image)
    budget = float(cfg.ready_timeout)
    if _number(p.get("request_timeout")) and p["request_timeout"] > 0:
        budget = min(budget, max(1.0, float(p["request_timeout"]) - 1.0))
    deadline = time.monotonic() + budget
    reply = _guard(lambda: osb.create(body, timeout=max(cfg.http_timeout, budget)), op="create", srv=srv)
    sb = reply.json() if isinstance(reply.json(), dict) else {}
    sid = str(sb.get("id") or "")
    if not sid:
        raise EppError(-32000, "OpenSandbox accepted the create request but returned no sandbox id.")
    try:
        sb = wait_ready(srv, req, osb, sid, sb, deadline, budget)
    except BaseException:
        try:
            osb.delete(sid)
        except Exception:  # noqa: BLE001 - best effort, the original error matters
            srv.log_stderr(f"could not delete sandbox {sid} after a failed create")
        raise
    osb.cache.prune()
    return to_record(sb, image)


def resolve_image(cfg: Config, template) -> str:
    """template -> image: an alias, then "base" -> default_image, else the image reference verbatim."""
    name = _text(template)
    if not name or name == "base":
        return cfg.default_image
    return cfg.image_aliases.get(name, name)


_LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?"
_DNS_PREFIX = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"


def check_metadata(metadata) -> dict:
    """Kubernetes label syntax (OpenSandbox stores metadata as labels, seed 000 §4.4)."""
    import re
    if metadata is None:
        return {}
    if not isinstance(metadata, dict):
        raise bad_input("metadata must be an object of string keys and values.")
    out = {}
    for key, value in metadata.items():
        key = str(key)
        prefix, slash, name = key.partition("/")
        if not slash:
            prefix, name = "", key
        problem = None
        if key.startswith("opensandbox.io/"):
            problem = "the opensandbox.io/ prefix is reserved by OpenSandbox"
        elif not name or len(name) > 63 or not re.fullmatch(_LABEL_NAME, name):
            problem = ("the name part must be 1-63 characters of letters, digits, '-', '_' or '.', "
                       "starting and ending with a letter or digit")
        elif slash and (not prefix or len(prefix) > 253 or not re.fullmatch(_DNS_PREFIX, prefix)):
            problem = "the prefix before '/' must be a lower-case DNS subdomain"
        if problem:
            raise bad_input(f"metadata key {key!r} is not a valid label key: {problem}.",
                            "Use keys like 'project' or 'example.com/team'.")
        text = "" if value is None else str(value)
        if len(text) > 63 or (text and not re.fullmatch(_LABEL_NAME, text)):
            raise bad_input(f"metadata value of key {key!r} is not a valid label value: at most 63 "
                            "characters of letters, digits, '-', '_' or '.', starting and ending with a "
                            "letter or digit.", "Store longer or free-form text in a file in the sandbox.")
        out[key] = text
    return out


def check_envs(envs, field: str = "envs") -> dict:
    if envs is None:
        return {}
    if not isinstance(envs, dict):
        raise bad_input(f"{field} must be an object of variable names to string values.")
    out = {}
    for key, value in envs.items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise bad_input(f"{field}: {str(key)[:60]!r} is not a valid environment variable name.")
        if value is None:
            value = ""
        if isinstance(value, (dict, list)) or "\0" in str(value):
            raise bad_input(f"{field}: the value of {key!r} must be a string without NUL bytes.")
        out[key] = value if isinstance(value, str) else json.dumps(value) if isinstance(value, bool) else str(value)
    return out


def create_body(cfg: Config, p: dict, image: str) -> dict:
    if p.get("disk") not in (None, 0):
        raise unsupported("disk", "OpenSandbox cannot size a sandbox's disk.",
                          "Create the sandbox without disk=.")
    limits = {"cpu": "500m", "memory": "512Mi"}            # the official SDK's defaults (rec 18)
    cpu, memory, gpu = p.get("cpu"), p.get("memory"), p.get("gpu")
    if cpu is not None:
        limits["cpu"] = _quantity("cpu", cpu, lambda n: f"{int(round(n * 1000))}m")
    if memory is not None:
        limits["memory"] = _quantity("memory", memory, lambda n: f"{int(n)}Mi")
    if gpu not in (None, "", 0):
        if isinstance(gpu, bool) or not str(gpu).strip().isdigit():
            raise unsupported("gpu", f"OpenSandbox takes a GPU count, not a model name ({str(gpu)[:40]!r}).",
                              "Pass gpu as a number of devices, e.g. 1.")
        limits["gpu"] = str(gpu).strip()
    body: dict = {"image": {"uri": image}, "resourceLimits": limits}
    if cfg.registry_username or cfg.registry_password:
        body["image"]["auth"] = {"username": cfg.registry_username, "password": cfg.registry_password}
    entrypoint = cfg.entrypoint
    if cfg.entrypoint_is_default and "code-interpreter" in image:
        entrypoint = list(CODE_INTERPRETER_ENTRYPOINT)      # keep the image's runtime script
    body["entrypoint"] = entrypoint
    ttl = p.get("timeout")
    if ttl is not None:
        if not _number(ttl) or ttl < 0:
            raise bad_input("timeout must be a number of seconds.")
        if ttl > 0:
            body["timeout"] = max(60, int(ttl))             # OpenSandbox's minimum TTL (rec 03)
    envs = check_envs(p.get("envs"))
    if envs:
        body["env"] = envs                                  # create takes "env" (rec 15)
    metadata = check_metadata(p.get("metadata"))
    if metadata:
        body["metadata"] = metadata
    if cfg.network_policy:
        body["networkPolicy"] = cfg.network_policy
    if cfg.platform:
        body["platform"] = cfg.platform
    secure = p["secure"] if isinstance(p.get("secure"), bool) else cfg.secure_access
    if secure:
        body["secureAccess"] = True
    return body


def _quantity(field: str, value, fmt) -> str:
    if isinstance(value, bool):
        raise bad_input(f"{field} must be a number.")
    if isinstance(value, (int, float)):
        if not _number(value) or value <= 0:
            raise bad_input(f"{field} must be a positive number.")
        return fmt(value)
    text = _text(value)
    try:
        number = float(text)
        if not _number(number) or number <= 0:
            raise bad_input(f"{field} must be a positive number.")
        return fmt(number)
    except ValueError:
        if text and text[0].isdigit():
            return text                                     # already a quantity like "250m" or "1Gi"
        raise bad_input(f"{field} must be a number or a resource quantity like 500m / 1Gi.") from None


def wait_ready(srv: Server, req: Request, osb, sid: str, sb: dict, deadline: float, budget: float) -> dict:
    """Until state Running AND execd answers /ping: the create answer already says Running before
    execd is up, and an entrypoint that exits turns the sandbox Failed a moment later (rec 15)."""
    import _osb_http as http
    interval, first, last_problem = 0.05, True, "state " + (_state(sb) or "unknown")
    while True:
        if req.cancelled.is_set():
            raise EppError(-32000, f"Creating sandbox {sid} was cancelled; it was deleted.")
        if not first:
            sb = _guard(lambda: osb.get(sid), op="sandbox", srv=srv).json() or sb
        first = False
        state = _state(sb)
        if state in ("Failed", "Terminated", "Stopping"):
            status = sb.get("status") if isinstance(sb.get("status"), dict) else {}
            detail = " ".join(str(status.get(k) or "") for k in ("reason", "message")).strip()
            raise EppError(-32000, f"Sandbox {sid} did not start: {state}" + (f" ({detail})" if detail else "") + ".",
                           suggestion="Check the image and the entrypoint setting: the entrypoint must keep "
                                      "running (default: tail -f /dev/null).", state=state)
        if state == "Running":
            try:
                execd = osb.execd(sid)
                execd.ping(timeout=max(0.5, min(3.0, deadline - time.monotonic())))
                # an entrypoint that exits at once can lose the race against the ping: confirm the state
                # once more (rec 15: Failed 0.4 s after a create that said Running)
                again = _guard(lambda: osb.get(sid), op="sandbox", srv=srv).json() or sb
                if _state(again) == "Running":
                    return again
                sb, first = again, True
                continue
            except http.HttpError as exc:
                if exc.status in (401, 403) or (exc.plane == "lifecycle" and exc.status < 500):
                    raise map_osb_error(exc, op="create", cfg=srv._cfg) from None
                last_problem = f"execd answered HTTP {exc.status}"
            except http.NetError as exc:
                last_problem = f"execd not reachable yet ({exc.kind})"
        else:
            last_problem = f"state {state or 'unknown'}"
        if time.monotonic() >= deadline:
            raise EppError(-32000, f"Sandbox {sid} was not ready within {budget:g} s ({last_problem}); "
                                   "it was deleted.", sdk_code="E3001",
                           suggestion="Raise ready_timeout (image pulls can be slow), or check the server.")
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
        interval = min(interval * 1.6, 0.5)


def m_sandbox_get(srv: Server, req: Request, p: dict) -> dict:
    sid = _sandbox_id(p)
    osb = srv.osb()
    return to_record(_guard(lambda: osb.get(sid), op="sandbox", srv=srv).json() or {})


def m_sandbox_connect(srv: Server, req: Request, p: dict) -> dict:
    """Like get, but a paused sandbox is resumed (what connect means for E2B-style hosts)."""
    sid = _sandbox_id(p)
    osb = srv.osb()
    sb = _guard(lambda: osb.get(sid), op="sandbox", srv=srv).json() or {}
    if _state(sb) == "Paused":
        _resume(srv, osb, sid)
        sb = _guard(lambda: osb.get(sid), op="sandbox", srv=srv).json() or sb
    return to_record(sb)


def m_sandbox_list(srv: Server, req: Request, p: dict) -> dict:
    osb = srv.osb()
    limit = p.get("limit")
    limit = limit if isinstance(limit, int) and not isinstance(limit, bool) and limit > 0 else 100
    cursor = p.get("cursor")
    page = int(cursor) if isinstance(cursor, (str, int)) and str(cursor).isdigit() and int(cursor) > 0 else 1
    states: list = []
    status = p.get("status")
    if status:
        states = STATUS_TO_STATES.get(str(status).lower())
        if states is None:
            raise bad_input(f"Unknown status filter {str(status)[:30]!r}; use one of "
                            + ", ".join(sorted(STATUS_TO_STATES)) + ".")
    metadata = ""
    if isinstance(p.get("metadata"), dict) and p["metadata"]:
        import urllib.parse
        metadata = "&".join(f"{urllib.parse.quote(str(k))}={urllib.parse.quote(str(v))}"
                            for k, v in p["metadata"].items())
    records: list = []
    next_page = None
    for _ in range(10_000):
        body = _guard(lambda: osb.list_page(page=page, page_size=200, states=states, metadata=metadata),
                      op="list", srv=srv)
        items = body.get("items") if isinstance(body.get("items"), list) else []
        records += [to_record(sb) for sb in items if isinstance(sb, dict) and sb.get("id")]
        pagination = body.get("pagination") if isinstance(body.get("pagination"), dict) else {}
        if not pagination.get("hasNextPage") or not items:
            next_page = None
            break
        page += 1
        next_page = str(page)
        if len(records) >= limit:
            break
    return {"sandboxes": records, "next": next_page}


def m_sandbox_kill(srv: Server, req: Request, p: dict) -> dict:
    """Idempotent: an unknown or already deleted id answers {} (epp-host-ref §4.3)."""
    sid = _sandbox_id(p)
    osb = srv.osb()
    _pty_module = sys.modules.get("_pty")
    if _pty_module is not None:         # a terminal never outlives its sandbox
        _pty_module.close_sandbox(sid)
    try:
        osb.delete(sid)
    except Exception as exc:  # noqa: BLE001
        if not _is_http(exc, 404):
            raise map_osb_error(exc, op="sandbox", cfg=srv._cfg) from None
        osb.forget(sid)
    return {}


def m_sandbox_set_timeout(srv: Server, req: Request, p: dict) -> dict:
    """renew-expiration with expiresAt = the server's clock (its Date header) + timeout, so a skewed
    local clock does not matter."""
    import datetime
    import email.utils
    sid = _sandbox_id(p)
    seconds = p.get("timeout")
    if not _number(seconds) or seconds <= 0:
        raise bad_input("timeout must be a positive number of seconds.")
    seconds = max(60, int(seconds))
    osb = srv.osb()
    reply = _guard(lambda: osb.get(sid), op="sandbox", srv=srv)
    now = None
    try:
        server_date = email.utils.parsedate_to_datetime(reply.headers.get("date", ""))
        if server_date.tzinfo is None:
            server_date = server_date.replace(tzinfo=datetime.timezone.utc)
        # Date has whole seconds: the true time is in [D, D+1); add the time since it arrived.
        now = server_date + datetime.timedelta(seconds=0.5 + time.monotonic() - reply.received)
    except (TypeError, ValueError, IndexError):
        now = datetime.datetime.now(datetime.timezone.utc)
    expires = (now + datetime.timedelta(seconds=seconds)).astimezone(datetime.timezone.utc)
    expires = expires.replace(microsecond=0) + datetime.timedelta(seconds=round(expires.microsecond / 1e6))
    stamp = expires.strftime("%Y-%m-%dT%H:%M:%SZ")
    _guard(lambda: osb.renew(sid, stamp), op="sandbox", srv=srv)
    return {"expires_at": stamp}


def m_sandbox_pause(srv: Server, req: Request, p: dict) -> dict:
    sid = _sandbox_id(p)
    osb = srv.osb()
    try:
        osb.pause(sid)
    except Exception as exc:  # noqa: BLE001
        # rec 14: pausing twice is 409 SANDBOX_NOT_RUNNING; already paused counts as success.
        if not (_is_http(exc, 409) and _state(_guard(lambda: osb.get(sid), op="sandbox", srv=srv).json() or {})
                in ("Paused", "Pausing")):
            raise map_osb_error(exc, op="sandbox", cfg=srv._cfg) from None
    return {}


def _resume(srv: Server, osb, sid: str) -> None:
    try:
        osb.resume(sid)
    except Exception as exc:  # noqa: BLE001
        # rec 14: resuming twice is 409 SANDBOX_NOT_PAUSED; already running counts as success.
        if not (_is_http(exc, 409) and _state(_guard(lambda: osb.get(sid), op="sandbox", srv=srv).json() or {})
                in ("Running", "Resuming")):
            raise map_osb_error(exc, op="sandbox", cfg=srv._cfg) from None


def m_sandbox_resume(srv: Server, req: Request, p: dict) -> dict:
    sid = _sandbox_id(p)
    _resume(srv, srv.osb(), sid)
    return {}


# --------------------------------------------------------------------------- methods: commands

class ExecSpec:
    """Validated exec.run / exec.start params."""

    def __init__(self, p: dict):
        self.sandbox_id = _sandbox_id(p)
        cmd, args, command = p.get("cmd"), p.get("args"), p.get("command")
        if isinstance(command, str) and command.strip() and not cmd:
            self.argv, self.command = None, command          # our extension: a shell string
        else:
            if not isinstance(cmd, str) or not cmd:
                raise EppError(-32602, "Invalid params: cmd must be a non-empty string.")
            if args is None:
                args = []
            if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
                raise EppError(-32602, "Invalid params: args must be a list of strings.")
            if any("\0" in a for a in [cmd, *args]):
                raise bad_input("A command argument contains a NUL byte.")
            self.argv, self.command = [cmd, *args], None
        self.env = check_envs(p.get("env"), "env")
        cwd = p.get("cwd")
        self.cwd = cwd if isinstance(cwd, str) else ""
        user = p.get("user")
        self.user = user.strip() if isinstance(user, str) else str(user) if isinstance(user, int) else ""
        timeout = p.get("timeout")
        if timeout is None:
            timeout = 60
        if not _number(timeout) or timeout < 0:
            raise EppError(-32602, "Invalid params: timeout must be a number of seconds (0 = none).")
        self.timeout = float(timeout)
        self.detached = p.get("detached") is True or p.get("background") is True


def _user_ids(srv: Server, execd, user: str) -> tuple:
    """"" -> default; "1000" / "1000:1000" -> ids; "root" -> 0; other names are looked up with id(1)."""
    if not user:
        return None, None
    uid_s, _, gid_s = user.partition(":")
    if uid_s.isdigit() and (not gid_s or gid_s.isdigit()):
        return int(uid_s), (int(gid_s) if gid_s else None)
    if user == "root":
        return 0, 0
    import _osb_http as osb
    code, out, _ = run_internal(srv, execd, f"id -u {osb.shell_join([user])} && id -g {osb.shell_join([user])}")
    ids = out.split()
    if code != 0 or len(ids) != 2 or not all(i.isdigit() for i in ids):
        raise bad_input(f"User {user[:40]!r} does not exist in the sandbox.",
                        "Pass a user name that exists in the image, or a numeric uid.")
    return int(ids[0]), int(ids[1])


def _start(srv: Server, spec: ExecSpec, *, background: bool = False):
    osb = srv.osb()
    execd = _guard(lambda: osb.execd(spec.sandbox_id), op="exec", srv=srv)
    uid, gid = _user_ids(srv, execd, spec.user)
    # execd enforces the timeout too (rec 09); we enforce it ourselves as well (the host never does).
    timeout_ms = int(spec.timeout * 1000) if spec.timeout > 0 else 0
    return _guard(lambda: execd.start(argv=spec.argv, command=spec.command, envs=spec.env, cwd=spec.cwd,
                                      uid=uid, gid=gid, timeout_ms=timeout_ms, background=background),
                  op="exec", srv=srv)


_END, _WAKE = object(), object()


class Pump:
    """Reads a CommandRun on its own thread so the caller can wait with deadlines and cancel. The
    queue is bounded: a slow reader of our stdout slows the SSE read, and so execd, down."""

    def __init__(self, run):
        import queue
        self.run, self.q, self.queue_empty = run, queue.Queue(maxsize=4096), queue.Empty
        self._held = None
        threading.Thread(target=self._read, daemon=True, name="execd-sse").start()

    def _read(self) -> None:
        try:
            for event in self.run.events():
                self.q.put(event)
        except Exception as exc:  # noqa: BLE001
            self.q.put(exc)
        self.q.put(_END)

    def get(self, timeout: float | None):
        if self._held is not None:
            item, self._held = self._held, None
            return item
        try:
            return self.q.get(timeout=timeout)
        except self.queue_empty:
            return None

    def more_of(self, kind: str, text: str, limit: int = OUTPUT_CHUNK_CHARS) -> str:
        """Join output of the same stream that is already queued (v1.1.0 sends one event per line)."""
        parts, size = [text], len(text)
        while size < limit:
            try:
                item = self.q.get_nowait()
            except self.queue_empty:
                break
            if isinstance(item, dict) and item.get("type") == kind:
                parts.append(item["text"])
                size += len(item["text"])
            else:
                self._held = item
                break
        return "".join(parts)

    def wake(self) -> None:
        try:
            self.q.put_nowait(_WAKE)
        except Exception:  # noqa: BLE001 - full: the reader is about to be woken anyway
            pass


def _quiet_interrupt(run, timeout: float = 5.0) -> None:
    if run.command_id:
        try:
            run.execd.interrupt(run.command_id, timeout=timeout)
        except Exception:  # noqa: BLE001
            pass


def drive(srv: Server, req: Request, run, pump: Pump, spec: ExecSpec, started: float, on_output,
          first=None) -> tuple[int, str | None]:
    """Forward output until the terminal event; returns (exit_code, problem or None).

    Timeout: at the deadline the command is interrupted (DELETE /command?id=); if execd has not
    ended the stream STOP_GRACE later we stop reading. A timed-out command exits 124.
    """
    import _osb_http as osb
    deadline = started + spec.timeout if spec.timeout > 0 else None
    stop_at, timed_out = None, False
    req.on_cancel(pump.wake)
    item = first
    while True:
        now = time.monotonic()
        if item is None:
            if req.cancelled.is_set() and stop_at is None:
                threading.Thread(target=_quiet_interrupt, args=(run,), daemon=True).start()
                stop_at = now + STOP_GRACE
            if deadline is not None and now >= deadline and stop_at is None:
                timed_out = True
                threading.Thread(target=_quiet_interrupt, args=(run,), daemon=True).start()
                stop_at = now + STOP_GRACE
            if stop_at is not None and now >= stop_at:
                run.abort()
                return (124 if timed_out else 130), None
            waits = [t - now for t in (deadline if stop_at is None else None, stop_at) if t is not None]
            item = pump.get(max(0.01, min(waits)) if waits else None)
            if item is None or item is _WAKE:
                item = None
                continue
        current, item = item, None
        if current is _END:
            return _lost_stream(run, "the output stream ended before the command finished")
        if isinstance(current, Exception):
            return _lost_stream(run, f"reading the output failed ({type(current).__name__})")
        kind = current.get("type")
        if kind in ("stdout", "stderr"):
            on_output(kind, pump.more_of(kind, current["text"]))
            continue
        try:
            code = osb.terminal_exit_code(current)
        except osb.StartFailure as exc:
            on_output("stderr", f"{exc}\n")
            return 126, None
        if code is None:
            continue
        late = deadline is not None and time.monotonic() >= deadline - 0.25
        if code != 0 and (timed_out or (late and code in (-1, 137))):
            code = 124
        return code, None


def _lost_stream(run, why: str) -> tuple[int, str]:
    """No terminal event: the output may be incomplete, so this is always reported as a problem.
    execd still knows how the command ended (rec 07: foreground commands have a status too, but no
    logs): its exit code when it exited by itself; -1 when it was killed (execd kills a foreground
    command whose stream broke, so a signal here says nothing about the command) or is unknown."""
    if run.command_id:
        for _ in range(10):
            try:
                st = run.execd.status(run.command_id)
            except Exception:  # noqa: BLE001
                break
            if st.get("running") is False:
                code = st.get("exit_code")
                if isinstance(code, int) and not isinstance(code, bool) and code >= 0:
                    return code, why
                return -1, why
            time.sleep(0.2)
    return -1, why


def _await_start(srv: Server, spec: ExecSpec, run, pump: Pump):
    """A command that cannot start ends with an error event right after init: answer that as an error
    instead of a process id. Returns the first event (or None) for drive()."""
    import _osb_http as osb
    first = pump.get(0.25)
    if isinstance(first, dict) and first.get("type") == "error":
        try:
            osb.terminal_exit_code(first)
        except osb.StartFailure as exc:
            raise EppError(-32000, f"The command could not be started: {exc}",
                           suggestion="Check the command name, cwd and user.") from None
    return None if first is _WAKE else first


def m_exec_start(srv: Server, req: Request, p: dict):
    spec = ExecSpec(p)
    if spec.detached:
        return _start_detached(srv, spec)
    started = time.monotonic()
    run = _start(srv, spec)
    pump = Pump(run)
    first = _await_start(srv, spec, run, pump)
    pid = run.command_id or f"cmd-{os.urandom(8).hex()}"

    def emit(kind: str, text: str) -> None:
        for i in range(0, len(text), OUTPUT_CHUNK_CHARS):
            srv.notify("exec.output", {"process_id": pid, "stream": kind, "data": text[i:i + OUTPUT_CHUNK_CHARS]})

    def stream() -> None:
        srv.active_runs.add(run)
        try:
            code, problem = drive(srv, req, run, pump, spec, started, emit, first)
        finally:
            srv.active_runs.discard(run)
        if problem:
            emit("stderr", f"[opensandbox provider] {problem}; the output may be incomplete\n")
        srv.notify("exec.exit", {"process_id": pid, "exit_code": int(code)})

    return Deferred({"process_id": pid}, stream)


def m_exec_run(srv: Server, req: Request, p: dict) -> dict:
    spec = ExecSpec(p)
    if spec.detached:
        raise bad_input("exec.run cannot run a detached command; use exec.start with detached: true.")
    started = time.monotonic()
    run = _start(srv, spec)
    req.on_cancel(lambda: _quiet_interrupt(run))
    pump = Pump(run)
    first = _await_start(srv, spec, run, pump)
    out: dict = {"stdout": [], "stderr": []}
    srv.active_runs.add(run)
    try:
        code, problem = drive(srv, req, run, pump, spec, started, lambda k, t: out[k].append(t), first)
    finally:
        srv.active_runs.discard(run)
    if problem:
        ended = f" The command exited with {code}, but its output may be incomplete." if code != -1 else ""
        raise EppError(-32000, f"Lost the command's output: {problem}.{ended}", sdk_code="E5001",
                       suggestion="Check the connection to the sandbox; run the command again if it is safe "
                                  "to repeat.", exit_code=code if code != -1 else None)
    return _fit_result("".join(out["stdout"]), "".join(out["stderr"]), code)


def _fit_result(stdout: str, stderr: str, code: int) -> dict:
    """Keep the exec.run answer under the 8 MiB line limit (the head of the output is kept)."""
    result = {"stdout": stdout, "stderr": stderr, "exit_code": int(code)}
    budget = MAX_LINE_BYTES - 64 * 1024
    size = len(json.dumps(result, ensure_ascii=False).encode("utf-8", "replace"))
    while size > budget:
        ratio = budget / size * 0.95
        dropped = 0
        for key in ("stdout", "stderr"):
            keep = int(len(result[key]) * ratio)
            dropped += len(result[key]) - keep
            result[key] = result[key][:keep]
        result["stderr"] += f"\n[opensandbox provider: {dropped} characters of output dropped (EPP 8 MiB limit)]\n"
        result["truncated"] = True
        size = len(json.dumps(result, ensure_ascii=False).encode("utf-8", "replace"))
    return result


def run_internal(srv: Server, execd, script: str, timeout: float = 30.0) -> tuple[int, str, str]:
    """Run a helper shell script in the sandbox (process list, kill, user lookup)."""
    run = _guard(lambda: execd.start(argv=["sh", "-c", script], timeout_ms=int(timeout * 1000)),
                 op="process", srv=srv)
    out: dict = {"stdout": [], "stderr": []}
    spec = type("Spec", (), {"timeout": timeout})()
    code, problem = drive(srv, Request(None), run, Pump(run), spec, time.monotonic(),
                          lambda k, t: out[k].append(t))
    if problem:
        raise EppError(-32000, f"A helper command in the sandbox failed: {problem}.", sdk_code="E5001")
    return code, "".join(out["stdout"]), "".join(out["stderr"])


def _start_detached(srv: Server, spec: ExecSpec) -> Deferred:
    """`sessions`: a background command (it survives this process), followed by polling its merged
    logs and status (rec 10)."""
    run = _start(srv, spec, background=True)
    for event in run.events():       # init, ping, execution_complete arrive at once (rec 10)
        if event.get("type") == "error":
            import _osb_http as osb
            try:
                osb.terminal_exit_code(event)
            except osb.StartFailure as exc:
                raise EppError(-32000, f"The command could not be started: {exc}") from None
    run.stream.close()
    if not run.command_id:
        raise EppError(-32000, "execd started a background command but returned no command id.")
    pid, execd = run.command_id, run.execd

    def follow() -> None:
        cursor, delay, failing_since = None, 0.1, None
        while not srv.closing.is_set():
            polled = time.monotonic()
            try:
                status = execd.status(pid)
                text, cursor = execd.logs(pid, cursor)
            except Exception as exc:  # noqa: BLE001
                # the calls retry by themselves; keep polling through an outage of up to http_timeout
                now = time.monotonic()
                failing_since = failing_since or polled
                if now - failing_since < execd.osb.http.timeout and not srv.closing.is_set():
                    time.sleep(delay)
                    delay = min(delay * 1.5, 1.0)
                    continue
                err = map_osb_error(exc, op="process", cfg=srv._cfg)
                note = f"[opensandbox provider] lost track of the command: {err.message}\n"
                srv.notify("exec.output", {"process_id": pid, "stream": "stderr", "data": note})
                srv.notify("exec.exit", {"process_id": pid, "exit_code": -1})
                return
            failing_since = None
            if text:
                srv.notify("exec.output", {"process_id": pid, "stream": "stdout", "data": text})
                delay = 0.1
            if status.get("running") is False:
                code = status.get("exit_code")
                if not isinstance(code, int) or code == -1:
                    import _osb_http as osb
                    code = osb.signal_exit_code(str(status.get("error") or "")) or (code if isinstance(code, int) else 0)
                srv.notify("exec.exit", {"process_id": pid, "exit_code": int(code)})
                return
            time.sleep(delay)
            delay = min(delay * 1.5, 1.0)

    return Deferred({"process_id": pid, "detached": True}, follow)


# --------------------------------------------------------------------------- methods: processes

_PS_MARK = "__osb_ps__"
_PS_SCRIPT = r"""# __osb_ps__
echo "SELF $$"
if ps -eo pid=,ppid=,stat=,args= 2>/dev/null; then exit 0; fi
for d in /proc/[0-9]*; do
  p=${d#/proc/}
  st=$(sed 's/.*) //' "$d/stat" 2>/dev/null | cut -d' ' -f1-2) || continue
  [ -n "$st" ] || continue
  set -- $st
  a=$(tr '\000' ' ' < "$d/cmdline" 2>/dev/null)
  [ -n "$a" ] || a="[$(cat "$d/comm" 2>/dev/null)]"
  echo "$p $2 $1 $a"
done
"""


def m_process_list(srv: Server, req: Request, p: dict) -> dict:
    """Emulated with ps (or /proc) inside the sandbox: execd has no process table."""
    sid = _sandbox_id(p)
    osb = srv.osb()
    execd = _guard(lambda: osb.execd(sid), op="process", srv=srv)
    code, out, err = run_internal(srv, execd, _PS_SCRIPT)
    lines = out.splitlines()
    me = None
    if lines and lines[0].startswith("SELF "):
        me = lines.pop(0)[5:].strip()
    procs = []
    for line in lines:
        fields = line.split(None, 3)
        if len(fields) < 3 or not fields[0].isdigit():
            continue
        pid, ppid, stat = fields[0], fields[1], fields[2]
        args = fields[3] if len(fields) > 3 else ""
        if pid == me or ppid == me or _PS_MARK in args:
            continue
        state = {"Z": "zombie", "T": "stopped", "t": "stopped", "X": "dead"}.get(stat[:1], "running")
        procs.append({"pid": int(pid), "ppid": int(ppid) if ppid.isdigit() else None,
                      "command": args.strip(), "status": state, "state": stat})
    if not procs and code != 0:
        raise EppError(-32000, f"Could not list processes in the sandbox (exit {code}): {err.strip()[:200]}",
                       suggestion="The image needs ps or a readable /proc.")
    return {"processes": procs}


def m_process_signal(srv: Server, req: Request, p: dict) -> dict:
    """numeric pid -> `kill -SIG pid` in the sandbox; an execd command id -> execd's interrupt."""
    import re
    sid = _sandbox_id(p)
    pid = p.get("pid")
    sig = p.get("signal", 15)
    if isinstance(sig, bool) or not isinstance(sig, int) or not 0 <= sig <= 64:
        raise bad_input("signal must be a signal number between 0 and 64.")
    osb = srv.osb()
    if isinstance(pid, int) and not isinstance(pid, bool) or isinstance(pid, str) and pid.strip().isdigit():
        execd = _guard(lambda: osb.execd(sid), op="process", srv=srv)
        code, out, err = run_internal(srv, execd, f"kill -{sig} {int(pid)}")
        if code != 0:
            text = (err or out).strip()[:300]
            if "no such process" in text.lower():
                raise EppError(-32002, f"No process {int(pid)} in sandbox {sid}.")
            raise EppError(-32000, f"kill -{sig} {int(pid)} failed (exit {code}): {text}")
        return {}
    if isinstance(pid, str) and re.fullmatch(r"[0-9a-fA-F]{8,64}", pid.strip()):
        if sig not in (9, 15):
            raise unsupported("process.signal",
                              f"execd can only stop a command it started (signal 9 or 15), not send signal {sig}.",
                              "Use the numeric pid from process.list to send other signals.")
        execd = _guard(lambda: osb.execd(sid), op="process", srv=srv)
        try:
            execd.interrupt(pid.strip())
        except Exception as exc:  # noqa: BLE001
            # rec 10: an unknown id is HTTP 500 "... no such session"
            import _osb_http as http
            if isinstance(exc, http.HttpError) and exc.status in (404, 500) and "no such" in exc.message.lower():
                raise EppError(-32002, f"No running command {pid.strip()} in sandbox {sid}.") from None
            raise map_osb_error(exc, op="process", cfg=srv._cfg) from None
        return {}
    raise bad_input(f"Unknown process id {str(pid)[:70]!r}: pass an OS pid (a number) or the process_id "
                    "returned by exec.start.")


def m_process_kill(srv: Server, req: Request, p: dict) -> dict:
    return m_process_signal(srv, req, {**p, "signal": 9})


def m_process_stdin(srv: Server, req: Request, p: dict) -> dict:
    raise unsupported("process.stdin", "OpenSandbox execd has no way to write to a running command's stdin.",
                      "Pipe the input in the command itself (e.g. printf ... | cmd), or write a file first.")


# --------------------------------------------------------------------------- methods: files

def _execd(srv: Server, p: dict):
    sid = _sandbox_id(p)
    osb = srv.osb()
    return _guard(lambda: osb.execd(sid), op="files", srv=srv)


def file_entry(info: dict) -> dict:
    """execd FileInfo (rec 13) -> EPP FileEntry."""
    path = str(info.get("path") or "")
    kind = str(info.get("type") or "file")
    entry = {
        "name": path.rstrip("/").rsplit("/", 1)[-1] or path,
        "path": path,
        "type": "dir" if kind == "directory" else "file",
        "size": info.get("size") if isinstance(info.get("size"), int) else 0,
        "mtime": info.get("modified_at") or None,
    }
    if kind not in ("file", "directory"):
        entry["kind"] = kind                        # symlink / other (execd FileInfo.type)
    for key in ("mode", "owner", "group"):
        if info.get(key) not in (None, ""):
            entry[key] = info[key]
    return entry


def _octal_mode(value) -> int | None:
    """Permissions for execd, which wants the octal digits as a decimal number (rec 13: 644).
    Accepts "644" / "0o644" / "0644" or an int permission value such as 0o644."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise bad_input("mode must be an octal permission like 644.")
    if isinstance(value, int):
        number = value
    else:
        text = str(value).strip().lower().removeprefix("0o")
        if not text or any(c not in "01234567" for c in text):
            raise bad_input(f"mode {str(value)[:20]!r} is not an octal permission like 644.")
        number = int(text, 8)
    if not 0 <= number <= 0o7777:
        raise bad_input("mode must be between 0 and 7777 (octal).")
    return int(format(number, "o"))


def m_files_read(srv: Server, req: Request, p: dict) -> dict:
    import _osb_http as osb
    path = _path(p)
    execd = _execd(srv, p)
    offset, length = p.get("offset"), p.get("length")
    for name, val in (("offset", offset), ("length", length)):
        if val is not None and (isinstance(val, bool) or not isinstance(val, int) or val < 0):
            raise bad_input(f"{name} must be a non-negative integer.")
    if length is not None and length > MAX_READ_BYTES:
        raise _too_big(path, length)
    if length == 0:
        return {"content_b64": ""}
    ranged = offset is not None or length is not None
    start = offset or 0
    end = start + length - 1 if length is not None else None
    timeout = execd.osb.http.timeout

    def fetch() -> bytes:
        """One download, read whole within http_timeout. A body that ends before its Content-Length
        or arrives too slowly raises NetError, so a truncated download is never taken for the file;
        the whole fetch is retried like any idempotent call."""
        deadline = time.monotonic() + timeout
        stream = execd.download(path, start=start if ranged else None, end=end)
        try:
            declared = stream.headers.get("content-length", "")
            skip = start if (ranged and stream.status == 200) else 0     # server ignored Range
            want = (skip + length) if length is not None else None
            if declared.isdigit() and want is None and int(declared) - skip > MAX_READ_BYTES:
                raise _too_big(path, int(declared) - skip)
            cap = want if want is not None else skip + MAX_READ_BYTES
            data = stream.read_all(limit=cap, deadline=max(deadline, stream.received + 0.5))
            if want is None and len(data) - skip > MAX_READ_BYTES:
                raise _too_big(path, None)
        except EppError:
            stream.close()
            raise
        except Exception as exc:  # noqa: BLE001
            stream.close()
            raise osb.NetError(osb._net_kind(exc), f"download {path}", osb._safe_url(execd.base),
                               str(exc) or type(exc).__name__) from None
        if len(data) > cap:
            stream.close()
            data = data[:cap]
        else:
            stream.release()
        return data[skip:want] if want is not None else data[skip:]

    try:
        data = osb.with_retries(fetch, timeout)
    except EppError:
        raise
    except Exception as exc:  # noqa: BLE001
        if _is_http(exc, 416):
            return {"content_b64": ""}                  # offset at or past the end
        raise map_osb_error(exc, op="files", cfg=srv._cfg, target=path) from None
    import base64
    return {"content_b64": base64.b64encode(data)}     # bytes: Server.send splices them into the line


def _too_big(path: str, size) -> EppError:
    what = f"{size} bytes" if size else f"more than {MAX_READ_BYTES} bytes"
    return EppError(-32000, f"{path} is {what}; one files.read returns at most {MAX_READ_BYTES} bytes "
                            "(EPP lines are limited to 8 MiB).",
                    suggestion="Read it in parts with offset/length, or split/compress it in the sandbox first.",
                    max_bytes=MAX_READ_BYTES)


def m_files_write(srv: Server, req: Request, p: dict) -> dict:
    import base64
    import binascii
    path = _path(p)
    if p.get("append"):
        raise unsupported("files.write.append", "Appending is not supported by OpenSandbox uploads.",
                          "Read, concatenate and write the whole file.")
    content = p.get("content_b64", "")
    if not isinstance(content, str):
        raise EppError(-32602, "Invalid params: content_b64 must be a base64 string.")
    try:
        data = base64.b64decode(content, validate=True)
    except (binascii.Error, ValueError):
        raise bad_input("content_b64 is not valid base64.") from None
    mode = _octal_mode(p.get("mode"))
    execd = _execd(srv, p)
    _guard(lambda: execd.upload(path, data, mode), op="files", srv=srv, target=path)
    return {}


def m_files_list(srv: Server, req: Request, p: dict) -> dict:
    path = _path(p)
    depth = p.get("depth", 1)
    if isinstance(depth, bool) or not isinstance(depth, int) or depth < 1:
        raise bad_input("depth must be a positive integer.")
    execd = _execd(srv, p)
    items = _guard(lambda: execd.list_dir(path, depth), op="files", srv=srv, target=path)
    return {"entries": [file_entry(i) for i in items if isinstance(i, dict)]}


def m_files_stat(srv: Server, req: Request, p: dict) -> dict:
    path = _path(p)
    execd = _execd(srv, p)
    return file_entry(_guard(lambda: execd.info(path), op="files", srv=srv, target=path))


def m_files_mkdir(srv: Server, req: Request, p: dict) -> dict:
    """Parents are created and an existing directory is fine (execd works like mkdir -p)."""
    path = _path(p)
    mode = _octal_mode(p.get("mode")) or 755
    execd = _execd(srv, p)
    _guard(lambda: execd.mkdir(path, mode), op="files", srv=srv, target=path)
    return {}


def m_files_remove(srv: Server, req: Request, p: dict) -> dict:
    """File or directory (recursively). DELETE /files only removes files (seed 000), so stat first."""
    path = _path(p)
    execd = _execd(srv, p)
    info = _guard(lambda: execd.info(path), op="files", srv=srv, target=path)
    if info.get("type") == "directory":
        _guard(lambda: execd.remove_dir(path), op="files", srv=srv, target=path)
    else:
        _guard(lambda: execd.remove_file(path), op="files", srv=srv, target=path)
    return {}


def m_files_move(srv: Server, req: Request, p: dict) -> dict:
    """Rename/move; an existing destination file is replaced unless overwrite is false."""
    src, dest = _path(p, "source"), _path(p, "destination")
    overwrite = p.get("overwrite", True) is not False
    execd = _execd(srv, p)

    def dest_info():
        try:
            return execd.info(dest)
        except Exception as exc:  # noqa: BLE001
            if _is_http(exc, 404):
                return None
            raise

    if not overwrite and _guard(dest_info, op="files", srv=srv, target=dest) is not None:
        raise bad_input(f"{dest} already exists.", "Pass overwrite=true or choose another destination.")
    try:
        execd.move(src, dest)
    except Exception as exc:  # noqa: BLE001
        if _is_http(exc, 404):
            raise map_osb_error(exc, op="files", cfg=srv._cfg, target=src) from None
        existing = _guard(dest_info, op="files", srv=srv, target=dest) if _is_http(exc, 400, 409, 500) else None
        if existing is None or not overwrite:
            raise map_osb_error(exc, op="files", cfg=srv._cfg, target=src) from None
        if existing.get("type") == "directory":
            raise bad_input(f"Cannot move {src} onto the existing directory {dest}.",
                            "Move it to a path inside that directory instead.") from None
        _guard(lambda: execd.remove_file(dest), op="files", srv=srv, target=dest)
        _guard(lambda: execd.move(src, dest), op="files", srv=srv, target=src)
    return {}


def m_files_search(srv: Server, req: Request, p: dict) -> dict:
    path = _path(p)
    pattern = p.get("pattern") or "**"
    if not isinstance(pattern, str):
        raise bad_input("pattern must be a glob string such as *.txt or **/*.py.")
    execd = _execd(srv, p)
    items = _guard(lambda: execd.search(path, pattern), op="files", srv=srv, target=path)
    return {"entries": [file_entry(i) for i in items if isinstance(i, dict)]}


def m_files_chmod(srv: Server, req: Request, p: dict) -> dict:
    path = _path(p)
    perm: dict = {}
    mode = _octal_mode(p.get("mode"))
    if mode is None:
        raise bad_input("mode is required, e.g. 755.")
    perm["mode"] = mode
    for key in ("owner", "group"):
        if isinstance(p.get(key), str) and p[key]:
            perm[key] = p[key]
    execd = _execd(srv, p)
    _guard(lambda: execd.chmod(path, perm), op="files", srv=srv, target=path)
    return {}


# --------------------------------------------------------------------------- methods: ports

def m_ports_url(srv: Server, req: Request, p: dict) -> dict:
    """The direct endpoint (or the server proxy with use_server_proxy) and the headers it needs."""
    sid = _sandbox_id(p)
    port = p.get("port")
    if isinstance(port, str) and port.isdigit():
        port = int(port)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise bad_input("port must be a number between 1 and 65535.")
    osb = srv.osb()
    url, headers = _guard(lambda: osb.endpoint(sid, port), op="ports", srv=srv)
    return {"url": url, "headers": headers, "provider_id": PLUGIN_NAME, "sandbox_id": sid, "port": port,
            "authentication_audience": "gateway", "path_mode": "prefix"}


# --------------------------------------------------------------------------- terminals (pty)
# execd's PTY API (POST /pty + a WebSocket) lives in _pty.py / _ws.py. A terminal is served by the
# plugin process that opened it (the host keeps that process for the Sandbox object).

def _pty(srv: Server, name: str, p: dict) -> dict:
    import _pty as pty
    try:
        if name == "pty_open":
            return pty.pty_open(srv.osb(), p, srv.notify, srv.log_stderr)
        return getattr(pty, name)(srv.osb(), p, srv.notify)
    except pty.PtyError as exc:
        err = EppError(exc.code, exc.message)
        err.data = dict(exc.data)
        raise err from None


def m_pty_open(srv: Server, req: Request, p: dict) -> dict:
    return _pty(srv, "pty_open", p)


def m_pty_write(srv: Server, req: Request, p: dict) -> dict:
    return _pty(srv, "pty_write", p)


def m_pty_resize(srv: Server, req: Request, p: dict) -> dict:
    return _pty(srv, "pty_resize", p)


def m_pty_close(srv: Server, req: Request, p: dict) -> dict:
    return _pty(srv, "pty_close", p)


# --------------------------------------------------------------------------- method table, main

METHODS = {
    "sandbox.create": m_sandbox_create,
    "sandbox.get": m_sandbox_get,
    "sandbox.connect": m_sandbox_connect,
    "sandbox.list": m_sandbox_list,
    "sandbox.kill": m_sandbox_kill,
    "sandbox.set_timeout": m_sandbox_set_timeout,
    "sandbox.pause": m_sandbox_pause,
    "sandbox.resume": m_sandbox_resume,
    "exec.run": m_exec_run,
    "exec.start": m_exec_start,
    "process.list": m_process_list,
    "process.signal": m_process_signal,
    "process.kill": m_process_kill,
    "process.stdin": m_process_stdin,
    "files.read": m_files_read,
    "files.write": m_files_write,
    "files.list": m_files_list,
    "files.stat": m_files_stat,
    "files.mkdir": m_files_mkdir,
    "files.remove": m_files_remove,
    "files.move": m_files_move,
    "files.search": m_files_search,
    "files.chmod": m_files_chmod,
    "ports.url": m_ports_url,
    "pty.open": m_pty_open,
    "pty.write": m_pty_write,
    "pty.resize": m_pty_resize,
    "pty.close": m_pty_close,
}


def main() -> int:
    out = sys.stdout.buffer
    sys.stdout = sys.stderr             # a stray print() can never corrupt the protocol stream
    Server(sys.stdin.buffer, out).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
