"""Live: snapshots of the Docker runtime (QUIRKS.md, Snapshots), the shared flow of tiers/flows/docker/snapshot_flow.py (recorder
scenario 25's requests with their recorded answers asserted); tiers/t1/docker/test_snapshots.py runs the same flow on the
mock. Every sandbox and snapshot it makes is deleted at the end."""

from __future__ import annotations

from tiers.flows.docker import snapshot_flow
from tiers.flows.sandbox import sandbox_inside as si


def test_snapshot_flow_live(live_server):
    snapshot_flow.run(si.Target(live_server.root, live_server.api_key, live_server.image))
