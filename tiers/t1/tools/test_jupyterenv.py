"""The code interpreter's Jupyter env (mock_opensandbox/runtime/jupyterenv.py): registering its kernels leaves
nothing in the system's temp directory (ipykernel's install leaves the empty ``tmp*_kernels`` directory it
made; the env's maker gives it a temp directory of its own)."""

from __future__ import annotations

import glob
import os
import tempfile

from mock_opensandbox.runtime import jupyterenv
from tiers.toolkit.jupyter import jupyter_env_or_skip


def test_registering_the_kernels_leaves_no_temp_dir(tmp_path):
    env = jupyter_env_or_skip()
    pattern = os.path.join(tempfile.gettempdir(), "tmp*_kernels")
    before = set(glob.glob(pattern))
    jupyterenv.register_kernels(env, prefix=str(tmp_path / "prefix"))  # not the shared env's own kernelspecs
    assert set(glob.glob(pattern)) - before == set()
    kernels = sorted(os.listdir(tmp_path / "prefix" / "share" / "jupyter" / "kernels"))
    assert kernels == ["bash", "python"], kernels
