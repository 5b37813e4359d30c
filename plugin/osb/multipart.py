"""multipart/form-data for execd's ``POST /files/upload`` (rec 13, 18)."""

from __future__ import annotations

import os


def multipart_pieces(parts: list[tuple[str, str, str, bytes]]) -> tuple[str, list[bytes]]:
    """multipart/form-data for ``[(field, filename, content_type, data), ...]``: ``(content_type_header,
    pieces)``, the body as a list of pieces to send in turn (a data part over 64 KiB is its own piece, as it is:
    a large upload is sent without being copied into one body first). The boundary never occurs inside any
    part."""
    while True:
        boundary = "osbprovider" + os.urandom(12).hex()
        marker = boundary.encode("ascii")
        if not any(marker in data for _, _, _, data in parts):
            break
    chunks: list[bytes] = []
    small: list[bytes] = []  # joined, so that small pieces do not go out one by one
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
