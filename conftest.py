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

try:  # (a test-only dependency: requirements-test.txt)
    from hypothesis import HealthCheck, settings
except ImportError:  # pragma: no cover - the tests that use it fail to import on their own
    pass
else:
    # no property test is timed: a draw or an example that a loaded machine makes slow is no failure (timings are
    # the bench's; a health check for slow input generation failed `make test` once at load, 1.12 s for one draw)
    settings.register_profile("osb", suppress_health_check=[HealthCheck.too_slow], deadline=None)
    settings.load_profile("osb")
