"""The fault proxy's recorder (``Recorder``: upstream exchanges into a fixtures/ file, credentials scrubbed)
and the streaming of large request bodies upstream, keeping the first MAX_RECORDED_BODY bytes."""

from __future__ import annotations

import base64
import http.client
import os
import re
import threading
import time
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

from mock_opensandbox.wire.http1 import Request
from mock_opensandbox.workbench import fixturefile
from mock_opensandbox.workbench.scrub import SECRET_HEADERS, scrub_text, strip_secrets

MAX_RECORDED_BODY = 8 << 20
MIN_RECORDED_WAIT = 0.5  # a client pause at least this long before a request is recorded (wait_before_s)


# =====================================================================================================
# recording (fixtures/ format; the placeholders for ids/ports/times are added by `python -m record`)
# =====================================================================================================
STREAM_ABOVE = 1 << 20


def _stream_request(req: Request, conn: http.client.HTTPConnection, length: int) -> bytes:
    """Copy ``length`` body bytes from the client to ``conn``; the first MAX_RECORDED_BODY of them."""
    kept = bytearray()
    left = length
    req._body = b""  # read here, never again (drain)
    while left:
        data = req.handler.rfile.read(min(left, 1 << 16))
        if not data:
            req.handler.close_connection = True
            raise OSError("the client closed before its body ended")
        if len(kept) < MAX_RECORDED_BODY:
            kept += data[: MAX_RECORDED_BODY - len(kept)]
        conn.send(data)
        left -= len(data)
    return bytes(kept)


def _text_or_b64(data: bytes | None) -> dict[str, Any]:
    if data is None:
        return {"body": None}
    try:
        return {"body": data.decode("utf-8")}
    except UnicodeDecodeError:
        return {"body_b64": base64.b64encode(data).decode("ascii")}


class Recorder:
    """Scrubs each upstream exchange as it comes and appends it to ``DIR/<name>.json`` (fixturefile.Appender:
    a whole fixture after every exchange, only the new one written). ``secrets``: values the proxy
    already knows (its keys, execd tokens) to scrub besides those the requests' credential headers carry."""

    def __init__(self, directory: str, name: str, upstream: str, secrets: Callable[[], Iterable[str]] = lambda: ()):
        if not re.fullmatch(r"[\w.-]{1,100}", name):
            raise ValueError("the recording name may use letters, digits, '.', '_' and '-' only")
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, name + ".json")
        self.name = name
        self.upstream = upstream
        self.secrets: set[str] = set()
        self._known = secrets
        self._lock = threading.Lock()
        self._last_end: float | None = None
        self.started = datetime.now(timezone.utc)
        self._file = fixturefile.Appender(
            self.path,
            fixturefile.make(
                name,
                "recorded by the fault proxy in front of %s" % upstream,
                {
                    "where": "fault proxy (python -m mock_opensandbox.workbench.proxy) in front of %s" % upstream,
                    "when": self.started.strftime("%Y-%m-%d"),
                    "source": "proxy",
                    "tool": "python -m mock_opensandbox.workbench.proxy --record",
                    "templated": False,
                },
                {"replayable": True},
                [],
            ),
        )

    def add(self, request: dict[str, Any], response: dict[str, Any], started: float | None = None) -> None:
        """``started``: time.monotonic() when the request was sent. A client that waited before it (a
        background command left to finish, a sleep) gets the same pause noted as ``wait_before_s``,
        so a replay waits too (record.replay caps it at 5 s)."""
        with self._lock:
            for k, v in request["headers"].items():
                if k.lower() in SECRET_HEADERS and v and not v.startswith("<"):
                    self.secrets.add(v)
            ex: dict[str, Any] = {}
            now = time.monotonic()
            if started is not None and self._last_end is not None and started - self._last_end >= MIN_RECORDED_WAIT:
                ex["wait_before_s"] = round(started - self._last_end, 2)
            self._last_end = now if self._last_end is None else max(self._last_end, now)
            ex["request"], ex["response"] = self._scrub(request, response)
            self._file.append(ex)

    def _scrub(self, request: dict[str, Any], response: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Credential headers as their placeholders; known secrets as <api-key>; in bodies also
        credential-looking fields (env keys...) as <redacted>."""
        known = self.secrets | {s for s in self._known() if s}
        req, resp = dict(request), dict(response)
        for part in (req, resp):
            part["headers"] = {
                k: SECRET_HEADERS[k.lower()] if k.lower() in SECRET_HEADERS else strip_secrets(v, known, "<api-key>")
                for k, v in part["headers"].items()
            }
            if part.get("body") is not None:
                part["body"] = scrub_text(part["body"], known, "<api-key>")
        req["path"] = strip_secrets(req["path"], known, "<api-key>")
        return req, resp
