"""No Python module of the repository is over 600 lines: a module that long holds more than one subject, and a
reader (or the reviewer of a diff) cannot keep it in view. Every git-tracked ``*.py`` file counts: the mock, the
plugin, the tests, the tools. The allow-list names the files that are data rather than code, each with why (none in mock_opensandbox/ or
plugin/).
"""

from __future__ import annotations

import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MAX_LINES = 600
# Files that are data, not code: a longer one is a longer table, not a module doing more. Only data corpora.
DATA = {
    # the differential corpus: request cases, one per execd route behaviour, run unchanged against the real
    # execd and the mock; it grows as cases are added (568 lines when this list was written)
    "differential/corpus.py": "the differential corpus (request cases)",
}


def tracked_python(repo: str) -> list[str]:
    """The ``*.py`` files git tracks in ``repo`` (index included: a file added but not yet committed counts)."""
    out = subprocess.run(["git", "ls-files", "-z", "--", "*.py"], cwd=repo, capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        pytest.skip("not a git work tree: %s" % out.stderr.strip()[:200])
    return sorted(p for p in out.stdout.split("\0") if p)


def _lines(path: str) -> int:
    with open(path, "rb") as fh:
        return sum(1 for _ in fh)


def oversized(repo: str = REPO, allowed: dict[str, str] = DATA) -> list[str]:
    bad = []
    for rel in tracked_python(repo):
        path = os.path.join(repo, rel)
        if rel in allowed or not os.path.isfile(path):  # allowed data, or deleted in the work tree
            continue
        n = _lines(path)
        if n > MAX_LINES:
            bad.append(f"{rel}: {n} lines, over {MAX_LINES}: split it by subject")
    return bad


def test_no_python_module_is_over_600_lines():
    assert oversized() == []


def test_the_allow_list_names_tracked_files():
    assert set(DATA) <= set(tracked_python(REPO))


def test_a_601_line_module_fails(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, capture_output=True, timeout=60)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * 601)
    (tmp_path / "pkg" / "just.py").write_text("x = 1\n" * 600)
    (tmp_path / "table.py").write_text("ROWS = [\n" + "    1,\n" * 700 + "]\n")
    (tmp_path / "untracked.py").write_text("x = 1\n" * 700)
    subprocess.run(["git", "add", "pkg", "table.py"], cwd=tmp_path, check=True, capture_output=True, timeout=60)
    assert oversized(str(tmp_path), {"table.py": "a table"}) == [
        "pkg/long.py: 601 lines, over 600: split it by subject"
    ]
    assert oversized(str(tmp_path), {}) == [
        "pkg/long.py: 601 lines, over 600: split it by subject",
        "table.py: 702 lines, over 600: split it by subject",
    ]
