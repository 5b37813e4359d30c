"""The image store's typed errors.

Every error carries ``kind`` (a short stable word the mock maps to the server's answer) and a message that
never holds a credential: messages are built from the image reference, the registry host, HTTP statuses and
digests only (never a header, a token or an ``imageAuth`` field).
"""

from __future__ import annotations


class ImageError(Exception):
    """Base class. ``kind`` is one of the subclasses' words; ``ref`` the image reference asked for."""

    kind = "error"

    def __init__(self, message: str, *, ref: str = ""):
        super().__init__(message)
        self.ref = ref


class ImageNotFound(ImageError):
    """No source has the image (no layout/tarball names it, no daemon has it, the registry says unknown)."""

    kind = "not_found"


class ImageAuthError(ImageError):
    """The registry refused the credential (or asked for one and none was given)."""

    kind = "unauthorized"


class RegistryUnreachable(ImageError):
    """The registry did not answer (DNS, connect, TLS, timeout, 5xx)."""

    kind = "unreachable"


class CorruptImage(ImageError):
    """A manifest, config or layer does not match its digest, or is not what its media type says."""

    kind = "corrupt"


class DigestMismatch(CorruptImage):
    kind = "digest_mismatch"

    def __init__(self, what: str, expected: str, actual: str, *, ref: str = ""):
        super().__init__("%s digest mismatch: expected %s, got %s" % (what, expected, actual), ref=ref)
        self.expected = expected
        self.actual = actual


class UnsafeLayer(CorruptImage):
    """A layer entry would land outside the layer root (absolute name, ``..``, a symlinked parent, a hard
    link to outside). The layer is refused as a whole and nothing of it stays."""

    kind = "unsafe_layer"


class UnsupportedImage(ImageError):
    """A well-formed image the store cannot use (zstd layers, a platform that is not in the index, an
    unknown media type)."""

    kind = "unsupported"
