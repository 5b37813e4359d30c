"""The type hints are checked: mypy (pinned in requirements-test.txt) passes with --strict on
plugin/ and on mock_opensandbox/ (whose pyproject.toml settings are as strict by themselves). Both runs check
against Python 3.10's standard library (python_version there), the oldest Python the project promises.
The caches live in .mypy_cache/ (ignored by git): a warm run takes about a second. Marked ``lint``: `make lint`
runs these, `make test` deselects them."""

from __future__ import annotations

import pathlib
import re
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.lint


def _mypy() -> str:
    exe = pathlib.Path(sys.executable).with_name("mypy")
    found = str(exe) if exe.exists() else shutil.which("mypy")
    assert found, "mypy is not installed: `make venv` installs the pinned version (requirements-test.txt)"
    return found


def _check(*args: str, cache: str) -> None:
    out = subprocess.run(
        [
            _mypy(),
            "--config-file",
            str(REPO / "pyproject.toml"),
            "--cache-dir",
            str(REPO / ".mypy_cache" / cache),
            "--no-error-summary",
            "--hide-error-context",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=REPO,
    )
    errors = [line for line in out.stdout.splitlines() if ": error:" in line]
    assert out.returncode == 0 and not errors, f"mypy {' '.join(args)}:\n{out.stdout}{out.stderr}"


@pytest.mark.parametrize(
    "tree,flags", [("plugin", ("--strict",)), ("mock_opensandbox", ("--strict",))], ids=["plugin-strict", "mock-strict"]
)
def test_mypy_finds_nothing(tree, flags):
    # plugin/ has no __init__.py: mypy names its modules from there (epp, osb.transport, methods.pty), as
    # launch.py's sys.path does
    _check(*flags, tree, cache=tree)


def test_mypy_is_the_pinned_version():
    pins = (REPO / "requirements-test.txt").read_text(encoding="utf-8")
    pinned = re.search(r"^mypy==(\S+)", pins, re.M)
    assert pinned, "mypy is pinned in requirements-test.txt"
    got = subprocess.run([_mypy(), "--version"], capture_output=True, text=True, timeout=60).stdout.split()
    assert got[1] == pinned.group(1), (got, pinned.group(1))
