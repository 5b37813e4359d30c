"""Where the plugin is, and how tests import its modules."""

from __future__ import annotations

import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGIN_DIR = os.path.join(REPO, "plugin")
LAUNCH = os.path.join(PLUGIN_DIR, "launch.py")  # what the manifest runs
PROVIDER = os.path.join(PLUGIN_DIR, "provider.py")


def importable() -> str:
    """Put plugin/ on sys.path (once, first): its modules import each other by their own names,
    because the plugin's directory is sys.path[0] when the host runs it."""
    if PLUGIN_DIR not in sys.path:
        sys.path.insert(0, PLUGIN_DIR)
    return PLUGIN_DIR
