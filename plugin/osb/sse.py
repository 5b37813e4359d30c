"""execd's event stream (``POST /command``), as pure codecs without I/O (unit-tested in tiers/t0):
the SSE decoder for both execd framings, v1.1.0 output restoration, and exit-code mapping.

Facts quoted in comments come from the recorded exchanges (``rec NN`` = recording NN, fixtures/NN_*.json)
or from mock_opensandbox/QUIRKS.md (POST /command).
"""

from __future__ import annotations

import re

from .transport import json_or_none

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class SSEDecoder:
    """Incremental decoder for execd's event stream.

    Accepts the bare-JSON framing execd really sends (``{...}\\n\\n``, rec 07-18) and standard SSE
    (``data: {...}\\n\\n``, with ``event:``/``id:``/``retry:`` fields and ``:`` comments), split into
    chunks at arbitrary byte boundaries. ``feed()`` returns the JSON objects completed so far;
    ``close()`` flushes a final frame that was not followed by a blank line.
    """

    _SSE_FIELDS = (b"data:", b"event:", b"id:", b"retry:", b":")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._lines: list[bytes] = []
        self.bad_frames = 0

    def feed(self, data: bytes) -> list[dict[str, Any]]:
        self._buf += data
        out: list[dict[str, Any]] = []
        start = 0
        while True:
            nl = self._buf.find(b"\n", start)
            if nl < 0:
                break
            line = bytes(self._buf[start:nl])
            start = nl + 1
            if line.endswith(b"\r"):
                line = line[:-1]
            if line.strip():
                self._lines.append(line)
            else:
                out.extend(self._frame())
        del self._buf[:start]
        return out

    def close(self) -> list[dict[str, Any]]:
        tail = bytes(self._buf).rstrip(b"\r")
        self._buf.clear()
        if tail.strip():
            self._lines.append(tail)
        return self._frame()

    def _frame(self) -> list[dict[str, Any]]:
        lines, self._lines = self._lines, []
        if not lines:
            return []
        if lines[0].startswith(self._SSE_FIELDS):
            data = [ln[5:].removeprefix(b" ") for ln in lines if ln.startswith(b"data:")]
            candidates = [b"\n".join(data)] if data else []
        else:
            candidates = [b"\n".join(lines)]
        out: list[dict[str, Any]] = []
        for blob in candidates:
            obj = json_or_none(blob)
            if isinstance(obj, dict):
                out.append(obj)
                continue
            # Not one JSON document: maybe several objects separated by single newlines.
            for ln in blob.split(b"\n"):
                one = json_or_none(ln)
                if isinstance(one, dict):
                    out.append(one)
                elif ln.strip():
                    self.bad_frames += 1
        return out


def restore_legacy_text(text: str) -> str:
    """v1.1.0 execd sends one event per output line with "\\n"/"\\r" stripped, and an empty line as
    the text "\\n" (rec 12: printf 'a\\r\\nb\\n\\nc' -> "a", "b", "\\n", "c"). Give each line its newline
    back. Lost for good: "\\r" characters and whether the last line ended with a newline."""
    return "\n" if text == "\n" else text + "\n"


_SIGNAL_NUMBERS = {
    "hangup": 1,
    "interrupt": 2,
    "quit": 3,
    "illegal instruction": 4,
    "trace/breakpoint trap": 5,
    "aborted": 6,
    "bus error": 7,
    "floating point exception": 8,
    "killed": 9,
    "user defined signal 1": 10,
    "segmentation fault": 11,
    "user defined signal 2": 12,
    "broken pipe": 13,
    "alarm clock": 14,
    "terminated": 15,
}
_SIGNAL_RE = re.compile(r"signal:\s*([a-z0-9 /]+)", re.I)


def signal_exit_code(text: str) -> int | None:
    """ "signal: killed" -> 137 (128 + 9), as a shell would report it; None when no signal is named."""
    m = _SIGNAL_RE.search(text or "")
    if not m:
        return None
    name = m.group(1).strip().lower()
    if name in _SIGNAL_NUMBERS:
        return 128 + _SIGNAL_NUMBERS[name]
    digits = re.search(r"\d+", name)
    return 128 + int(digits.group()) if digits else None


class StartFailure(Exception):
    """execd could not start the command (an ``error`` event whose evalue is not an exit status)."""


def terminal_exit_code(event: dict[str, Any]) -> int | None:
    """Exit code of a terminal event, None for a non-terminal one; StartFailure for a start error.

    execution_complete -> 0. error -> int(evalue) (rec 07: "3"); evalue "-1" is a signal death
    (rec 09/12: traceback ["signal: killed"]) and becomes 128 + signal number.
    """
    kind = event.get("type")
    if kind == "execution_complete":
        return 0
    if kind != "error":
        return None
    err = v if isinstance(v := event.get("error"), dict) else {}
    evalue = str(err.get("evalue", "")).strip()
    tb = err.get("traceback")
    trace = " ".join(str(t) for t in tb) if isinstance(tb, list) else str(tb or "")
    try:
        code = int(evalue)
    except ValueError:
        code = None
    if code is not None and code != -1:
        return code
    sig = signal_exit_code(trace) or signal_exit_code(evalue)
    if sig is not None:
        return sig
    if code == -1:
        return -1
    name = str(err.get("ename") or "error")
    raise StartFailure(f"{name}: {evalue or trace or 'command could not be started'}")
