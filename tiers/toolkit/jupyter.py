"""A Jupyter env for code-interpreter tests (mock_opensandbox/runtime/jupyterenv.py), made once from the pinned
requirements and cached under the project's .venv (keyed by the pins); a test that needs it skips with
one line when pip cannot install it here (no index reachable)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess

import pytest

from mock_opensandbox.runtime import jupyterenv

__all__ = ["jupyter_env_or_skip"]

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def jupyter_env_or_skip() -> str:
    key = hashlib.sha256("\n".join(jupyterenv.REQUIREMENTS).encode()).hexdigest()[:12]
    base = os.path.join(_ROOT, ".venv")
    os.makedirs(base, exist_ok=True)
    path = os.path.join(base, "jupyter-env-" + key)
    if not os.access(jupyterenv.BASE_PYTHON, os.X_OK):
        pytest.skip("code interpreter: %s is missing (the venv is made from it)" % jupyterenv.BASE_PYTHON)
    with open(path + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one maker across parallel sessions
        if jupyterenv.check(path) is None:
            return path
        shutil.rmtree(path, ignore_errors=True)
        try:
            jupyterenv.make(path, pip_args=("--timeout", "20", "--retries", "1"))
        except (OSError, subprocess.CalledProcessError) as exc:
            shutil.rmtree(path, ignore_errors=True)
            pytest.skip("code interpreter: pip could not install Jupyter here (%s)" % exc)
    return path
