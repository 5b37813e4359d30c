"""A sandbox's hostname (runtime/sandbox.py ``_short_id``): 12 hex digits, never all decimal ones, as Docker's
container ids (moby pkg/stringid GenerateRandomID draws again; glibc would take such a hostname for a number and
fail to resolve it: QUIRKS.md, "Hostname")."""

from __future__ import annotations

import uuid

from mock_opensandbox.runtime import sandbox


def test_an_all_digit_draw_is_drawn_again(monkeypatch):
    draws = iter([uuid.UUID("12345678901234567890123456789012"), uuid.UUID("0123456789ab0123456789abcdef0123")])
    monkeypatch.setattr(sandbox.uuid, "uuid4", lambda: next(draws))
    assert sandbox._short_id() == "0123456789ab"


def test_twelve_hex_digits():
    for _ in range(200):
        short = sandbox._short_id()
        assert len(short) == 12 and int(short, 16) >= 0 and not short.isdigit()
