"""Which execd framing is the server under test using? Learned, not assumed (tiers t3 and t4).

The two generations (QUIRKS.md, MockOpenSandbox / CLI: `execd_mode`; the plugin's ``LEGACY``/``LATEST``): ``v1.1.0``
runs only a ``command`` string, one event per output line with line endings stripped, and answers ``argv`` with 400;
``latest`` takes ``argv`` and keeps output byte-exact. The real execd v1.0.19 (``../shared/opensandbox/execd``,
recordings 11/12) frames like ``v1.1.0``.

``OSB_EXECD_MODE`` (``v1.1.0`` or ``latest``) wins when set. Otherwise one sandbox's execd is asked the way the
plugin asks it (``plugin/osb/execd.py``: an ``argv`` POST /command; a 400 the plugin's own ``_is_argv_rejection``
recognises means ``v1.1.0``).
"""

from __future__ import annotations

import http.client
import json
import os
import time
from typing import Dict, Optional

from tiers.toolkit.plugin import importable

importable()  # the plugin's modules import each other by their own names (epp, osb)

from osb.execd import LATEST, LEGACY, _is_argv_rejection  # noqa: E402 - needs plugin/ on sys.path first
from tiers.flows.server.smoke_flow import request  # noqa: E402 - after importable() above, like the line before

MODES = (LEGACY, LATEST)


class FramingError(AssertionError):
    pass


def mode_from_env() -> Optional[str]:
    mode = os.environ.get("OSB_EXECD_MODE") or None
    if mode is not None and mode not in MODES:
        raise FramingError(f"OSB_EXECD_MODE={mode!r}: use one of {', '.join(MODES)} (or leave it unset to detect)")
    return mode


def probe_execd(execd_url: str, headers: Optional[Dict[str, str]] = None, *, timeout: float = 30.0) -> str:
    """The framing of the execd at ``execd_url`` (``http://host:port[/prefix]``), as the plugin detects it."""
    hdrs = {**(headers or {}), "Accept": "text/event-stream", "Cache-Control": "no-cache"}
    reply = request("POST", execd_url, "/command", headers=hdrs, json_body={"argv": ["true"]}, timeout=timeout)
    if reply.status == 400 and _is_argv_rejection(_message(reply.body)):
        return LEGACY
    if reply.status == 200:
        return LATEST
    raise FramingError(f"execd framing probe: POST /command with argv answered {reply.status}: {reply.body[:200]!r}")


def _message(body: bytes) -> str:
    try:
        data = json.loads(body)
    except ValueError:
        return body.decode("utf-8", "replace")
    if isinstance(data, dict):
        return str(data.get("message") or data.get("error") or data)
    return str(data)


def detect(base_url: str, api_key: str, image: str, *, ready_timeout: float = 60.0) -> str:
    """OSB_EXECD_MODE, else the framing of a throw-away sandbox's execd on the server at ``base_url``."""
    mode = mode_from_env()
    if mode:
        return mode
    auth = {"OPEN-SANDBOX-API-KEY": api_key}
    r = request(
        "POST",
        base_url,
        "/v1/sandboxes",
        headers=auth,
        json_body={
            "image": {"uri": image},
            "entrypoint": ["tail", "-f", "/dev/null"],
            "timeout": 600,
            "resourceLimits": {"cpu": "250m", "memory": "128Mi"},
            "metadata": {"purpose": "framing-probe"},
        },
    )
    if r.status != 202:
        raise FramingError(
            f"execd framing probe: creating a sandbox from {image!r} answered {r.status}: "
            f"{r.body[:200]!r} (set OPENSANDBOX_IMAGE to an image the server has, or OSB_EXECD_MODE)"
        )
    sid = r.json()["id"]
    try:
        ep = request("GET", base_url, f"/v1/sandboxes/{sid}/endpoints/44772", headers=auth)
        if ep.status != 200:
            raise FramingError(f"execd framing probe: endpoint answered {ep.status}: {ep.body[:200]!r}")
        data = ep.json()
        url = "http://" + data["endpoint"] if "://" not in data["endpoint"] else data["endpoint"]
        headers = data.get("headers") or {}
        deadline = time.monotonic() + ready_timeout
        last: object = None
        while True:  # Docker's readiness window: accepted-then-dropped, or refused, until execd listens
            try:
                last = request("GET", url, "/ping", headers=headers, timeout=5)
                if last.status == 200:
                    break
            except (OSError, ValueError, http.client.HTTPException) as exc:
                last = exc
            if time.monotonic() > deadline:
                raise FramingError(f"execd framing probe: /ping did not answer 200 in {ready_timeout} s: {last!r}")
            time.sleep(0.1)
        return probe_execd(url, headers)
    finally:
        request("DELETE", base_url, f"/v1/sandboxes/{sid}", headers=auth)
