"""The live server's ``[storage] allowed_host_paths``, which its VOLUME::HOST_PATH_NOT_ALLOWED message lists
("Allowed prefixes: [...]"): OPENSANDBOX_ALLOWED_HOST_PATHS when set (``./local-up.sh env`` exports it; comma
separated, empty = none), else the server.toml that ``./local-up.sh up`` wrote (``$OSB_WORKDIR``, default
``~/.cache/opensandbox-provider/local-up``) when it configures the server at OPENSANDBOX_BASE_URL's port, else none.
So ``OPENSANDBOX_LIVE=1 make test`` is true to the default local-up stack with only the URL and key exported."""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from typing import List, Optional

ENV = "OPENSANDBOX_ALLOWED_HOST_PATHS"


def local_up_config() -> str:
    work = os.environ.get("OSB_WORKDIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"),
        "opensandbox-provider",
        "local-up",
    )
    return os.path.join(work, "server.toml")


def from_config(text: str, port: Optional[int]) -> Optional[List[str]]:
    """allowed_host_paths of a local-up server.toml whose [server] port is port (None: not that server)."""
    sections = {}
    for name, body in re.findall(r"^\[([\w.]+)\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S):
        sections[name] = body
    m = re.search(r"^port\s*=\s*(\d+)\s*$", sections.get("server", ""), re.M)
    if port is None or not m or int(m.group(1)) != port:
        return None
    m = re.search(r"^allowed_host_paths\s*=\s*(\[.*?\])\s*$", sections.get("storage", ""), re.M)
    return json.loads(m.group(1)) if m else []


def allowed_host_paths() -> List[str]:
    given = os.environ.get(ENV)
    if given is not None:
        return [p for p in given.split(",") if p]
    port = urllib.parse.urlsplit(os.environ.get("OPENSANDBOX_BASE_URL", "")).port
    try:
        with open(local_up_config(), encoding="utf-8") as fh:
            found = from_config(fh.read(), port)
    except (OSError, ValueError):
        found = None
    return found or []


def egress_config() -> Optional[dict]:
    """The live server's ``[egress]`` (image, mode) when the local-up server.toml at OPENSANDBOX_BASE_URL's port
    configures one (OPENSANDBOX_EGRESS_IMAGE / OSB_EGRESS_MODE from ``./local-up.sh env`` first), else None: the
    networkPolicy tests skip against a server without an egress image."""
    if os.environ.get("OPENSANDBOX_EGRESS_IMAGE"):
        return {"image": os.environ["OPENSANDBOX_EGRESS_IMAGE"], "mode": os.environ.get("OSB_EGRESS_MODE") or "dns"}
    port = urllib.parse.urlsplit(os.environ.get("OPENSANDBOX_BASE_URL", "")).port
    try:
        with open(local_up_config(), encoding="utf-8") as fh:
            text = fh.read()
    except OSError:
        return None
    if from_config(text, port) is None:
        return None  # another server
    m = re.search(r"^\[egress\]\s*$(.*?)(?=^\[|\Z)", text, re.M | re.S)
    if not m:
        return None
    image = re.search(r'^image\s*=\s*"([^"]*)"', m.group(1), re.M)
    mode = re.search(r'^mode\s*=\s*"([^"]*)"', m.group(1), re.M)
    return {"image": image.group(1), "mode": mode.group(1) if mode else "dns"} if image else None
