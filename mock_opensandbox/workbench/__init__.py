"""The workbench: admin API, dashboard, request journal, fault rules and their injector, the fault proxy,
the secret scrubber and the fixture file. It plugs into the product (wire/http1.py FAULT_HOOK, the apps'
``journal`` and ``faults`` attributes); the product layers never import it."""

from __future__ import annotations

from mock_opensandbox.workbench import faultinject as faultinject  # plugs the fault hook into the wire
