"""Skip markers several tiers share."""

from __future__ import annotations

import pytest

from mock_opensandbox.runtime import probe_isolation

ISOLATED, NOTE = probe_isolation()  # cached by the runtime: one probe per test process
# The test runs sandboxes contained (PID 1 of their own, the sandbox root as "/"): skip where this machine cannot.
needs_isolation = pytest.mark.skipif(not ISOLATED, reason="sandbox isolation unavailable here: " + NOTE)
