"""pytest plugin: the ``opensandbox_mock`` fixture (placeholder until the mock lands)."""
