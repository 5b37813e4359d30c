"""Oracle: the official Python SDK's volume models (opensandbox==1.1.1 Volume, PVC, Host) end to end against the
mock (QUIRKS.md, Volumes), sync and async: a named volume shared by two sandboxes, read-only, subPath, a host bind under
the allowed prefix, and the server's typed errors as SandboxApiException."""

from __future__ import annotations

import asyncio
import os
import shutil

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit.marks import needs_isolation
from tiers.toolkit.sdk import sdk_config

opensandbox = pytest.importorskip("opensandbox")
from opensandbox import Sandbox, SandboxSync  # noqa: E402 - after the importorskip above
from opensandbox.exceptions import SandboxApiException  # noqa: E402 - after the importorskip above
from opensandbox.models.sandboxes import PVC, Host, Volume  # noqa: E402 - after the importorskip above

pytestmark = needs_isolation
IMAGE = "python:3.12-slim"


def _out(execution) -> str:
    """stdout then stderr, one line per message (execd v1.1.0 sends each line without its newline)."""
    msgs = list(execution.logs.stdout) + list(execution.logs.stderr)
    return "".join(m.text if m.text.endswith("\n") else m.text + "\n" for m in msgs)


@pytest.fixture(scope="module")
def osb(tmp_path_factory):
    allowed = tmp_path_factory.mktemp("sdk-host")
    with MockOpenSandbox(execd_close_delay=0.05, allowed_host_paths=[str(allowed)]) as mock:
        mock.allowed = str(allowed)
        yield mock


def test_sync_sdk_volumes(osb):
    cfg = sdk_config(osb, sync=True)
    host_dir = os.path.join(osb.allowed, "proj")
    writer = SandboxSync.create(
        IMAGE,
        connection_config=cfg,
        entrypoint=["tail", "-f", "/dev/null"],
        volumes=[
            Volume(name="work", pvc=PVC(claim_name="sdk-work"), mount_path="/workspace/work"),
            Volume(name="proj", host=Host(path=host_dir), mount_path="/proj"),
        ],
    )
    reader = None
    try:
        ex = writer.commands.run(
            "mkdir -p /workspace/work/a && echo shared > /workspace/work/a/f && echo host > /proj/h && echo ok"
        )
        assert ex.exit_code == 0 and _out(ex) == "ok\n"
        with open(os.path.join(host_dir, "h")) as fh:
            assert fh.read() == "host\n"
        reader = SandboxSync.create(
            IMAGE,
            connection_config=cfg,
            entrypoint=["tail", "-f", "/dev/null"],
            volumes=[
                Volume(name="ro", pvc=PVC(claim_name="sdk-work"), mount_path="/data", read_only=True),
                Volume(name="sub", pvc=PVC(claim_name="sdk-work"), mount_path="/sub", sub_path="a"),
            ],
        )
        assert _out(reader.commands.run("cat /data/a/f /sub/f")) == "shared\nshared\n"
        ro = reader.commands.run("echo x > /data/new")
        assert ro.exit_code != 0 and "Read-only file system" in _out(ro)
    finally:
        for sb in (writer, reader):
            if sb is not None:
                sb.kill()
                sb.close()


def test_async_sdk_volumes_and_typed_errors(osb):
    async def flow() -> None:
        cfg = sdk_config(osb, sync=False)
        sb = await Sandbox.create(
            IMAGE,
            connection_config=cfg,
            entrypoint=["tail", "-f", "/dev/null"],
            volumes=[Volume(name="w", pvc=PVC(claim_name="sdk-async"), mount_path="/w")],
        )
        try:
            assert _out(await sb.commands.run("echo async > /w/f && cat /w/f")) == "async\n"
        finally:
            await sb.kill()
            await sb.close()
        again = await Sandbox.create(
            IMAGE,
            connection_config=cfg,
            entrypoint=["tail", "-f", "/dev/null"],
            volumes=[Volume(name="w", pvc=PVC(claim_name="sdk-async"), mount_path="/w")],
        )
        try:  # the volume outlived the first sandbox
            assert _out(await again.commands.run("cat /w/f")) == "async\n"
        finally:
            await again.kill()
            await again.close()
        with pytest.raises(SandboxApiException) as err:
            await Sandbox.create(
                IMAGE,
                connection_config=cfg,
                entrypoint=["tail", "-f", "/dev/null"],
                volumes=[
                    Volume(name="w", pvc=PVC(claim_name="sdk-absent", create_if_not_exists=False), mount_path="/w")
                ],
            )
        assert err.value.status_code == 400 and err.value.error.code == "VOLUME::PVC_NOT_FOUND"
        with pytest.raises(SandboxApiException) as err:
            await Sandbox.create(
                IMAGE,
                connection_config=cfg,
                entrypoint=["tail", "-f", "/dev/null"],
                volumes=[Volume(name="h", host=Host(path="/etc"), mount_path="/h")],
            )
        assert err.value.error.code == "VOLUME::HOST_PATH_NOT_ALLOWED"
        assert (
            err.value.error.message == "Host path '/etc' is not under any allowed prefix. Allowed prefixes: "
            "['%s']" % osb.allowed
        )

    asyncio.run(flow())


@pytest.mark.skipif(shutil.which("node") is None, reason="node not installed: JS SDK volumes skipped")
def test_js_sdk_volumes(osb):
    from tiers.t2.clients import Unavailable, js

    try:
        steps = js.run_flow(
            osb.base_url.split("://", 1)[1],
            osb.api_key,
            IMAGE,
            flow=os.path.join(os.path.dirname(js.FLOW), "js_volumes.mjs"),
            args=("js-vol",),
        )
    except Unavailable as e:
        pytest.skip("JS SDK unavailable: %s" % e)
    assert len(steps) == 3 and all(s["ok"] for s in steps), js.summary(steps)
