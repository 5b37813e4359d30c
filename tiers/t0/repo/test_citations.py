"""Code and docs cite only what a reader of the repository can open (CONTRIBUTING.md, "Citations in code and docs"):
a row of mock_opensandbox/QUIRKS.md, a recording (``recording NN``), a test or module of the repository, an upstream
source path with its commit. Never an issue number: the tracker is not in the repository, so the number tells a
reader nothing they can check. Every git-tracked Python file, doc and configuration file counts; the recorded data
(fixtures/*.json, tiers/t4/recordings/) does not: it is what a server said, not our prose.
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CITATION = re.compile(r"\b[Ii]ssues? ?#?[0-9]+")
CHECKED = ["*.py", "*.md", "*.toml", "*.ini", "*.yml", "*.yaml", "*.sh", "Makefile", ".ci/run"]
RECORDED = re.compile(r"^(fixtures/.*\.json|tiers/t4/recordings/.*)$")
# Files another change is editing right now, whose text still cites issue numbers: that change cleans them, and
# drops them from this list.
PENDING: set[str] = set()


def tracked(repo: str) -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--", *CHECKED], cwd=repo, capture_output=True, text=True, timeout=60
    )
    if out.returncode != 0:
        pytest.skip("not a git work tree: %s" % out.stderr.strip()[:200])
    return sorted(p for p in out.stdout.split("\0") if p)


def issue_citations(repo: str = REPO, pending: set[str] = PENDING) -> list[str]:
    bad = []
    for rel in tracked(repo):
        path = os.path.join(repo, rel)
        if rel in pending or RECORDED.match(rel) or not os.path.isfile(path):
            continue
        with open(path, encoding="utf-8", errors="replace") as fh:
            for n, line in enumerate(fh, 1):
                for m in CITATION.finditer(line):
                    bad.append(f"{rel}:{n}: {m.group(0)!r}: cite what a reader can open (a test, a QUIRKS.md row, ...)")
    return bad


def test_no_issue_numbers_cited():
    assert issue_citations() == []


def test_the_pending_files_are_tracked():
    assert PENDING <= set(tracked(REPO))


def test_an_issue_citation_is_found(tmp_path):
    i = "iss" + "ue"  # spelled apart: this file cites nothing itself
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, capture_output=True, timeout=60)
    (tmp_path / "fixtures").mkdir()
    (tmp_path / "mod.py").write_text(f'"""Retries ({i} 7).\n\nSee {i.title()} #12 and /etc/{i}.net."""\n')
    (tmp_path / "notes.md").write_text(f"Fixed in {i}s 3, 4.\n")
    (tmp_path / "clean.py").write_text('"""Retries (tiers/t0/test_retries.py; recording 10)."""\n')
    (tmp_path / "fixtures" / "01_x.json").write_text('{"text": "%s 9"}\n' % i)
    (tmp_path / "fixtures" / "README.md").write_text(f"Recorded for {i} 5.\n")
    (tmp_path / "wip.py").write_text(f"# {i} 8\n")
    (tmp_path / "untracked.py").write_text(f"# {i} 6\n")
    subprocess.run(
        ["git", "add", "mod.py", "notes.md", "clean.py", "fixtures", "wip.py"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        timeout=60,
    )
    found = issue_citations(str(tmp_path), {"wip.py"})
    assert [f.split(": cite")[0] for f in found] == [
        f"fixtures/README.md:1: '{i} 5'",
        f"mod.py:1: '{i} 7'",
        f"mod.py:3: '{i.title()} #12'",
        f"notes.md:1: '{i}s 3'",
    ]
