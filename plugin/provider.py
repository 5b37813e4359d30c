#!/usr/bin/env python3
"""OpenSandbox provider for Agent Sandbox: an EPP/1 exec plugin (JSON-RPC 2.0 over stdio, NDJSON).

This file: the initialize contract (must equal abx-provider.toml), the method table and main().
The rest, one module per layer (plugin/README.md has the map):

    epp.py       the loop: requests, cancellation, the only stdout writer, the secrets registry
    config.py    settings -> Config          errors.py   OpenSandbox failure -> EppError
    sandbox.py · commands.py · processes.py · files.py · ports.py · terminal.py   the methods
    osb_*.py     the OpenSandbox client (transport, lifecycle, execd, sse, multipart, ws); plain sibling
                 modules, not a package: every plugin import is of the standard library or of a file here

A method's module is imported on its first call: the host starts a new plugin process for most
calls, and initialize needs none of them. Standard library only, Python >= 3.10. Only protocol
lines go to stdout. State that must outlive this process lives in ABX_PROVIDER_DATA_DIR only.
"""
from __future__ import annotations

import sys

if sys.pycache_prefix is None:          # launch.py caches bytecode in the data dir; never in the
    sys.dont_write_bytecode = True      # hashed plugin root

import epp

# --------------------------------------------------------------------------- initialize contract
# Must equal abx-provider.toml, in the same order (the host compares them; tiers/t0 checks it).

PROTOCOL = "epp/1"
PLUGIN_NAME = "opensandbox"
PLUGIN_VERSION = "0.1.0"
OPERATION_CONTRACT_VERSION = 1
FEATURES = [
    "sandbox.lifecycle", "sandbox.timeout", "sandbox.pause", "exec.run", "exec.stream",
    "process.manage", "pty", "files.rw", "ports.url", "sessions",
]
_OPS = [
    "sandbox.create", "sandbox.get", "sandbox.list", "sandbox.delete", "sandbox.timeout",
    "sandbox.pause", "sandbox.resume", "exec.run", "exec.stream", "files.read", "files.write",
    "files.list", "files.stat", "files.remove", "files.move", "ports.resolve",
]
OPERATIONS = {"cli": list(_OPS), "python": list(_OPS)}
WORKFLOW_INPUTS = ["image"]
STARTUP_MODES = ["exec", "entrypoint"]


def m_initialize(srv: epp.Server, p: dict) -> dict:
    srv.raw_config = p.get("config") if isinstance(p.get("config"), dict) else {}
    srv.core = p.get("core") if isinstance(p.get("core"), dict) else {}
    if isinstance(p.get("data_dir"), str) and p["data_dir"] and not srv.data_dir:
        srv.data_dir = p["data_dir"]
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
# EPP method -> the module that serves it; the function is m_<method> with "." as "_".

METHODS = {
    "sandbox.create": "sandbox", "sandbox.get": "sandbox", "sandbox.connect": "sandbox",
    "sandbox.list": "sandbox", "sandbox.kill": "sandbox", "sandbox.set_timeout": "sandbox",
    "sandbox.pause": "sandbox", "sandbox.resume": "sandbox",
    "exec.run": "commands", "exec.start": "commands",
    "process.list": "processes", "process.signal": "processes", "process.kill": "processes",
    "process.stdin": "processes",
    "files.read": "files", "files.write": "files", "files.list": "files", "files.stat": "files",
    "files.mkdir": "files", "files.remove": "files", "files.move": "files", "files.search": "files",
    "files.chmod": "files",
    "ports.url": "ports",
    "pty.open": "terminal", "pty.write": "terminal", "pty.resize": "terminal", "pty.close": "terminal",
}


def method(name: str):
    """The function serving an EPP method (importing its module on first use), or None."""
    module = METHODS.get(name)
    if module is None:
        return None
    return getattr(__import__(module), "m_" + name.replace(".", "_"))


def new_server(rfile, wfile) -> epp.Server:
    return epp.Server(rfile, wfile, initialize=m_initialize, find=method)


def main() -> int:
    out = sys.stdout.buffer
    sys.stdout = sys.stderr             # a stray print() can never corrupt the protocol stream
    # 1 MiB of read buffer: a multi-MB files.write line then arrives in pipe-sized reads instead of
    # 8 KiB ones (8 MiB over a pipe: 13 ms -> 6 ms on the bench machine)
    stdin = open(sys.stdin.fileno(), "rb", buffering=1 << 20, closefd=False)
    new_server(stdin, out).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
