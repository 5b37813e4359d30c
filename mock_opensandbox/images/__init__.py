"""The mock's image store (docs/IMAGES.md; QUIRKS.md, Image store): OCI layouts, ``docker save`` tarballs, a local Docker/Podman and OCI
registries, unpacked once into a content-addressed cache shared by every sandbox. Standard library only.
See docs/IMAGES.md."""

from mock_opensandbox.images.errors import (
    CorruptImage,
    DigestMismatch,
    ImageAuthError,
    ImageError,
    ImageNotFound,
    RegistryUnreachable,
    UnsafeLayer,
    UnsupportedImage,
)
from mock_opensandbox.images.reference import Reference, parse
from mock_opensandbox.images.store import Image, ImageStore

__all__ = [
    "CorruptImage",
    "DigestMismatch",
    "Image",
    "ImageAuthError",
    "ImageError",
    "ImageNotFound",
    "ImageStore",
    "Reference",
    "RegistryUnreachable",
    "UnsafeLayer",
    "UnsupportedImage",
    "parse",
]
