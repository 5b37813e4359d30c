"""The workflows (nightly, and ci on every push/PR) stay clean under actionlint and zizmor (pinned in
requirements-test.txt). Each check skips with one line when its linter is not installed (zizmor 1.32 installs only on
Python >= 3.11: an environment marker); neither needs the network (zizmor --offline). Marked ``lint``: `make lint`
runs these, `make test` deselects them."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import pytest

pytestmark = pytest.mark.lint
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
WORKFLOWS = sorted(
    os.path.join(REPO, ".github", "workflows", f)
    for f in os.listdir(os.path.join(REPO, ".github", "workflows"))
    if f.endswith((".yml", ".yaml"))
)


def _tool(name: str) -> str:
    here = os.path.join(os.path.dirname(sys.executable), name)  # the test venv's own copy first
    found = here if os.access(here, os.X_OK) else shutil.which(name)
    if not found:
        why = " (needs Python >= 3.11)" if name == "zizmor" and sys.version_info < (3, 11) else ""
        pytest.skip(f"{name} is not installed{why} (pip install -r requirements-test.txt)")
    return found


def test_both_workflows_are_checked():
    assert {os.path.basename(w) for w in WORKFLOWS} >= {"ci.yml", "nightly.yml"}


def test_actionlint_clean():
    r = subprocess.run([_tool("actionlint"), "-no-color", *WORKFLOWS], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "", r.stdout + r.stderr


def test_zizmor_clean():
    r = subprocess.run(
        [_tool("zizmor"), "--offline", "--no-progress", "--format", "plain", *WORKFLOWS],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "No findings to report" in r.stdout + r.stderr, r.stdout + r.stderr


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=os.path.basename)
def test_every_action_is_pinned_to_a_commit_with_its_version(workflow):
    with open(workflow) as fh:
        uses = re.findall(r"^\s*(?:-\s*)?uses:\s*(\S+)(.*)$", fh.read(), re.M)
    assert uses, "the workflow uses no actions?"
    for ref, rest in uses:
        assert re.fullmatch(r"[\w.-]+/[\w.-]+@[0-9a-f]{40}", ref), f"{ref}: pin the action to a full commit SHA"
        assert re.fullmatch(r"\s*# v\d+(\.\d+)*", rest), f"{ref}: say which release the SHA is (# vX.Y.Z)"
