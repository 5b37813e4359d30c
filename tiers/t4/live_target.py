"""The live server seen through the same small surface the t1 tests use on a MockOpenSandbox:
``base_url``, ``api_key``, ``execd_mode`` and ``sandboxes`` (ids currently listed by the server)."""

from __future__ import annotations

import json

from tiers.flows.server.smoke_flow import request
from tiers.t3 import framing


class LiveTarget:
    def __init__(self, live_server):
        self.base_url = live_server.root
        self.api_key = live_server.api_key
        self.image = live_server.image
        self._mode = None

    @property
    def execd_mode(self) -> str:
        """OSB_EXECD_MODE, else learned once from a throw-away sandbox (tiers/t3/framing.py): the real execd
        v1.0.19 frames like v1.1.0, a newer one like latest."""
        if self._mode is None:
            self._mode = framing.detect(self.base_url, self.api_key, self.image)
        return self._mode

    @property
    def sandboxes(self) -> dict:
        ids: dict = {}
        page = 1
        while True:
            reply = request(
                "GET",
                self.base_url,
                f"/v1/sandboxes?page={page}&pageSize=200",
                headers={"OPEN-SANDBOX-API-KEY": self.api_key},
            )
            body = json.loads(reply.body)
            ids.update({item["id"]: item for item in body.get("items", [])})
            if not body.get("pagination", {}).get("hasNextPage"):
                return ids
            page += 1
