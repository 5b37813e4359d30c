"""Oracle: the official OpenSandbox Python SDK (opensandbox==1.1.1) drives the mock unchanged, in both
its sync and async APIs and against both execd generations. If the SDK cannot tell the mock from a
real server for these calls, neither can a client built like it."""

from __future__ import annotations

import asyncio
from datetime import timedelta

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit.sdk import sdk_config
from tiers.toolkit.waits import wait_until

opensandbox = pytest.importorskip("opensandbox")
from opensandbox import Sandbox, SandboxSync  # noqa: E402 - after the importorskip above
from opensandbox.config.connection_sync import ConnectionConfigSync  # noqa: E402 - after the importorskip above
from opensandbox.models.execd import RunCommandOpts  # noqa: E402 - after the importorskip above
from opensandbox.models.filesystem import DirectoryListEntry, SearchEntry  # noqa: E402 - after the importorskip above

IMAGE = "python:3.12-slim"


def _domain(osb: MockOpenSandbox) -> str:
    return osb.base_url.split("://", 1)[1]


def _stdout(execution) -> str:
    return "".join(m.text for m in execution.logs.stdout)


def _stderr(execution) -> str:
    return "".join(m.text for m in execution.logs.stderr)


@pytest.fixture(scope="module", params=["v1.1.0", "latest"])
def osb(request):
    with MockOpenSandbox(execd_mode=request.param) as mock:
        yield mock


def test_sync_sdk_end_to_end(osb):
    cfg = sdk_config(osb, sync=True)
    sb = SandboxSync.create(
        IMAGE,
        connection_config=cfg,
        timeout=timedelta(minutes=10),
        metadata={"via": "sdk"},
        env={"GREETING": "hi"},
        entrypoint=["tail", "-f", "/dev/null"],
    )
    try:
        info = sb.get_info()
        assert info.id == sb.id and info.status.state == "Running"
        assert info.metadata == {"via": "sdk"}

        ex = sb.commands.run("echo $GREETING; echo err >&2; exit 3")
        assert ex.exit_code == 3 and ex.error is not None and ex.error.value == "3"
        assert _stdout(ex).strip() == "hi" and _stderr(ex).strip() == "err"

        ok = sb.commands.run("echo fine")
        assert ok.exit_code == 0 and _stdout(ok).strip() == "fine" and ok.error is None

        bg = sb.commands.run("echo started; sleep 0.3; echo done", opts=RunCommandOpts(background=True))
        assert bg.id
        wait_until(lambda: not sb.commands.get_command_status(bg.id).running, 10, 0.1)
        status = sb.commands.get_command_status(bg.id)
        assert status.running is False and status.exit_code == 0
        logs = sb.commands.get_background_command_logs(bg.id)
        assert logs.content == "started\ndone\n"

        sb.files.write_file("/tmp/sdk/hello.txt", "hello from sdk\n")
        assert sb.files.read_file("/tmp/sdk/hello.txt") == "hello from sdk\n"
        payload = bytes(range(256)) * 64
        sb.files.write_file("/tmp/sdk/blob.bin", payload)
        assert sb.files.read_bytes("/tmp/sdk/blob.bin") == payload
        names = sorted(e.path for e in sb.files.list_directory(DirectoryListEntry(path="/tmp/sdk")))
        assert names == ["/tmp/sdk/blob.bin", "/tmp/sdk/hello.txt"]
        found = sb.files.search(SearchEntry(path="/tmp/sdk", pattern="*.txt"))
        assert [e.path for e in found] == ["/tmp/sdk/hello.txt"]
        assert _stdout(sb.commands.run("cat /tmp/sdk/hello.txt")).strip() == "hello from sdk"

        renewed = sb.renew(timedelta(minutes=30))
        assert renewed.expires_at is not None

        endpoint = sb.get_endpoint(8080)
        assert endpoint.endpoint.startswith("127.0.0.1:")

        sb.pause()
        assert sb.get_info().status.state == "Paused"
        resumed = SandboxSync.resume(sb.id, connection_config=cfg)
        assert resumed.get_info().status.state == "Running"
        assert _stdout(resumed.commands.run("echo back")).strip() == "back"
    finally:
        sb.kill()
        sb.close()
    assert (
        all(getattr(s, "deleted", False) for s in osb.sandboxes.values() if s.id == sb.id) or sb.id not in osb.sandboxes
    )


def test_async_sdk_end_to_end(osb):
    async def flow() -> None:
        cfg = sdk_config(osb, sync=False)
        sb = await Sandbox.create(
            IMAGE, connection_config=cfg, timeout=timedelta(minutes=10), entrypoint=["tail", "-f", "/dev/null"]
        )
        try:
            assert (await sb.get_info()).status.state == "Running"
            ex = await sb.commands.run("printf 'one\\ntwo\\n'")
            assert ex.exit_code == 0 and _stdout(ex).replace("\n", "") == "onetwo"
            timed = await sb.commands.run("sleep 5", opts=RunCommandOpts(timeout=timedelta(seconds=1)))
            assert timed.error is not None and timed.error.value == "-1"
            await sb.files.write_file("/workspace/a.txt", "async")
            assert await sb.files.read_file("/workspace/a.txt") == "async"
            await sb.renew(timedelta(minutes=20))
            await sb.pause()
            assert (await sb.get_info()).status.state == "Paused"
            resumed = await Sandbox.resume(sb.id, connection_config=cfg)
            assert (await resumed.get_info()).status.state == "Running"
            assert (await sb.get_endpoint(44772)).endpoint
        finally:
            await sb.kill()
            await sb.close()

    asyncio.run(flow())


def test_sdk_sees_typed_errors(osb):
    cfg = ConnectionConfigSync(api_key="wrong-key", domain=_domain(osb), protocol="http")
    with pytest.raises(opensandbox.exceptions.SandboxException) as err:
        SandboxSync.create(IMAGE, connection_config=cfg, ready_timeout=timedelta(seconds=5))
    assert "INVALID_API_KEY" in str(err.value) or "401" in str(err.value)
