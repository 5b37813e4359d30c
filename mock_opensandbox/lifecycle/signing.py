"""OSEP-0011 secure access as server 1.1.1 issues it and OpenSandbox's ingress gateway checks it: the signing keys,
signed route tokens (``<id>-<port>-<expires_b36>-<signature>``) and the per-sandbox access token.

Issuing: server ``services/signing.py`` (base36 ``expires``, the canonical bytes, ``hex8 + key_id``),
``services/endpoint_auth.py`` (``secrets.token_urlsafe(24)`` access tokens) and ``config.py``
(``SecureAccessKey``/``SecureAccessConfig``: one-character key ids ``[0-9a-z]``, base64 secrets, an active key).
Checking: ``components/ingress/pkg/signature/signature.go`` and ``ingress_access.go`` at 3bb6fad (``ParseRouteToken``,
``ParsePortSegment``, ``ParseExpiresB36``, ``ValidateSignatureFormat``, ``VerifySignature``,
``CheckIngressSecureAccess``) with their error texts, which the gateway puts in its answers. Standard library only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
import struct
import time

B36 = "0123456789abcdefghijklmnopqrstuvwxyz"
MAX_EXPIRES_B36_LEN = 13
MAX_UINT64 = 2**64 - 1
KEY_ID = re.compile(r"^[0-9a-z]$")
SECURE_ACCESS_HEADER = "OpenSandbox-Secure-Access"  # server services/constants.py, ingress_access.go
TOKEN_BYTES = 24  # server services/endpoint_auth.py SECURE_ACCESS_TOKEN_BYTES

# ingress_access.go / signature.go error texts (the gateway answers "OpenSandbox Ingress: <text>")
ERR_HEADER_MISMATCH = "signature: secure access header mismatch"
ERR_SIGNATURE_REQUIRED = "signature: signature required for this sandbox"
ERR_VERIFIER_NOT_CONFIGURED = "signature: ingress verifier not configured"
ERR_UNAUTHORIZED = "signature: unauthorized"
ERR_EXPIRED = "signature: access expired"


class RouteError(ValueError):
    """A refused route or access check; ``status`` is the gateway's (HTTPStatusForIngressErr: 401, 503 or 400)."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


def generate_token() -> str:
    """A sandbox's secure-access token (server services/endpoint_auth.py generate_secure_access_token)."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def encode_expires_b36(n: int) -> str:
    if n < 0 or n > MAX_UINT64:
        raise ValueError("expires out of range: %d" % n)
    out = ""
    while True:
        n, r = divmod(n, 36)
        out = B36[r] + out
        if not n:
            return out


def canonical(sandbox_id: str, port: int, expires_b36: str) -> bytes:
    return ("v1\nshort\n%s\n%d\n%s\n" % (sandbox_id, port, expires_b36)).encode("utf-8")


def hex8(secret: bytes, canon: bytes) -> str:
    inner = struct.pack(">I", len(secret)) + secret + struct.pack(">I", len(canon)) + canon
    return hashlib.sha256(inner).hexdigest()[:8]


def parse_keys(spec: str) -> dict[str, bytes]:
    """``"a=<base64>,b=<base64>"`` (the server's OPENSANDBOX_SECURE_ACCESS_KEYS, the gateway's ParseKeys)."""
    out: dict[str, bytes] = {}
    for seg in spec.split(","):
        seg = seg.strip()
        if not seg:
            continue
        kid, sep, val = seg.partition("=")
        kid, val = kid.strip(), val.strip()
        if not sep or not KEY_ID.match(kid) or not val:
            raise ValueError("invalid secure access key %r (want key_id=base64, key_id one of [0-9a-z])" % seg)
        try:
            raw = base64.b64decode(val, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError("secure access key %r is not valid base64" % kid) from None
        if not raw:
            raise ValueError("secure access key %r decodes to no bytes" % kid)
        if kid in out:
            raise ValueError("duplicate secure access key_id %r" % kid)
        out[kid] = raw
    if not out:
        raise ValueError("no secure access keys")
    return out


class KeyRing:
    """The signing keys: the server signs with ``active``, the gateway verifies with any of ``keys``."""

    def __init__(self, spec: str | None = None, active: str = ""):
        # [choice] no keys given: one random 32-byte key "a" per mock (the server needs them configured)
        self.spec = spec or "a=" + base64.b64encode(secrets.token_bytes(32)).decode()
        self.keys = parse_keys(self.spec)
        self.active = active or sorted(self.keys)[0]
        if self.active not in self.keys:
            raise ValueError("active secure access key %r not in keys %s" % (self.active, sorted(self.keys)))

    def sign(self, sandbox_id: str, port: int, expires: int) -> tuple[str, str]:
        """(expires_b36, signature) of a signed route (server KubernetesSandboxService._build_signed_endpoint)."""
        e = encode_expires_b36(expires)
        return e, hex8(self.keys[self.active], canonical(sandbox_id, port, e)) + self.active

    def verify(self, signature: str, sandbox_id: str, port: int, expires_b36: str, now: float | None = None) -> None:
        """signature.go Verifier.VerifySignature: raises RouteError (401 expired/unauthorized, 400 malformed)."""
        validate_signature_format(signature)
        expires = parse_expires_b36(expires_b36)
        if int(time.time() if now is None else now) > expires:
            raise RouteError(ERR_EXPIRED, 401)
        secret = self.keys.get(signature[8])
        if secret is None:
            raise RouteError(ERR_UNAUTHORIZED + ": unknown signed_key_id", 401)
        want = hex8(secret, canonical(sandbox_id, port, expires_b36))
        if not hmac.compare_digest(signature[:8], want):
            raise RouteError(ERR_UNAUTHORIZED + ": signature mismatch", 401)


def parse_expires_b36(s: str) -> int:
    if not s:
        raise RouteError("empty expires_b36")
    if len(s) > MAX_EXPIRES_B36_LEN:
        raise RouteError("expires_b36 too long")
    for c in s:
        if "A" <= c <= "Z":
            raise RouteError("expires_b36 must be lowercase [0-9a-z]")
        if c not in B36:
            raise RouteError("invalid character in expires_b36")
    if len(s) > 1 and s[0] == "0":
        raise RouteError("expires_b36 must not have leading zeros")
    n = int(s, 36)
    if n > MAX_UINT64:
        raise RouteError('strconv.ParseUint: parsing "%s": value out of range' % s)
    return n


def validate_signature_format(sig: str) -> None:
    if len(sig) != 9:
        raise RouteError("signature must be 9 characters, got %d" % len(sig))
    if any(c not in "0123456789abcdef" for c in sig[:8]):
        raise RouteError("signature hex8 must be lowercase hex")
    if sig[8] not in B36:
        raise RouteError("signed_key_id must be [0-9a-z]")


def parse_port_segment(s: str) -> int:
    if len(s) > 1 and s[0] == "0":
        raise RouteError("port must not have leading zeros")
    try:
        p = int(s) if re.fullmatch(r"[+-]?[0-9]+", s) else 0
    except ValueError:
        p = 0
    if not 1 <= p <= 65535:
        raise RouteError('invalid port "%s"' % s)
    return p


def parse_route_token(s: str) -> tuple[str, int, str, str]:
    """signature.go ParseRouteToken: ``<id>-<port>`` or ``<id>-<port>-<expires_b36>-<signature>``."""
    parts = s.split("-")
    if len(parts) == 1:
        raise RouteError("expected <sandbox-id>-<port> or signed host label, got 1 segments")
    if len(parts) == 2:
        if not parts[0]:
            raise RouteError("empty sandbox_id")
        return parts[0], parse_port_segment(parts[1]), "", ""
    if len(parts) < 4:
        raise RouteError("signed host label needs at least 4 segments, got %d" % len(parts))
    validate_signature_format(parts[-1])
    parse_expires_b36(parts[-2])
    port = parse_port_segment(parts[-3])
    sid = "-".join(parts[:-3])
    if not sid:
        raise RouteError("empty sandbox_id")
    return sid, port, parts[-2], parts[-1]


def check_access(
    expected_token: str, header: str | None, expires_b36: str, signature: str, sid: str, port: int, keys: KeyRing
) -> None:
    """ingress_access.go CheckIngressSecureAccess for a sandbox that has a token: the header when present (equal,
    else 401 mismatch), else a signed route (verified), else 401 signature required."""
    if header is not None:
        if hmac.compare_digest(header.strip().encode(), expected_token.strip().encode()):
            return
        raise RouteError(ERR_HEADER_MISMATCH, 401)
    if signature and expires_b36.strip():
        keys.verify(signature, sid, port, expires_b36)
        return
    raise RouteError(ERR_SIGNATURE_REQUIRED, 401)
