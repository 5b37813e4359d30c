"""The image store as the mock's create uses it: resolve the requested image (a pull, as the server's
``_ensure_image_available`` does before it creates the container) or fail the create the way the server
fails it: 500 ``DOCKER::SANDBOX_IMAGE_PULL_FAILED`` "Failed to pull image <uri>: <docker-py error>"
(server ``services/docker/container_ops.py`` ``_pull_image``; recording 16). No sandbox exists afterwards
(the create raised before the container existed: GET is 404, the list does not show it).

The docker-py part is ``<status> Client|Server Error for http+docker://localhost/v1.41/images/create
?tag=…&fromImage=…: <reason> ("<daemon text>")`` (recording 16's shape); the daemon text is the store's
message, worded as Docker words the same failure where it can be."""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import quote_plus

from mock_opensandbox.images.errors import ImageAuthError, ImageError, ImageNotFound
from mock_opensandbox.images.store import Image, ImageStore
from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.lifecycle.model import docker_pull_params
from mock_opensandbox.lifecycle.quirks import MockError


def default_cache_dir() -> str:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "mock-opensandbox", "images")


def docker_error_text(err: ImageError, uri: str) -> str:
    """docker-py's APIError text for a failed /images/create (what follows "Failed to pull image <uri>: ")."""
    repo, tag = docker_pull_params(uri)
    url = "http+docker://localhost/v1.41/images/create?tag=%s&fromImage=%s" % (quote_plus(tag), quote_plus(repo))
    # the daemon answers 404 for an image the registry does not have or will not show (errdefs.NotFound),
    # 500 for everything else (unreachable, refused credentials, a corrupt layer)
    if isinstance(err, ImageNotFound) or (isinstance(err, ImageAuthError) and "pull access denied" in str(err)):
        return '404 Client Error for %s: Not Found ("%s")' % (url, err)
    return '500 Server Error for %s: Internal Server Error ("%s")' % (url, err)


class ImagePuller:
    """``pull(uri, auth, platform)`` -> Image, or MockError(IMAGE_PULL_FAILED_STORE)."""

    def __init__(self, store: ImageStore):
        self.store = store

    def pull(self, uri: str, auth: dict[str, Any] | None, platform: dict[str, str] | None) -> Image:
        try:
            return self.store.resolve(uri, auth=auth, platform=platform)
        except ImageError as e:
            raise MockError(quirks.IMAGE_PULL_FAILED_STORE, image=uri, error=docker_error_text(e, uri)) from None

    def describe(self) -> str:
        """For x-mock-isolation and the start-up banner: which sources answer."""
        return "images from %s (cache %s)" % (", ".join(self.store.sources()) or "no source", self.store.cache_dir)

    def images(self, sandboxes: dict[str, Any] | None = None) -> list[dict[str, Any]]:
        """``GET /__mock__/images``: every cached image (id, refs, digest, size, layers, config) and the ids
        of the live sandboxes created from it."""
        users: dict[str, list[str]] = {}
        for sid, sb in (sandboxes or {}).items():
            img = getattr(sb, "rootfs_image", None)
            if img is not None:
                users.setdefault(img.id, []).append(sid)
        out = self.store.images()
        for d in out:
            d["sandboxes"] = sorted(users.get(d["id"], []))
        return out
