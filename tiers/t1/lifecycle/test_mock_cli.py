"""t1: ``python -m mock_opensandbox`` as a user runs it: prints its URL (and the generated key), serves,
and on SIGINT/SIGTERM exits 0 leaving no process, no temp dir and no listening port behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest

from tiers.toolkit.mockcli import REPO
from tiers.toolkit.procs import alive, descendants
from tiers.toolkit.waits import port_closed, wait_until


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_cli_serves_and_stops_cleanly(cli_factory, sig):
    cli = cli_factory()
    assert cli.key and len(cli.key) >= 24
    assert cli.call("GET", "/health", key=False) == (200, b'{"status":"healthy"}')
    assert cli.call("GET", "/v1/sandboxes", key=False)[0] == 401
    assert os.path.isdir(cli.root)
    status, body = cli.call(
        "POST", "/v1/sandboxes", {"image": {"uri": "python:3"}, "entrypoint": ["sleep", "300"], "resourceLimits": {}}
    )
    assert status == 202
    sid = json.loads(body)["id"]
    # the CLI's execd comes up --execd-start-delay (0.2 s) after the create says Running, like a real server's
    assert wait_until(lambda: cli.call("GET", "/v1/sandboxes/%s/proxy/44772/ping" % sid)[0] == 200, 10), (
        "execd never answered /ping"
    )
    status, body = cli.call(
        "POST",
        "/v1/sandboxes/%s/proxy/44772/command" % sid,
        {"command": "sleep 300 & echo started", "background": True},
    )
    assert status == 200
    kids = descendants(cli.proc.pid)
    assert kids, "the sandbox should run processes"
    execd_port = json.loads(cli.call("GET", "/v1/sandboxes/%s/endpoints/44772" % sid)[1])["endpoint"]
    execd_port = int(execd_port.split("/")[0].rsplit(":", 1)[1])
    rc, out, err = cli.stop(sig)
    assert rc == 0, err
    assert "Stopping" in out
    assert cli.key not in err
    assert [p for p in kids if alive(p)] == []
    assert not os.path.exists(cli.root)
    assert port_closed(cli.port) and port_closed(execd_port)


def test_cli_insecure_and_given_key(cli_factory):
    cli = cli_factory("--insecure")
    assert cli.key is None and any("No API key required" in line for line in cli.lines)
    assert cli.call("GET", "/v1/sandboxes", key=False)[0] == 200
    assert cli.stop()[0] == 0
    cli2 = cli_factory("--api-key", "cli-given-key")
    assert cli2.key is None
    assert not any("cli-given-key" in line for line in cli2.lines)  # a given key is never echoed
    assert cli2.call("GET", "/v1/sandboxes", key=False)[0] == 401
    cli2.key = "cli-given-key"
    assert cli2.call("GET", "/v1/sandboxes")[0] == 200
    assert cli2.stop()[0] == 0


def test_cli_keeps_a_given_root_but_removes_sandbox_dirs(cli_factory, tmp_path):
    root = tmp_path / "roots"
    cli = cli_factory("--root", str(root), "--execd-mode", "latest")
    _status, body = cli.call(
        "POST", "/v1/sandboxes", {"image": {"uri": "python:3"}, "entrypoint": ["sleep", "300"], "resourceLimits": {}}
    )
    sid = json.loads(body)["id"]
    assert (root / sid).is_dir()
    assert cli.stop()[0] == 0
    assert root.is_dir() and not (root / sid).exists()


def test_cli_reports_a_busy_port_and_bad_arguments(cli_factory):
    cli = cli_factory()
    p = subprocess.run(
        [sys.executable, "-m", "mock_opensandbox", "--port", str(cli.port)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "cannot listen" in p.stderr and "Traceback" not in p.stderr
    p = subprocess.run(
        [sys.executable, "-m", "mock_opensandbox", "--port", "70000"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "Traceback" not in p.stderr
    p = subprocess.run(
        [sys.executable, "-m", "mock_opensandbox", "--execd-mode", "v9"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2 and "invalid choice" in p.stderr
    assert cli.stop()[0] == 0
