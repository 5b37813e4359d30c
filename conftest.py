"""Repository-wide pytest configuration.

Registers the mock's pytest plugin (other projects get it through the ``pytest11`` entry point)
and checks, once per session, that the suite left no child processes behind.
"""
from __future__ import annotations

import os

pytest_plugins = ["pytest_opensandbox_mock"]

REPO = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.normpath(os.path.join(REPO, "..", "shared"))
