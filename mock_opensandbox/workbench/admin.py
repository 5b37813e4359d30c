"""The workbench admin API under ``/__mock__/`` (moto's reset, WireMock's journal and verify).

Routes (behind the API key like every other route; a browser on the dashboard authenticates with a
session cookie it gets from ``GET /__mock__/?key=<api key>``):

* ``GET  /__mock__/``                  the dashboard (workbench/dashboard.py)
* ``POST /__mock__/reset``             everything (sandboxes, their processes, named volumes, fault rules,
                                       journal; ``{"keep_volumes": true}`` / ``?keep_volumes=1`` keeps the
                                       volumes), or one sandbox with ``{"sandbox": "<id>"}`` / ``?sandbox=<id>``
* ``GET  /__mock__/requests``          the journal (workbench/journal.py); filters: method, path (regex), sandbox,
                                       listener, status (404 or 4xx), fault (rule id or *), since (seq),
                                       limit; ``DELETE`` clears it
* ``GET  /__mock__/sandboxes``         internal state of every sandbox; ``GET .../{id}`` one of them;
                                       ``DELETE .../{id}`` kills it (like the lifecycle DELETE)
* ``GET  /__mock__/images``            the image store's cache: images, size, digest, sandboxes using them;
  ``DELETE`` empties it (``reset`` leaves it)
* ``GET  /__mock__/volumes``           named volumes (size, who mounts them) and host binds in use
* ``GET  /__mock__/state``             everything the dashboard shows, in one document
* ``GET  /__mock__/events``            the same document as a server-sent event stream, on every change
* ``/__mock__/faults``                 the fault rules (workbench/faults.py; served by the lifecycle app, or here
                                       for the proxy and for the dashboard's session)

The API is served by ``AdminLayer``, which sits in front of an app's ``handle(req)``; the backend
(``MockBackend`` in workbench/mock_backend.py, ``ProxyBackend`` in workbench/proxy_backend.py for the fault
proxy) says what the sandboxes are. ``serve_faults`` is in workbench/fault_routes.py, ``assert_requested``
in workbench/assertions.py.
Standard library only.
"""

from __future__ import annotations

import hmac
import json
import secrets
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable, Protocol, cast

from mock_opensandbox.wire.http1 import Request, host_allowed
from mock_opensandbox.wire.listener import App, FaultRules, RequestJournal
from mock_opensandbox.wire.relay import client_gone
from mock_opensandbox.workbench.assertions import assert_requested
from mock_opensandbox.workbench.dashboard import page
from mock_opensandbox.workbench.fault_routes import serve_faults
from mock_opensandbox.workbench.faults import FaultRegistry
from mock_opensandbox.workbench.journal import Journal
from mock_opensandbox.workbench.mock_backend import MockBackend
from mock_opensandbox.workbench.proxy_backend import ProxyBackend

__all__ = ["AdminAPI", "AdminLayer", "MockBackend", "assert_requested", "serve_faults"]

PREFIX = "/__mock__"
COOKIE = "osb_mock_session"
EVENT_THROTTLE = 0.25  # the event stream sends at most one state document per this many seconds
EVENT_KEEPALIVE = 15.0
LIGHT_REQUESTS = 200  # journal entries in a state document


def _error(req: Request, status: int, code: str, message: str) -> None:
    req.send_json(status, {"code": code, "message": message})


def light(entry: dict[str, Any]) -> dict[str, Any]:
    """A journal entry without headers and bodies (the dashboard's table row)."""
    return {
        k: entry.get(k)
        for k in ("seq", "time", "method", "path", "listener", "sandbox", "status", "duration_ms", "fault", "error")
    }


# =====================================================================================================
# the admin layer
# =====================================================================================================
class AdminAPI:
    """The /__mock__/ routes for one backend. ``serve_faults``: answer /__mock__/faults here (the proxy);
    otherwise they fall through to the app, except for the dashboard's cookie session."""

    def __init__(
        self,
        backend: MockBackend | ProxyBackend,
        journal: Journal,
        faults: FaultRegistry,
        *,
        api_key: Callable[[], str | None],
        bind_host: Callable[[], str],
        serve_faults: bool = False,
    ):
        self.backend = backend
        self.journal = journal
        self.faults = faults
        self._api_key = api_key
        self._bind_host = bind_host
        self.serve_faults = serve_faults
        self.session = secrets.token_urlsafe(24)  # the dashboard's cookie value (never the API key)
        self._lock = threading.Lock()

    # -- auth -----------------------------------------------------------------------------------------
    def _cookie_ok(self, req: Request) -> bool:
        raw = req.headers.get("Cookie") or ""
        for part in raw.split(";"):
            k, _, v = part.strip().partition("=")
            if k == COOKIE and hmac.compare_digest(v.encode(), self.session.encode()):
                return True
        return False

    def _key_ok(self, key: str | None) -> bool:
        want = self._api_key()
        if want is None:
            return True
        if not key:
            return False
        return hmac.compare_digest(key.encode("utf-8", "surrogateescape"), want.encode("utf-8"))

    def _guard(self, req: Request) -> str | None:
        """None when the request may use the admin API, else why not (403/401 already sent)."""
        host = req.headers.get("Host")
        if not host_allowed(host, self._bind_host()):
            _error(
                req,
                403,
                "MOCK::HOST_NOT_ALLOWED",
                "Host header is not allowed: the admin API only answers "
                "loopback names or the bound address (DNS-rebinding protection).",
            )
            return "host"
        origin = req.headers.get("Origin")
        cookie = self._cookie_ok(req)
        if origin is not None and not (cookie and origin.lower() in ("http://" + (host or "").lower(),)):
            _error(req, 403, "MOCK::ORIGIN_NOT_ALLOWED", "Cross-origin requests to the admin API are refused.")
            return "origin"
        if cookie or self._key_ok(req.headers.get("OPEN-SANDBOX-API-KEY")):
            return None
        key = req.headers.get("OPEN-SANDBOX-API-KEY")
        if not key:
            _error(
                req,
                401,
                "MISSING_API_KEY",
                "Authentication credentials are missing. Provide API key via "
                "OPEN-SANDBOX-API-KEY header (the dashboard: open /__mock__/?key=<api key>).",
            )
        else:
            _error(
                req, 401, "INVALID_API_KEY", "Authentication credentials are invalid. Check your API key and try again."
            )
        return "auth"

    # -- dispatch ---------------------------------------------------------------------------------------
    def handle(self, req: Request) -> bool:
        """Serve an admin request; False = not ours (the app answers it)."""
        path = req.path.rstrip("/") or "/"
        if path == PREFIX and req.method == "GET" and req.q("key") is not None:
            return self._login(req)
        is_faults = path == PREFIX + "/faults" or path.startswith(PREFIX + "/faults/")
        if is_faults and not self.serve_faults and not self._cookie_ok(req):
            return False
        if self._guard(req) is not None:
            return True
        parts = path[len(PREFIX) :].strip("/").split("/") if path != PREFIX else []
        m = req.method
        try:
            if not parts:
                if m not in ("GET", "HEAD"):
                    return self._method(req)

                req.send(
                    200,
                    page(),
                    "text/html; charset=utf-8",
                    {
                        "Cache-Control": "no-store",
                        "X-Frame-Options": "DENY",
                        "Content-Security-Policy": "default-src 'self'; script-src 'unsafe-inline' 'self'; "
                        "style-src 'unsafe-inline'; img-src data:",
                    },
                )
                return True
            head = parts[0]
            if head == "reset" and len(parts) == 1:
                return self._reset(req) if m == "POST" else self._method(req)
            if head == "requests" and len(parts) == 1:
                if m == "GET":
                    return self._requests(req)
                if m == "DELETE":
                    self.journal.clear()
                    req.send(204)
                    return True
                return self._method(req)
            if head == "sandboxes" and len(parts) == 1:
                if m != "GET":
                    return self._method(req)
                items = [s for s in (self.backend.sandbox(i) for i in self.backend.sandbox_ids()) if s]
                req.send_json(200, {"sandboxes": items})
                return True
            if head == "sandboxes" and len(parts) == 2:
                sid = parts[1]
                if m == "GET":
                    st = self.backend.sandbox(sid)
                    if st is None:
                        _error(req, 404, "MOCK::SANDBOX_NOT_FOUND", "No sandbox %s." % sid[:64])
                    else:
                        req.send_json(200, st)
                    return True
                if m == "DELETE":
                    if self.backend.kill(sid):
                        req.send(204)
                    else:
                        _error(req, 404, "MOCK::SANDBOX_NOT_FOUND", "No sandbox %s." % sid[:64])
                    return True
                return self._method(req)
            if head == "images" and len(parts) == 1 and isinstance(self.backend, MockBackend):  # the proxy has none
                if m == "GET":
                    return self._images(req, self.backend)
                return self._clear_images(req, self.backend) if m == "DELETE" else self._method(req)
            if head == "volumes" and len(parts) == 1 and hasattr(self.backend, "volumes"):
                if m != "GET":
                    return self._method(req)
                req.send_json(200, self.backend.volumes())
                return True
            if head == "state" and len(parts) == 1:
                return self._state(req) if m == "GET" else self._method(req)
            if head == "events" and len(parts) == 1:
                return self._events(req) if m == "GET" else self._method(req)
            if head == "faults":
                return self._faults(req, parts[1:])
        except ValueError as e:  # a bad filter, rule, body...
            _error(req, 400, "MOCK::INVALID_REQUEST", str(e))
            return True
        _error(req, 404, "MOCK::NOT_FOUND", "No admin route %s %s." % (m, path[:200]))
        return True

    def _images(self, req: Request, backend: MockBackend) -> bool:
        """``GET /__mock__/images``: the image store's cache (docs/IMAGES.md)."""
        req.send_json(200, backend.images())
        return True

    def _clear_images(self, req: Request, backend: MockBackend) -> bool:
        """``DELETE /__mock__/images``: empty the image cache (``/__mock__/reset`` leaves it); 409 while a
        live sandbox was created from a cached image."""
        state = backend.images()
        users = sorted(sid for img in state["images"] for sid in img.get("sandboxes", []))
        if users:
            _error(req, 409, "MOCK::IMAGES_IN_USE", "Images are in use by sandboxes %s." % ", ".join(users[:20]))
        elif not state["available"]:
            _error(req, 404, "MOCK::NO_IMAGE_STORE", "The mock has no image store (start it with --image-dir).")
        else:
            backend.clear_images()
            req.send(204)
        return True

    @staticmethod
    def _method(req: Request) -> bool:
        _error(req, 405, "MOCK::METHOD_NOT_ALLOWED", "Method %s is not allowed here." % req.method)
        return True

    def _login(self, req: Request) -> bool:
        if not host_allowed(req.headers.get("Host"), self._bind_host()) or req.headers.get("Origin") is not None:
            _error(req, 403, "MOCK::ORIGIN_NOT_ALLOWED", "Not allowed.")
            return True
        if not self._key_ok(req.q("key")):
            _error(
                req, 401, "INVALID_API_KEY", "Authentication credentials are invalid. Check your API key and try again."
            )
            return True
        # the key leaves the address bar at once; the browser keeps a session cookie instead
        req.send(
            303,
            b"",
            None,
            {
                "Location": PREFIX + "/",
                "Cache-Control": "no-store",
                "Set-Cookie": "%s=%s; Path=%s/; HttpOnly; SameSite=Strict" % (COOKIE, self.session, PREFIX),
            },
        )
        return True

    # -- routes ----------------------------------------------------------------------------------------
    def _body_json(self, req: Request) -> Any:
        raw = req.body
        if not raw.strip():
            return None
        try:
            return json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise ValueError("the body must be JSON") from None

    def _reset(self, req: Request) -> bool:
        body = self._body_json(req)
        sid = req.q("sandbox")
        keep_q = req.q("keep_volumes")
        keep: bool | None = None
        if keep_q is not None:
            if keep_q.lower() not in ("1", "true", "0", "false"):
                raise ValueError("keep_volumes must be true or false")
            keep = keep_q.lower() in ("1", "true")
        if isinstance(body, dict) and body.get("sandbox") is not None:
            sid = body["sandbox"]
        elif body is not None and not isinstance(body, dict):
            raise ValueError('the body must be {} or {"sandbox": "<id>"}')
        if isinstance(body, dict) and body.get("keep_volumes") is not None:
            keep = body["keep_volumes"]
            if not isinstance(keep, bool):
                raise ValueError("keep_volumes must be true or false")
        if sid is not None and (not isinstance(sid, str) or not sid):
            raise ValueError("sandbox must be a sandbox id")
        if sid is not None and self.backend.sandbox(sid, processes=False) is None:
            _error(req, 404, "MOCK::SANDBOX_NOT_FOUND", "No sandbox %s." % sid[:64])
            return True
        req.send_json(200, self.reset(sid, keep_volumes=bool(keep)))
        return True

    def reset(self, sid: str | None = None, *, keep_volumes: bool = False) -> dict[str, Any]:
        with self._lock:
            out = self.backend.reset(sid)
            if sid is None and hasattr(self.backend, "reset_volumes"):
                # moto-style: the named volumes go with everything else unless asked to keep them
                out["volumes_removed"] = self.backend.reset_volumes(keep_volumes)
            if sid is None:
                rules = len(self.faults.rules)
                self.faults.clear()
                out["rules_removed"] = rules
                out["requests_removed"] = self.journal.clear()
            else:
                gone = [r.id for r in self.faults.rules if r.sandbox == sid]
                for rid in gone:
                    self.faults.remove(rid)
                out["rules_removed"] = len(gone)
                out["requests_removed"] = self.journal.clear(sid)
            return out

    def _requests(self, req: Request) -> bool:
        filters: dict[str, Any] = {}
        for name in ("method", "path", "sandbox", "listener", "status", "fault"):
            v = req.q(name)
            if v:
                filters[name] = v
        for name in ("since", "limit"):
            v = req.q(name)
            if v is not None:
                if not v.isdigit():
                    raise ValueError("%s must be a non-negative integer" % name)
                filters[name] = int(v)
        items = self.journal.entries(**filters)
        req.send_json(
            200, {"requests": items, "count": len(items), "seq": self.journal.seq, "dropped": self.journal.dropped}
        )
        return True

    def state(self) -> dict[str, Any]:
        sandboxes = [s for s in (self.backend.sandbox(i) for i in self.backend.sandbox_ids()) if s]
        # the dashboard's document is rebuilt on every change: sizes counted over at most 5000 entries
        vols = self.backend.volumes(5000) if hasattr(self.backend, "volumes") else None
        return {
            "info": self.backend.info(),
            "sandboxes": sandboxes,
            "volumes": vols,
            "images": self._light_images(),
            "faults": self.faults.to_json(),
            "requests": [light(e) for e in self.journal.entries(limit=LIGHT_REQUESTS)],
            "seq": self.journal.seq,
            "time": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }

    def _light_images(self) -> dict[str, Any] | None:
        """The dashboard's Images panel: ``/__mock__/images`` without each image's layers and config."""
        if not hasattr(self.backend, "images"):
            return None
        doc = self.backend.images()
        keep = ("id", "ref", "refs", "digest", "size", "source", "sandboxes")
        return {
            "available": doc["available"],
            "sources": doc["sources"],
            "snapshots": doc["snapshots"],
            "images": [{k: img.get(k) for k in keep} for img in doc["images"]],
        }

    def _state(self, req: Request) -> bool:
        req.send_json(200, self.state())
        return True

    def _events(self, req: Request) -> bool:
        """Server-sent events: ``event: state`` with the state document whenever it changed (TTL
        counters are compared at one-second resolution), a comment line as keep-alive."""
        h = req.handler
        w = req.start_chunked(
            200,
            {
                "Content-Type": "text/event-stream; charset=utf-8",
                "Cache-Control": "no-store",
                "X-Accel-Buffering": "no",
            },
        )
        last_doc = None
        last_send = 0.0
        seq = -1
        try:
            while h.server.socket.fileno() != -1:
                doc = self.state()
                doc_cmp = json.dumps({k: v for k, v in doc.items() if k != "time"}, sort_keys=True, default=str)
                now = time.monotonic()
                if doc_cmp != last_doc:
                    w.write(b"event: state\ndata: " + json.dumps(doc, separators=(",", ":")).encode() + b"\n\n")
                    last_doc, last_send = doc_cmp, now
                elif now - last_send > EVENT_KEEPALIVE:
                    w.write(b": keep-alive\n\n")
                    last_send = now
                seq = self.journal.seq
                for _ in range(4):  # a request arrived, or a second passed
                    if self.journal.wait_for(seq, 0.25) or client_gone(h.connection):
                        break
                if client_gone(h.connection):  # the page went away: end now, not at the next change
                    break
                time.sleep(EVENT_THROTTLE)
        except (OSError, ValueError):
            h.close_connection = True
            return True
        w.close()
        h.close_connection = True
        return True

    def _faults(self, req: Request, rest: list[str]) -> bool:
        if len(rest) > 1:
            _error(req, 404, "MOCK::NOT_FOUND", "No admin route.")
            return True
        return serve_faults(req, self.faults, rest[0] if rest else None) or self._method(req)


class Routed(Protocol):
    """An app whose listener's handler hands it every request (lifecycle/app.py LifecycleApp, the proxy's app)."""

    def handle(self, req: Request) -> None: ...


class AdminLayer(App):
    """Puts the admin API in front of an app: ``handle(req)`` serves /__mock__/ routes it owns and
    passes everything else on. Every other attribute is the wrapped app's (faults, store, ...): the App
    interface (wire/listener.py) by the properties below, anything else by __getattr__; every assignment
    goes to the wrapped app (__setattr__)."""

    _app: App  # (in __dict__: set without __setattr__)
    admin: AdminAPI

    def __init__(self, app: App, admin: AdminAPI):
        self.__dict__["_app"] = app
        self.__dict__["admin"] = admin

    # the App interface: the wrapped app's, read and written through
    @property
    def faults(self) -> FaultRules | None:
        return self._app.faults

    @faults.setter
    def faults(self, value: FaultRules | None) -> None:
        self._app.faults = value

    @property
    def journal(self) -> RequestJournal | None:
        return self._app.journal

    @journal.setter
    def journal(self, value: RequestJournal | None) -> None:
        self._app.journal = value

    @property
    def sandbox_id(self) -> str | None:
        return self._app.sandbox_id

    @sandbox_id.setter
    def sandbox_id(self, value: str | None) -> None:
        self._app.sandbox_id = value

    @property
    def fault_listener(self) -> str | None:
        return self._app.fault_listener

    @fault_listener.setter
    def fault_listener(self, value: str | None) -> None:
        self._app.fault_listener = value

    @property
    def verbose(self) -> bool:
        return self._app.verbose

    @verbose.setter
    def verbose(self, value: bool) -> None:
        self._app.verbose = value

    def __getattr__(self, name: str) -> Any:
        return getattr(self.__dict__["_app"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.__dict__["_app"], name, value)

    def handle(self, req: Request) -> None:
        if req.path == PREFIX or req.path.startswith(PREFIX + "/"):
            if self.admin.handle(req):
                return
        cast(Routed, self._app).handle(req)
