"""The official Python SDK's (opensandbox==1.1.1) connection config for a mock: one place for the t2 oracles."""

from __future__ import annotations

from datetime import timedelta
from typing import Any


def sdk_config(osb: Any, *, sync: bool, timeout: float = 30.0) -> Any:
    """ConnectionConfigSync (sync) or ConnectionConfig (async) for ``osb`` (a MockOpenSandbox): its key and
    host:port over plain HTTP, ``timeout`` seconds per request. The SDK is imported here, on use: the tests
    that call this skip first (pytest.importorskip) where it is not installed."""
    if sync:
        from opensandbox.config.connection_sync import ConnectionConfigSync as config
    else:
        from opensandbox.config import ConnectionConfig as config
    return config(
        api_key=osb.api_key,
        domain=osb.base_url.split("://", 1)[1],
        protocol="http",
        request_timeout=timedelta(seconds=timeout),
    )
