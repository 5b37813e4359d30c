"""Terminals over EPP: pty.open / pty.write / pty.resize / pty.close against the mock's execd PTY
(a real pseudo-terminal behind execd's WebSocket protocol), driven through the plugin over EPP."""

from __future__ import annotations

import base64
import queue
import time

import pytest

from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit.epp import EppClient, RpcError


class Terminal:
    """Collects pty.output bytes of one terminal and its single pty.exit."""

    def __init__(self, epp: EppClient, sid: str, cols: int = 80, rows: int = 24):
        self.epp, self.sid = epp, sid
        self.pid = str(epp.call("pty.open", {"sandbox_id": sid, "cols": cols, "rows": rows})["process_id"])
        self.q = epp._stream(self.pid)
        self.buf = b""
        self.exits: list[dict] = []

    def write(self, text: str) -> None:
        data = base64.b64encode(text.encode()).decode()
        self.epp.call("pty.write", {"sandbox_id": self.sid, "process_id": self.pid, "data_b64": data})

    def _pump(self, timeout: float) -> None:
        try:
            msg = self.q.get(timeout=timeout)
        except queue.Empty:
            return
        if msg is None:
            raise EOFError("plugin exited")
        if msg["method"] == "pty.output":
            self.buf += base64.b64decode(msg["params"]["data_b64"])
        elif msg["method"] == "pty.exit":
            self.exits.append(msg["params"])

    def expect(self, needle: bytes, timeout: float = 15.0) -> bytes:
        deadline = time.monotonic() + timeout
        while needle not in self.buf:
            if time.monotonic() > deadline or self.exits:
                raise AssertionError(f"{needle!r} not seen; got {self.buf[-400:]!r}")
            self._pump(0.2)
        head, _, self.buf = self.buf.partition(needle)
        return head

    def wait_exit(self, timeout: float = 15.0) -> dict:
        deadline = time.monotonic() + timeout
        while not self.exits and time.monotonic() < deadline:
            self._pump(0.2)
        assert self.exits, f"no pty.exit; output {self.buf[-400:]!r}"
        return self.exits[0]


@pytest.fixture(scope="module")
def mock():
    """Overrides the toolkit's ``mock`` (tiers/toolkit/fixtures.py): no close delay on execd's streams."""
    with MockOpenSandbox(execd_mode="latest", execd_close_delay=0.0) as osb:
        yield osb


# epp, sid: tiers/t1/conftest.py


def test_initialize_declares_pty(tmp_path, mock):
    with EppClient(str(tmp_path / "d"), {"base_url": mock.base_url, "api_key": mock.api_key}) as epp:
        assert "pty" in epp.init_result["features"]


def test_shell_arithmetic_resize_ctrl_c_and_exit_status(epp, sid):
    term = Terminal(epp, sid, cols=100, rows=30)
    term.write("echo $((6*7))\n")
    term.expect(b"42")
    epp.call("pty.resize", {"sandbox_id": sid, "process_id": term.pid, "cols": 120, "rows": 40})
    term.write("stty size\n")
    term.expect(b"40 120")
    term.write("sleep 100\n")
    time.sleep(0.5)
    # Ctrl-C reaches the foreground job through the tty, whose SIGINT is ignored as live (execd's, inherited:
    # QUIRKS "SIGINT of a PTY shell or a session"); Ctrl-\ stops it: 128 + SIGQUIT, as live
    term.write("\x03")
    term.expect(b"^C")
    time.sleep(0.3)
    term.write("\x1c")
    term.write("echo rc=$?\n")
    term.expect(b"rc=131", timeout=10)
    term.write("exit 3\n")
    assert term.wait_exit()["exit_code"] == 3
    time.sleep(0.3)
    term._pump(0.1)
    assert len(term.exits) == 1  # exactly one pty.exit


def test_close_ends_the_terminal_and_unknown_ids_are_typed(epp, sid):
    term = Terminal(epp, sid)
    term.write("echo ready\n")
    term.expect(b"ready")
    epp.call("pty.close", {"sandbox_id": sid, "process_id": term.pid})
    term.wait_exit()
    with pytest.raises(RpcError) as err:
        epp.call("pty.write", {"sandbox_id": sid, "process_id": "no-such-terminal", "data_b64": ""})
    assert err.value.code == -32002


def test_terminal_does_not_outlive_its_sandbox(epp):
    sandbox_id = epp.call("sandbox.create", {"template": "base", "timeout": 300})["sandbox_id"]
    term = Terminal(epp, sandbox_id)
    term.write("echo alive\n")
    term.expect(b"alive")
    epp.call("sandbox.kill", {"sandbox_id": sandbox_id})
    term.wait_exit()
