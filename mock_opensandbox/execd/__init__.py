"""The execd half of the mock OpenSandbox: one ExecdServer per sandbox (commands, files, pty, sessions, code,
metrics, ping, proxy: each API an <api>_routes.py, over its state module <api>.py when it keeps state).

``from mock_opensandbox.execd import ExecdServer`` (imported lazily so that ``python -m
mock_opensandbox.execd`` and the submodules stay cheap to import).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ExecdServer", "EXECD_PORT"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from mock_opensandbox.execd import server

        return getattr(server, name)
    raise AttributeError(name)
