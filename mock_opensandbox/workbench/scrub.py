"""The one secret scrubber of the mock and its tooling: the request journal's previews and headers
(workbench/journal.py), the fault proxy's recordings (workbench/proxy.py) and the fixture recorder (record/scrub.py, which
puts its placeholders for ids, ports and times on top) all scrub with these.

* ``SECRET_HEADERS``: the credential headers and what stands in their value (``<api-key>``,
  ``<execd-token>``, else ``<redacted>``);
* ``strip_secrets()``: every occurrence of a known secret value (4 characters or more, longest first);
* ``scrub_text()``: that, then credential-looking JSON fields (``"api_key": "..."``, ``token``,
  ``secret``, ``password``, ``authorization``) and environment assignments (``X_TOKEN=...``).

Standard library only; imports nothing of the mock."""

from __future__ import annotations

import re
from typing import Iterable

__all__ = ["REDACTED", "SECRET_HEADERS", "strip_secrets", "scrub_text"]

REDACTED = "<redacted>"
SECRET_HEADERS = {
    "open-sandbox-api-key": "<api-key>",
    "x-execd-access-token": "<execd-token>",
    "opensandbox-egress-auth": "<egress-token>",
    "authorization": REDACTED,
    "proxy-authorization": REDACTED,
    "cookie": REDACTED,
    "set-cookie": REDACTED,
    "x-api-key": REDACTED,
}
MIN_SECRET = 4  # shorter values are too likely to be ordinary text
# "key": "value" pairs whose key looks like a credential, in JSON or form bodies
_SECRET_KEY_RE = re.compile(
    r'(?i)("(?:[\w-]*(?:api[_-]?key|token|secret|password|passwd|authorization)[\w-]*)"'
    r'\s*:\s*")([^"\\]*(?:\\.[^"\\]*)*)(")'
)
_ENV_SECRET_RE = re.compile(r"(?i)\b([A-Z0-9_]*(?:API_KEY|TOKEN|SECRET|PASSWORD)[A-Z0-9_]*=)(\S+)")


def strip_secrets(text: str, secrets: Iterable[str], mark: str = REDACTED) -> str:
    """``text`` with every occurrence of a known secret replaced by ``mark`` (longest secret first, so
    a secret that contains another goes as a whole)."""
    for s in sorted({s for s in secrets if s and len(s) >= MIN_SECRET}, key=len, reverse=True):
        text = text.replace(s, mark)
    return text


def scrub_text(text: str, secrets: Iterable[str] = (), mark: str = REDACTED) -> str:
    """Known secrets (as ``mark``), then credential-looking JSON fields and env assignments (as
    ``<redacted>``)."""
    text = strip_secrets(text, secrets, mark)
    text = _SECRET_KEY_RE.sub(lambda m: m.group(1) + REDACTED + m.group(3), text)
    return _ENV_SECRET_RE.sub(lambda m: m.group(1) + REDACTED, text)
