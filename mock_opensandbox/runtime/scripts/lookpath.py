# Go's exec.LookPath(name) on a PATH (execd's), in whatever "/" the caller has: the contained thread's and the
# forker's are the sandbox's (runtime/contained.py, scripts/osb_forker.py). The first regular file the caller
# may execute (os/exec/lp_unix.go findExecutable: a stat, then eaccess X_OK); None when there is none. Absolute
# directories only (a relative match is Go's ErrDot). Written by the OpenSandbox mock; standard library only.
import os
import stat


def look_path(name: str, path: str) -> "str | None":
    for d in path.split(":"):
        if not d.startswith("/"):
            continue
        cand = d.rstrip("/") + "/" + name
        try:
            if stat.S_ISREG(os.stat(cand).st_mode) and os.access(cand, os.X_OK):
                return cand
        except (OSError, ValueError):
            continue
    return None
