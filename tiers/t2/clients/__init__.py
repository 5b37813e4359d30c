"""Pinned official clients whose dependencies clash with the host's get their own cached environment.

``python_env(name, requirements)`` returns the interpreter of a venv with the pinned requirements file installed,
created on first use in the machine's cache (``ENVS``: ``$OSB_TEST_ENVS``, else
``$XDG_CACHE_HOME/opensandbox-provider/test-envs``, else ``~/.cache/...``), one directory per name and digest of the
file and interpreter, so every clone of the repository on the machine reuses it (as pre-commit keeps its hook
environments in ``~/.cache/pre-commit``). ``node_modules(name, packages)`` does the same for npm packages.
Both raise ``Unavailable`` (the test skips with one line) when the tool or the registry is missing, or when the
requirements file says ``# requires-python >= X.Y`` (its pins need a newer Python than the running one).
A digest no longer wanted stays until removed (``rm -r`` of the directory; nothing else points into it).
"""

from __future__ import annotations

import fcntl
import glob
import hashlib
import os
import re
import shutil
import subprocess
import sys
from contextlib import contextmanager
from typing import Iterator

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
ENVS = os.environ.get("OSB_TEST_ENVS") or os.path.join(
    os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "opensandbox-provider", "test-envs"
)


class Unavailable(Exception):
    """The client's environment cannot be built here (no node, no registry...)."""


@contextmanager
def _locked(path: str) -> Iterator[None]:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path + ".lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _floor(requirements: str) -> tuple[int, int] | None:
    with open(os.path.join(REPO, requirements)) as fh:
        floor = re.search(r"^# requires-python >= (\d+)\.(\d+)", fh.read(), re.M)
    return (int(floor[1]), int(floor[2])) if floor else None


def python_too_old(requirements: str) -> str | None:
    """Why ``requirements`` (a file in the repo root) cannot be installed on this Python, or None: the file's
    ``# requires-python >= X.Y`` line."""
    floor = _floor(requirements)
    if floor and sys.version_info < floor:
        return "%s needs Python >= %d.%d" % (requirements, *floor)
    return None


def newer_python(requirements: str) -> str:
    """This interpreter when it meets ``requirements``' floor, else the first ``python3.N`` on PATH that does
    (N from the floor up). Raises Unavailable (one line) when there is none."""
    floor = _floor(requirements)
    if not floor or sys.version_info >= floor:
        return sys.executable
    pyenv = os.environ.get("PYENV_ROOT") or os.path.expanduser("~/.pyenv")
    candidates = [os.environ.get("OSB_NEWER_PYTHON", "")]
    for minor in range(floor[1], 20):
        candidates.append(shutil.which("python%d.%d" % (floor[0], minor)) or "")
        candidates += sorted(
            glob.glob(os.path.join(pyenv, "versions", "%d.%d.*" % (floor[0], minor), "bin", "python3"))
        )
    for path in filter(None, candidates):
        try:
            ok = subprocess.run(
                [path, "-c", "import sys, venv, ensurepip; assert sys.version_info >= %r" % (floor,)],
                capture_output=True,
                timeout=60,
            )
        except (OSError, subprocess.SubprocessError):
            continue
        if ok.returncode == 0:
            return path
    raise Unavailable(
        "%s needs Python >= %d.%d: none found (OSB_NEWER_PYTHON, python%d.%d+ on PATH, pyenv)"
        % (requirements, *floor, *floor)
    )


def python_env(name: str, requirements: str, python: str | None = None) -> str:
    """The python of the cached venv ``<ENVS>/venv-<name>-<digest>`` with ``requirements`` (a file in the repo root)
    installed, made with ``python`` (default: this interpreter, which must meet the file's floor)."""
    req = os.path.join(REPO, requirements)
    with open(req) as fh:
        text = fh.read()
    why = python_too_old(requirements) if python is None else None
    if why:
        raise Unavailable(why)
    base = python or sys.executable
    want = _digest(text, sys.version if python is None else os.path.realpath(python))
    venv = os.path.join(ENVS, "venv-%s-%s" % (name, want))
    py = os.path.join(venv, "bin", "python")
    stamp = os.path.join(venv, ".stamp")  # written last: the venv is complete
    with _locked(venv):
        try:
            with open(stamp) as fh:
                if fh.read().strip() == want and os.path.exists(py):
                    return py
        except OSError:
            pass
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([base, "-m", "venv", venv], check=True, capture_output=True)
        r = subprocess.run(
            [py, "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", req],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if r.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["pip failed"]
            raise Unavailable("could not install %s: %s" % (requirements, tail[0][:200]))
        with open(stamp, "w") as fh:
            fh.write(want)
    return py


def node_modules(name: str, packages: list[str]) -> str:
    """A directory whose node_modules holds exactly ``packages`` (``pkg@version``); returns it."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        raise Unavailable("node/npm not installed")
    want = _digest(*packages)
    d = os.path.join(ENVS, "npm-%s-%s" % (name, want))
    stamp = os.path.join(d, ".stamp")
    with _locked(d):
        try:
            with open(stamp) as fh:
                if fh.read().strip() == want:
                    return d
        except OSError:
            pass
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        with open(os.path.join(d, "package.json"), "w") as fh:
            fh.write('{"name": "osb-client-%s", "private": true}\n' % name)
        r = subprocess.run(
            [npm, "install", "--no-audit", "--no-fund", "--save-exact", *packages],
            cwd=d,
            capture_output=True,
            text=True,
            timeout=600,
        )
        if r.returncode != 0:
            shutil.rmtree(d, ignore_errors=True)
            tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or ["npm failed"]
            raise Unavailable("could not install %s: %s" % (" ".join(packages), tail[0][:200]))
        with open(stamp, "w") as fh:
            fh.write(want)
    return d
