"""Tier t3: the mock lifecycle with one execd *process* per sandbox (QUIRKS.md, MockOpenSandbox / CLI: `execd_bin`).

The execd executable is ``$OSB_EXECD_BIN`` when set, else the real execd at ``../shared/opensandbox/execd`` when it
exists (``execd --port P [-access-token T]``), else the mock's stand-alone execd (``python -m
mock_opensandbox.execd``), reached through a small wrapper script because ``MockOpenSandbox(execd_bin=...)`` takes a
single executable path (``OSB_EXECD_BIN=mock`` forces the stand-in). A real binary never runs on the host: the mock starts it inside each sandbox's isolated
view (own mount + PID namespaces, throw-away root, the real sandbox's capability set; mock_opensandbox/runtime).
The summary says which execd the tier ran against.
"""

from __future__ import annotations

import importlib.util
import os
import shlex
import shutil
import stat
import sys
import tempfile
from typing import Callable, Iterator, NamedTuple

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit import session_report

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED_EXECD = os.path.normpath(os.path.join(REPO, "..", "shared", "opensandbox", "execd"))
_WHICH = pytest.StashKey[str]()


class ExecdBin(NamedTuple):
    path: str
    real: bool  # True: $OSB_EXECD_BIN or ../shared/opensandbox/execd; False: the mock's stand-alone execd


def _describe(bin_: "ExecdBin") -> str:
    if not bin_.real:
        return "the mock's stand-alone execd (python -m mock_opensandbox.execd: no real binary, or OSB_EXECD_BIN=mock)"
    shown = os.path.relpath(bin_.path, REPO) if bin_.path.startswith(os.path.dirname(REPO)) else bin_.path
    return f"the real execd {shown} (inside the mock's isolated sandbox view)"


def _wrapper_text() -> str:
    return (
        "#!/bin/sh\n"
        "# t3: run the mock's stand-alone execd with the test interpreter (flags are execd's: --port, -access-token)\n"
        f"PYTHONPATH={shlex.quote(REPO)}${{PYTHONPATH:+:$PYTHONPATH}}\n"
        "export PYTHONPATH\n"
        f'exec {shlex.quote(sys.executable)} -m mock_opensandbox.execd "$@"\n'
    )


@pytest.fixture(scope="session")
def execd_bin(pytestconfig) -> Iterator[ExecdBin]:
    for bin_ in _execd_bin():
        pytestconfig.stash[_WHICH] = _describe(bin_)
        session_report.add_lines("t3", [f"t3 ran against {_describe(bin_)}"])  # printed at the end
        yield bin_


def _execd_bin() -> Iterator[ExecdBin]:
    from mock_opensandbox.runtime import optional

    given = "mock" if optional.off("execd") else os.environ.get("OSB_EXECD_BIN")  # OSB_MOCK_NO=execd: the stand-in
    if given and given != "mock":  # OSB_EXECD_BIN=mock: the stand-in even when the real binary is there
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            pytest.fail(f"OSB_EXECD_BIN={given!r} is not an executable file", pytrace=False)
        yield ExecdBin(os.path.abspath(given), True)
        return
    if given != "mock" and os.path.isfile(SHARED_EXECD) and os.access(SHARED_EXECD, os.X_OK):
        yield ExecdBin(SHARED_EXECD, True)
        return
    if importlib.util.find_spec("mock_opensandbox.execd.__main__") is None:
        pytest.skip(
            "t3: mock_opensandbox/execd/__main__.py (the stand-alone execd) does not exist yet; "
            "set OSB_EXECD_BIN to a real execd binary to run this tier"
        )
    tmp = tempfile.mkdtemp(prefix="osb-t3-execd-")
    try:
        path = os.path.join(tmp, "execd")
        with open(path, "w") as fh:
            fh.write(_wrapper_text())
        os.chmod(path, stat.S_IRWXU)
        yield ExecdBin(path, False)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def t3_factory(execd_bin) -> Iterator[Callable[..., MockOpenSandbox]]:
    """Started MockOpenSandbox instances whose sandboxes each get an execd process; all stopped at teardown."""
    made = []

    def make(**kwargs) -> MockOpenSandbox:
        # isolate=False: the execd process runs on the host with cwd = the per-sandbox directory (QUIRKS.md, Sandbox
        # runtime). Inside the mock's mount-namespace view only system dirs are visible, so neither the wrapper (in a
        # temp dir) nor an $OSB_EXECD_BIN outside /usr could be executed there. The mock's stand-alone execd then
        # isolates the commands it runs by itself (its --isolate defaults to auto).
        kwargs.setdefault("isolate", False)
        osb = MockOpenSandbox(execd_bin=execd_bin.path, **kwargs)
        made.append(osb)
        return osb.start()

    try:
        yield make
    finally:
        for osb in reversed(made):
            osb.stop()


@pytest.fixture
def t3_mock(t3_factory) -> MockOpenSandbox:
    return t3_factory()
