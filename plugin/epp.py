"""EPP/1, the host's side of the wire: JSON-RPC 2.0 over stdio, one JSON object per line.

``Server.serve`` reads requests; ``initialize`` and ``shutdown`` are answered inline, every other
method runs on its own thread with a ``Request`` (its id and its ``$/cancel``). A method returns its
result, raises ``EppError``, or returns ``Deferred`` (answer now, stream afterwards: exec.start).
``Server.send`` is the only writer of stdout. What it sends as an error, and everything logged to
stderr, passes ``SECRETS``: the plugin's one registry of credentials, which also scrubs the error
bodies the OpenSandbox client reads (osb_transport.py).

Standard library only, Python >= 3.10. Imports here are what every plugin start pays for.
"""
from __future__ import annotations

import json
import os
import sys
import threading
import time

MAX_LINE_BYTES = 8 * 1024 * 1024        # the host kills a plugin that writes a longer line


class Secrets:
    """Every credential this process holds (config secrets, per-create registry passwords). Each is
    replaced by ``***`` in its plain, JSON-escaped and URL-encoded (quote and quote_plus) forms:
    error bodies can echo request headers or bodies back (debugging proxies do)."""

    def __init__(self) -> None:
        self._forms: list[str] = []
        self._bforms: list[bytes] = []
        self._lock = threading.Lock()

    def add(self, *values) -> None:
        new = [v for v in values if isinstance(v, str) and len(v) >= 3]
        if not new:
            return
        import urllib.parse
        with self._lock:
            forms = set(self._forms)
            for v in new:
                forms |= {v, json.dumps(v)[1:-1], urllib.parse.quote(v, safe=""), urllib.parse.quote_plus(v)}
            self._forms = sorted((f for f in forms if f), key=len, reverse=True)
            self._bforms = [f.encode("utf-8", "replace") for f in self._forms]

    def __bool__(self) -> bool:
        return bool(self._forms)

    def scrub(self, data: bytes) -> bytes:
        for form in self._bforms:
            data = data.replace(form, b"***")
        return data

    def redact(self, value):
        """``value`` with every secret masked: strings, and strings inside dicts and lists."""
        if not self._forms:
            return value
        if isinstance(value, str):
            for form in self._forms:
                value = value.replace(form, "***")
            return value
        if isinstance(value, dict):
            return {k: self.redact(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.redact(v) for v in value]
        return value


SECRETS = Secrets()


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
            except Exception:  # noqa: BLE001 - one failing callback must not stop the others
                pass


class Deferred:
    """A result sent now, plus work that continues afterwards (streaming after exec.start)."""

    def __init__(self, result: dict, then):
        self.result, self.then = result, then


class Server:
    """``initialize(server, params)`` answers initialize; ``find(method)`` returns the function
    ``fn(server, request, params)`` of a method, or None (provider.py's method table)."""

    def __init__(self, rfile, wfile, *, initialize, find):
        self.rfile, self.wfile, self.initialize, self.find = rfile, wfile, initialize, find
        self._wlock = threading.Lock()
        self._state_lock = threading.Lock()
        self.raw_config: dict = {}
        self.core: dict = {}
        self.data_dir = os.environ.get("ABX_PROVIDER_DATA_DIR") or None
        self.requests: dict = {}
        self.active_runs: set = set()         # foreground commands (osb CommandRun) to stop at exit
        self.closing = threading.Event()
        self._cfg = None
        self._cfg_error: EppError | None = None
        self._client = None

    # ---- the loop

    def serve(self) -> None:
        for line in iter(self._readline, b""):
            if line.isspace():                            # (not strip(): that copies a multi-MB line)
                continue
            try:
                msg = json.loads(line)
            except (ValueError, RecursionError):          # RecursionError: absurdly deep nesting
                self.log_stderr("ignored a line that is not JSON")
                continue
            if isinstance(msg, dict):
                self.dispatch(msg)
            else:
                self.log_stderr("ignored a line that is not a JSON object")
        self.finish()

    def dispatch(self, msg: dict) -> None:
        method, rid, params = msg.get("method"), msg.get("id"), msg.get("params")
        if isinstance(rid, (bool, float, list, dict)):
            return                                        # not a JSON-RPC id: there is nobody to answer
        if not isinstance(method, str):
            if rid is not None and "result" not in msg and "error" not in msg:
                self.respond(rid, error=EppError(-32600, "Invalid Request: method must be a string."))
        elif params is not None and not isinstance(params, dict):
            if rid is not None:
                self.respond(rid, error=EppError(-32602, "Invalid params: params must be an object."))
        elif rid is None:                                 # a notification: only $/cancel means something
            target = (params or {}).get("id")
            if method == "$/cancel" and isinstance(target, (int, str)) and not isinstance(target, bool):
                req = self.requests.get(target)
                if req is not None:
                    req.cancel()
        elif method == "initialize":                      # answered inline: cheap, no I/O
            self.respond(rid, self.initialize(self, params or {}))
        elif method == "shutdown":
            self.closing.set()
            self.respond(rid, {})
        else:
            self.requests[rid] = req = Request(rid)
            threading.Thread(target=self._run, args=(req, method, params or {}), daemon=True,
                             name=f"epp-{rid}").start()

    def _run(self, req: Request, method: str, params: dict) -> None:
        then = None
        try:
            fn = self.find(method)
            if fn is None:
                raise EppError(-32601, f"Method not found: {method}")
            result = fn(self, req, params)
            if isinstance(result, Deferred):
                result, then = result.result, result.then
            self.respond(req.id, result)
        except EppError as exc:
            self.respond(req.id, error=exc)
        except Exception as exc:  # noqa: BLE001 - every failure becomes an answer
            from errors import map_osb_error, op_kind
            self.respond(req.id, error=map_osb_error(exc, op=op_kind(method), cfg=self._cfg))
        finally:
            self.requests.pop(req.id, None)
        if then is not None:
            try:
                then()
            except Exception as exc:  # noqa: BLE001 - the answer is out; all that is left is to log
                self.log_stderr(f"{method}: {type(exc).__name__}: {exc}")

    def _readline(self) -> bytes:
        try:
            return self.rfile.readline()
        except (OSError, ValueError):
            return b""

    # ---- output (the only writer of stdout)

    def send(self, msg: dict) -> None:
        msg = {"jsonrpc": "2.0", **msg}
        if "error" in msg:
            msg["error"] = SECRETS.redact(msg["error"])
        res = msg.get("result")
        if isinstance(res, dict) and len(res) == 1 and isinstance(res.get("content_b64"), bytes):
            # files.read: base64 is JSON-safe ASCII, so it is spliced into the line as it is instead of
            # json-encoding a multi-MB string (about 1.5x faster reads, measured in bench/)
            line = b"".join([b'{"jsonrpc":"2.0","id":', json.dumps(msg["id"]).encode(),
                             b',"result":{"content_b64":"', res["content_b64"], b'"}}'])
        else:
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
                self.wfile.writelines((line, b"\n"))    # not line + b"\n": that copies a multi-MB line
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
            sys.stderr.write(SECRETS.redact(f"opensandbox: {text}\n"))
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    # ---- configuration and client, built once per process on first use

    def config(self):
        """The coerced configuration (config.Config); a bad setting fails every call alike."""
        with self._state_lock:
            if self._cfg is None and self._cfg_error is None:
                from config import Config
                try:
                    self._cfg = Config(self.raw_config, self.core)
                except EppError as exc:
                    self._cfg_error = exc
            if self._cfg_error is not None:
                raise self._cfg_error
            return self._cfg

    def client(self):
        """The OpenSandbox client (osb_lifecycle.OpenSandbox) of this process."""
        cfg = self.config()
        with self._state_lock:
            if self._client is None:
                from osb_lifecycle import OpenSandbox
                from osb_transport import Http
                self._client = OpenSandbox(
                    cfg.server, api_key=cfg.api_key, http=Http(cfg.http_timeout), data_dir=self.data_dir,
                    use_server_proxy=cfg.use_server_proxy, execd_token=cfg.execd_access_token,
                    scheme=cfg.protocol)
            return self._client

    def finish(self) -> None:
        """stdin closed: stop foreground commands we still run (best effort, in parallel), give
        requests in flight up to 2 s to answer (the host waits 3 s before SIGTERM), then exit."""
        self.closing.set()
        threads = [threading.Thread(target=run.stop, args=(1.5,), daemon=True) for run in list(self.active_runs)]
        for t in threads:
            t.start()
        deadline = time.monotonic() + 2.0
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))
        while self.requests and time.monotonic() < deadline:    # let answers in flight go out
            time.sleep(0.02)
        if "terminal" in sys.modules:       # end our terminals (their sessions are deleted in execd)
            sys.modules["terminal"].close_all()
        if self._client is not None:
            self._client.http.close()
