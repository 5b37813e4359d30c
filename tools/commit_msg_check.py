"""commit-msg hook (.pre-commit-config.yaml): refuse a commit whose subject, its first line, is over 72
characters, or that has no subject. Git's own comment lines (#) and the scissors cut are ignored.
Standard library only: `python3 tools/commit_msg_check.py .git/COMMIT_EDITMSG`."""

from __future__ import annotations

import sys

LIMIT = 72


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


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: commit_msg_check.py COMMIT_MSG_FILE", file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8", errors="replace") as f:
        why = problem(f.read())
    if why:
        print(f"commit-msg: {why}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
