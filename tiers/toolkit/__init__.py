"""The test toolkit shared by every tier and by bench/: one place for what tests keep needing.

* ``tiers.toolkit.plugin``: where the plugin is; ``importable()`` puts its directory on sys.path so
  tests import its modules by their own names (``import epp``, ``from osb import transport``), as
  the plugin itself does;
* ``tiers.toolkit.epp``: the EPP/1 clients (``EppClient`` for tests, ``Plugin`` the lean driver of
  bench/), both starting the plugin the way the host does;
* ``tiers.toolkit.waits``: ``wait_until`` (poll a predicate with a deadline);
* ``tiers.toolkit.procs``: /proc readers (state, parent, cmdline, environment, children).
* ``tiers.toolkit.rest``: ``call()``, the one HTTP/1.1 request helper of the tests (``Reply``: status,
  headers, body, json());
* ``tiers.toolkit.spec_guard``: the OpenAPI spec guard ``tiers/conftest.py`` installs for every tier.
"""
