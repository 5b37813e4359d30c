"""SandboxPaths.shell(): execd's getShell ("bash" when the sandbox has one on its PATH, else "sh") is
asked on every command; the runtime re-checks only where it found bash last time and looks again
along the whole PATH when that one is gone, so removing or adding bash is seen by the next command."""

from __future__ import annotations

import os
import shutil

import pytest

from mock_opensandbox.runtime import SandboxRuntime
from tiers.toolkit.marks import needs_isolation


@needs_isolation
def test_shell_follows_bash_coming_and_going(tmp_path):
    bash = shutil.which("bash")  # its real path: the sandbox's view has the host's /usr, not the host's PATH dirs
    bash = bash and os.path.realpath(bash)
    if bash is None:
        pytest.skip("no bash on this host")
    rt = SandboxRuntime(str(tmp_path / "sb"), env={"PATH": "/opt/x"})
    try:
        # PID 1's entrypoint by its absolute path (PATH has no tail): the view lives as long as it
        tail = shutil.which("tail")
        assert tail is not None
        rt.start_entrypoint([os.path.realpath(tail), "-f", "/dev/null"])
        own = os.path.join(rt.root, "opt", "x")
        os.makedirs(own)
        assert rt.paths.shell() == ["sh"]  # nothing on PATH yet
        shutil.copy(bash, os.path.join(own, "bash"))
        assert rt.paths.shell() == ["bash"]
        assert rt.paths.shell() == ["bash"]  # the quick re-check
        os.unlink(os.path.join(own, "bash"))
        assert rt.paths.shell() == ["sh"]
        # a link resolved in the sandbox's view (its /usr is the host's, read-only)
        os.symlink(bash, os.path.join(own, "bash"))
        assert rt.paths.shell() == ["bash"]
        assert rt.pid1.view_root() != rt.root  # all of it was looked up in the running sandbox's view
    finally:
        rt.cleanup()
