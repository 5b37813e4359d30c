"""A sandbox's hostname (runtime/sandbox.py ``_short_id``): 12 hex digits, never all decimal ones, as Docker's
container ids (moby pkg/stringid GenerateRandomID draws again; glibc would take such a hostname for a number and
fail to resolve it: QUIRKS.md, "Hostname")."""

from __future__ import annotations

from mock_opensandbox.runtime import _util, sandbox


def test_an_all_digit_draw_is_drawn_again(monkeypatch):
    draws = iter(["123456789012" + "a" * 52, "0123456789ab" + "1" * 52])
    monkeypatch.setattr(_util.secrets, "token_hex", lambda n: next(draws))
    assert sandbox._short_id() == "0123456789ab"


def test_a_container_id_is_64_hex_digits_its_short_id_never_all_decimal():
    ids = {_util.container_id() for _ in range(200)}
    assert len(ids) == 200 and all(len(i) == 64 and int(i, 16) >= 0 and not i[:12].isdigit() for i in ids)


def test_twelve_hex_digits():
    for _ in range(200):
        short = sandbox._short_id()
        assert len(short) == 12 and int(short, 16) >= 0 and not short.isdigit()
