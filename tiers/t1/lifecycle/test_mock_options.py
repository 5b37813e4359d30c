"""QUIRKS.md, MockOpenSandbox / CLI: --max-sandbox-timeout defaults to the server's example config (86400; 0 disables
it), --pids-limit (the server's [docker] pids_limit, 4096) and --execd-close-delay on the command line and in the pytest
fixtures."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys

import pytest

from mock_opensandbox import __main__ as cli
from mock_opensandbox.runtime import cgroups
from tiers.t1.lifecycle.test_lifecycle import CREATE, Client

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_max_sandbox_timeout_is_the_example_configs_by_default(opensandbox_mock_factory):
    m = opensandbox_mock_factory()
    assert m.max_sandbox_timeout == 86400
    c = Client(m.base_url, m.api_key)
    r = c.call("POST", "/v1/sandboxes", dict(CREATE, timeout=86401))
    assert (r.status, r.json()) == (
        400,
        {
            "code": "SANDBOX::INVALID_PARAMETER",
            "message": "Sandbox timeout 86401s exceeds configured maximum of 86400s.",
        },
    )
    off = opensandbox_mock_factory(max_sandbox_timeout=0)
    assert off.max_sandbox_timeout is None
    assert Client(off.base_url, off.api_key).call("POST", "/v1/sandboxes", dict(CREATE, timeout=86401)).status == 202


def test_pids_limit_and_close_delay_reach_the_mock(opensandbox_mock_factory):
    m = opensandbox_mock_factory(pids_limit=64, execd_close_delay=0)
    assert (m.pids_limit, m.execd_close_delay) == (64, 0)
    assert opensandbox_mock_factory().pids_limit == 4096
    assert opensandbox_mock_factory(pids_limit=0).pids_limit is None
    for bad in (
        {"pids_limit": -1},
        {"pids_limit": True},
        {"pids_limit": "64"},
        {"execd_close_delay": -1},
        {"execd_close_delay": float("nan")},
        {"code_context_wait": 0},
        {"code_context_wait": True},
        {"code_context_wait": "5"},
        {"code_unknown_language_wait": -1},
        {"code_unknown_language_wait": False},
    ):
        with pytest.raises(ValueError):
            opensandbox_mock_factory(**bad)


def test_cli_options_and_their_defaults(monkeypatch):
    got = []

    class Stop(Exception):
        pass

    def fake(options):
        got.append(options)  # the command line builds one MockOptions (mock_opensandbox/options.py)
        raise Stop

    monkeypatch.setattr(cli, "MockOpenSandbox", fake)
    with pytest.raises(Stop):
        cli.main([])
    with pytest.raises(Stop):
        cli.main(
            ["--pids-limit", "64", "--execd-close-delay", "0", "--max-sandbox-timeout", "0"]
            + ["--code-context-wait", "30"]
        )
    pick = ("pids_limit", "execd_close_delay", "max_sandbox_timeout", "code_context_wait")
    assert [tuple(getattr(o, p) for p in pick) for o in got] == [(4096, 1.0, 86400, None), (64, 0.0, 0, 30.0)]
    monkeypatch.undo()
    assert cli.main(["--pids-limit", "-3"]) == 2


def test_non_root_on_cgroup_v1_names_the_limits_it_cannot_apply():
    """As an unprivileged user on a cgroup v1 host the hierarchies are root's: the header says so."""
    if os.geteuid() != 0 or cgroups.host().version != 1 or not shutil.which("setpriv"):
        pytest.skip("needs root on a cgroup v1 host to switch to an unprivileged user")
    try:
        pwd.getpwuid(65534)
    except KeyError:
        pytest.skip("no uid 65534")
    py = "/usr/bin/python3" if os.path.isfile("/usr/bin/python3") else sys.executable
    p = subprocess.run(
        [
            shutil.which("setpriv"),
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--",
            py,
            "-c",
            "import sys; sys.path.insert(0, %r)\n"
            "from mock_opensandbox.runtime import probe, cgroups\n"
            "print(cgroups.host().note()); print(probe.isolation_header())" % REPO,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        timeout=120,
        cwd="/tmp",
        env={"PATH": "/usr/bin:/bin", "HOME": "/tmp"},
    )
    if p.returncode != 0:
        pytest.skip("an unprivileged user cannot import the mock here: " + p.stderr.decode()[-300:])
    note, header = p.stdout.decode().splitlines()
    assert note == "resource limits memory/cpu/pids (cgroup v1 needs root)"
    assert header.endswith("; not contained: " + note) or header.endswith(", " + note), header


def test_fast_timing_zeroes_the_named_delays_and_only_them(opensandbox_mock_factory, monkeypatch):
    """docs/MOCK.md, Timing: --timing fast sets execd's start and close delays to 0 whatever they say; faithful
    keeps them; anything else is refused by name."""
    from mock_opensandbox.options import FAST_TIMING, MockOptions

    assert sorted(FAST_TIMING) == [
        "code_unknown_language_wait",
        "execd_close_delay",
        "execd_start_delay",
        "execd_tail_interval",
    ]
    slow = MockOptions(execd_start_delay=0.2, execd_close_delay=1.0)
    assert (slow.checked().execd_start_delay, slow.checked().execd_close_delay) == (0.2, 1.0)
    assert slow.checked().execd_tail_interval == 0.1  # execd's tailStdPipe ticker
    fast = slow.replace(timing="fast").checked()
    assert (fast.execd_start_delay, fast.execd_close_delay, fast.pids_limit) == (0.0, 0.0, slow.pids_limit)
    assert fast.execd_tail_interval == 0.005
    with pytest.raises(ValueError, match="execd_tail_interval must be"):
        MockOptions(execd_tail_interval=0).checked()
    assert (slow.checked().code_unknown_language_wait, fast.code_unknown_language_wait) == (None, 0.0)
    with pytest.raises(ValueError, match="timing must be one of faithful, fast"):
        MockOptions(timing="quick").checked()
    m = opensandbox_mock_factory(timing="fast", execd_close_delay=1.0)
    assert (m.options.timing, m.execd_close_delay) == ("fast", 0.0)
    got = []

    class Stop(Exception):
        pass

    def fake(options):
        got.append(options.checked())
        raise Stop

    monkeypatch.setattr(cli, "MockOpenSandbox", fake)
    with pytest.raises(Stop):
        cli.main(["--timing", "fast"])
    assert (got[0].execd_start_delay, got[0].execd_close_delay) == (0.0, 0.0)
    monkeypatch.undo()
    with pytest.raises(SystemExit) as exc:
        cli.main(["--timing", "quick"])
    assert exc.value.code == 2
