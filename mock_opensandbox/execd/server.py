"""ExecdServer: one mock execd listener per sandbox (Go/Gin flavour of httpcore). The server's wiring only:
the route table (ROUTES), the route classes it sends them to (one per execd API, execd/<api>_routes.py), the
dispatch in front of them (routing headers, pause, access token, /proxy/<port>), connection handling, start and
stop. No request handler lives here (tiers/t0/repo/test_routes_layout.py).

Every route is served bare and under /proxy/44772 (recording 06); /proxy/<other port>/... is
reverse-proxied to 127.0.0.1:<port> (execd/proxy_routes.py; QUIRKS.md, Transport, routing, auth; execd
pkg/web/proxy.go). Behaviour sources are listed in mock_opensandbox/QUIRKS.md (part 2).
"""

from __future__ import annotations

import hmac
import socket
import threading
from typing import Any, Callable

from mock_opensandbox.execd import gin
from mock_opensandbox.execd.code import CodeInterpreter, jupyter_from_env
from mock_opensandbox.execd.code_routes import CodeRoutes
from mock_opensandbox.execd.commands import CommandRegistry
from mock_opensandbox.execd.commands_routes import CommandsRoutes
from mock_opensandbox.execd.connection import _ExecdHandler
from mock_opensandbox.execd.errors import MSG, ExecdError
from mock_opensandbox.execd.files_routes import FilesRoutes
from mock_opensandbox.execd.inside import InsideListener
from mock_opensandbox.execd.metrics_routes import MetricsRoutes
from mock_opensandbox.execd.ping_routes import PingRoutes
from mock_opensandbox.execd.proxy_routes import ProxyRoutes
from mock_opensandbox.execd.pty import PtyRegistry
from mock_opensandbox.execd.pty_routes import PtyRoutes
from mock_opensandbox.execd.sessions import SessionRegistry
from mock_opensandbox.execd.sessions_routes import SessionsRoutes
from mock_opensandbox.runtime import SandboxRuntime
from mock_opensandbox.wire.http1 import Request, Router
from mock_opensandbox.wire.listener import App, FaultRules, RequestJournal, Server

__all__ = ["ExecdServer", "EXECD_PORT", "ROUTES"]

EXECD_PORT = 44772
TOKEN_HEADER = "X-EXECD-ACCESS-TOKEN"
HEARTBEAT_S = 3.0  # recording 17: pings 3 s apart; execd controller/sse.go wait.Until(..., 3*time.Second)


# The one route table: router.go NewRouter at 3bb6fad, in its order (gin ":param" as "{param}").
# Targets name ExecdServer attributes. Every route is also served under /proxy/44772 (handle()).
ROUTES: tuple[tuple[str, str, str], ...] = (
    ("GET", "/ping", "ping.ping"),
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
    ("POST", "/session", "session.create"),
    ("POST", "/session/{sessionId}/run", "session.run"),
    ("DELETE", "/session/{sessionId}", "session.delete"),
    ("POST", "/command", "command.run"),
    ("DELETE", "/command", "command.interrupt"),
    ("GET", "/command/status/{id}", "command.status"),
    ("GET", "/command/{id}/logs", "command.logs"),
    ("GET", "/metrics", "metrics.get"),
    ("GET", "/metrics/watch", "metrics.watch"),
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
        tail_interval: float = 0.1,
        heartbeat: float = HEARTBEAT_S,
        verbose: bool = False,
        start_delay: float = 0.0,
        faults: FaultRules | None = None,
        sandbox_id: str | None = None,
        journal: RequestJournal | None = None,
        context_wait: float | None = None,
        unknown_language_wait: float | None = None,
    ):
        """``context_wait``: how long a code context's kernel start is retried (None: until the client leaves);
        ``unknown_language_wait``: how long once Jupyter has no kernel spec of the language (None: as context_wait).
        ``tail_interval``: seconds between reads of a running foreground command's files (execd's 100 ms ticker).
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
        self.unknown_language_wait = unknown_language_wait
        self.verbose = verbose
        self.faults = faults
        self.sandbox_id = sandbox_id
        self.journal = journal
        self.commands = CommandRegistry(runtime, mode, tail_interval)
        self.stopping = threading.Event()
        self._server: Server | None = None
        self._inside: InsideListener | None = None  # 127.0.0.1:44772 in the sandbox's netns
        self._conns: set[socket.socket] = set()
        self._conns_lock = threading.Lock()
        self.sessions = SessionRegistry(runtime, self.commands.sigint, self.commands.files)
        self.interpreter = CodeInterpreter(
            lambda: jupyter_from_env(runtime, self.stopping, self.context_wait, self.unknown_language_wait)
        )
        # one route class per execd API (execd/<api>_routes.py), ROUTES targets "<attribute>.<method>"
        self.ping = PingRoutes()
        self.files = FilesRoutes(runtime, self.stopping)
        self.pty = PtyRoutes(runtime, mode, PtyRegistry(runtime, self.commands.sigint))
        self.pty_sessions = self.pty.registry
        self.command = CommandsRoutes(
            runtime,
            self.files.fs,
            self.commands,
            self.stopping,
            mode=mode,
            close_delay=max(0.0, float(close_delay)),
            heartbeat=max(0.05, float(heartbeat)),
        )
        self.code = CodeRoutes(self.command.stream, self.command.interrupt, self.stopping, self.interpreter, mode)
        self.session = SessionsRoutes(self.sessions, self.command.validate_cwd)
        self.metrics = MetricsRoutes(self.stopping)
        self.proxy = ProxyRoutes(runtime)
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
        """A ROUTES target ("files.info", "ping.ping") as a handler; an ExecdError it raises becomes
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
        self.stopping.clear()
        self._server = Server((self.host, self._want_port), _ExecdHandler, self, listen_delay=self.start_delay)
        self._server.start(name=f"execd-{self._server.port}")
        if self.runtime.has_netns:  # execd's :44772 as the sandbox sees it (inside.py)
            self._inside = InsideListener(self, _ExecdHandler, self.runtime, EXECD_PORT, delay=self.start_delay)
            self._inside.start()

    def stop(self) -> None:
        """Close the listener, unblock every waiting request (paused / stalled / streaming) and kill
        the foreground commands whose streams are still open."""
        self.stopping.set()
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
        self.commands.files.close()
        self.sessions.close_all()
        self.pty.close_all()

    def __enter__(self) -> "ExecdServer":
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def track(self, conn: socket.socket, add: bool) -> None:
        """Register (add) or forget a connection of this listener: stop() shuts those still open."""
        with self._conns_lock:
            if add:
                self._conns.add(conn)
            else:
                self._conns.discard(conn)

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
            while self.runtime.paused and not self.stopping.is_set() and not self.runtime.terminated:
                self.runtime.wait_unpaused(0.1)
            if self.stopping.is_set() or self.runtime.terminated:
                req.handler.close_connection = True  # never answer: close without a response
                return
        if self.stopping.is_set():
            req.handler.close_connection = True  # never answer: close without a response
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
                self.proxy.forward(req, port, "/" + sub)
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
