"""execd's pkg/util/pathutil and Go's os.Expand / filepath.Clean, for sandbox paths (no HTTP)."""

from __future__ import annotations

import posixpath
import re
from typing import Mapping

__all__ = ["os_expand", "expand_path", "expand_abs", "clean", "PathExpandError", "go_duration"]

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")
_SPECIAL = "*#$@!?-0123456789"


class PathExpandError(ValueError):
    pass


def os_expand(s: str, mapping: Mapping[str, str]) -> str:
    """Go's os.Expand: $name / ${name} / a special one-character name ($1, $$, ${*}); "${}" is eaten,
    "${" without "}" loses just those two characters, a "$" before anything else stays, as does a
    lone "$" at the end (getShellName; tiers/diff gen.env)."""
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c != "$" or i + 1 >= len(s):
            out.append(c)
            i += 1
            continue
        rest = s[i + 1 :]
        if rest[0] == "{":
            if len(rest) > 2 and rest[1] in _SPECIAL and rest[2] == "}":
                out.append(mapping.get(rest[1], ""))
                i += 4
                continue
            j = rest.find("}", 1)
            if j < 0:
                i += 2  # bad syntax: eat "${"
                continue
            if j == 1:
                i += 3  # bad syntax: eat "${}"
                continue
            out.append(mapping.get(rest[1:j], ""))
            i += j + 2
            continue
        if rest[0] in _SPECIAL:
            out.append(mapping.get(rest[0], ""))
            i += 2
            continue
        j = 0
        while j < len(rest) and rest[j].isascii() and (rest[j].isalnum() or rest[j] == "_"):
            j += 1
        if j == 0:
            out.append("$")  # "$" not followed by a name stays
            i += 1
            continue
        out.append(mapping.get(rest[:j], ""))
        i += 1 + j
    return "".join(out)


def expand_path(path: str, env: Mapping[str, str], home: str = "/root") -> str:
    """pathutil.ExpandPathWithEnv: undefined ${VAR}/$VAR is an error, then os.Expand, then "~"."""
    if path == "":
        return ""
    missing = sorted({m.group(1) or m.group(2) for m in _ENV_REF.finditer(path)} - set(env))
    if missing:
        raise PathExpandError("path references undefined environment variables: " + ",".join(missing))
    expanded = os_expand(path, env)
    if expanded == "~":
        return home
    if expanded.startswith("~/") or expanded.startswith("~\\"):
        return clean(posixpath.join(home, expanded[2:]))
    return expanded


def clean(p: str) -> str:
    """filepath.Clean."""
    if p == "":
        return "."
    out = posixpath.normpath(p)
    if out.startswith("//"):
        out = "/" + out.lstrip("/")
    return out


def expand_abs(path: str, env: Mapping[str, str], cwd: str = "/", home: str = "/root") -> str:
    """pathutil.ExpandAbsPath: expand_path then filepath.Abs (relative to execd's cwd)."""
    p = expand_path(path, env, home)
    if not p.startswith("/"):
        p = posixpath.join(cwd, p)
    return clean(p)


def go_duration(ms: int) -> str:
    """time.Duration.String() of a whole number of milliseconds ("300ms", "1.5s", "1m30s", "24h0m0s")."""
    if ms == 0:
        return "0s"
    neg = ms < 0
    ms = abs(ms)
    if ms < 1000:
        s = f"{ms}ms"
    else:
        h, rem = divmod(ms, 3_600_000)
        m, rem = divmod(rem, 60_000)
        sec, frac = divmod(rem, 1000)
        secs = str(sec) + (("." + f"{frac:03d}".rstrip("0")) if frac else "") + "s"
        s = (f"{h}h{m}m" if h else (f"{m}m" if m else "")) + secs
    return ("-" if neg else "") + s
