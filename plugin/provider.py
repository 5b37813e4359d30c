#!/usr/bin/env python3
"""OpenSandbox provider for Agent Sandbox: an EPP/1 exec plugin (JSON-RPC 2.0 over stdio, NDJSON).

This file, the top layer: the initialize contract (must equal abx-provider.toml), the method table,
and the wiring of the protocol loop (epp.py) to this process's ``Context`` (context.py), which every
method (methods/: a module per EPP namespace) receives. Each layer imports only the ones below it;
plugin/README.md has the map.

A method's module is imported on its first call: the host starts a new plugin process for most
calls, and initialize needs none of them. Standard library only, Python >= 3.10. Only protocol
lines go to stdout. State that must outlive this process lives in ABX_PROVIDER_DATA_DIR only.
"""

from __future__ import annotations

import sys

if sys.pycache_prefix is None:  # launch.py caches bytecode in the data dir; never in the
    sys.dont_write_bytecode = True  # hashed plugin root

import epp
from context import Context

TYPE_CHECKING = False  # (typing is not imported at start-up: it costs milliseconds)
if TYPE_CHECKING:
    from typing import Any, Callable

    from epp import Request

# --------------------------------------------------------------------------- initialize contract
# Must equal abx-provider.toml, in the same order (the host compares them; tiers/t0 checks it).

PROTOCOL = "epp/1"
PLUGIN_NAME = "opensandbox"
PLUGIN_VERSION = "0.1.0"
OPERATION_CONTRACT_VERSION = 1
FEATURES = [
    "sandbox.lifecycle",
    "sandbox.timeout",
    "sandbox.pause",
    "exec.run",
    "exec.stream",
    "process.manage",
    "pty",
    "files.rw",
    "ports.url",
    "sessions",
]
_OPS = [
    "sandbox.create",
    "sandbox.get",
    "sandbox.list",
    "sandbox.delete",
    "sandbox.timeout",
    "sandbox.pause",
    "sandbox.resume",
    "exec.run",
    "exec.stream",
    "files.read",
    "files.write",
    "files.list",
    "files.stat",
    "files.remove",
    "files.move",
    "ports.resolve",
]
OPERATIONS = {"cli": list(_OPS), "python": list(_OPS)}
WORKFLOW_INPUTS = ["image"]
STARTUP_MODES = ["exec", "entrypoint"]


def m_initialize(ctx: Context, p: dict[str, Any]) -> dict[str, Any]:
    config, core = p.get("config"), p.get("core")
    ctx.raw_config = config if isinstance(config, dict) else {}
    ctx.core = core if isinstance(core, dict) else {}
    if isinstance(p.get("data_dir"), str) and p["data_dir"] and not ctx.data_dir:
        ctx.data_dir = p["data_dir"]
    return {
        "protocol": PROTOCOL,
        "plugin": {"name": PLUGIN_NAME, "version": PLUGIN_VERSION},
        "features": list(FEATURES),
        "operation_contract_version": OPERATION_CONTRACT_VERSION,
        "operations": {"cli": list(OPERATIONS["cli"]), "python": list(OPERATIONS["python"])},
        "workflow_inputs": list(WORKFLOW_INPUTS),
        "startup_modes": list(STARTUP_MODES),
    }


# --------------------------------------------------------------------------- method table
# EPP method -> the module of methods/ that serves it, named by the method's namespace (methods/pty.py
# serves pty.*); the function is m_<method> with "." as "_".

METHODS = {
    "sandbox.create": "sandbox",
    "sandbox.get": "sandbox",
    "sandbox.connect": "sandbox",
    "sandbox.list": "sandbox",
    "sandbox.kill": "sandbox",
    "sandbox.set_timeout": "sandbox",
    "sandbox.pause": "sandbox",
    "sandbox.resume": "sandbox",
    "exec.run": "exec",
    "exec.start": "exec",
    "process.list": "process",
    "process.signal": "process",
    "process.kill": "process",
    "process.stdin": "process",
    "files.read": "files",
    "files.write": "files",
    "files.list": "files",
    "files.stat": "files",
    "files.mkdir": "files",
    "files.remove": "files",
    "files.move": "files",
    "files.search": "files",
    "files.chmod": "files",
    "ports.url": "ports",
    "pty.open": "pty",
    "pty.write": "pty",
    "pty.resize": "pty",
    "pty.close": "pty",
}


def method(name: str) -> Callable[[Context, Request, dict[str, Any]], Any] | None:
    """The function serving an EPP method (importing its module on first use), or None."""
    module = METHODS.get(name)
    if module is None:
        return None
    served = __import__("methods." + module, None, None, ("m_",))  # the submodule, not the package
    fn: Callable[[Context, Request, dict[str, Any]], Any] = getattr(served, "m_" + name.replace(".", "_"))
    return fn


def new_context(rfile: Any, wfile: Any) -> Context:
    """A protocol loop on (rfile, wfile) wired to a new Context (``ctx.server.serve()`` runs it)."""
    ctx: Context

    def find(name: str) -> Callable[[Request, dict[str, Any]], Any] | None:
        fn = method(name)
        return None if fn is None else lambda req, p: fn(ctx, req, p)

    server = epp.Server(
        rfile,
        wfile,
        initialize=lambda p: m_initialize(ctx, p),
        find=find,
        map_error=lambda exc, name: ctx.map_error(exc, name),
        on_exit=lambda d: ctx.close(d),
        name=PLUGIN_NAME,
    )
    ctx = Context(server)
    return ctx


def main() -> int:
    out = sys.stdout.buffer
    sys.stdout = sys.stderr  # a stray print() can never corrupt the protocol stream
    # 1 MiB of read buffer: a multi-MB files.write line then arrives in pipe-sized reads instead of
    # 8 KiB ones (8 MiB over a pipe: 13 ms -> 6 ms on the bench machine)
    stdin = open(sys.stdin.fileno(), "rb", buffering=1 << 20, closefd=False)
    new_context(stdin, out).server.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
