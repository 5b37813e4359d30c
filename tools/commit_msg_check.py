"""commit-msg hook (.pre-commit-config.yaml): refuse a commit whose subject, its first line, is over 72
characters, or that has no subject. Git's own comment lines (#) and the scissors cut are ignored.
Standard library only: `python3 tools/commit_msg_check.py .git/COMMIT_EDITMSG`.

`python3 tools/commit_msg_check.py --history` checks the messages of the commits already made (`make lint`
runs it, through tiers/t0/repo/test_commit_msg.py): every commit reachable from HEAD after CHECKED_AFTER."""

from __future__ import annotations

import os
import subprocess
import sys

LIMIT = 72
# The last commit with a subject over 72 characters (73, as did 382e5fc): history stays as it is, the commits after
# it are checked. A clone too shallow to hold it (CI's checkout) checks the commits it has, all newer than it.
CHECKED_AFTER = "00fe3c008186d640e7f691f96b443455c619adf1"


def problem(message: str) -> str | None:
    """Why the message is refused, or None when it is fine."""
    lines = []
    for line in message.splitlines():
        if line.startswith("# ------------------------ >8 ------------------------"):
            break
        if not line.startswith("#"):
            lines.append(line.rstrip())
    while lines and not lines[0].strip():
        lines.pop(0)
    if not lines:
        return "the commit message is empty"
    subject = lines[0]
    if len(subject) > LIMIT:
        return (
            f"the subject is {len(subject)} characters, over {LIMIT}: put the detail and the evidence "
            f"in the body, after a blank line (CONTRIBUTING.md)\n  {subject}"
        )
    if len(lines) > 1 and lines[1].strip():
        return "the second line is not blank: the subject is one line, then a blank line, then the body"
    return None


def history(repo: str, rev: str = "HEAD", after: str | None = CHECKED_AFTER) -> tuple[int, list[str]]:
    """(commits checked, "<short sha>: why" of each refused one) for the commits reachable from ``rev`` in ``repo``
    and not from ``after`` (all of them when ``after`` is None or not in the clone)."""

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", *args], cwd=repo, capture_output=True, text=True, encoding="utf-8", errors="replace", timeout=60
        )

    exclude = [f"^{after}"] if after and git("cat-file", "-e", f"{after}^{{commit}}").returncode == 0 else []
    out = git("log", "-z", "--format=%H%n%B", rev, *exclude, "--")
    if out.returncode != 0:
        raise RuntimeError(f"git log {rev}: {out.stderr.strip()}")
    entries = [e for e in out.stdout.split("\0") if e.strip()]
    bad = []
    for entry in entries:
        sha, _, message = entry.partition("\n")
        why = problem(message)
        if why:
            bad.append(f"{sha[:7]}: {why}")
    return len(entries), bad


def main(argv: list[str]) -> int:
    if argv[1:] == ["--history"]:
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        try:
            checked, bad = history(repo)
        except RuntimeError as e:  # not a git checkout, or git refuses it (safe.directory): nothing was checked
            print(f"commit-msg: {e}", file=sys.stderr)
            return 2
        for line in bad:
            print(f"commit-msg: {line}", file=sys.stderr)
        print(f"commit subjects: {checked} commit(s) after {CHECKED_AFTER[:7]} checked, {len(bad)} refused")
        return 1 if bad else 0
    if len(argv) != 2:
        print("usage: commit_msg_check.py COMMIT_MSG_FILE | --history", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8", errors="replace") as f:
        why = problem(f.read())
    if why:
        print(f"commit-msg: {why}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
