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
replay) and proxy.py. Standard library only; imports nothing of the mock.
"""
from __future__ import annotations

import json
import os
import threading
from typing import Any

__all__ = ["FORMAT", "dumps", "write", "load", "load_dir", "make", "Appender"]

FORMAT = 1
_CLOSE = "\n  ]\n}\n"   # how dumps() ends a fixture whose exchanges are the last key and not empty


def dumps(fixture: dict[str, Any]) -> str:
    return json.dumps(fixture, indent=2, ensure_ascii=False) + "\n"


def write(path: str, fixture: dict[str, Any]) -> None:
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8", newline="\n") as f:
        f.write(dumps(fixture))
    os.replace(tmp, path)


def load(path: str) -> dict[str, Any]:
    with open(path, encoding="utf-8") as f:
        data = json.load(f)
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


def make(scenario: str, description: str, recorded: dict[str, Any], replay: dict[str, Any],
         exchanges: list[dict[str, Any]]) -> dict[str, Any]:
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
    closing brackets. Thread-safe."""

    def __init__(self, path: str, fixture: dict[str, Any]):
        head = dumps(dict(fixture, exchanges=[]))
        if not head.endswith('"exchanges": []\n}\n'):
            raise ValueError("a fixture's exchanges must be its last key")
        self.path = path
        self.count = 0
        self._head = head[:-len("]\n}\n")].encode("utf-8")    # up to and including the list's "["
        self._end = 0                                            # where the closing brackets start
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
                with open(self.path, "r+b") as f:
                    f.seek(self._end)
                    f.write(data + _CLOSE.encode())
                self._end += len(data)
            self.count += 1
