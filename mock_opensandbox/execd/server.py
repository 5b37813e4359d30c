"""ExecdServer: one mock execd listener per sandbox (Go/Gin flavour of httpcore).

Every route is served bare and under /proxy/44772 (recording 06); /proxy/<other port>/... is
reverse-proxied to 127.0.0.1:<port> (QUIRKS.md, Transport, routing, auth; execd pkg/web/proxy.go). Behaviour sources
are listed in mock_opensandbox/QUIRKS.md (part 2).
"""

from __future__ import annotations

import hmac
import http.client
import os
import socket
import threading
from typing import Any, Callable

from mock_opensandbox.execd import gin
from mock_opensandbox.execd.code_jupyter_routes import JupyterCode, idle_poll_s
from mock_opensandbox.execd.code_routes import CodeAPI
from mock_opensandbox.execd.commands import CommandRegistry
from mock_opensandbox.execd.commands_routes import CommandRoutes
from mock_opensandbox.execd.connection import _ExecdHandler
from mock_opensandbox.execd.errors import MSG, ExecdError
from mock_opensandbox.execd.files_routes import FilesAPI
from mock_opensandbox.execd.inside import InsideListener
from mock_opensandbox.execd.metrics import _CPU_SAMPLE_S, _metrics
from mock_opensandbox.execd.pty_routes import PTYRoutes
from mock_opensandbox.execd.sessions import RunHooks, SessionRegistry, SessionTimeout
from mock_opensandbox.runtime import SandboxRuntime
from mock_opensandbox.wire import sse
from mock_opensandbox.wire.gojson import GoJSONError, Struct, decode, go_json
from mock_opensandbox.wire.http1 import OBSERVERS, App, ChunkedWriter, Request, Router, Server
from mock_opensandbox.wire.relay import FRAMING, HOP_BY_HOP, client_gone, forwardable

__all__ = ["ExecdServer", "EXECD_PORT", "ROUTES"]

EXECD_PORT = 44772
TOKEN_HEADER = "X-EXECD-ACCESS-TOKEN"
HEARTBEAT_S = 3.0  # recording 17: pings 3 s apart; execd controller/sse.go wait.Until(..., 3*time.Second)
# /proxy/<port>'s hop-by-hop policy (httputil.ReverseProxy), both ways: every hop-by-hop header, and the
# framing it writes itself (Host and Content-Length of the request; Content-Length of the answer)
PROXY_HOP_BY_HOP = HOP_BY_HOP | FRAMING


# The one route table: router.go NewRouter at 3bb6fad, in its order (gin ":param" as "{param}").
# Targets name ExecdServer attributes. Every route is also served under /proxy/44772 (handle()).
ROUTES: tuple[tuple[str, str, str], ...] = (
    ("GET", "/ping", "_ping"),
    ("DELETE", "/files", "files.delete_files"),
    ("GET", "/files/info", "files.info"),
    ("POST", "/files/mv", "files.mv"),
    ("POST", "/files/permissions", "files.permissions"),
    ("GET", "/files/search", "files.search"),
    ("POST", "/files/replace", "files.replace"),
    ("POST", "/files/upload", "files.upload"),
    ("GET", "/files/download", "files.download"),
    ("GET", "/directories/list", "files.list_dir"),
    ("POST", "/directories", "files.mkdirs"),
    ("DELETE", "/directories", "files.delete_dirs"),
    ("POST", "/code", "code.run"),
    ("DELETE", "/code", "code.interrupt"),
    ("POST", "/code/context", "code.create_context"),
    ("GET", "/code/contexts", "code.list_contexts"),
    ("DELETE", "/code/contexts", "code.delete_by_language"),
    ("DELETE", "/code/contexts/{contextId}", "code.delete_context"),
    ("GET", "/code/contexts/{contextId}", "code.get_context"),
    ("POST", "/session", "_create_session"),
    ("POST", "/session/{sessionId}/run", "_run_in_session"),
    ("DELETE", "/session/{sessionId}", "_delete_session"),
    ("POST", "/command", "command.run"),
    ("DELETE", "/command", "command.interrupt"),
    ("GET", "/command/status/{id}", "command.status"),
    ("GET", "/command/{id}/logs", "command.logs"),
    ("GET", "/metrics", "_get_metrics"),
    ("GET", "/metrics/watch", "_watch_metrics"),
    ("POST", "/pty", "pty.create"),
    ("GET", "/pty/{sessionId}", "pty.status"),
    ("DELETE", "/pty/{sessionId}", "pty.delete"),
    ("GET", "/pty/{sessionId}/ws", "pty.websocket"),
)


def _param_tsr(method: str, path: str) -> bool:
    """Gin's other trailing-slash recommendation: "/command/status/" walks into "/command/:id/logs"
    with id="status" and is left with exactly "/" (tree.go getValue; tiers/diff unknown.paths)."""
    if not path.endswith("/") or len(path) < 2:
        return False
    segs = path[:-1].split("/")
    for m, pattern, _ in ROUTES:
        if m != method:
            continue
        psegs = pattern.split("/")
        if (
            len(psegs) > len(segs)
            and psegs[len(segs) - 1].startswith("{")
            and all(p.startswith("{") and s or p == s for p, s in zip(psegs[: len(segs)], segs, strict=False))
        ):
            return True
    return False


_CREATE_SESSION = Struct("model.CreateSessionRequest", {"cwd": "string"})
_RUN_IN_SESSION = Struct("model.RunInSessionRequest", {"command": "string", "cwd": "string", "timeout": "int64"})


class ExecdServer(App):
    """The execd half of one sandbox. See ARCHITECTURE.md for the interface."""

    def __init__(
        self,
        runtime: SandboxRuntime,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        mode: str = "v1.1.0",
        access_token: str | None = None,
        required_headers: dict[str, str] | None = None,
        close_delay: float = 1.0,
        heartbeat: float = HEARTBEAT_S,
        verbose: bool = False,
        start_delay: float = 0.0,
        faults: Any = None,
        sandbox_id: str | None = None,
        journal: Any = None,
        context_wait: float | None = None,
    ):
        """``context_wait``: how long a code context's kernel start is retried (None: until the client leaves).
        ``start_delay``: seconds after start() before the port listens (connections are refused until
        then): the lifecycle answers Running before execd answers /ping (QUIRKS.md, Transport, routing, auth: execd_start_delay).
        ``faults`` / ``sandbox_id`` / ``journal``: the fault registry whose rules reach this listener,
        the sandbox it belongs to, the request journal (httpcore.App)."""
        if mode not in ("v1.1.0", "latest"):
            raise ValueError(f"mode must be 'v1.1.0' or 'latest', not {mode!r}")
        self.runtime = runtime
        self.host = host
        self._want_port = port
        self.mode = mode
        self.access_token = access_token or None
        self.required_headers = dict(required_headers or {})
        self.start_delay = max(0.0, float(start_delay))
        self.context_wait = context_wait
        self.verbose = verbose
        self.faults = faults
        self.sandbox_id = sandbox_id
        self.journal = journal
        self.commands = CommandRegistry(runtime, mode)
        self._stopping = threading.Event()
        self._server: Server | None = None
        self._inside: Any = None  # inside.InsideListener: 127.0.0.1:44772 in the sandbox's netns
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        self.sessions = SessionRegistry(runtime)
        self.files = FilesAPI(runtime, self._stopping)
        self.pty = PTYRoutes(runtime, mode)
        self.pty_sessions = self.pty.registry
        # the /command group (execd/commands_routes.py) over the command registry
        self.command = CommandRoutes(
            runtime,
            self.files.fs,
            self.commands,
            self._stopping,
            mode=mode,
            close_delay=max(0.0, float(close_delay)),
            heartbeat=max(0.05, float(heartbeat)),
        )
        self.code = CodeAPI(self.command.stream, self.command.interrupt, self._stall, mode, jupyter=self._jupyter)
        self.router = Router()
        for method, pattern, target in ROUTES:
            self.router.add(method, pattern, self._endpoint(target))

    @property
    def close_delay(self) -> float:
        """How long an SSE stream stays open after its last event (seconds; execd's ~1 s linger). Settable per
        sandbox while it runs (bench case 2 gives the official SDK's sandbox 0)."""
        return self.command.close_delay

    @close_delay.setter
    def close_delay(self, value: float) -> None:
        self.command.close_delay = max(0.0, float(value))

    def _endpoint(self, target: str) -> Callable[[Request], None]:
        """A ROUTES target ("files.info", "_ping") as a handler; an ExecdError it raises becomes
        Gin's JSON error answer."""
        obj: Any = self
        for part in target.split("."):
            obj = getattr(obj, part)
        fn = obj

        def handler(req: Request) -> None:
            try:
                fn(req)
            except ExecdError as err:
                if req.responded:  # headers already out (a stream): Gin appends the JSON to the body
                    return
                gin.error_reply(req, err)

        return handler

    def set_mode(self, mode: str) -> None:
        """Switch the execd dialect ("v1.1.0" | "latest") of this sandbox's execd."""
        if mode not in ("v1.1.0", "latest"):
            raise ValueError(f"mode must be 'v1.1.0' or 'latest', not {mode!r}")
        self.mode = self.commands.mode = self.command.mode = self.code.mode = self.pty.mode = mode

    # -- lifecycle ------------------------------------------------------------------------------
    @property
    def port(self) -> int:
        return self._server.port if self._server else 0

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self) -> None:
        if self._server is not None:
            return
        self._stopping.clear()
        self._server = Server((self.host, self._want_port), _ExecdHandler, self, listen_delay=self.start_delay)
        self._server.start(name=f"execd-{self._server.port}")
        if self.runtime.has_netns:  # execd's :44772 as the sandbox sees it (inside.py)
            self._inside = InsideListener(self, _ExecdHandler, self.runtime, EXECD_PORT, delay=self.start_delay)
            self._inside.start()

    def stop(self) -> None:
        """Close the listener, unblock every waiting request (paused / stalled / streaming) and kill
        the foreground commands whose streams are still open."""
        self._stopping.set()
        srv, self._server = self._server, None
        if srv is not None:
            srv.stop()
        inside, self._inside = self._inside, None
        if inside is not None:
            inside.stop()
        with self._conns_lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.commands.kill_all()
        self.sessions.close_all()
        self.pty.close_all()

    def __enter__(self) -> "ExecdServer":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _track(self, conn: socket.socket, add: bool) -> None:
        with self._conns_lock:
            if add:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)

    # -- helpers --------------------------------------------------------------------------------
    def _ping(self, req: Request) -> None:
        gin.ok(req)

    @staticmethod
    def _drop(req: Request) -> None:
        """Never answer (a frozen or vanished sandbox): close the connection without a response."""
        req.handler.close_connection = True

    def _jupyter(self) -> Any:
        """The sandbox's Jupyter server (execd/code_jupyter_routes.py), reached from inside its network
        namespace; None when JUPYTER_HOST or JUPYTER_TOKEN is unset (runtime/jupyter.go)."""
        try:
            env = self.runtime.base_env()
        except Exception:  # noqa: BLE001 - a runtime without an environment names no server
            return None
        host, token = env.get("JUPYTER_HOST", ""), env.get("JUPYTER_TOKEN", "")
        if not host or not token:
            return None
        rt = self.runtime

        def connect(h: str, port: int, timeout: float) -> socket.socket:
            if h in ("127.0.0.1", "localhost", "::1"):
                return rt.connect(port, timeout=timeout)
            return socket.create_connection((h, port), timeout=timeout)

        def mkdir(path: str) -> None:
            try:
                os.makedirs(rt.resolve(path), exist_ok=True)
            except (OSError, ValueError):
                pass

        return JupyterCode(
            host,
            token,
            connect,
            self._stopping,
            mkdir,
            idle_poll=idle_poll_s(env.get("EXECD_JUPYTER_IDLE_POLL_INTERVAL")),
            create_wait=self.context_wait,
        )

    def _stall(self, req: Request) -> None:
        """Hold the request unanswered until stop() or until the client goes away."""
        while not self._stopping.wait(0.2):
            if client_gone(req.handler.connection):
                break
        self._drop(req)

    # -- dispatch -------------------------------------------------------------------------------
    def handle(self, req: Request) -> None:
        # 1. an ingress gateway in front of execd checks its routing headers first [choice, QUIRKS.md (part 2)]
        #    (never for a connection from inside the sandbox: it does not pass the gateway)
        for name, value in ({} if getattr(req.handler.server, "inside", False) else self.required_headers).items():
            got = req.headers.get(name)
            if got is None or not hmac.compare_digest(
                got.encode("utf-8", "surrogateescape"), value.encode("utf-8", "surrogateescape")
            ):
                req.send_text(
                    404, f"sandbox not found: missing or wrong routing header {name}\n", "text/plain; charset=utf-8"
                )
                return
        # 2. a paused sandbox is frozen: execd does not answer until resume (QUIRKS.md, Transport, routing, auth: paused sandbox)
        if self.runtime.paused:
            while self.runtime.paused and not self._stopping.is_set() and not self.runtime.terminated:
                self.runtime.wait_unpaused(0.1)
            if self._stopping.is_set() or self.runtime.terminated:
                self._drop(req)
                return
        if self._stopping.is_set():
            self._drop(req)
            return
        # the real execd listens on :44772 once, for the sandbox and the host alike: as non-root the inside
        # socket comes from the agent a little later, so a request waits for it (bounded; ready is set on give-up)
        inside = self._inside
        if inside is not None and not inside.ready.is_set():
            inside.ready.wait(10.0)
        # 3. access token (execd router.go accessTokenMiddleware; QUIRKS.md, Transport, routing, auth)
        if self.access_token is not None:
            got = (req.headers.get(TOKEN_HEADER) or "").strip(" \t")  # Go's textproto trims values
            if not got or not hmac.compare_digest(
                got.encode("utf-8", "surrogateescape"), self.access_token.encode("utf-8", "surrogateescape")
            ):
                gin.json_reply(req, 401, {"error": MSG["unauthorized"].format(TOKEN_HEADER)})
                return
        # 4. /proxy/<port>/...: execd's own port is served here, others are reverse-proxied
        path = req.path
        if path.startswith("/proxy/"):
            rest = path[len("/proxy/") :]
            port, _, sub = rest.partition("/")
            if not port:
                req.send_text(
                    400, "port is required\n", "text/plain; charset=utf-8", {"X-Content-Type-Options": "nosniff"}
                )
                return
            if port != str(EXECD_PORT):
                self._proxy(req, port, "/" + sub)
                return
            path = "/" + sub
        fn, params, _ = self.router.match(req.method, path)
        if fn is None:
            # Gin: no HEAD/OPTIONS routing, no 405; a path that only differs by a trailing slash from
            # a route of this method is redirected (RedirectTrailingSlash; tiers/diff unknown.paths)
            alt = path[:-1] if path.endswith("/") and len(path) > 1 else path + "/"
            if self.router.match(req.method, alt)[0] is not None or _param_tsr(req.method, path):
                gin.redirect(req, alt)
                return
            gin.not_found(req)
            return
        req.params = params
        fn(req)

    def _get_metrics(self, req: Request) -> None:
        gin.json_reply(req, 200, _metrics())

    # -- /session (bash sessions; execd/sessions.py) ----------------------------------------------
    def _create_session(self, req: Request) -> None:
        try:
            data = decode(req.body, _CREATE_SESSION)
        except GoJSONError as exc:
            if str(exc) != "EOF":  # an empty body means default options
                raise ExecdError(400, "INVALID_REQUEST_BODY", MSG["bad_body_session"].format(exc)) from exc
            data = {}
        sid = self.sessions.create(data.get("cwd") or "")
        gin.json_reply(req, 200, {"session_id": sid})

    def _run_in_session(self, req: Request) -> None:
        sid = req.params.get("sessionId", "")
        try:
            data = decode(req.body, _RUN_IN_SESSION)
        except GoJSONError as exc:
            raise ExecdError(400, "INVALID_REQUEST_BODY", MSG["bad_body_session"].format(exc)) from exc
        problems = []
        if not data.get("command"):
            problems.append(MSG["required"].format("RunInSessionRequest", "Command"))
        if data.get("timeout", 0) < 0:
            problems.append(MSG["gte"].format("RunInSessionRequest", "Timeout"))
        if problems:
            raise ExecdError(400, "INVALID_REQUEST_BODY", MSG["invalid_session"].format("\n".join(problems)))
        cwd = data.get("cwd") or ""
        if cwd:
            err = self.command.validate_cwd(cwd)
            if err:
                raise ExecdError(400, "INVALID_REQUEST_BODY", MSG["invalid_session"].format(err))

        state: dict[str, Any] = {"w": None, "gone": False}

        def emit(ev: dict[str, Any]) -> None:
            if state["w"] is None:
                state["w"] = gin.sse_start(req)  # headers go out lazily with the first event
                state["w"].write(sse.encode_event(ev))
                state["w"].write(sse.encode_event(sse.ping_event()))
                return
            if state["gone"]:
                return
            try:
                state["w"].write(sse.encode_event(ev))
            except OSError:
                state["gone"] = True

        hooks = RunHooks(
            on_init=lambda i: emit(sse.init_event(i)),
            on_stdout=lambda t: emit(sse.output_event("stdout", t)),
            on_error=lambda ev, tb: emit(sse.error_event(ev, tb)),
            on_complete=lambda ms: emit(sse.complete_event(ms)),
        )
        try:
            self.sessions.run(
                sid,
                data["command"],
                cwd,
                int(data.get("timeout") or 0),
                hooks,
                gone=lambda: state["gone"] or client_gone(req.handler.connection),
            )
        except (LookupError, RuntimeError, SessionTimeout, OSError, ValueError) as exc:
            msg = MSG["run_in_session"].format(exc.args[0] if exc.args else exc)
            if state["w"] is None:
                raise ExecdError(500, "RUNTIME_ERROR", msg) from exc
            try:  # RespondError after the stream started: the JSON lands in the body
                state["w"].write(go_json({"code": "RUNTIME_ERROR", "message": msg}).encode())
            except OSError:
                pass
        if state["w"] is not None:
            state["w"].close()

    def _delete_session(self, req: Request) -> None:
        self.sessions.delete(req.params.get("sessionId", ""))
        gin.ok(req)

    def _watch_metrics(self, req: Request) -> None:
        """controller/metric.go WatchMetrics: SSE headers, one JSON object + "\n" per second until the
        client leaves."""
        w = gin.sse_start(req)
        try:
            while not self._stopping.wait(1.0 - _CPU_SAMPLE_S):
                if client_gone(req.handler.connection):
                    break
                w.write((go_json(_metrics()) + "\n").encode())
        except OSError:
            pass
        w.close()
        req.handler.close_connection = True

    # -- reverse proxy ---------------------------------------------------------------------------
    def _proxy(self, req: Request, port: str, path: str) -> None:
        """execd pkg/web/proxy.go: forward to 127.0.0.1:<port><path>?<query> inside the sandbox (execd
        runs in the container's network namespace), streaming the answer.
        Headers travel as lists of pairs both ways, so repeated ones (Set-Cookie, Cookie, Vary, ...)
        stay separate like Go's http.Header copies them; hop-by-hop headers (and those named in
        Connection) are dropped as httputil.ReverseProxy does."""
        query = req.raw_path.split("?", 1)[1] if "?" in req.raw_path else ""
        target = path + ("?" + query if query else "")
        try:
            body = req.body
        except (OSError, ValueError):
            body = b""
        client_ip = (
            req.headers.get("X-Forwarded-For", "").split(",")[0].strip()
            or req.headers.get("X-Real-IP")
            or req.handler.client_address[0]
        )
        # Director: Header.Set X-Forwarded-For / X-Forwarded-Proto, Header.Del X-Forwarded-Host
        # (src pkg/web/proxy.go; the server proxy's X-Forwarded-Host therefore never reaches the app)
        out = forwardable(
            req.headers.items(), PROXY_HOP_BY_HOP | {"x-forwarded-for", "x-forwarded-proto", "x-forwarded-host"}
        )
        out += [("X-Forwarded-For", client_ip), ("X-Forwarded-Proto", "http")]
        send_body = body if body or req.method in ("POST", "PUT", "PATCH") else None
        try:
            if not port.isdigit() or not 0 < int(port) < 65536:
                raise OSError("bad port")
            conn = http.client.HTTPConnection("127.0.0.1", int(port), timeout=600)
            # 127.0.0.1 as the sandbox sees it: its own network namespace (runtime.connect)
            conn.sock = self.runtime.connect(int(port), timeout=600)
            conn.putrequest(
                req.method, target, skip_accept_encoding=any(k.lower() == "accept-encoding" for k, _ in out)
            )
            for k, v in out:
                conn.putheader(k, v)
            if send_body is not None:
                conn.putheader("Content-Length", str(len(send_body)))
            conn.endheaders(send_body)
            resp = conn.getresponse()
        except (OSError, http.client.HTTPException):
            req.send_text(502, "Bad Gateway\n", "text/plain; charset=utf-8", {"X-Content-Type-Options": "nosniff"})
            return
        try:
            pairs = forwardable(resp.getheaders(), PROXY_HOP_BY_HOP)
            length = resp.getheader("Content-Length")
            if length is not None or resp.status in (204, 304) or req.method == "HEAD":
                data = resp.read()
                if resp.status == 204:
                    n = None
                elif req.method == "HEAD" or resp.status == 304:
                    n = length  # the upstream's length of the body it did not send
                else:
                    n = str(len(data))
                _relay_head(req, resp.status, pairs, content_length=n)
                if data and req.method != "HEAD":
                    req.handler.wfile.write(data)
                    if OBSERVERS:
                        req.sent_body += data
                if OBSERVERS:
                    req.observe()
                return
            _relay_head(req, resp.status, pairs, chunked=True)
            w = ChunkedWriter(req.handler, req.sent_body, req.observe) if OBSERVERS else ChunkedWriter(req.handler)
            while True:
                chunk = resp.read1(65536) if hasattr(resp, "read1") else resp.read(4096)
                if not chunk:
                    break
                w.write(chunk)
            w.close()
        finally:
            conn.close()


def _relay_head(
    req: Request, status: int, pairs: list[tuple[str, str]], *, content_length: str | None = None, chunked: bool = False
) -> None:
    """Status line and headers of a proxied answer, repeated headers kept. Go's server adds Date
    only when the upstream sent none (the copied header wins)."""
    h = req.handler
    req.drain()
    h.log_request(status)
    h.send_response_only(status)
    if not any(k.lower() == "date" for k, _ in pairs):
        h.send_header("Date", h.date_time_string())
    for k, v in pairs:
        h.send_header(k, v)
    if content_length is not None:
        h.send_header("Content-Length", content_length)
    if chunked:
        h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()
    req.responded = True
    if OBSERVERS:
        req.sent_status = status
        req.sent_headers = {}
        for k, v in pairs:  # observers get a dict: repeated values joined as one field would be
            req.sent_headers[k] = req.sent_headers[k] + ", " + v if k in req.sent_headers else v
