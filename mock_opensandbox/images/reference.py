"""Image references, normalised the way Docker does (distribution/reference ``ParseNormalizedNamed``).

``busybox`` is ``docker.io/library/busybox:latest``; the first path component is a registry host when it
has a ``.`` or a ``:`` or is ``localhost``; ``name@sha256:…`` pins a digest; a digest-less, tag-less name
gets ``latest``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_DOMAIN = "docker.io"
DOCKER_HUB_API = "registry-1.docker.io"  # what docker.io means on the wire
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_PATH_COMPONENT = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG = re.compile(r"^[\w][\w.-]{0,127}$")
_DOMAIN = re.compile(
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)*"
    r"|\[[0-9A-Fa-f:.]+\])(?::[0-9]{1,5})?$"
)


@dataclass(frozen=True)
class Reference:
    domain: str  # docker.io, 127.0.0.1:5000, ghcr.io
    path: str  # library/busybox, local/busybox
    tag: str | None  # latest (None when only a digest was given)
    digest: str | None  # sha256:… or None

    @property
    def name(self) -> str:
        return "%s/%s" % (self.domain, self.path)

    @property
    def api_host(self) -> str:
        return DOCKER_HUB_API if self.domain == DEFAULT_DOMAIN else self.domain

    @property
    def reference(self) -> str:
        """What goes after /manifests/: the digest when pinned, else the tag."""
        return self.digest or self.tag or "latest"

    def __str__(self) -> str:
        out = self.name
        if self.tag:
            out += ":" + self.tag
        if self.digest:
            out += "@" + self.digest
        return out

    @property
    def familiar_name(self) -> str:
        """Docker's short repository name: ``busybox``, ``local/busybox``, ``127.0.0.1:5000/x``."""
        if self.domain == DEFAULT_DOMAIN:
            return self.path[len("library/") :] if self.path.startswith("library/") else self.path
        return self.name

    def familiar(self) -> str:
        """Docker's short form: ``busybox:latest``, ``local/busybox:latest``."""
        out = self.familiar_name
        if self.tag:
            out += ":" + self.tag
        if self.digest:
            out += "@" + self.digest
        return out


def parse(uri: str) -> Reference:
    """Parse an image reference; ValueError for one Docker would refuse."""
    s = (uri or "").strip()
    if not s or len(s) > 4096:
        raise ValueError("invalid reference format")
    digest = None
    if "@" in s:
        s, digest = s.split("@", 1)
        if not _DIGEST.match(digest):
            raise ValueError("invalid reference format: unsupported digest")
    tag = None
    slash = s.rfind("/")
    colon = s.rfind(":")
    if colon > slash:
        s, tag = s[:colon], s[colon + 1 :]
        if not _TAG.match(tag):
            raise ValueError("invalid reference format")
    parts = s.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        domain, rest = parts[0], parts[1:]
    else:
        domain, rest = DEFAULT_DOMAIN, parts
    if not _DOMAIN.match(domain):
        raise ValueError("invalid reference format: bad registry host")
    if domain == "index.docker.io":
        domain = DEFAULT_DOMAIN
    if domain == DEFAULT_DOMAIN and len(rest) == 1:
        rest = ["library"] + rest
    if not rest or not all(_PATH_COMPONENT.match(p) for p in rest):
        raise ValueError("invalid reference format: repository name must be lowercase")
    if tag is None and digest is None:
        tag = "latest"
    return Reference(domain, "/".join(rest), tag, digest)


def same_image(a: str, b: str) -> bool:
    """Do two references name the same repository and tag (after normalisation)? A digest on both sides
    must be equal too. Unparseable names never match."""
    try:
        ra, rb = parse(a), parse(b)
    except ValueError:
        return False
    if ra.name != rb.name:
        return False
    if ra.digest and rb.digest and ra.digest != rb.digest:
        return False
    if ra.tag and rb.tag and ra.tag != rb.tag:
        return False
    return True
