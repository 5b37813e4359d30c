"""The image store wired into the mock (QUIRKS.md, Image store): ``MockOpenSandbox(image_dir=)``, the create pulls
through the store or fails like the server (500 DOCKER::SANDBOX_IMAGE_PULL_FAILED, no sandbox left), the
``/__mock__/images`` admin route, ``x-mock-isolation``, and imageAuth kept out of the journal."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import urllib.parse

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit.images import BuiltImage, layer, write_oci_layout

PASSWORD = "pw-Canary-8c2f"
pytestmark = pytest.mark.spec_exempt(
    "the /__mock__/ workbench routes (images, reset, requests) are mock-only (not in the OpenSandbox spec)"
)


def call(m: MockOpenSandbox, method: str, path: str, body=None) -> tuple[int, dict, dict]:
    u = urllib.parse.urlsplit(m.base_url)
    c = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    h = {"OPEN-SANDBOX-API-KEY": m.api_key, "Content-Type": "application/json"}
    c.request(method, path, body=json.dumps(body) if body is not None else None, headers=h)
    r = c.getresponse()
    data = r.read()
    c.close()
    return r.status, dict(r.getheaders()), (json.loads(data) if data else {})


def create(m, uri, **extra):
    body = {
        "image": {"uri": uri},
        "entrypoint": ["tail", "-f", "/dev/null"],
        "timeout": 600,
        "resourceLimits": {"cpu": "250m", "memory": "128Mi"},
    }
    body["image"].update(extra)
    return call(m, "POST", "/v1/sandboxes", body)


@pytest.fixture
def mock(tmp_path):
    """Overrides the toolkit's ``mock`` (tiers/toolkit/fixtures.py): a mock with an image store of two images."""
    img = BuiltImage([layer([("dir", "etc"), ("file", "etc/os-release", "ID=demo\n")])])
    write_oci_layout(str(tmp_path / "images" / "demo"), {"local/demo:1": img})
    evil = BuiltImage([layer([("symlink", "x", "/"), ("file", "x/escape", "no")])])
    write_oci_layout(str(tmp_path / "images" / "evil"), {"local/evil:1": evil})
    m = MockOpenSandbox(image_dir=str(tmp_path / "images"), image_cache=str(tmp_path / "cache"), isolate=False)
    m.test_image = img
    with m:
        yield m


def test_create_pulls_through_the_store_and_admin_lists_it(mock):
    st, _, sb = create(mock, "local/demo:1")
    assert st == 202
    st, _, got = call(mock, "GET", "/__mock__/images")
    assert st == 200 and got["available"] is True and got["sources"][0] == "image-dir"
    [img] = got["images"]
    assert img["digest"] == mock.test_image.digest and img["size"] == len("ID=demo\n")
    assert img["sandboxes"] == [sb["id"]] and img["refs"] == ["local/demo:1"]
    assert mock.sandboxes[sb["id"]].rootfs_image.layer_dirs()
    st, headers, _ = call(mock, "GET", "/health")
    assert "; images from image-dir" in headers["x-mock-isolation"]


def test_reset_leaves_the_cache_and_delete_empties_it_when_unused(mock):
    st, _, sb = create(mock, "local/demo:1")
    assert call(mock, "POST", "/__mock__/reset", {})[0] == 200
    assert len(call(mock, "GET", "/__mock__/images")[2]["images"]) == 1  # reset: cache kept, no users
    st, _, sb = create(mock, "local/demo:1")
    st, _, body = call(mock, "DELETE", "/__mock__/images")
    assert st == 409 and body["code"] == "MOCK::IMAGES_IN_USE" and sb["id"] in body["message"]
    assert call(mock, "DELETE", "/v1/sandboxes/" + sb["id"])[0] == 204
    assert call(mock, "DELETE", "/__mock__/images")[0] == 204
    assert call(mock, "GET", "/__mock__/images")[2]["images"] == []
    assert os.listdir(os.path.join(mock.images.store.cache_dir, "layers", "sha256")) == []
    assert create(mock, "local/demo:1")[0] == 202  # unpacked again on demand


@pytest.mark.parametrize(
    "uri,words",
    [
        ("local/evil:1", "goes through a symlink"),
        (
            "127.0.0.1:{port}/team/app:1",
            'Internal Server Error ("Get \\"http://127.0.0.1:{port}/v2/\\": dial tcp '
            "127.0.0.1:{port}: connect: connection refused",
        ),
    ],
)
def test_failed_pull_is_the_servers_500_and_leaves_no_sandbox(mock, uri, words):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    uri, words = uri.format(port=port), words.format(port=port)
    st, _, body = create(mock, uri, auth={"username": "bob", "password": PASSWORD})
    assert st == 500 and body["code"] == "DOCKER::SANDBOX_IMAGE_PULL_FAILED"
    assert body["message"].startswith("Failed to pull image %s: " % uri)
    assert "http+docker://localhost/v1.41/images/create?tag=1&fromImage=" in body["message"]
    assert words.replace('\\"', '"') in body["message"]
    st, _, listed = call(mock, "GET", "/v1/sandboxes")
    assert st == 200 and listed["items"] == []
    st, _, journal = call(mock, "GET", "/__mock__/requests")
    assert PASSWORD not in json.dumps(journal) and PASSWORD not in body["message"]
    assert call(mock, "GET", "/__mock__/images")[2]["images"] == []


def test_without_image_dir_nothing_changes(opensandbox_mock_factory):
    m = opensandbox_mock_factory()
    st, headers, _ = call(m, "GET", "/health")
    assert "images from" not in headers["x-mock-isolation"]
    st, _, got = call(m, "GET", "/__mock__/images")
    assert st == 200 and got == {"available": False, "sources": [], "cache": None, "images": [], "snapshots": []}
    st, _, _ = create(m, "no/such-image:1")
    assert st == 202


def test_cli_refuses_a_missing_image_dir(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "mock_opensandbox", "--port", "0", "--image-dir", str(tmp_path / "nope")],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))),
    )
    assert r.returncode == 2 and "is not a directory" in r.stderr
