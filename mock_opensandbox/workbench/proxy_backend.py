"""The admin view of the fault proxy (``ProxyBackend``): the sandboxes seen through it, their state asked
from the upstream, for the /__mock__/ routes of workbench/admin.py."""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from typing import Any, Protocol

from mock_opensandbox.wire.listener import Server
from mock_opensandbox.workbench.proxy_recording import Recorder


# =====================================================================================================
# admin backend
# =====================================================================================================
class Proxied(Protocol):
    """What the admin view reads of its fault proxy (proxy.py FaultProxy, which imports this module): the sandboxes
    it saw (``known``, guarded by ``lock``), its per-endpoint listeners, and a call to the upstream."""

    upstream: str
    api_key: str
    recorder: Recorder | None
    known: dict[str, dict[str, Any]]
    listeners: dict[tuple[str, str], tuple[Server, Any]]

    @property
    def lock(self) -> threading.RLock: ...
    @property
    def running_url(self) -> str | None: ...
    def forget(self, sid: str) -> None: ...
    def upstream_call(self, method: str, path: str) -> tuple[int, Any]: ...


class ProxyBackend:
    """The admin view of the proxy: sandboxes seen through it, their state asked from the upstream."""

    kind = "proxy"

    def __init__(self, proxy: Proxied):
        self.proxy = proxy

    def info(self) -> dict[str, Any]:
        p = self.proxy
        return {
            "kind": "proxy",
            "upstream": p.upstream,
            "base_url": p.running_url,
            "execd_mode": "upstream's",
            "execd": "upstream's (through the proxy)",
            "isolation": "upstream's",
            "recording": p.recorder.path if p.recorder else None,
            "auth": p.api_key is not None,
        }

    def sandbox_ids(self) -> list[str]:
        with self.proxy.lock:
            return list(self.proxy.known)

    def sandbox(self, sid: str, *, processes: bool = True) -> dict[str, Any] | None:
        p = self.proxy
        with p.lock:
            if sid not in p.known:
                return None
            eps = [
                {"upstream": "%s:%d" % app.target, "local": "127.0.0.1:%d" % srv.port, "listener": app.fault_listener}
                for (hp, sb), (srv, app) in p.listeners.items()
                if sb == sid
            ]
            meta = dict(p.known[sid])
        doc: dict[str, Any] = {
            "id": sid,
            "state": "unknown",
            "image": meta.get("image"),
            "endpoints": eps,
            "created_through_proxy": meta.get("created", False),
            "processes": None,
            "root": None,
            "execd": {
                "mode": "upstream's",
                "headers": meta.get("headers") or {},
                "access_token": "<sent by the client>" if meta.get("token") else None,
                "gateway": bool(meta.get("headers")),
            },
        }
        st, body = p.upstream_call("GET", "/v1/sandboxes/%s" % sid)
        if st == 200 and isinstance(body, dict):
            status = body.get("status") or {}
            doc["state"] = status.get("state", "unknown")
            doc["paused"] = doc["state"] == "Paused"
            doc["image"] = (body.get("image") or {}).get("uri", doc["image"])
            doc["expires_at"] = body.get("expiresAt")
            doc["metadata"] = body.get("metadata") or {}
            try:
                exp = datetime.fromisoformat(str(body.get("expiresAt")).replace("Z", "+00:00"))
                doc["ttl_left_s"] = round((exp - datetime.now(timezone.utc)).total_seconds(), 1)
            except ValueError:
                doc["ttl_left_s"] = None
        elif st == 404:
            doc["state"] = "Deleted"
        return doc

    def kill(self, sid: str) -> bool:
        p = self.proxy
        st, _ = p.upstream_call("DELETE", "/v1/sandboxes/%s" % sid)
        p.forget(sid)
        return st in (200, 202, 204, 404) and st != 0

    def reset(self, sid: str | None) -> dict[str, Any]:
        """Deletes the sandboxes created through the proxy (all of them, or the one) on the upstream."""
        p = self.proxy
        with p.lock:
            ids = [sid] if sid is not None else [s for s, m in p.known.items() if m.get("created")]
        removed = sum(1 for s in ids if self.kill(s))
        if sid is None:
            for s in list(p.known):
                p.forget(s)
        return {"sandboxes_removed": removed}
