"""One HTTP/1.1 exchange for tests: ``call(target, method, path, body=None, headers=None, timeout=30)``.

Every tier's private request helper is this one: a fresh connection per call, ``Connection: close`` unless the
caller sends its own ``Connection`` header, a ``dict``/``list`` body sent as JSON (with ``Content-Type:
application/json`` unless the caller set one), a ``str`` body as UTF-8, ``bytes`` as they are. Error statuses are
answers, not exceptions. ``target`` is ``"host:port"``, a port on 127.0.0.1, or a URL (its path is ignored).

``wait_eof=True`` also waits, after the response, for the server to close the connection: on return the server has
finished the exchange (the mock reports an exchange to the spec guard after writing it).

The answer is a ``Reply``: ``status``, ``headers`` (names looked up in any case; listed lower-case),
``raw_headers`` (as sent: order, case, repeats), ``body`` bytes, ``json()``, ``text``; it also unpacks as
``status, headers, body``.
"""

from __future__ import annotations

import http.client
import json
from typing import Any, Iterator, Mapping, Optional, Union

from mock_opensandbox.wire import sse


class Headers(dict):
    """Response headers: names stored lower-case, looked up in any case."""

    def __init__(self, pairs: Any = ()) -> None:
        super().__init__((k.lower(), v) for k, v in (pairs.items() if isinstance(pairs, Mapping) else pairs))

    def __getitem__(self, name: str) -> str:
        return super().__getitem__(name.lower())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and super().__contains__(name.lower())

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(name.lower(), default)


class Reply:
    def __init__(self, status: int, raw_headers: list, body: bytes) -> None:
        self.status = status
        self.raw_headers = raw_headers
        self.headers = Headers(raw_headers)
        self.body = body

    def __iter__(self) -> Iterator[Any]:
        return iter((self.status, self.headers, self.body))

    def __repr__(self) -> str:
        return f"Reply({self.status}, {self.body[:300]!r})"

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")

    def header(self, name: str) -> Optional[str]:
        return self.headers.get(name)

    def events(self) -> list:
        """The body as execd's SSE events."""
        return list(sse.parse_stream([self.body]))


def hostport(target: Union[str, int]) -> str:
    if isinstance(target, int):
        return f"127.0.0.1:{target}"
    return target.split("://", 1)[1].split("/", 1)[0] if "://" in target else target


def call(
    target: Union[str, int],
    method: str,
    path: str,
    body: Any = None,
    headers: Optional[Mapping[str, str]] = None,
    timeout: float = 30.0,
    wait_eof: bool = False,
) -> Reply:
    h = {"Connection": "close"}
    for k, v in (headers or {}).items():
        for have in [n for n in h if n.lower() == k.lower()]:
            del h[have]
        h[k] = v
    if isinstance(body, (dict, list)):
        body = json.dumps(body)
        if not any(k.lower() == "content-type" for k in h):
            h["Content-Type"] = "application/json"
    if isinstance(body, str):
        body = body.encode("utf-8")
    c = http.client.HTTPConnection(hostport(target), timeout=timeout)
    watch = None
    try:
        c.request(method, path, body=body, headers=h)
        if wait_eof and c.sock is not None:
            watch = c.sock.dup()
        r = c.getresponse()
        # what arrives, to the end: a body cut off before its Content-Length (execd's directory download declares
        # 2**63 - 1, on which a plain read() overflows) is the bytes that came
        reply = Reply(r.status, r.getheaders(), b"".join(iter(lambda: r.read(65536), b"")))
        c.close()
        try:
            while watch is not None and watch.recv(65536):
                pass
        except OSError:
            pass
        return reply
    finally:
        c.close()
        if watch is not None:
            watch.close()
