"""What the two foreground commands share, ``python -m mock_opensandbox`` (__main__.py) and
``python -m mock_opensandbox.workbench.proxy``: the ``--fault`` arguments (JSON rules for workbench/faults.py), the port
check, and the run itself (start, a banner, wait for Ctrl-C / SIGTERM, stop). Standard library only."""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from typing import Any, Callable, Iterable, Sequence

from mock_opensandbox.workbench.faults import FaultRegistry

__all__ = ["FAULT_ARG_HELP", "add_cli_rules", "parse_args", "run_foreground"]

FAULT_ARG_HELP = "a fault rule (JSON object or list; @file reads a file), repeatable; see docs/FAULTS.md"


def add_cli_rules(registry: FaultRegistry, texts: Iterable[str]) -> str | None:
    """Add the ``--fault`` arguments (JSON, or ``@file``); the first problem as a message, else None."""
    for text in texts:
        try:
            if text.startswith("@"):
                with open(text[1:], encoding="utf-8") as fh:
                    text = fh.read()
            registry.add_json(json.loads(text))
        except (OSError, ValueError) as e:  # FaultError and JSONDecodeError are ValueErrors
            return "--fault: %s" % e
    return None


def parse_args(parser: argparse.ArgumentParser, argv: Sequence[str] | None) -> argparse.Namespace | None:
    """The parsed arguments; None, with the message on stderr, when ``--port`` is no TCP port."""
    args = parser.parse_args(argv)
    if 0 <= args.port <= 65535:
        return args
    print("error: --port must be between 0 and 65535", file=sys.stderr)
    return None


def run_foreground(server: Any, faults: Iterable[str], host: str, port: int, banner: Callable[[], None]) -> int:
    """Add the ``--fault`` rules to ``server.faults``, start ``server``, print ``banner()``, serve until
    SIGINT or SIGTERM, stop. The exit status: 0, or 2 (a bad rule, a port that cannot be listened on)."""
    problem = add_cli_rules(server.faults, faults)
    if problem:
        print("error: %s" % problem, file=sys.stderr)
        return 2
    stop = threading.Event()
    old = [signal.signal(s, lambda *_: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)]
    try:
        try:
            server.start()
        except OSError as e:
            print("error: cannot listen on %s:%d: %s" % (host, port, e.strerror or e), file=sys.stderr)
            return 2
        banner()
        while not stop.wait(0.5):
            pass
        print("Stopping...", flush=True)
        return 0
    finally:
        server.stop()
        signal.signal(signal.SIGINT, old[0])
        signal.signal(signal.SIGTERM, old[1])
