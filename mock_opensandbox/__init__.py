"""A faithful, offline OpenSandbox server (lifecycle + execd) for tests. Standard library only.

    from mock_opensandbox import MockOpenSandbox
    with MockOpenSandbox() as osb:
        ...  # osb.base_url, osb.api_key

CLI: ``python -m mock_opensandbox``; pytest fixtures: ``opensandbox_mock``, ``opensandbox_mock_factory``.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["MockOpenSandbox", "__version__"]

TYPE_CHECKING = False  # (not typing's: importing typing would cost every import of the package)
if TYPE_CHECKING:
    from mock_opensandbox.server import MockOpenSandbox


def __getattr__(name: str) -> type[MockOpenSandbox]:  # lazy: importing the package must not start or import the servers
    if name == "MockOpenSandbox":
        from mock_opensandbox.server import MockOpenSandbox

        return MockOpenSandbox
    raise AttributeError(name)
