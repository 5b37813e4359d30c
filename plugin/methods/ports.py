"""Ports: ports.url, the URL (direct, or through the server's proxy) and headers of a sandbox port."""

from __future__ import annotations

from context import Context
from epp import Request
from errors import bad_input
from params import sandbox_id

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

PLUGIN_NAME = "opensandbox"  # provider_id in the answer (= provider.PLUGIN_NAME)


def m_ports_url(ctx: Context, req: Request, p: dict[str, Any]) -> dict[str, Any]:
    """The direct endpoint (or the server proxy with use_server_proxy) and the headers it needs."""
    sid = sandbox_id(p)
    port = p.get("port")
    if isinstance(port, str) and port.isdigit():
        port = int(port)
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65535:
        raise bad_input("port must be a number between 1 and 65535.")
    client = ctx.client()
    url, headers = ctx.guard(lambda: client.endpoint(sid, port), op="ports")
    return {
        "url": url,
        "headers": headers,
        "provider_id": PLUGIN_NAME,
        "sandbox_id": sid,
        "port": port,
        "authentication_audience": "gateway",
        "path_mode": "prefix",
    }
