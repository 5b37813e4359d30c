"""Command line: ``python -m record [convert|replay|compare] ...`` (see ``record/__init__.py``;
``compare DIR``: record/compare_dir.py)."""

from __future__ import annotations

import argparse
import os
import sys


def _record_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m record", description="Record the named scenarios from a live OpenSandbox into fixtures."
    )
    p.add_argument(
        "--base-url",
        default=os.environ.get("OPENSANDBOX_BASE_URL"),
        help="lifecycle server, e.g. http://127.0.0.1:8080 (a trailing /v1 is accepted)",
    )
    p.add_argument("--api-key", default=None, help="API key (default: $OPENSANDBOX_API_KEY); never written out")
    p.add_argument(
        "--image",
        default=os.environ.get("OPENSANDBOX_IMAGE") or "python:3.12-slim",
        help="image with bash and coreutils (default: $OPENSANDBOX_IMAGE or python:3.12-slim; now %(default)s)",
    )
    p.add_argument(
        "--busybox-image",
        default=os.environ.get("OPENSANDBOX_BUSYBOX_IMAGE") or "busybox:latest",
        help="image without bash, for scenario 15 (default: $OPENSANDBOX_BUSYBOX_IMAGE or busybox:latest)",
    )
    p.add_argument("--missing-image", default="local/does-not-exist:1", help="an image that cannot be pulled (16)")
    p.add_argument("--out", default="fixtures", help="fixture directory (default %(default)s)")
    p.add_argument(
        "--mode",
        choices=("all", "new"),
        default="new",
        help="all: re-record everything; new: only scenarios without a fixture (default)",
    )
    p.add_argument(
        "--check", action="store_true", help="record into a temp dir and report drift against --out; exit 1 on drift"
    )
    p.add_argument(
        "--keep-dir",
        default=None,
        help="with --check: where the fresh recordings go (a record-check-* directory in it; default: the temp dir)",
    )
    p.add_argument("--scenario", action="append", help="only this scenario (name or number; repeatable)")
    p.add_argument("--list", action="store_true", help="list the scenarios and exit")
    p.add_argument("--execd-version", default=None, help="execd version to note in the fixture header")
    p.add_argument("--execd-commit", default=None, help="execd source commit to note in the fixture header")
    p.add_argument(
        "--runtime",
        default=os.environ.get("OPENSANDBOX_RUNTIME") or None,
        help="the server's runtime, noted in the fixture header (default: $OPENSANDBOX_RUNTIME, which "
        "./local-up.sh env sets, e.g. docker/20.10.24+dfsg1)",
    )
    p.add_argument("--timeout", type=float, default=60.0, help="per-request timeout in seconds")
    p.add_argument(
        "--ready-timeout",
        type=float,
        default=60.0,
        help="how long a new sandbox's execd may take to answer /ping (default %(default)s s, like the plugin)",
    )
    return p


def _convert_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m record convert", description="Convert raw live recordings into fixtures (deterministic)."
    )
    p.add_argument("--from", dest="src", required=True, help="directory of raw exchange lists (*.json)")
    p.add_argument("--out", default="fixtures", help="fixture directory (default %(default)s)")
    p.add_argument("--versions", default=None, help="VERSIONS.md (default: next to --from)")
    return p


def _replay_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m record replay", description="Replay fixtures against a server and print fidelity scores."
    )
    p.add_argument("--base-url", default=os.environ.get("OPENSANDBOX_BASE_URL"), required=False)
    p.add_argument("--api-key", default=None)
    p.add_argument("--fixtures", default="fixtures")
    p.add_argument("--scenario", action="append")
    p.add_argument("--verbose", "-v", action="store_true", help="print every difference")
    return p


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    from record.client import RecorderError
    from record.convert import ConvertError
    from record.replay import ReplayError

    try:
        if argv[:1] == ["convert"]:
            from record.convert import convert_dir

            a = _convert_parser().parse_args(argv[1:])
            for path in convert_dir(a.src, a.out, a.versions):
                print(path)
            return 0
        if argv[:1] == ["replay"]:
            return _replay(_replay_parser().parse_args(argv[1:]))
        if argv[:1] == ["compare"]:  # replay your own recordings (the fault proxy's --record) against the mock
            from record.compare_dir import main as compare_main

            return compare_main(argv[1:])
        from record.recorder import run

        return run(_record_parser().parse_args(argv))
    except (RecorderError, ConvertError, ReplayError, ValueError, OSError) as exc:
        fix = getattr(exc, "fix", "")
        print(f"error: {exc}" + (f"; fix: {fix}" if fix else ""), file=sys.stderr)
        return 2


def _replay(a: argparse.Namespace) -> int:
    from mock_opensandbox.workbench import fixturefile as fixture
    from record.replay import ScenarioResult, format_table, replay_fixture

    if not a.base_url:
        print("error: --base-url is required", file=sys.stderr)
        return 2
    api_key = a.api_key or os.environ.get("OPENSANDBOX_API_KEY", "")
    fixtures = fixture.load_dir(a.fixtures)
    results = []
    for name, fx in fixtures.items():
        if a.scenario and not any(name == s or name.startswith(s + "_") for s in a.scenario):
            continue
        if not fx["replay"].get("replayable", True):
            results.append(ScenarioResult(name, [], len(fx["exchanges"]), fx["replay"].get("reason", "")))
            continue
        res = replay_fixture(fx, a.base_url, api_key)
        results.append(res)
        if a.verbose:
            for c in res.differences():
                print(f"{name} {c.text()}")
    print("\n".join(format_table(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
