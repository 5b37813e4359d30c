"""The programs the runtime runs around a sandbox process, and their arguments.

The shell and Python programs are resource files in ``scripts/`` (read once at import):
``view.sh`` builds the sandbox view inside a fresh mount namespace, ``holder.sh`` turns it into a
sandbox's PID 1, ``prelude.sh`` into one command (the fallback without a PID namespace of the
sandbox's own), ``nsexec.py`` joins a sandbox's namespaces as non-root. ``etc/`` holds the
sandbox's account files. Everything that runs before the capability drop gets a sanitized
environment (see ``split_env``).
"""
from __future__ import annotations

import os
import stat
import threading
from typing import Mapping, Sequence

from . import caps

_HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS_DIR = os.path.join(_HERE, "scripts")
ETC_DIR = os.path.join(_HERE, "etc")


def _read(name: str) -> str:
    with open(os.path.join(SCRIPTS_DIR, name), encoding="utf-8") as fh:
        return fh.read()


def _strip_comments(text: str) -> str:
    """Drop full-line comments (the scripts travel in argv: keep /proc/<pid>/cmdline short)."""
    return "".join(line for line in text.splitlines(True) if not line.lstrip().startswith("#"))


VIEW_SH = _strip_comments(_read("view.sh"))
HOLDER_SH = VIEW_SH + _strip_comments(_read("holder.sh"))
PRELUDE_SH = VIEW_SH + _strip_comments(_read("prelude.sh"))
NSEXEC_PY = _read("nsexec.py")

# The wrapper programs (unshare, sh, mount, nsenter, setpriv, the helper's Python) run with full
# capabilities before the drop; a caller-controlled variable must not load code into them or
# reconfigure them. glibc's list of variables it drops for privileged programs (unsecvars.h), the
# shells' start-up hooks, bash's exported functions. They reach the command through a last
# `env NAME=VALUE...` stage after the drop (the helper restores them itself).
_UNSAFE = frozenset(("GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH",
                     "MALLOC_TRACE", "NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS", "TZDIR",
                     "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "IFS", "CDPATH"))
ENV_STAGE = "/usr/bin/env"
HELPER_ENV_PREFIX = "OSB_MOCK_UNSAFE_"


def unsafe_env_name(name: str) -> bool:
    return name.startswith(("LD_", "BASH_FUNC_")) or name in _UNSAFE or name.startswith(HELPER_ENV_PREFIX)


def split_env(env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(environment for the privileged wrappers, variables only the command itself may get)."""
    safe: dict[str, str] = {}
    unsafe: dict[str, str] = {}
    for k, v in env.items():
        (unsafe if unsafe_env_name(k) else safe)[k] = v
    return safe, unsafe


def env_stage(unsafe: Mapping[str, str]) -> list[str]:
    """argv prefix that adds the unsafe variables after the drop (empty when there are none)."""
    if not unsafe:
        return []
    return [ENV_STAGE] + ["%s=%s" % kv for kv in unsafe.items()]


# -- /etc entries the sandbox must not see -------------------------------------------------------
# Always hidden: the host's ssh configuration and keys, its machine identity. Also hidden: every
# entry of the host's /etc that is not world-readable (shadow, gshadow, sudoers, private keys...);
# passwd/group/shadow/gshadow are the sandbox's own (ETC_DIR) anyway.
ALWAYS_HIDDEN = ("ssh", "machine-id")
_hidden_lock = threading.Lock()
_hidden: str | None = None


def hidden_etc_entries() -> str:
    """Newline-separated /etc-relative paths to whiteout in the sandbox's /etc (computed once)."""
    global _hidden
    with _hidden_lock:
        if _hidden is None:
            found: list[str] = [p for p in ALWAYS_HIDDEN if os.path.lexists("/etc/" + p)]
            for dirpath, dirnames, filenames in os.walk("/etc"):
                for name in list(dirnames) + filenames:
                    full = os.path.join(dirpath, name)
                    rel = os.path.relpath(full, "/etc")
                    if "\n" in rel or rel in ALWAYS_HIDDEN:
                        if name in dirnames:
                            dirnames.remove(name)
                        continue
                    try:
                        st = os.lstat(full)
                    except OSError:
                        continue
                    if stat.S_ISLNK(st.st_mode):
                        continue
                    need = stat.S_IROTH | (stat.S_IXOTH if stat.S_ISDIR(st.st_mode) else 0)
                    if st.st_mode & need != need:
                        found.append(rel)
                        if name in dirnames:
                            dirnames.remove(name)  # hidden as a whole
            _hidden = "\n".join(found)
        return _hidden


def view_args(root: str, hostname: str, setpriv: str) -> list[str]:
    """The arguments holder.sh and prelude.sh share after their first two: H X E S O."""
    return [hostname, hidden_etc_entries(), ETC_DIR, setpriv, " ".join(caps.setpriv_options())]


def root_is_safe(root: str) -> bool:
    """view.sh compares /proc/self/mountinfo paths (whitespace and backslashes come escaped)."""
    return root.startswith("/") and not any(c in root for c in " \t\n\\")


def holder_argv(prefix: Sequence[str], root: str, fifo: str, hostname: str, setpriv: str,
                argv: Sequence[str]) -> list[str]:
    return list(prefix) + ["/bin/sh", "-c", HOLDER_SH, "osb-holder", root, fifo] + \
        view_args(root, hostname, setpriv) + list(argv)


def prelude_argv(prefix: Sequence[str], root: str, wd: str, hostname: str, setpriv: str,
                 argv: Sequence[str]) -> list[str]:
    return list(prefix) + ["/bin/sh", "-c", PRELUDE_SH, "osb-prelude", root, wd] + \
        view_args(root, hostname, setpriv) + list(argv)
