"""The programs the runtime runs around a sandbox process, and their arguments.

They are resource files in ``scripts/``: ``view.py`` builds the sandbox view inside the fresh
namespaces (mount(2) calls), pivots into it, drops the capabilities and becomes the sandbox's
PID 1 (``holder``) or one command (``command``: the fallback without a PID namespace of the
sandbox's own); ``nsexec.py`` joins a sandbox's namespaces as non-root. ``etc/`` holds the
sandbox's account files. Everything that runs before the capability drop gets a sanitized
environment (see ``split_env``).
"""

from __future__ import annotations

import functools
import os
import shutil
import stat
import sys
import threading
from typing import Any, Mapping, Sequence

from mock_opensandbox.runtime import caps

_HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPTS_DIR = os.path.join(_HERE, "scripts")
ETC_DIR = os.path.join(_HERE, "etc")


@functools.lru_cache(maxsize=None)
def _read(name: str) -> str:
    """A resource file of scripts/ (read once per process)."""
    with open(os.path.join(SCRIPTS_DIR, name), encoding="utf-8") as fh:
        return fh.read()


def resource(name: str) -> str:
    """scripts/<name> as text, read on first use and kept (agent.py, bootstrap.sh)."""
    return _read(name)


VIEW_PY = os.path.join(SCRIPTS_DIR, "osb_view.py")  # runs view.py from its bytecode cache; a file: `ps` reads well
SECCOMP_PY = _read("seccomp.py")  # Docker's default profile's closed calls (BPF)
NSEXEC_PY = SECCOMP_PY + _read("nsexec.py")  # run with -c (one per command, non-root)
SECCOMP: dict[str, Any] = {}
exec(compile(SECCOMP_PY, os.path.join(SCRIPTS_DIR, "seccomp.py"), "exec"), SECCOMP)
# a root join's stage in front of setpriv (CAP_SYS_ADMIN still held): the filter, then exec; argv[1]
# "0" drops the LC_CTYPE this Python's locale coercion added (PEP 538), as view.py and nsexec.py do
SECCOMP_STAGE = (
    SECCOMP_PY
    + """
import ctypes, os, sys
e = seccomp_install(ctypes.CDLL(None, use_errno=True))
if e not in (0, 22):
    os.write(2, b"nsenter: seccomp: " + os.strerror(e).encode() + b"\\n")
    os._exit(127)
if sys.argv[1] == "0":
    os.environ.pop("LC_CTYPE", None)
import _signal
for s in (_signal.SIGPIPE, _signal.SIGXFSZ):  # Python ignores them; exec(2) would hand that on
    _signal.signal(s, _signal.SIG_DFL)
os.execv(sys.argv[2], sys.argv[2:])
"""
)


@functools.lru_cache(maxsize=None)
def stage_python() -> str:
    """A Python the sandbox's view shows (/usr and /bin are the host's): the interpreter's real path."""
    real = os.path.realpath(sys.executable)
    if real.startswith(("/usr/", "/bin/")):
        return real
    return shutil.which("python3", path="/usr/local/bin:/usr/bin:/bin") or real


def seccomp_stage(keep_lc: bool = False) -> list[str]:
    """The stage's argv; keep_lc when the command's own environment has LC_CTYPE."""
    return [stage_python(), "-I", "-S", "-c", SECCOMP_STAGE, "1" if keep_lc else "0"]


# The wrapper programs (unshare, sh, mount, nsenter, setpriv, the helper's Python) run with full
# capabilities before the drop; a caller-controlled variable must not load code into them or
# reconfigure them. glibc's list of variables it drops for privileged programs (unsecvars.h), the
# shells' start-up hooks, bash's exported functions. They reach the command through a last
# `env NAME=VALUE...` stage after the drop (the helper restores them itself).
_UNSAFE = frozenset(
    (
        "GCONV_PATH",
        "GETCONF_DIR",
        "GLIBC_TUNABLES",
        "HOSTALIASES",
        "LOCALDOMAIN",
        "LOCPATH",
        "MALLOC_TRACE",
        "NIS_PATH",
        "NLSPATH",
        "RESOLV_HOST_CONF",
        "RES_OPTIONS",
        "TZDIR",
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "PS4",
        "IFS",
        "CDPATH",
    )
)
ENV_STAGE = "/usr/bin/env"
HELPER_ENV_PREFIX = "OSB_MOCK_UNSAFE_"
# view.py's image settings (rootfs.py VIEW_*_ENV): only the mock sets them
VIEW_ONLY_ENV = ("OSB_MOCK_IMAGE", "OSB_MOCK_USER", "OSB_MOCK_WORKDIR")


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
# Always hidden: the host's ssh configuration and keys, its machine identity, the backup copies and
# subordinate-id maps of its account database. Also hidden: every entry of the host's /etc that is
# not world-readable (shadow, gshadow, sudoers, private keys...); passwd/group/shadow/gshadow are
# the sandbox's own (ETC_DIR) anyway.
ALWAYS_HIDDEN = (
    "ssh",
    "machine-id",
    "passwd-",
    "group-",
    "shadow-",
    "gshadow-",
    "subuid",
    "subgid",
    "subuid-",
    "subgid-",
)
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


KEEP_LC_ENV = "OSB_MOCK_KEEP_LC"  # view.py: "0" = drop the LC_CTYPE its own Python added (PEP 538)


def protect_view_env(env: Mapping[str, str]) -> dict[str, str]:
    """protect_env() for view.py, which execs the sandbox process with its own environment: Python's
    locale coercion may have added LC_CTYPE there, and view.py drops it unless env had it."""
    out = protect_env(env)
    out[KEEP_LC_ENV] = "1" if "LC_CTYPE" in env else "0"
    return out


def protect_env(env: Mapping[str, str]) -> dict[str, str]:
    """The environment for view.py / nsexec.py: unsafe variables renamed (they restore them right
    before the exec of the sandbox process)."""
    safe, unsafe = split_env(env)
    for k, v in unsafe.items():
        safe[HELPER_ENV_PREFIX + k] = v
    return safe


def _view_argv(
    mode: str, prefix: Sequence[str], root: str, arg: str, hostname: str, argv: Sequence[str], volumes: str = ""
) -> list[str]:
    return (
        list(prefix)
        + [
            sys.executable,
            "-I",
            "-S",
            VIEW_PY,
            mode,
            root,
            arg,
            hostname,
            hidden_etc_entries(),
            ETC_DIR,
            "%x" % caps.SANDBOX_CAP_MASK,
            "1" if caps.NO_NEW_PRIVILEGES else "0",
            volumes,
        ]
        + list(argv)
    )


def root_is_safe(root: str) -> bool:
    """The root goes into overlayfs options (",", ":" separate them) and mountinfo paths."""
    return root.startswith("/") and not any(c in root for c in " \t\n\\,:")


def holder_argv(
    prefix: Sequence[str], root: str, fifo: str, hostname: str, argv: Sequence[str], volumes: str = ""
) -> list[str]:
    """`<prefix> python view.py holder ...`: the sandbox's PID 1 (prefix: unshare ... --fork). volumes:
    mounts.plan()'s argument ("" for none)."""
    return _view_argv("holder", prefix, root, fifo, hostname, argv, volumes)


def prelude_argv(
    prefix: Sequence[str], root: str, wd: str, hostname: str, argv: Sequence[str], volumes: str = ""
) -> list[str]:
    """`<prefix> python view.py command ...`: one command in a view of its own (prefix: unshare ...)."""
    return _view_argv("command", prefix, root, wd, hostname, argv, volumes)
