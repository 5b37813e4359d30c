"""Kept for test files that import ``eppclient`` by name: the EPP client is tiers/toolkit/epp.py."""
from tiers.toolkit.epp import MAX_LINE_BYTES, PLUGIN, EppClient, RpcError, wait_until  # noqa: F401 - re-exports
