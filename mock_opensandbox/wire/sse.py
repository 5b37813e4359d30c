"""execd's event-stream framing: bare JSON objects followed by a blank line, no "data:" prefix
(recordings 07-12, 17; QUIRKS.md, POST /command). Pure functions, standard library only.

Writer key order follows the recordings:
  output/ping/init:      {"type", "text", "timestamp"}
  execution_complete:    {"type", "execution_time"?, "timestamp"}
  error:                 {"type", "timestamp", "error": {"ename", "evalue", "traceback"}}
JSON is compact (Go's encoding/json) with "<", ">", "&" escaped as \\u003c etc. like Go does
(recording 07 shows the same escaping in JSON bodies; text events with those characters behave alike).
``SSEWriter`` is the one writer of an event-stream response (execd's /command and /code routes).
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any, Iterable, Iterator

from mock_opensandbox.wire.gojson import go_json, html_safe

__all__ = [
    "SSEWriter",
    "now_ms",
    "encode_event",
    "init_event",
    "ping_event",
    "output_event",
    "complete_event",
    "error_event",
    "go_json",
    "SSEReader",
    "parse_stream",
]


def now_ms() -> int:
    return int(time.time() * 1000)


def encode_event(event: dict[str, Any]) -> bytes:
    """One frame: the JSON object then a blank line."""
    return (go_json(event) + "\n\n").encode("utf-8")


class SSEWriter:
    """Writes one event-stream response's frames to ``w`` (the chunked writer of gin.sse_start). Threads may
    share it (a heartbeat beside the stream): each write holds a lock. The first write that fails marks the
    client ``gone``; later events are dropped (and a caller may set ``gone`` itself when it sees the client
    leave)."""

    def __init__(self, w: Any):
        self.w = w
        self.gone = False
        self._lock = threading.Lock()

    def emit(self, *events: dict[str, Any]) -> None:
        """One frame per event (one chunk each), written together."""
        with self._lock:
            if self.gone:
                return
            try:
                self.w.write(*(encode_event(e) for e in events))
            except OSError:
                self.gone = True

    def frames(self, frames: list[bytes]) -> None:
        """Frames already encoded (output_frames), one chunk each, written together like emit's."""
        with self._lock:
            if self.gone or not frames:
                return
            try:
                self.w.write(*frames)
            except OSError:
                self.gone = True

    def raw(self, data: bytes) -> None:
        """Bytes that are not an event (execd's RespondError JSON once the stream has begun); a failed write
        is ignored, as the response is over either way."""
        with self._lock:
            try:
                self.w.write(data)
            except OSError:
                pass

    def close(self, last: dict[str, Any] | None = None) -> None:
        """The end of the stream; ``last``: a final event sent in the same write (dropped when gone)."""
        with self._lock:
            frame = encode_event(last) if last is not None and not self.gone else b""
        self.w.close(frame)  # ChunkedWriter.close: a failed write ends the response all the same


def output_frames(stream: str, texts: list[str], ts: int | None = None) -> list[bytes]:
    """encode_event(output_event(stream, text, ts)) for each text, one timestamp for all (the lines of one read of
    the pipe), without a dict and an encoder pass per line: the same bytes (tiers/t0/wire/test_sse_codec.py)."""
    if stream not in ("stdout", "stderr"):
        raise ValueError(f"bad stream {stream!r}")
    head = '{"type":"%s","text":' % stream
    tail = ',"timestamp":%d}\n\n' % (now_ms() if ts is None else ts)
    return [(head + html_safe(_STR_ENCODER.encode(t)) + tail).encode("utf-8") for t in texts]


_STR_ENCODER = json.JSONEncoder(ensure_ascii=False)  # a str alone: what go_json's C encoder writes for it


def init_event(command_id: str, ts: int | None = None) -> dict[str, Any]:
    return {"type": "init", "text": command_id, "timestamp": now_ms() if ts is None else ts}


def ping_event(ts: int | None = None) -> dict[str, Any]:
    return {"type": "ping", "text": "pong", "timestamp": now_ms() if ts is None else ts}


def output_event(stream: str, text: str, ts: int | None = None) -> dict[str, Any]:
    if stream not in ("stdout", "stderr"):
        raise ValueError(f"bad stream {stream!r}")
    return {"type": stream, "text": text, "timestamp": now_ms() if ts is None else ts}


def complete_event(execution_time_ms: int | None, ts: int | None = None) -> dict[str, Any]:
    ev: dict[str, Any] = {"type": "execution_complete"}
    if execution_time_ms:  # Go omitempty: a 0 ms background start shows no execution_time (recording 10)
        ev["execution_time"] = int(execution_time_ms)
    ev["timestamp"] = now_ms() if ts is None else ts
    return ev


def error_event(
    evalue: str, traceback: list[str], ename: str = "CommandExecError", ts: int | None = None
) -> dict[str, Any]:
    return {
        "type": "error",
        "timestamp": now_ms() if ts is None else ts,
        "error": {"ename": ename, "evalue": evalue, "traceback": list(traceback)},
    }


class SSEReader:
    """Incremental, tolerant reader: feed() arbitrary byte chunks, get parsed events back.

    Accepts bare JSON frames ("{...}\\n\\n", execd) and standard SSE ("data: {...}\\n\\n", with
    multi-line data joined by "\\n"), CRLF or LF line endings, comment lines (": ...") and
    event:/id:/retry: fields (ignored). A frame whose payload is not a JSON object is returned
    as {"type": "_raw", "text": payload} so callers can see it instead of losing it.
    """

    def __init__(self) -> None:
        self._buf = bytearray()
        self._data: list[str] = []

    def feed(self, chunk: bytes) -> list[dict[str, Any]]:
        self._buf += chunk
        events: list[dict[str, Any]] = []
        while True:
            nl = self._buf.find(b"\n")
            if nl < 0:
                break
            line = bytes(self._buf[:nl])
            del self._buf[: nl + 1]
            if line.endswith(b"\r"):
                line = line[:-1]
            self._line(line.decode("utf-8", "replace"), events)
        return events

    def close(self) -> list[dict[str, Any]]:
        """End of stream: flush a final frame that lacks its blank line."""
        events: list[dict[str, Any]] = []
        if self._buf:
            rest = bytes(self._buf).decode("utf-8", "replace")
            self._buf.clear()
            self._line(rest, events)
        self._dispatch(events)
        return events

    def _line(self, line: str, events: list[dict[str, Any]]) -> None:
        if line == "":
            self._dispatch(events)
            return
        if line.startswith(":"):
            return
        if line.startswith("data:"):
            v = line[5:]
            self._data.append(v[1:] if v.startswith(" ") else v)
            return
        for field in ("event:", "id:", "retry:"):
            if line.startswith(field):
                return
        self._data.append(line)  # bare JSON frame (execd)

    def _dispatch(self, events: list[dict[str, Any]]) -> None:
        if not self._data:
            return
        payload = "\n".join(self._data)
        self._data = []
        try:
            obj = json.loads(payload)
        except ValueError:
            obj = None
        if isinstance(obj, dict):
            events.append(obj)
        else:
            events.append({"type": "_raw", "text": payload})


def parse_stream(chunks: Iterable[bytes]) -> Iterator[dict[str, Any]]:
    reader = SSEReader()
    for c in chunks:
        yield from reader.feed(c)
    yield from reader.close()
