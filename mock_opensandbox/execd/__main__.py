"""Stand-alone mock execd with the real binary's flags (Go's flag package accepts -x and --x):

    python -m mock_opensandbox.execd --port P [-access-token T] [--mode v1.1.0|latest] [--root DIR]
                                     [--close-delay S] [--isolate auto|on|off]

The root defaults to the current directory (the fallback runs execd with cwd = the sandbox dir: QUIRKS.md, Sandbox runtime).
Prints only one ready line on stderr; SIGTERM/SIGINT stop it cleanly and kill all its commands.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from typing import TYPE_CHECKING

from mock_opensandbox.execd.server import ExecdServer
from mock_opensandbox.runtime import SandboxRuntime

if TYPE_CHECKING:
    from types import FrameType


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mock_opensandbox.execd", prefix_chars="-", description="Mock OpenSandbox execd (one sandbox)."
    )
    p.add_argument("-port", "--port", type=int, default=44772, help="listen port (0 = ephemeral)")
    p.add_argument("-host", "--host", default="127.0.0.1", help="listen address (default 127.0.0.1)")
    p.add_argument(
        "-access-token", "--access-token", dest="access_token", default=None, help="require X-EXECD-ACCESS-TOKEN"
    )
    p.add_argument(
        "-mode", "--mode", choices=("v1.1.0", "latest"), default="v1.1.0", help="output framing / argv behaviour"
    )
    p.add_argument("-root", "--root", default=None, help="sandbox root directory (default: cwd)")
    p.add_argument(
        "-close-delay",
        "--close-delay",
        dest="close_delay",
        type=float,
        default=1.0,
        help="seconds a command stream stays open after its last event",
    )
    p.add_argument("-isolate", "--isolate", choices=("auto", "on", "off"), default="auto")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if not 0 <= args.port < 65536:
        print(f"execd: invalid port {args.port}", file=sys.stderr)
        return 2
    iso = {"auto": None, "on": True, "off": False}[args.isolate]
    root = os.path.abspath(args.root or os.getcwd())
    try:
        rt = SandboxRuntime(root, isolate=iso)
        srv = ExecdServer(
            rt,
            host=args.host,
            port=args.port,
            mode=args.mode,
            access_token=args.access_token,
            close_delay=args.close_delay,
        )
        srv.start()
    except (OSError, ValueError, RuntimeError) as exc:
        print(f"execd: cannot start: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    print(
        f"execd ready on {args.host}:{srv.port} mode={args.mode} root={root} isolated={rt.isolated}",
        file=sys.stderr,
        flush=True,
    )
    try:
        while not stop.wait(0.5):
            pass
    finally:
        srv.stop()
        rt.terminate()
    return 0


if __name__ == "__main__":
    sys.exit(main())
