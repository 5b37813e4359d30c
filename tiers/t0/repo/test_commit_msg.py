"""tools/commit_msg_check.py, the commit-msg hook of .pre-commit-config.yaml: a subject over 72 characters
is refused with a message that says why, a subject of 72 passes, git's comment lines do not count."""

from __future__ import annotations

import pathlib
import subprocess
import sys

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
