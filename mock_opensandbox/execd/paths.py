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
    """Go's os.Expand: $name / ${name}; a special one-character name ($1, $$, ...); "${" without "}"
    or "${}" swallow the text; a lone "$" at the end stays."""
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c != "$" or i + 1 >= len(s):
            out.append(c)
            i += 1
            continue
        nxt = s[i + 1]
        if nxt == "{":
            j = s.find("}", i + 2)
            if j < 0:  # bad syntax: Go drops "${" and the rest of the name
                i = len(s)
                continue
            name = s[i + 2:j]
            if name == "":
                i = j + 1
                continue
            out.append(mapping.get(name, ""))
            i = j + 1
            continue
        if nxt in _SPECIAL:
            out.append(mapping.get(nxt, ""))
            i += 2
            continue
        j = i + 1
        while j < len(s) and (s[j].isascii() and (s[j].isalnum() or s[j] == "_")):
            j += 1
        if j == i + 1:  # "$" followed by something else: Go drops the "$"... and keeps nothing of it
            i += 1
            continue
        out.append(mapping.get(s[i + 1:j], ""))
        i = j
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
