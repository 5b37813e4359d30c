"""multipart/form-data for execd's ``POST /files/upload`` (rec 13, 18)."""
from __future__ import annotations

import os


def encode_multipart(parts: list[tuple[str, str, str, bytes]]) -> tuple[str, bytes]:
    """multipart/form-data body for ``[(field, filename, content_type, data), ...]``.

    Returns ``(content_type_header, body)``. The boundary never occurs inside any part.
    """
    ctype, pieces = multipart_pieces(parts)
    return ctype, b"".join(pieces)


def multipart_pieces(parts: list[tuple[str, str, str, bytes]]) -> tuple[str, list[bytes]]:
    """encode_multipart() as the list of its pieces (the data parts as they are: a large upload is
    sent without being copied into one body first)."""
    while True:
        boundary = "osbprovider" + os.urandom(12).hex()
        marker = boundary.encode("ascii")
        if not any(marker in data for _, _, _, data in parts):
            break
    chunks: list[bytes] = []
    small: list[bytes] = []                 # joined, so that small pieces do not go out one by one
    for field, filename, ctype, data in parts:
        head = (
            f"--{boundary}\r\n"
            f'Content-Disposition: form-data; name="{_header_token(field)}"; '
            f'filename="{_header_token(filename)}"\r\n'
            f"Content-Type: {ctype}\r\n\r\n"
        )
        small.append(head.encode("ascii"))
        if len(data) > 65536:
            chunks += [b"".join(small), data]
            small = []
        else:
            small.append(data)
        small.append(b"\r\n")
    small.append(f"--{boundary}--\r\n".encode("ascii"))
    chunks.append(b"".join(small))
    return f"multipart/form-data; boundary={boundary}", chunks


def _header_token(value: str) -> str:
    safe = "".join(c if 32 <= ord(c) < 127 and c not in '"\\' else "_" for c in value)
    return safe or "file"
