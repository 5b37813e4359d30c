"""``python -m record compare DIR``: replay your own recordings against the mock and list every difference.

VCR's idea with a model underneath: record your client's traffic once through the fault proxy
(``python -m mock_opensandbox.workbench.proxy --upstream URL --record DIR``), then check how faithfully the
mock answers the same requests. Each ``DIR/*.json`` (fixtures/ format) is

1. given placeholders (``record.scrub``: ids, ports, dates, request ids) unless it already has them
   (the proxy writes its files with credentials scrubbed but ids literal: the mock is stdlib-only);
2. replayed against a fresh in-process mock (``record.replay``: placeholders bound to what the mock
   returns, a sandbox set up when the recording used one it did not create);
3. compared exchange by exchange (``record.compare``: status, content type, the headers that matter,
   JSON key sets/types and semantic values, SSE framing/events/output).

Every difference is printed. A difference is *explained* when a ``replay`` entry of an allow-list
(``DIR/ALLOWED_DIFFERENCES`` if present, ``--allow FILE``, and tiers/t2/ALLOWED_DIFFERENCES unless
``--no-default-allow``; format in that file) matches it. Exit status: 0 = no unexplained difference,
1 = some, 2 = usage error.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import Any, TextIO

from mock_opensandbox.workbench import fixturefile as fixture
from record.compare import PH_RE
from record.replay import ScenarioResult, format_table, replay_fixture
from record.scrub import scrub_exchanges

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_ALLOW = os.path.join(REPO, "tiers", "t2", "ALLOWED_DIFFERENCES")
UUID_RE = re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m record compare",
        description="Replay recordings (fixtures/ format, e.g. from the fault proxy's "
        "--record) against the mock and report every difference.",
    )
    p.add_argument("dir", help="directory of recordings (*.json)")
    p.add_argument("--scenario", action="append", help="only this recording (name; repeatable)")
    p.add_argument("--allow", action="append", default=[], help="an ALLOWED_DIFFERENCES file (repeatable)")
    p.add_argument("--no-default-allow", action="store_true", help="do not use tiers/t2/ALLOWED_DIFFERENCES")
    p.add_argument(
        "--execd-mode",
        choices=("v1.1.0", "latest"),
        default="v1.1.0",
        help="the mock's execd behaviour (default v1.1.0, as recorded from execd v1.0.19)",
    )
    p.add_argument(
        "--gateway",
        action="store_true",
        help="the recorded deployment routes execd by header (endpoint headers): so does the mock",
    )
    p.add_argument(
        "--execd-token",
        default=None,
        help="the recorded deployment's execd needs an access token: the mock uses this one and the "
        "replay sends it where the recording says <execd-token>",
    )
    p.add_argument(
        "--write-templated",
        action="store_true",
        help="also rewrite each recording in place with placeholders (then it can go to fixtures/)",
    )
    return p


def needs_templating(fx: dict[str, Any]) -> bool:
    if fx.get("recorded", {}).get("templated") is False:
        return True
    text = fixture.dumps(fx)
    return not PH_RE.search(text) and bool(UUID_RE.search(text))


def templated(fx: dict[str, Any]) -> dict[str, Any]:
    out = dict(fx)
    out["exchanges"] = scrub_exchanges(fx["exchanges"])
    out["recorded"] = dict(fx.get("recorded") or {}, templated=True)
    return out


def load_allow(paths: list[str]) -> list[Any]:
    from tiers.toolkit.spec_guard import load_allow_list

    entries: list[Any] = []
    for p in paths:
        entries.extend(load_allow_list(p)[1])
    return entries


def compare_dir(
    directory: str,
    *,
    scenarios: list[str] | None = None,
    allow_files: list[str] | None = None,
    default_allow: bool = True,
    execd_mode: str = "v1.1.0",
    write_templated: bool = False,
    gateway: bool = False,
    execd_token: str | None = None,
    out: TextIO = sys.stdout,
) -> tuple[int, int, list[ScenarioResult]]:
    """Returns (unexplained, explained, results) and prints the report."""
    from mock_opensandbox.server import MockOpenSandbox

    if not os.path.isdir(directory):
        raise ValueError(f"{directory}: not a directory")
    files = list(allow_files or [])
    own = os.path.join(directory, "ALLOWED_DIFFERENCES")
    if os.path.isfile(own):
        files.insert(0, own)
    if default_allow and os.path.isfile(DEFAULT_ALLOW):
        files.append(DEFAULT_ALLOW)
    allow = load_allow(files)
    recordings = fixture.load_dir(directory)
    if scenarios:
        recordings = {k: v for k, v in recordings.items() if k in scenarios}
    if not recordings:
        raise ValueError(f"no recordings (*.json in the fixtures/ format) in {directory}")
    unexplained = explained = 0
    results: list[ScenarioResult] = []
    for name, fx in recordings.items():
        if needs_templating(fx):
            fx = templated(fx)
            if write_templated:
                fixture.write(os.path.join(directory, name + ".json"), fx)
        if not fx["replay"].get("replayable", True):
            results.append(ScenarioResult(name, [], len(fx["exchanges"]), fx["replay"].get("reason", "")))
            continue
        with MockOpenSandbox(
            execd_mode=execd_mode, execd_close_delay=0.0, gateway=gateway, execd_token=execd_token
        ) as mock:
            res = replay_fixture(fx, mock.base_url, mock.api_key or "", execd_token=execd_token)
        results.append(res)
        for c in res.differences():
            text = f"{c.aspect}: {c.detail}"
            entry = next((a for a in allow if a.matches(name, c.index, text)), None)
            ex = fx["exchanges"][c.index]["request"] if c.index < len(fx["exchanges"]) else {}
            where = f"{ex.get('method', '?')} {ex.get('path', '?')}"
            if entry is None:
                unexplained += 1
                print(f"DIFF      {name} #{c.index} {where}: {text}", file=out)
            else:
                explained += 1
                print(f"explained {name} #{c.index} {where}: {text}\n          -> {entry.reason}", file=out)
    print("\n".join(format_table(results)), file=out)
    print(
        f"compare: {len(results)} recording(s), {sum(r.exchanges for r in results)} exchange(s), "
        f"{unexplained} unexplained difference(s), {explained} explained",
        file=out,
    )
    return unexplained, explained, results


def main(argv: list[str]) -> int:
    a = build_parser().parse_args(argv)
    unexplained, _, _ = compare_dir(
        a.dir,
        scenarios=a.scenario,
        allow_files=a.allow,
        default_allow=not a.no_default_allow,
        execd_mode=a.execd_mode,
        write_templated=a.write_templated,
        gateway=a.gateway,
        execd_token=a.execd_token,
    )
    return 1 if unexplained else 0
