"""The fixture file format: one JSON document per scenario (fixtures/<scenario>.json).

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
``record.scrub``. ``dumps`` is deterministic: the same fixture always gives the same bytes.
"""
from __future__ import annotations

import json
import os
from typing import Any

FORMAT = 1


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
