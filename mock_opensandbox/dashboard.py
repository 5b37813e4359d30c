"""The workbench dashboard (placeholder until the page lands)."""
from __future__ import annotations


def page() -> bytes:
    return b"<!doctype html><html><title>mock OpenSandbox</title><p>dashboard</html>"
