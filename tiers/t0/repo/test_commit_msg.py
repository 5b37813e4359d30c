"""tools/commit_msg_check.py, the commit-msg hook of .pre-commit-config.yaml: a subject over 72 characters
is refused with a message that says why, a subject of 72 passes, git's comment lines do not count. Its
``--history`` mode checks the commits already made: `make lint` runs it on this repository (the test marked
``lint``); the others, which show that each check can fail, run in `make test`."""

from __future__ import annotations

import importlib.util
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
SCRIPT = REPO / "tools" / "commit_msg_check.py"


def _run(tmp_path: pathlib.Path, message: str) -> subprocess.CompletedProcess[str]:
    path = tmp_path / "COMMIT_EDITMSG"
    path.write_text(message, encoding="utf-8")
    return subprocess.run([sys.executable, str(SCRIPT), str(path)], capture_output=True, text=True, timeout=30)


def test_a_subject_of_72_passes(tmp_path):
    out = _run(tmp_path, "x" * 72 + "\n\nthe evidence: what was measured\n")
    assert out.returncode == 0, out.stderr


def test_a_subject_of_73_is_refused_and_says_why(tmp_path):
    out = _run(tmp_path, "y" * 73 + "\n\nbody\n")
    assert out.returncode == 1
    assert "73 characters, over 72" in out.stderr and "y" * 73 in out.stderr


def test_git_comments_and_the_scissors_do_not_count(tmp_path):
    msg = (
        "short subject\n\nbody\n# " + "z" * 100 + "\n"
        "# ------------------------ >8 ------------------------\n" + "w" * 100 + "\n"
    )
    assert _run(tmp_path, msg).returncode == 0


def test_an_empty_message_and_a_two_line_subject_are_refused(tmp_path):
    assert _run(tmp_path, "# only a comment\n\n").returncode == 1
    out = _run(tmp_path, "subject\nno blank line before the body\n")
    assert out.returncode == 1 and "second line" in out.stderr


def test_the_hook_is_configured():
    text = (REPO / ".pre-commit-config.yaml").read_text(encoding="utf-8")
    assert "tools/commit_msg_check.py" in text and "commit-msg" in text


def _tool():
    spec = importlib.util.spec_from_file_location("commit_msg_check", SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _commit(repo: pathlib.Path, message: str) -> str:
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "commit.gpgsign=false"]
    subprocess.run(
        [*git, "commit", "-q", "--allow-empty", "--no-verify", "-m", message],
        cwd=repo,
        check=True,
        capture_output=True,
        timeout=60,
    )
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True, text=True, timeout=60
    ).stdout.strip()


def test_the_history_check_refuses_the_commits_after_the_mark(tmp_path):
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, capture_output=True, timeout=60)
    old = _commit(tmp_path, "o" * 80)
    mark = _commit(tmp_path, "the mark")
    _commit(tmp_path, "a fine subject\n\nthe body")
    late = _commit(tmp_path, "n" * 73)
    history = _tool().history
    checked, bad = history(str(tmp_path), after=mark)
    assert checked == 2 and len(bad) == 1, bad
    assert bad[0].startswith(f"{late[:7]}: the subject is 73 characters, over 72") and "n" * 73 in bad[0]
    checked, bad = history(str(tmp_path), after=None)
    assert checked == 4 and [b[:7] for b in bad] == [late[:7], old[:7]]
    assert history(str(tmp_path), after="0" * 40)[0] == 4  # a mark the clone lacks (shallow): every commit it has


def test_the_history_check_says_when_it_cannot_look(tmp_path):
    with pytest.raises(RuntimeError, match="git log"):
        _tool().history(str(tmp_path), after=None)


@pytest.mark.lint
def test_every_commit_after_the_mark_passes():
    out = subprocess.run([sys.executable, str(SCRIPT), "--history"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "0 refused" in out.stdout, out.stdout + out.stderr
