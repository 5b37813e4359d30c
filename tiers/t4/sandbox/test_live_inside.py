"""Live: the inside of a real sandbox (fixtures/22_sandbox_inside.json), asserted with the shared probe list of
tiers/flows/sandbox/sandbox_inside.py, the same assertions tiers/t1/sandbox/test_sandbox_inside.py runs on the mock. The sandbox is
created with resourceLimits cpu 500m / memory 512Mi and deleted at the end."""

from __future__ import annotations

import pytest

from tiers.flows.sandbox import sandbox_inside as si


@pytest.fixture(scope="module")
def target(live_server):
    t = si.Target(live_server.root, live_server.api_key, live_server.image)
    yield t
    t.delete_all()


@pytest.fixture(scope="module")
def inside(target):
    return si.Inside(target, target.create())


@pytest.mark.parametrize("name", si.NAMES)
def test_inside_live(inside, name):
    probe = si.PROBES[name]
    probe.check(probe.run(inside), inside)


def test_pid1_leads_its_session_live(inside):
    command = si.pid1_session(inside)
    assert [row[2] for row in command.values()] == [1], command  # execd's Setpgid, no Setsid: PID 1's session


def test_same_port_two_sandboxes_live(target):
    si.same_port_two_sandboxes(target)


def test_bridge_peers_live(target):
    si.bridge_peers(target)


def test_directory_download_live(inside):
    for path in ("/tmp", "/", "/etc"):
        si.directory_download(inside, path)


def test_sigint_of_sessions_live(inside):
    assert si.sigint_dispositions(inside) == si.SIGINT_DISPOSITIONS


def test_stdin_and_session_env_live(inside):
    assert si.stdin_and_session_env(inside) == si.STDIN_AND_SESSION_ENV


def test_dockerenv_live(inside):
    assert si.dockerenv(inside) == si.DOCKERENV


def test_execd_files_live(inside):
    assert si.execd_files(inside) == si.EXECD_FILES


def test_execd_fds_live(inside):
    assert si.execd_fds(inside) == si.EXECD_FDS


def test_execd_failed_starts_live(inside):
    assert si.execd_failed_starts(inside) == si.EXECD_FAILED_STARTS
