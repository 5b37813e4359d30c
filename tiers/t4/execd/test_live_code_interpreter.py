"""The official code-interpreter SDK (opensandbox-code-interpreter, unchanged) on the live stack with local-up's
code-interpreter image (OSB_LOCAL_IMAGES=1 OSB_WITH_CODE_INTERPRETER=1: ``local/code-interpreter:py-bash``,
named by ``./local-up.sh env`` as OPENSANDBOX_CODE_INTERPRETER_IMAGE), sync and async classes, step by step
(tiers/flows/execd/code_flow.py), and the same steps on mocks given the same image: its own tree (``docker save`` into the
mock's image dir, the image's entrypoint starts its Jupyter), with the mock's execd and with the real one
(--execd-bin), and the host-tools view with a pip-made Jupyter env (--jupyter-env). Every table must equal the
live one. Skips with one line without the image in a Docker here."""

from __future__ import annotations

import os
import subprocess

import pytest

pytest.importorskip("code_interpreter")

from mock_opensandbox.server import MockOpenSandbox
from tiers.flows.execd.code_flow import STEPS, run_code_flow, run_code_flow_async
from tiers.toolkit.images import docker_has
from tiers.toolkit.jupyter import jupyter_env_or_skip

IMAGE = os.environ.get("OPENSANDBOX_CODE_INTERPRETER_IMAGE", "local/code-interpreter:py-bash")
EXECD = os.environ.get(
    "OSB_EXECD_BIN", os.path.join(os.path.dirname(__file__), "..", "..", "..", "..", "shared", "opensandbox", "execd")
)
_TABLES: dict[str, dict[str, str]] = {}


@pytest.fixture(scope="module")
def image():
    if not docker_has(IMAGE):
        pytest.skip(
            "no code-interpreter image %s here (OSB_LOCAL_IMAGES=1 OSB_WITH_CODE_INTERPRETER=1 "
            "./local-up.sh up)" % IMAGE
        )
    return IMAGE


@pytest.fixture(scope="module")
def image_dir(image, tmp_path_factory):
    d = tmp_path_factory.mktemp("ci-image")
    subprocess.run(["docker", "save", "-o", str(d / "ci.tar"), image], check=True, timeout=300)
    return d


@pytest.fixture(scope="module")
def live_table(live_server, image):
    if "live" not in _TABLES:
        _TABLES["live"] = run_code_flow(live_server.root, live_server.api_key, image)
    return _TABLES["live"]


def _ok(table: dict[str, str]) -> None:
    failed = {k: v for k, v in table.items() if v != "ok"}
    assert failed == {} and len(table) == STEPS, failed


def test_live_sync_flow(live_table):
    _ok(live_table)


def test_live_async_flow(live_server, image):
    _ok(run_code_flow_async(live_server.root, live_server.api_key, image))


@pytest.mark.parametrize("how", ["image tree", "image tree + real execd", "jupyter env"])
def test_mock_gives_the_live_table(live_table, image, image_dir, how):
    kw: dict = {"execd_close_delay": 0.05}
    if how == "jupyter env":
        kw["jupyter_env"] = jupyter_env_or_skip()
    else:
        kw.update(image_dir=str(image_dir), image_cache=str(image_dir / "cache"))
    if how.endswith("real execd"):
        if not os.access(EXECD, os.X_OK):
            pytest.skip("no real execd at %s (OSB_EXECD_BIN)" % EXECD)
        kw["execd_bin"] = os.path.abspath(EXECD)
    with MockOpenSandbox(**kw) as osb:
        table = run_code_flow(osb.base_url, osb.api_key, image)
    assert table == live_table
