"""The fixture file format, written and read in one place: one JSON document per scenario
(fixtures/<scenario>.json, the fault proxy's ``--record DIR/<name>.json``).

    {
      "fixture_format": 1,
      "scenario": "07_command_exit3_sse",
      "description": "...",
      "recorded": {where, when, server_version, execd_version, execd_commit, runtime, source, tool},
      "replay": {"timing_dependent": false, "reason": "..."},
      "exchanges": [
        {"request":  {"method", "path", "headers", "body"},      # body: raw text or null
         "response": {"status", "headers", "body"},
         "wait_before_s": 1.5}                                 # optional: pause before sending
      ]
    }

Bodies are raw text (``body_b64`` instead of ``body`` when not UTF-8). Placeholders are described in
``record/scrub.py``. ``dumps`` is deterministic: the same fixture always gives the same bytes.
``Appender`` grows a fixture's exchanges on disk one at a time (the fault proxy records that way):
the file is a whole fixture after every append, byte for byte what ``write`` makes of the same
fixture, and an append writes only the new exchange. Used by record/ (the recorder, convert,
replay) and workbench/proxy.py. Standard library only; imports nothing of the mock.

Crashes while recording: an append never rewrites a byte of what is already recorded; it writes the new
exchange and the closing brackets over the old closing brackets, in one write. A write that fails (an
exception: a full disk) puts the old closing brackets back, so the file is the previous whole fixture. A
process killed *during* that write (the one window, as long as the write of one exchange) leaves the
recorded exchanges intact followed by part of the new one: ``load`` then refuses the file and says so, and
``repair(path)`` cuts it back to its complete exchanges (``python -m mock_opensandbox.workbench.fixturefile repair
PATH``). Nothing is fsynced: a power loss may lose what the page cache held.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

__all__ = ["FORMAT", "dumps", "write", "load", "load_dir", "make", "Appender", "repair"]

FORMAT = 1
_CLOSE = "\n  ]\n}\n"  # how dumps() ends a fixture whose exchanges are the last key and not empty
# in dumps()' layout an exchange is the only thing that ends with a newline, 4 spaces and "}" after the
# exchanges key (everything inside one is indented deeper; a string never holds a raw newline)
_EXCHANGES_KEY = b'\n  "exchanges": ['
_ITEM_END = b"\n    }"


def dumps(fixture: dict[str, Any]) -> str:
    return json.dumps(fixture, indent=2, ensure_ascii=False) + "\n"


def write(path: str, fixture: dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(dumps(fixture))
    os.replace(tmp, path)


def load(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        try:
            data = json.load(f)
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise ValueError(
                f"{path}: not valid JSON ({e}); a recording cut short by a crash: "
                f"python -m mock_opensandbox.workbench.fixturefile repair {path}"
            ) from None
    if not isinstance(data, dict) or data.get("fixture_format") != FORMAT or "exchanges" not in data:
        raise ValueError(f"{path}: not a fixture (fixture_format {FORMAT} expected)")
    return data


def load_dir(directory: str) -> dict[str, dict[str, Any]]:
    out = {}
    for name in sorted(os.listdir(directory)):
        if name.endswith(".json"):
            fx = load(os.path.join(directory, name))
            out[fx["scenario"]] = fx
    return out


def make(
    scenario: str, description: str, recorded: dict[str, Any], replay: dict[str, Any], exchanges: list[dict[str, Any]]
) -> dict[str, Any]:
    return {
        "fixture_format": FORMAT,
        "scenario": scenario,
        "description": description,
        "recorded": recorded,
        "replay": replay,
        "exchanges": exchanges,
    }


class Appender:
    """``path`` holds ``fixture`` (``make()``'s, its exchanges ignored) with the exchanges appended so
    far. The file appears with the first exchange (atomically); each later one overwrites only the
    closing brackets, in one write (a failed write puts them back; see the module's doc for a kill
    during it). Thread-safe."""

    def __init__(self, path: str, fixture: dict[str, Any]):
        head = dumps(dict(fixture, exchanges=[]))
        if not head.endswith('"exchanges": []\n}\n'):
            raise ValueError("a fixture's exchanges must be its last key")
        self.path = path
        self.count = 0
        self._head = head[: -len("]\n}\n")].encode("utf-8")  # up to and including the list's "["
        self._end = 0  # where the closing brackets start
        self._lock = threading.Lock()

    def append(self, exchange: dict[str, Any]) -> None:
        item = json.dumps(exchange, indent=2, ensure_ascii=False).replace("\n", "\n    ")
        with self._lock:
            piece = (",\n    " if self.count else "\n    ") + item
            data = piece.encode("utf-8")
            if self.count == 0:
                tmp = self.path + ".tmp"
                with open(tmp, "wb") as f:
                    f.write(self._head + data + _CLOSE.encode())
                os.replace(tmp, self.path)
                self._end = len(self._head) + len(data)
            else:
                fd = os.open(self.path, os.O_WRONLY | getattr(os, "O_CLOEXEC", 0))
                try:
                    try:
                        _pwrite_all(fd, data + _CLOSE.encode(), self._end)
                    except BaseException:
                        try:  # back to the previous whole fixture: its end, its closing brackets
                            os.ftruncate(fd, self._end)
                            _pwrite_all(fd, _CLOSE.encode(), self._end)
                        except OSError:
                            pass  # the recorded exchanges are still intact: repair() keeps them
                        raise
                finally:
                    os.close(fd)
                self._end += len(data)
            self.count += 1


def _pwrite_all(fd: int, data: bytes, offset: int) -> None:
    view = memoryview(data)
    while view:
        n = os.pwrite(fd, view, offset)
        view, offset = view[n:], offset + n


def repair(path: str) -> int:
    """Cut a fixture that a crash left cut short (an ``Appender`` killed while it wrote an exchange) back to
    its complete exchanges, atomically; returns how many it keeps. A whole fixture is left as it is. Raises
    ValueError when the file is no fixture in ``dumps()``' layout."""
    with open(path, "rb") as f:
        raw = f.read()
    try:
        return len(load(path)["exchanges"])
    except ValueError:
        pass
    key = raw.find(_EXCHANGES_KEY)
    if key < 0:
        raise ValueError(f"{path}: no exchanges list: not a fixture this module wrote")
    start = key + len(_EXCHANGES_KEY)
    end = raw.rfind(_ITEM_END, start)
    fixed = raw[: end + len(_ITEM_END)] + _CLOSE.encode() if end >= 0 else raw[:start] + b"]\n}\n"
    try:
        fx = json.loads(fixed.decode("utf-8"))
    except ValueError as e:
        raise ValueError(f"{path}: cannot be repaired ({e})") from None
    if not isinstance(fx, dict) or fx.get("fixture_format") != FORMAT:
        raise ValueError(f"{path}: not a fixture (fixture_format {FORMAT} expected)")
    write(path, fx)
    return len(fx["exchanges"])


if __name__ == "__main__":  # python -m mock_opensandbox.workbench.fixturefile repair PATH...
    import sys

    if len(sys.argv) < 3 or sys.argv[1] != "repair":
        sys.exit("usage: python -m mock_opensandbox.workbench.fixturefile repair PATH...")
    for p in sys.argv[2:]:
        print("%s: %d complete exchange(s)" % (p, repair(p)))
