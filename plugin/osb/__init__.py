"""The OpenSandbox client: the plugin's only way to the lifecycle server and to execd.

Its public surface is the names below (``from osb import OpenSandbox, HttpError``); the rest of the
plugin imports nothing else of the client, no ``osb.<module>``. Its modules, beside this file in osb/
(plugin/ is a flat root for its imports: launch.py runs with it as sys.path[0], and osb/ is a package
there), import each other by relative imports and, outside the client, only the standard library and the
leaf ``errors.py`` (``SECRETS`` scrubs the error bodies read here). Every failure of a call is an
``HttpError`` (the server answered >= 400) or a ``NetError`` (no usable answer: refused, reset,
timeout, an answer cut short, a WebSocket that broke).

    transport.py   keep-alive HTTP, deadlines, HttpError / NetError, the error-body parser
    retries.py     retries of idempotent calls (429/502/503/504, resets, cut-short answers)
    lifecycle.py   OpenSandbox (/v1/sandboxes...) and SandboxCache (per-sandbox state on disk)
    execd.py       Execd (commands, files, the PTY API) and CommandRun
    sse.py · multipart.py · ws.py   execd's event stream, uploads, the WebSocket client

This file imports none of them: a name is imported on first use (PEP 562). The host starts a new plugin
process for most calls, and a call pays only for the modules it needs (``initialize`` loads no part of the
client, sandbox.get never loads osb/execd.py or osb/ws.py).
"""

from __future__ import annotations

TYPE_CHECKING = False  # (not typing's: importing typing costs milliseconds)

__all__ = [
    "Http",
    "HttpError",
    "NetError",
    "Reply",
    "http_date",
    "retry_after_seconds",
    "safe_url",
    "OpenSandbox",
    "SandboxCache",
    "Execd",
    "CommandRun",
    "TooLarge",
    "shell_join",
    "StartFailure",
    "signal_exit_code",
    "terminal_exit_code",
    "OP_BINARY",
    "OP_TEXT",
    "WebSocketClient",
]

_WHERE = {
    "Http": "transport",
    "HttpError": "transport",
    "NetError": "transport",
    "Reply": "transport",
    "http_date": "retries",
    "retry_after_seconds": "retries",
    "safe_url": "transport",
    "OpenSandbox": "lifecycle",
    "SandboxCache": "lifecycle",
    "Execd": "execd",
    "CommandRun": "execd",
    "TooLarge": "execd",
    "shell_join": "execd",
    "StartFailure": "sse",
    "signal_exit_code": "sse",
    "terminal_exit_code": "sse",
    "OP_BINARY": "ws",
    "OP_TEXT": "ws",
    "WebSocketClient": "ws",
}

if TYPE_CHECKING:
    from .execd import CommandRun, Execd, TooLarge, shell_join
    from .lifecycle import OpenSandbox, SandboxCache
    from .retries import http_date, retry_after_seconds
    from .sse import StartFailure, signal_exit_code, terminal_exit_code
    from .transport import Http, HttpError, NetError, Reply, safe_url
    from .ws import OP_BINARY, OP_TEXT, WebSocketClient
else:

    def __getattr__(name: str) -> object:
        module = _WHERE.get(name)
        if module is None:
            raise AttributeError(f"module 'osb' has no attribute {name!r}")
        value = getattr(__import__(module, globals(), None, (name,), 1), name)  # from .<module> import name
        globals()[name] = value  # the next lookup is a plain module attribute
        return value
