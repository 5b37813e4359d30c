"""The checks of parameters many methods share (and two value helpers config.py uses too): each
returns the clean value or raises the EPP error the host expects (-32602 for a malformed parameter,
-32000 for a value OpenSandbox could not take).
"""

from __future__ import annotations

import json
import sys

from errors import EppError, bad_input

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Mapping, TypeGuard


def is_number(value: object) -> TypeGuard[int | float]:
    """A real, finite JSON number (not a bool, not NaN/Infinity, which Python's json accepts)."""
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and value == value
        and value not in (float("inf"), float("-inf"))
    )


def as_text(value: object) -> str:
    return "" if value is None else str(value).strip()


def sandbox_id(p: dict[str, Any]) -> str:
    sid = p.get("sandbox_id")
    if not isinstance(sid, str) or not sid.strip():
        raise EppError(-32602, "Invalid params: sandbox_id must be a non-empty string.")
    return sid.strip()


def path_param(p: dict[str, Any], key: str = "path") -> str:
    path = p.get(key)
    if not isinstance(path, str) or not path or "\0" in path:
        raise EppError(-32602, f"Invalid params: {key} must be a non-empty path.")
    return path


def b64_param(p: Mapping[str, Any], key: str, bad_code: int = -32000) -> bytes:
    """The bytes of a base64 string parameter; ``bad_code`` when it is a string but not base64."""
    import binascii

    raw = p.get(key, "")
    if not isinstance(raw, str):
        raise EppError(-32602, f"Invalid params: {key} must be a base64 string.")
    try:
        if sys.version_info >= (3, 11):
            # what b64decode(validate=True) does on 3.11+, without first copying the str into bytes
            # (8 MB for a full files.write)
            return binascii.a2b_base64(raw, strict_mode=True)
        import base64  # Python 3.10 only

        return base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise EppError(bad_code, f"{key} is not valid base64.") from None


def check_envs(envs: object, field: str = "envs") -> dict[str, Any]:
    if envs is None:
        return {}
    if not isinstance(envs, dict):
        raise bad_input(f"{field} must be an object of variable names to string values.")
    out = {}
    for key, value in envs.items():
        if not isinstance(key, str) or not key or "=" in key or "\0" in key:
            raise bad_input(f"{field}: {str(key)[:60]!r} is not a valid environment variable name.")
        if value is None:
            value = ""
        if isinstance(value, (dict, list)) or "\0" in str(value):
            raise bad_input(f"{field}: the value of {key!r} must be a string without NUL bytes.")
        out[key] = value if isinstance(value, str) else json.dumps(value) if isinstance(value, bool) else str(value)
    return out
