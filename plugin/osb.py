"""The OpenSandbox client: the plugin's only way to the lifecycle server and to execd.

Its public surface is the names below (``from osb import OpenSandbox, HttpError``); the rest of the
plugin imports nothing else of the client. Its modules, ``osb_*.py`` beside this one (plugin/ is a flat
root for its imports: launch.py runs with it as sys.path[0], and every import names a module there), import
each other and, outside the client, only the standard library and the leaf
``errors.py`` (``SECRETS`` scrubs the error bodies read here). Every failure of a call is an
``HttpError`` (the server answered >= 400) or a ``NetError`` (no usable answer: refused, reset,
timeout, an answer cut short, a WebSocket that broke).

    osb_transport.py   keep-alive HTTP, deadlines, HttpError / NetError, the error-body parser
    osb_retries.py     retries of idempotent calls (429/502/503/504, resets, cut-short answers)
    osb_lifecycle.py   OpenSandbox (/v1/sandboxes...) and SandboxCache (per-sandbox state on disk)
    osb_execd.py       Execd (commands, files, the PTY API) and CommandRun
    osb_sse.py · osb_multipart.py · osb_ws.py   execd's event stream, uploads, the WebSocket client

A name is imported on first use (PEP 562): the host starts a new plugin process for most calls,
and a call pays only for the modules it needs (sandbox.get never loads osb_execd.py or osb_ws.py).
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
    from osb_execd import CommandRun, Execd, TooLarge, shell_join
    from osb_lifecycle import OpenSandbox, SandboxCache
    from osb_retries import http_date, retry_after_seconds
    from osb_sse import StartFailure, signal_exit_code, terminal_exit_code
    from osb_transport import Http, HttpError, NetError, Reply, safe_url
    from osb_ws import OP_BINARY, OP_TEXT, WebSocketClient
else:

    def __getattr__(name: str) -> object:
        module = _WHERE.get(name)
        if module is None:
            raise AttributeError(f"module 'osb' has no attribute {name!r}")
        value = getattr(__import__("osb_" + module, globals(), None, (name,), 0), name)  # from osb_<module> import name
        globals()[name] = value  # the next lookup is a plain module attribute
        return value
