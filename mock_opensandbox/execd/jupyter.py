"""A Jupyter server client for the mock execd's /code group, as execd's pkg/jupyter is one (3bb6fad:
components/execd/pkg/jupyter/client.go, kernel/, session/, execute/): the REST calls execd makes
(kernelspecs, kernels, sessions, interrupt) with ``Authorization: token T`` (auth/ AuthTransport), and
the kernel's channels WebSocket (``/api/kernels/{id}/channels?token=T``, execute/execute.go) with
``execute_request`` messages (protocol 5.3, channel "shell"). Every connection is made by the caller's
``connect(port)``: the sandbox's own network namespace (runtime.connect), so the server the sandbox's
JUPYTER_HOST names is reached as execd inside the sandbox reaches it. Standard library only."""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import threading
import time
import urllib.parse
import uuid
from typing import Any, Callable

from mock_opensandbox.wire import websocket as wsproto
from mock_opensandbox.wire.gojson import errno_text


def _dial(host: str, port: int, exc: OSError) -> str:
    """Go's net.Dial error text."""
    return "dial tcp %s:%d: connect: %s" % (host, port, errno_text(exc))


__all__ = ["JupyterClient", "JupyterError", "KernelChannel"]


class JupyterError(Exception):
    """A Jupyter call failed (transport or a non-2xx answer): the text execd's client would report."""


class JupyterClient:
    def __init__(self, base_url: str, token: str, connect: Callable[[str, int, float], socket.socket]):
        u = urllib.parse.urlsplit(base_url if "://" in base_url else "http://" + base_url)
        self.host = u.hostname or "127.0.0.1"
        self.port = u.port or (443 if u.scheme == "https" else 80)
        self.netloc = u.netloc
        self.prefix = u.path.rstrip("/")
        self.token = token
        self._connect = connect

    def _http(self, method: str, path: str, body: Any = None, timeout: float = 30.0) -> Any:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            try:
                conn.sock = self._connect(self.host, self.port, timeout)
            except OSError as exc:
                raise JupyterError(
                    '%s "http://%s%s%s": %s'
                    % (method.capitalize(), self.netloc, self.prefix, path, _dial(self.host, self.port, exc))
                ) from exc
            data = None if body is None else json.dumps(body).encode()
            headers = {"Authorization": "token " + self.token, "Host": self.netloc}
            if data is not None:
                headers["Content-Type"] = "application/json"
            try:
                conn.request(method, self.prefix + path, body=data, headers=headers)
                resp = conn.getresponse()
                raw = resp.read()
            except (OSError, http.client.HTTPException) as exc:
                raise JupyterError("%s %s: %s" % (method, path, exc)) from exc
            if resp.status >= 300:
                raise JupyterError(
                    "unexpected status code: %d, body: %s" % (resp.status, raw.decode("utf-8", "replace"))
                )
            return json.loads(raw) if raw.strip() else None
        finally:
            conn.close()

    def kernelspecs(self) -> dict[str, Any]:
        return self._http("GET", "/api/kernelspecs") or {}

    def kernels(self) -> list[dict[str, Any]]:
        return self._http("GET", "/api/kernels") or []

    def create_session(self, name: str, path: str, kernel: str) -> dict[str, Any]:
        session: dict[str, Any] = self._http(
            "POST", "/api/sessions", {"path": path, "name": name, "type": "notebook", "kernel": {"name": kernel}}
        )
        return session

    def delete_session(self, session_id: str) -> None:
        self._http("DELETE", "/api/sessions/" + session_id)

    def interrupt(self, kernel_id: str) -> None:
        self._http("POST", "/api/kernels/%s/interrupt" % kernel_id)

    def channel(self, kernel_id: str, timeout: float = 30.0) -> "KernelChannel":
        try:
            sock = self._connect(self.host, self.port, timeout)
        except OSError as exc:
            raise JupyterError("failed to connect to kernel: %s" % _dial(self.host, self.port, exc)) from exc
        return KernelChannel(
            sock,
            "%s/api/kernels/%s/channels?token=%s" % (self.prefix, kernel_id, urllib.parse.quote(self.token)),
            self.netloc,
        )


class KernelChannel:
    """One kernel's channels WebSocket (client side: masked frames out, unmasked in)."""

    def __init__(self, sock: socket.socket, path: str, host: str):
        self.sock = sock
        self.session = str(uuid.uuid4())
        self._counter = 0
        self._wlock = threading.Lock()
        key = base64.b64encode(os.urandom(16)).decode()
        req = (
            "GET %s HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" % (path, host, key)
        )
        self.rfile = sock.makefile("rb")
        try:
            sock.sendall(req.encode())
            status = self.rfile.readline()
            while True:
                line = self.rfile.readline()
                if not line or line in (b"\r\n", b"\n"):
                    break
        except OSError as exc:
            self.close()
            raise JupyterError("failed to connect to kernel: %s" % exc) from exc
        parts = status.split()
        if len(parts) < 2 or parts[1] != b"101":
            self.close()
            raise JupyterError(
                "failed to connect to kernel: websocket: bad handshake (%s)" % status.decode("latin-1").strip()
            )
        sock.settimeout(None)
        self._events = wsproto.MessageAssembler(wsproto.FrameReader(self.rfile.read, require_mask=False))

    def execute(self, code: str) -> str:
        """Send one execute_request (execute.go buildExecuteMessage); returns its msg_id."""
        self._counter += 1
        msg_id = "%s-%d" % (self.session, self._counter)
        msg = {
            "header": {
                "msg_id": msg_id,
                "username": "go-client",
                "session": self.session,
                "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "msg_type": "execute_request",
                "version": "5.3",
            },
            "parent_header": {},
            "metadata": {},
            "channel": "shell",
            "content": {
                "code": code,
                "silent": False,
                "store_history": True,
                "user_expressions": {},
                "allow_stdin": False,
                "stop_on_error": True,
            },
        }
        self._send(wsproto.OP_TEXT, json.dumps(msg).encode())
        return msg_id

    def _send(self, op: int, payload: bytes) -> None:
        with self._wlock:
            try:
                self.sock.sendall(wsproto.encode_frame(op, payload, mask=os.urandom(4)))
            except OSError as exc:
                raise JupyterError("failed to send execution request: %s" % exc) from exc

    def recv(self) -> dict[str, Any] | None:
        """The next JSON message; None when the connection ended (closed, reset, or the server died)."""
        while True:
            try:
                ev = self._events.next_event()
            except (OSError, wsproto.ConnectionClosed, wsproto.ProtocolError, ValueError):
                return None
            if ev[0] == "ping":
                try:
                    self._send(wsproto.OP_PONG, ev[1])
                except JupyterError:
                    return None
                continue
            if ev[0] == "close":
                return None
            if ev[0] == "message":
                try:
                    msg = json.loads(ev[2])
                except ValueError:
                    continue
                if isinstance(msg, dict):
                    return msg

    def close(self) -> None:
        """Shut the socket first: that ends a reader blocked in recv() (its buffered file is closed last)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        try:
            self.sock.close()
        except OSError:
            pass
        rfile = getattr(self, "rfile", None)
        if rfile is not None:
            try:
                rfile.close()
            except OSError:
                pass
