"""pytest plugin (kept outside mock_opensandbox/, which is standard library only): the ``opensandbox_mock`` and ``opensandbox_mock_factory`` fixtures.

Registered through the ``pytest11`` entry point (``pytest_opensandbox_mock``, the module's own name) for projects that install this
package, and through ``pytest_plugins`` in this repository's conftest.py.

    def test_create(opensandbox_mock):
        url, key = opensandbox_mock.base_url, opensandbox_mock.api_key

    def test_token(opensandbox_mock_factory):
        osb = opensandbox_mock_factory(execd_token="secret", execd_mode="latest")
        osb = opensandbox_mock_factory(egress_mode="dns", egress_dns_upstream="127.0.0.1:5353")  # networkPolicy

    def test_fork_bomb(opensandbox_mock_factory):   # the server's options: pids_limit (4096),
        osb = opensandbox_mock_factory(pids_limit=64, execd_close_delay=0)   # max_sandbox_timeout (86400)

    def test_quick(opensandbox_mock_factory):   # no delay a client does not depend on (ini: opensandbox_timing)
        osb = opensandbox_mock_factory(timing="fast")

    def test_pools(opensandbox_mock_factory):   # /v1/pools and extensions.poolRef (ini: opensandbox_runtime)
        osb = opensandbox_mock_factory(runtime="kubernetes")

    def test_config(opensandbox_mock_factory):   # the real server's server.toml (ini: opensandbox_config)
        osb = opensandbox_mock_factory(config="server.toml")

    def test_fast(opensandbox_mock_shared):   # one mock per session, reset() after every test
        opensandbox_mock_shared.assert_requested(method="POST", path="^/v1/sandboxes$", count=0)
"""

from __future__ import annotations

from typing import Any, Callable, Iterator

import pytest

from mock_opensandbox.options import MockOptions
from mock_opensandbox.server import MockOpenSandbox


def pytest_addoption(parser: Any) -> None:
    parser.addini(
        "opensandbox_egress_mode",
        "networkPolicy in the opensandbox_mock fixtures: off | dns | dns+nft "
        "(MockOpenSandbox egress_mode; default: dns where the host can run it)",
        default="",
    )
    parser.addini(
        "opensandbox_timing",
        "the opensandbox_mock fixtures' timing: faithful (a real server's delays) | fast (execd's start and "
        "close delays 0; MockOpenSandbox timing)",
        default="",
    )
    parser.addini(
        "opensandbox_runtime",
        "the opensandbox_mock fixtures' server runtime: docker (default) | kubernetes (the pools API and poolRef "
        "creates; MockOpenSandbox runtime)",
        default="",
    )
    parser.addini(
        "opensandbox_config",
        "an opensandbox-server 1.1.1 config file the fixtures' mocks honour (MockOpenSandbox config; default: "
        "$OSB_MOCK_CONFIG, if set)",
        default="",
    )
    parser.addini("opensandbox_egress_dns_upstream", "IP[:PORT] the fixtures' policy resolvers forward to", default="")
    parser.addini(
        "opensandbox_egress_bin",
        "a real egress sidecar binary the fixtures run instead of the mock's "
        "(MockOpenSandbox egress_bin; root, iptables)",
        default="",
    )


def fixture_options(config: Any) -> MockOptions:
    """The fixtures' MockOptions: the defaults, with the ini file's settings (the command line builds its own
    from its flags, mock_opensandbox/__main__.py); a config file's settings go under those that differ from a default."""
    return MockOptions(
        timing=config.getini("opensandbox_timing") or "faithful",
        runtime=config.getini("opensandbox_runtime") or "docker",
        config=config.getini("opensandbox_config") or None,
        egress_mode=config.getini("opensandbox_egress_mode") or None,
        egress_dns_upstream=config.getini("opensandbox_egress_dns_upstream") or None,
        egress_bin=config.getini("opensandbox_egress_bin") or None,
    )


@pytest.fixture
def opensandbox_mock(pytestconfig: Any) -> Iterator[MockOpenSandbox]:
    """A started MockOpenSandbox (127.0.0.1, ephemeral port, generated API key), stopped afterwards."""
    with MockOpenSandbox(fixture_options(pytestconfig)) as osb:
        yield osb


@pytest.fixture
def opensandbox_mock_factory(pytestconfig: Any) -> Iterator[Callable[..., MockOpenSandbox]]:
    """Call with MockOptions settings as keywords (or a MockOptions) to get started instances; all are
    stopped at teardown."""
    made: list[MockOpenSandbox] = []

    def make(options: MockOptions | None = None, /, **changes: Any) -> MockOpenSandbox:
        osb = MockOpenSandbox(options or fixture_options(pytestconfig), **changes)
        made.append(osb)
        osb.start()
        return osb

    try:
        yield make
    finally:
        errors = []
        for osb in reversed(made):
            try:
                osb.stop()
            except Exception as e:  # noqa: BLE001 - stop every instance, then report the first failure
                errors.append(e)
        if errors:
            raise errors[0]


@pytest.fixture(scope="session")
def _opensandbox_mock_session(pytestconfig: Any) -> Iterator[MockOpenSandbox]:
    with MockOpenSandbox(fixture_options(pytestconfig)) as osb:
        yield osb


@pytest.fixture
def opensandbox_mock_shared(_opensandbox_mock_session: MockOpenSandbox) -> Iterator[MockOpenSandbox]:
    """One MockOpenSandbox for the whole session, ``reset()`` after every test (moto's reset): no sandbox,
    process, fault rule or journal entry carries over to the next test."""
    yield _opensandbox_mock_session
    _opensandbox_mock_session.reset()
