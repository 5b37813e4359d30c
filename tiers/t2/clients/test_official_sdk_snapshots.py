"""Oracle: the official Python SDK's snapshot calls (opensandbox==1.1.1, unchanged) against the mock (QUIRKS.md,
Snapshots), sync and async: Sandbox.create_snapshot, SandboxManager get/list/delete_snapshot, Sandbox.create with
snapshot_id restoring the files, and the server's typed errors as SandboxApiException."""

from __future__ import annotations

import asyncio

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit.marks import needs_isolation
from tiers.toolkit.sdk import sdk_config
from tiers.toolkit.waits import wait_until

opensandbox = pytest.importorskip("opensandbox")
from opensandbox import Sandbox, SandboxManager, SandboxManagerSync, SandboxSync  # noqa: E402 - after the importorskip above
from opensandbox.exceptions import SandboxApiException  # noqa: E402 - after the importorskip above
from opensandbox.models.sandboxes import SnapshotFilter  # noqa: E402 - after the importorskip above

pytestmark = needs_isolation
IMAGE = "python:3.12-slim"


def _out(execution) -> str:
    return "".join(m.text if m.text.endswith("\n") else m.text + "\n" for m in execution.logs.stdout)


@pytest.fixture(scope="module")
def osb():
    with MockOpenSandbox(execd_close_delay=0.05) as mock:
        yield mock


def test_sync_sdk_snapshot_and_restore(osb):
    cfg = sdk_config(osb, sync=True)
    manager = SandboxManagerSync.create(cfg)
    src = SandboxSync.create(IMAGE, connection_config=cfg)
    restored = None
    try:
        assert _out(src.commands.run("echo kept > /tmp/kept && echo ok")) == "ok\n"
        info = src.create_snapshot(name="sdk")
        assert (info.status.state, info.status.reason, info.name, info.sandbox_id) == (
            "Creating",
            "snapshot_accepted",
            "sdk",
            src.id,
        )
        assert wait_until(lambda: manager.get_snapshot(info.id).status.state != "Creating", 30, 0.1)
        got = manager.get_snapshot(info.id)
        assert (got.status.state, got.status.reason) == ("Ready", "snapshot_runtime_ready")
        page = manager.list_snapshots(SnapshotFilter(sandbox_id=src.id, states=["Ready"], page_size=5))
        assert [s.id for s in page.snapshot_infos] == [info.id] and page.pagination.total_items == 1
        restored = SandboxSync.create(snapshot_id=info.id, connection_config=cfg)
        assert _out(restored.commands.run("cat /tmp/kept")) == "kept\n"
        assert manager.get_sandbox_info(restored.id).snapshot_id == info.id
        with pytest.raises(SandboxApiException) as e:
            manager.delete_snapshot(info.id)
        assert e.value.status_code == 409 and "SNAPSHOT::DELETE_CONFLICT" in str(e.value)
        restored.kill()
        manager.delete_snapshot(info.id)
        with pytest.raises(SandboxApiException) as e:
            manager.get_snapshot(info.id)
        assert e.value.status_code == 404
    finally:
        for sb in (restored, src):
            if sb is not None:
                try:
                    sb.kill()
                except SandboxApiException:
                    pass
                sb.close()
        manager.close()


def test_async_sdk_snapshot_errors(osb):
    async def flow() -> None:
        cfg = sdk_config(osb, sync=False)
        manager = await SandboxManager.create(cfg)
        try:
            with pytest.raises(SandboxApiException) as e:
                await Sandbox.create(snapshot_id="00000000-0000-0000-0000-000000000000", connection_config=cfg)
            assert e.value.status_code == 404 and "SNAPSHOT::NOT_FOUND" in str(e.value)
            with pytest.raises(SandboxApiException) as e:
                await manager.create_snapshot("00000000-0000-0000-0000-000000000000")
            assert e.value.status_code == 404 and "DOCKER::SANDBOX_NOT_FOUND" in str(e.value)
            sb = await Sandbox.create(IMAGE, connection_config=cfg)
            try:
                info = await sb.create_snapshot()
                assert info.name is None and info.status.state == "Creating"
                osb.snapshots.wait(30)
                assert (await manager.get_snapshot(info.id)).status.state == "Ready"
                await manager.delete_snapshot(info.id)
            finally:
                await sb.kill()
                await sb.close()
        finally:
            await manager.close()

    asyncio.run(flow())
