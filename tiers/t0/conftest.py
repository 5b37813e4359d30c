"""t0 (unit tests): the plugin's modules are importable by their own names (``import epp``,
``from osb import transport``), as the plugin imports them."""

from tiers.toolkit.plugin import importable

importable()
