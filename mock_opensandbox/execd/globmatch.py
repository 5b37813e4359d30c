"""execd's pkg/util/glob.PathMatch (doublestar semantics; search matches it against the base name),
for `GET /files/search` in execd/files.py. Pure: no files, no HTTP."""

from __future__ import annotations

import re

__all__ = ["glob_match"]


def _segment_regex(seg: str) -> str:
    out, i = [], 0
    while i < len(seg):
        c = seg[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "\\":
            i += 1
            if i >= len(seg):
                raise ValueError("syntax error in pattern")
            out.append(re.escape(seg[i]))
        elif c == "[":
            j = i + 1
            neg = False
            if j < len(seg) and seg[j] in "^!":
                neg, j = True, j + 1
            cls = []
            first = True
            while j < len(seg) and (seg[j] != "]" or first):
                ch = seg[j]
                if ch == "\\":
                    j += 1
                    if j >= len(seg):
                        raise ValueError("syntax error in pattern")
                    ch = seg[j]
                cls.append(re.escape(ch) if ch != "-" else "-")
                first = False
                j += 1
            if j >= len(seg) or not cls:
                raise ValueError("syntax error in pattern")
            out.append("[" + ("^" if neg else "") + "".join(cls) + "]")
            i = j
        elif c == "{":
            j = seg.find("}", i)
            if j < 0:
                raise ValueError("syntax error in pattern")
            alts = seg[i + 1 : j].split(",")
            out.append("(?:" + "|".join(_segment_regex(a) for a in alts) + ")")
            i = j
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _closing(s: str, left: str, right: str) -> int:
    """findMatchedClosingSymbolsIndex (pkg/util/glob/index.go), depth starting at 0."""
    depth, i = 0, 0
    while i < len(s):
        if s[i] == "\\":
            i += 2
            continue
        if s[i] == left:
            depth += 1
        elif s[i] == right:
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1


def _negation(pattern: str) -> int:
    """Index of the first "!" outside a [class] and not escaped, or -1."""
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            j = pattern.find("]", i + 2)
            i = (j + 1) if j > 0 else len(pattern)
            continue
        if c == "!":
            return i
        i += 1
    return -1


def glob_match(pattern: str, name: str) -> bool:
    """doublestar.PathMatch(pattern, name) of execd's pkg/util/glob; raises ValueError("syntax error
    in pattern"). "!(x)" negates: the pattern with the group spliced in must NOT match (a "!" without
    its "(...)" is a syntax error; tiers/diff gen.paths.search)."""
    k = _negation(pattern)
    if k >= 0:
        rest = pattern[k + 1 :]
        close = _closing(rest, "(", ")")
        if close < 0:
            raise ValueError("syntax error in pattern")
        spliced = pattern[:k] + rest[1:close] + rest[close + 1 :]
        if k and not re.match(_segment_regex(pattern[:k]), name, re.S):
            return False
        return not glob_match(spliced, name)
    segs = pattern.split("/")
    regs = [None if s == "**" else re.compile(_segment_regex(s) + r"\Z", re.S) for s in segs]
    parts = name.split("/")

    def m(i: int, j: int) -> bool:
        if i == len(regs):
            return j == len(parts)
        r = regs[i]
        if r is None:
            return any(m(i + 1, k) for k in range(j, len(parts) + 1))
        return j < len(parts) and bool(r.match(parts[j])) and m(i + 1, j + 1)

    return m(0, 0)
