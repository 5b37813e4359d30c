"""The optional-tool switches (mock_opensandbox/runtime/optional.py): OSB_MOCK_NO's words, and the README's quick start
lists every tool with its switch word."""

from __future__ import annotations

import os

from mock_opensandbox.runtime import optional

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_words_aliases_and_all(monkeypatch):
    monkeypatch.setenv(optional.ENV, "pasta, chromium,nonsense")
    assert optional.switched_off() == {"slirp4netns", "chromium"}
    assert optional.off("slirp4netns") and optional.off("pasta") and not optional.off("cgroups")
    assert optional.which("chromium", "sh") is None and optional.which("cgroups", "sh")
    assert optional.why_absent("chromium") == "switched off by OSB_MOCK_NO"
    monkeypatch.setenv(optional.ENV, "all")
    assert optional.switched_off() == set(optional.TOOLS)
    monkeypatch.delenv(optional.ENV)
    assert optional.switched_off() == set()
    assert optional.why_absent("slirp4netns") == "not installed (apt-get install slirp4netns)"


def test_readme_lists_every_optional_tool():
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as fh:
        text = fh.read()
    rows = [line for line in text.splitlines() if line.startswith("| `")]
    for tool in optional.TOOLS:
        assert any(line.startswith("| `%s`" % tool) for line in rows), f"README's optional tools: no row for {tool}"
