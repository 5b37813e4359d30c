"""A smell detector for subjects, not a splitting rule: no Python module of the repository is over 800 lines. A
module that long most likely holds more than one subject, and a reader (or the reviewer of a diff) cannot keep it in
view; a module is split where its subjects part, never to get under the number. Every git-tracked ``*.py`` file
counts: the mock, the plugin, the tests, the tools. The allow-list names the files that are data rather than code,
each with why (none in mock_opensandbox/ or plugin/).
"""

from __future__ import annotations

import os
import subprocess

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
MAX_LINES = 800
SMELL = (
    "a smell detector for subjects, not a splitting rule: does it hold more than one subject? Split it where its "
    "subjects part, or, if it is data, add it to DATA with why"
)
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
            bad.append(f"{rel}: {n} lines, over {MAX_LINES}: {SMELL}")
    return bad


def test_no_python_module_is_over_800_lines():
    assert oversized() == []


def test_the_allow_list_names_tracked_files():
    assert set(DATA) <= set(tracked_python(REPO))


def test_an_801_line_module_fails(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, capture_output=True, timeout=60)
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * 801)
    (tmp_path / "pkg" / "just.py").write_text("x = 1\n" * 800)
    (tmp_path / "table.py").write_text("ROWS = [\n" + "    1,\n" * 900 + "]\n")
    (tmp_path / "untracked.py").write_text("x = 1\n" * 900)
    subprocess.run(["git", "add", "pkg", "table.py"], cwd=tmp_path, check=True, capture_output=True, timeout=60)
    assert oversized(str(tmp_path), {"table.py": "a table"}) == [f"pkg/long.py: 801 lines, over 800: {SMELL}"]
    assert oversized(str(tmp_path), {}) == [
        f"pkg/long.py: 801 lines, over 800: {SMELL}",
        f"table.py: 902 lines, over 800: {SMELL}",
    ]
