"""One-time conversion of the raw live recordings into fixtures.

    python -m record convert --from ../shared/live/exchanges --out fixtures

Reads every ``*.json`` exchange list in ``--from`` and the ``VERSIONS.md`` next to it (for the
metadata header), scrubs each with ``record.scrub`` and writes ``<out>/<scenario>.json``.
Deterministic: the same input gives byte-identical output.
"""

from __future__ import annotations

import json
import os
import re
from typing import Any

from mock_opensandbox.workbench import fixturefile as fixture
from record.scenarios import BY_NAME
from record.scrub import PUBLIC_WRONG_CREDENTIALS, SECRET_HEADERS, scrub_exchanges


class ConvertError(ValueError):
    pass


def parse_versions(text: str) -> dict[str, str]:
    """Pull the facts the fixture header needs out of VERSIONS.md."""

    def find(rx: str, what: str) -> str:
        m = re.search(rx, text, re.S)
        if not m:
            raise ConvertError(f"VERSIONS.md: cannot find the {what}")
        return m.group(1)

    return {
        "when": find(r"Recorded on (\d{4}-\d{2}-\d{2})", "recording date"),
        "server_version": find(r"`opensandbox-server`\s+([0-9][\w.]*)", "server version"),
        "execd_version": find(r"reports Version `([^`]+)`", "execd version"),
        "execd_commit": find(r"HEAD\s+`([0-9a-f]{40})`", "execd source commit"),
        "runtime": find(r"Runtime `(\w+)`", "runtime"),
    }


def _check_raw(name: str, data: Any) -> list[dict[str, Any]]:
    if not isinstance(data, list):
        raise ConvertError(f"{name}: expected a list of exchanges")
    for i, ex in enumerate(data):
        if not (isinstance(ex, dict) and isinstance(ex.get("request"), dict) and isinstance(ex.get("response"), dict)):
            raise ConvertError(f"{name}: exchange {i} lacks request/response")
        for k in ("method", "path", "headers"):
            if k not in ex["request"]:
                raise ConvertError(f"{name}: exchange {i} request lacks {k!r}")
        for k in ("status", "headers"):
            if k not in ex["response"]:
                raise ConvertError(f"{name}: exchange {i} response lacks {k!r}")
    return data


def _secret_values(raw: list[dict[str, Any]]) -> list[str]:
    """Credential header values still present in raw input (the live files already say <api-key>)."""
    out = set()
    for ex in raw:
        for k, v in (ex["request"].get("headers") or {}).items():
            if k.lower() in SECRET_HEADERS and v not in PUBLIC_WRONG_CREDENTIALS and not v.startswith("<"):
                out.add(v)
    return sorted(out)


def convert_file(path: str, versions: dict[str, str], source_label: str) -> dict[str, Any]:
    name = os.path.splitext(os.path.basename(path))[0]
    with open(path, encoding="utf-8") as f:
        raw = _check_raw(name, json.load(f))
    sc = BY_NAME.get(name)
    waits = sc.live_waits if sc else {}
    staged = []
    for i, ex in enumerate(raw):
        item: dict[str, Any] = {}
        if i in waits:
            item["wait_before_s"] = waits[i]
        item["request"] = ex["request"]
        item["response"] = ex["response"]
        staged.append(item)
    exchanges = scrub_exchanges(staged, secrets=_secret_values(raw))
    recorded = {
        "where": "local OpenSandbox stack on 127.0.0.1 (lifecycle :8080, sandbox ports published on 127.0.0.1)",
        "when": versions["when"],
        "server": "opensandbox-server " + versions["server_version"],
        "server_version": versions["server_version"],
        "runtime": versions["runtime"],
        "execd_version": versions["execd_version"],
        "execd_commit": versions["execd_commit"],
        "source": source_label + "/" + os.path.basename(path),
        "tool": "python -m record convert",
    }
    if sc and sc.live_note:
        recorded["note"] = sc.live_note
    replay = {"replayable": not (sc and sc.replay_skip)}
    if sc and sc.replay_skip:
        replay["reason"] = sc.replay_skip
    if sc and sc.needs_sandbox:
        replay["setup"] = "sandbox"
    return fixture.make(name, sc.description if sc else "", recorded, replay, exchanges)


def convert_dir(src: str, out: str, versions_path: str | None = None) -> list[str]:
    versions_path = versions_path or os.path.join(os.path.dirname(os.path.abspath(src)), "VERSIONS.md")
    try:
        with open(versions_path, encoding="utf-8") as f:
            versions = parse_versions(f.read())
    except OSError as exc:
        raise ConvertError(f"cannot read {versions_path}: {exc.strerror}") from None
    files = sorted(n for n in os.listdir(src) if n.endswith(".json"))
    if not files:
        raise ConvertError(f"no *.json recordings in {src}")
    os.makedirs(out, exist_ok=True)
    label = "live/" + os.path.basename(os.path.normpath(src))
    written = []
    for n in files:
        fx = convert_file(os.path.join(src, n), versions, label)
        dest = os.path.join(out, fx["scenario"] + ".json")
        fixture.write(dest, fx)
        written.append(dest)
    return written
