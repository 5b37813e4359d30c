"""Runs inside .venv-cli (requirements-cli.txt): the official ``opensandbox`` CLI entry point
(``opensandbox_cli.main:cli``, unchanged) invoked once per JSON line on stdin, in one interpreter, so a
50-step flow does not pay the CLI's ~2 s import 50 times. Each line ``{"args": [...], "stdin": str|null}``
is answered with ``{"rc", "stdout", "stderr"}`` (click's CliRunner captures both streams).
"""

from __future__ import annotations

import json
import sys


def main() -> int:
    from click.testing import CliRunner
    from opensandbox_cli.main import cli

    out = sys.stdout
    print(json.dumps({"ready": True}), file=out, flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        runner = CliRunner()
        res = runner.invoke(cli, msg["args"], input=msg.get("stdin"), prog_name="opensandbox", catch_exceptions=True)
        err = res.stderr if hasattr(res, "stderr") else ""
        if res.exception is not None and not isinstance(res.exception, SystemExit):
            err += "\n%s: %s" % (type(res.exception).__name__, res.exception)
        print(json.dumps({"rc": res.exit_code, "stdout": res.stdout, "stderr": err}), file=out, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
