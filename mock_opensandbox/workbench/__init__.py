"""The workbench: admin API, dashboard, request journal, fault rules and their injector, the fault proxy,
the secret scrubber and the fixture file. Whoever builds a server plugs it into the product (the apps' ``journal``
and ``faults``: wire/listener.py RequestJournal and FaultRules; server.py, proxy.py); importing it changes nothing,
and the product layers never import it."""
