"""The leaf every layer of the plugin imports (and that imports only the standard library):
``EppError``, the one kind of error a method raises (a JSON-RPC error answer), its two common
shapes (``bad_input``, ``unsupported``), and ``SECRETS``, the plugin's one registry of credentials.

``SECRETS`` masks every credential this process holds in its plain, JSON-escaped and URL-quoted
forms: ``epp.py`` passes every error answer and every stderr line through it, and the OpenSandbox
client (``osb/transport.py``) scrubs the error bodies it reads with it. (Not named secrets.py: the
plugin's directory is sys.path[0], where that name would hide the standard library's module.)
"""

from __future__ import annotations

import json
import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any


class Secrets:
    """Every credential this process holds (config secrets, per-create registry passwords). Each is
    replaced by ``***`` in its plain, JSON-escaped and URL-encoded (quote and quote_plus) forms:
    error bodies can echo request headers or bodies back (debugging proxies do)."""

    def __init__(self) -> None:
        self._forms: list[str] = []
        self._bforms: list[bytes] = []
        self._lock = threading.Lock()

    def add(self, *values: object) -> None:
        new = [v for v in values if isinstance(v, str) and len(v) >= 3]
        if not new:
            return
        import urllib.parse

        with self._lock:
            forms = set(self._forms)
            for v in new:
                forms |= {v, json.dumps(v)[1:-1], urllib.parse.quote(v, safe=""), urllib.parse.quote_plus(v)}
            self._forms = sorted((f for f in forms if f), key=len, reverse=True)
            self._bforms = [f.encode("utf-8", "replace") for f in self._forms]

    def __bool__(self) -> bool:
        return bool(self._forms)

    def scrub(self, data: bytes) -> bytes:
        for form in self._bforms:
            data = data.replace(form, b"***")
        return data

    def redact(self, value: Any) -> Any:
        """``value`` with every secret masked: strings, and strings inside dicts and lists."""
        if not self._forms:
            return value
        if isinstance(value, str):
            for form in self._forms:
                value = value.replace(form, "***")
            return value
        if isinstance(value, dict):
            return {k: self.redact(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.redact(v) for v in value]
        return value


SECRETS = Secrets()


class EppError(Exception):
    """A JSON-RPC error answer. ``sdk_code`` picks the host's exception class (epp-host-ref §4.1)."""

    def __init__(
        self, code: int, message: str, *, sdk_code: str | None = None, suggestion: str | None = None, **data: Any
    ) -> None:
        super().__init__(message)
        self.code, self.message = code, message
        self.data = {k: v for k, v in data.items() if v not in (None, "")}
        if sdk_code:
            self.data["sdk_code"] = sdk_code
        if suggestion:
            self.data["suggestion"] = suggestion

    def to_json(self) -> dict[str, Any]:
        err = {"code": self.code, "message": self.message}
        if self.data:
            err["data"] = self.data
        return err


def bad_input(message: str, suggestion: str | None = None) -> EppError:
    return EppError(-32000, message, suggestion=suggestion)


def unsupported(feature: str, message: str, suggestion: str | None = None) -> EppError:
    return EppError(-32003, message, suggestion=suggestion, feature=feature, details={"feature": feature})
