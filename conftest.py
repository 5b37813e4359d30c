"""Repository-wide pytest configuration.

Registers the mock's pytest plugin (other projects get it through the ``pytest11`` entry point,
which carries the module's own name, so an install of this project into the venv registers it once:
tiers/t0/repo/test_editable_install.py).
"""

from __future__ import annotations

import os

pytest_plugins = ["pytest_opensandbox_mock"]

REPO = os.path.dirname(os.path.abspath(__file__))
SHARED = os.path.normpath(os.path.join(REPO, "..", "shared"))
