"""The live server seen through the same small surface the t1 tests use on a MockOpenSandbox:
``base_url``, ``api_key``, ``execd_mode`` and ``sandboxes`` (ids currently listed by the server)."""
from __future__ import annotations

import json
import os

from tiers.smoke_flow import request


class LiveTarget:
    def __init__(self, live_server):
        self.base_url = live_server.root
        self.api_key = live_server.api_key
        # local-up.sh runs opensandbox/execd:latest; a server with the v1.1.0 image sets OSB_EXECD_MODE=v1.1.0
        self.execd_mode = os.environ.get("OSB_EXECD_MODE", "latest")

    @property
    def sandboxes(self) -> dict:
        ids: dict = {}
        page = 1
        while True:
            reply = request("GET", self.base_url, f"/v1/sandboxes?page={page}&pageSize=200",
                            headers={"OPEN-SANDBOX-API-KEY": self.api_key})
            body = json.loads(reply.body)
            ids.update({item["id"]: item for item in body.get("items", [])})
            if not body.get("pagination", {}).get("hasNextPage"):
                return ids
            page += 1
