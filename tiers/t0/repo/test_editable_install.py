"""A contributor's first reflex: ``pip install -e .`` into the venv, then pytest in this repository.

The install's ``pytest11`` entry point and this repository's conftest.py both register the mock's
pytest plugin; pytest accepts that only under one name (it used to fail every run with "Plugin
already registered under a different name"). Here the project is installed (editable) into a
throw-away venv that sees the dev venv's packages, and pytest runs one test of this repository with
it. About 20 s; the build backend comes from the package index (skips with one line without one).
"""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys
import sysconfig

REPO = pathlib.Path(__file__).resolve().parents[3]
PROJECT = ["pyproject.toml", "README.md", "pytest_opensandbox_mock.py", "mock_opensandbox"]


def test_editable_install_then_pytest_in_the_repo(tmp_path):
    import pytest

    src = tmp_path / "src"
    src.mkdir()
    for name in PROJECT:  # a copy: the install writes its metadata next to it
        if (REPO / name).is_dir():
            shutil.copytree(REPO / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(REPO / name, src / name)
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = subprocess.run(
        [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    # the dev venv's packages (pip, pytest, ...) behind the new venv's own site-packages
    pathlib.Path(site, "dev-venv.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "PYTHON"))}
    install = subprocess.run(
        [str(py), "-m", "pip", "install", "-q", "--no-deps", "-e", str(src)],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
    )
    if install.returncode != 0 and "No matching distribution found for setuptools" in install.stderr:
        pytest.skip("no package index for the build backend (setuptools)")
    assert install.returncode == 0, install.stderr[-3000:]
    entry = subprocess.run(
        [
            str(py),
            "-c",
            "from importlib.metadata import entry_points; "
            "print([e.name for e in entry_points(group='pytest11') if e.value == 'pytest_opensandbox_mock'])",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    assert entry.stdout.strip() == "['pytest_opensandbox_mock']", entry.stderr
    run = subprocess.run(
        [
            str(py),
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "tiers/t1/lifecycle/test_smoke_flow_mock.py",
            "-k",
            "not latest",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=240,
        env={**env, "OSB_SPEC_GUARD": "0"},
    )
    assert "already registered" not in run.stdout + run.stderr, run.stderr[-3000:]
    assert run.returncode == 0 and "1 passed" in run.stdout, (run.stdout + run.stderr)[-3000:]
