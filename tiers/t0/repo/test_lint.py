"""The linter: ruff (pinned in requirements-test.txt, rules in pyproject.toml) finds nothing in the repository,
`ruff format --check` would change nothing, and every noqa comment says why it is there (the codes, then a
reason). The checks of the whole tree are marked ``lint``: `make lint` runs them, `make test` deselects them;
the test that shows the noqa check can fail runs in `make test`."""

from __future__ import annotations

import io
import pathlib
import re
import shutil
import subprocess
import sys
import tokenize

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
NOQA = re.compile(r"#\s*noqa\b(?P<codes>:\s*[A-Z]+[0-9]+(?:\s*,\s*[A-Z]+[0-9]+)*)?(?P<why>.*)$")


def _ruff() -> str:
    exe = pathlib.Path(sys.executable).with_name("ruff")
    found = str(exe) if exe.exists() else shutil.which("ruff")
    assert found, "ruff is not installed: `make venv` installs the pinned version (requirements-test.txt)"
    return found


@pytest.mark.lint
def test_ruff_finds_nothing():
    out = subprocess.run(
        [_ruff(), "check", "--no-cache", "--output-format", "concise", str(REPO)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert out.returncode == 0, (
        f"ruff check (`make fmt` sorts imports; `.venv/bin/ruff check --fix .` fixes most of the rest):\n"
        f"{out.stdout}{out.stderr}"
    )


@pytest.mark.lint
def test_ruff_format_changes_nothing():
    # the same files `ruff check` reads (pyproject.toml's [tool.ruff]: bench/out excluded)
    out = subprocess.run(
        [_ruff(), "format", "--check", "--no-cache", "--output-format", "concise", str(REPO)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    would = [line for line in out.stdout.splitlines() if "unformatted:" in line]
    assert out.returncode == 0, (
        f"`ruff format` would reformat {len(would)} file(s); run `make fmt` "
        f"and commit the result:\n" + "\n".join(would[:40]) + f"\n{out.stderr}"
    )


@pytest.mark.lint
def test_ruff_is_the_pinned_version():
    pins = (REPO / "requirements-test.txt").read_text(encoding="utf-8")
    pinned = re.search(r"^ruff==(\S+)", pins, re.M)
    assert pinned, "ruff is pinned in requirements-test.txt"
    got = subprocess.run([_ruff(), "--version"], capture_output=True, text=True, timeout=30).stdout.split()
    assert got[-1] == pinned.group(1), (got, pinned.group(1))


def unexplained(source: str) -> list[tuple[int, str]]:
    """(line, comment) of every noqa comment without codes or without a reason after them."""
    out = []
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type != tokenize.COMMENT:
            continue
        m = NOQA.search(tok.string)
        if m and (not m.group("codes") or len(m.group("why").strip(" -:—()")) < 3):
            out.append((tok.start[0], tok.string))
    return out


@pytest.mark.lint
def test_every_noqa_says_why():
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "*.py"], cwd=REPO, capture_output=True, text=True, timeout=60
    ).stdout.split()
    assert files, "git ls-files listed no Python file (not a git checkout, or git refuses it: safe.directory)"
    bad = []
    for name in files:
        path = REPO / name
        if path.is_file():
            try:
                found = unexplained(path.read_text(encoding="utf-8"))
            except (SyntaxError, tokenize.TokenError, UnicodeDecodeError):
                continue  # not Python this tokenizer reads; ruff reports real syntax errors
            bad += [f"{name}:{line}: {text}" for line, text in found]
    assert bad == []


def test_the_noqa_check_can_fail():
    tag = "#" + " noqa"
    assert unexplained(f"import os  {tag}: F401\n") == [(1, f"{tag}: F401")]
    assert unexplained(f"import os  {tag}\n") == [(1, tag)]
    assert unexplained(f"import os  {tag}: F401 - re-exported\n") == []
    assert unexplained(f"x = '{tag}: F401'\n") == []  # in a string, not a comment
