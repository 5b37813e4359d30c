"""t1 (the plugin over EPP against the mock, and the mock's parts): fixtures every t1 file can use.

* ``mock``, ``epp``, ``sid``: tiers/toolkit/fixtures.py, through tiers/conftest.py (a file may define
  its own ``mock``);
* ``sandbox_root``, ``runtime``, ``make_execd``: a bare execd over a SandboxRuntime (conftest_execd.py);
* ``cli_factory``: ``python -m mock_opensandbox`` in the foreground (tiers/toolkit/mockcli.py).

The plugin's modules are importable by their own names here too (``import epp``, ``from osb import transport``).
"""

from __future__ import annotations

from tiers.t1.conftest_execd import make_execd, runtime, sandbox_root  # noqa: F401 - fixtures for t1
from tiers.toolkit.mockcli import cli_factory  # noqa: F401 - fixture for t1
from tiers.toolkit.plugin import importable

importable()
