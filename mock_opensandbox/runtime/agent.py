"""The mock's side of a sandbox's in-sandbox agent (``scripts/agent.py``, installed as
``/opt/opensandbox/execd`` when the sandbox's execd is the mock's own, started by bootstrap.sh).

The agent runs in every namespace of the sandbox (whatever PID 1 has: mount, PID, IPC, UTS, and the
network namespace when there is one) with its capability set, so it can do what the mock process
itself cannot do from outside as non-root: connect to a port of the sandbox's own loopback. The
channel is a unix SOCK_SEQPACKET socketpair: the mock keeps one end, PID 1 inherits the other as
fd 3 and bootstrap.sh passes it to execd only. Descriptors come back with SCM_RIGHTS
(``socket.recvmsg``, available on every Python >= 3.3; ``socket.recv_fds`` is only a wrapper).
Standard library only.
"""

from __future__ import annotations

import array
import errno
import os
import socket
import threading
import time
from typing import Any, Mapping

from mock_opensandbox.runtime import stages as scripts

AGENT_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3")


def sandbox_python() -> str | None:
    """A Python 3 the sandbox view has at the same path (its /usr, /bin are the host's, read-only)."""
    for cand in AGENT_PYTHONS:
        real = os.path.realpath(cand)
        if real.startswith(("/usr/", "/bin/", "/lib")) and os.path.isfile(real) and os.access(real, os.X_OK):
            return cand
    return None


AGENT_PATH = "/opt/opensandbox/execd"
CHANNEL_FD = 3  # the fd number the agent and bootstrap.sh expect
HELLO_TIMEOUT = 10.0


class AgentError(OSError):
    """The agent is not there, did not answer in time, or its channel broke."""


def _encode(rid: int, request: Mapping[str, Any]) -> bytes:
    op = str(request.get("op", ""))
    words = [str(rid), op]
    for k, v in request.items():
        if k == "op":
            continue
        text = "%s=%s" % (k, v)
        if any(c.isspace() for c in text) or not text.isascii() or not k.isidentifier():
            raise ValueError("agent request fields must be ASCII words: %r" % (text,))
        words.append(text)
    if not op.isidentifier():
        raise ValueError("agent op must be a word: %r" % (op,))
    return " ".join(words).encode()


def _decode(data: bytes) -> tuple[str, dict[str, Any]]:
    words = data.decode("ascii", "replace").split()
    rid = words[0] if words else ""
    out: dict[str, Any] = {}
    for w in words[1:]:
        k, _, v = w.partition("=")
        out[k] = int(v) if v.lstrip("-").isdigit() else v
    if "ok" in out:
        out["ok"] = bool(out["ok"])
    if "errno" in out:
        out["error"] = os.strerror(out["errno"])
    return rid, out


class AgentChannel:
    """The mock's end of one agent's channel; call() is thread-safe (one request at a time)."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.pid_inside: int | None = None
        self._lock = threading.Lock()
        self._next = 1
        self.closed = False

    @staticmethod
    def pair() -> tuple["AgentChannel", int]:
        """(the mock's channel, the agent's end as an inheritable fd the caller passes on and closes)."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        mine.set_inheritable(False)
        fd = theirs.detach()
        return AgentChannel(mine), fd

    def _recv(self, deadline: float) -> tuple[bytes, list[int]]:
        left = deadline - time.monotonic()
        if left <= 0:
            raise AgentError(errno.ETIMEDOUT, "the sandbox's agent did not answer in time")
        self.sock.settimeout(left)
        fds = array.array("i")
        try:
            data, anc, _flags, _addr = self.sock.recvmsg(4096, socket.CMSG_SPACE(4 * fds.itemsize))
        except socket.timeout:
            raise AgentError(errno.ETIMEDOUT, "the sandbox's agent did not answer in time") from None
        except OSError as exc:
            raise AgentError(exc.errno or errno.EPIPE, "the sandbox's agent channel failed: %s" % exc) from None
        for level, typ, payload in anc:
            if level == socket.SOL_SOCKET and typ == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        if not data and not fds:
            raise AgentError(errno.EPIPE, "the sandbox's agent is gone")
        return data, list(fds)

    def wait_hello(self, timeout: float = HELLO_TIMEOUT) -> bool:
        """True once the agent said hello (it runs, as /opt/opensandbox/execd)."""
        try:
            data, fds = self._recv(time.monotonic() + timeout)
        except AgentError:
            return False
        for fd in fds:
            os.close(fd)
        _, msg = _decode(data)
        if "pid" in msg:
            self.pid_inside = msg["pid"]
        return data.split()[1:2] == [b"hello"]

    def call(self, request: Mapping[str, Any], timeout: float = 5.0) -> tuple[dict[str, Any], list[int]]:
        """(reply, fds) for one request; the caller owns (closes) the fds. The first call waits for
        the agent's hello (it starts with the sandbox, not awaited there). Raises AgentError."""
        deadline = time.monotonic() + timeout
        if not self._lock.acquire(timeout=max(0.0, timeout)):
            raise AgentError(errno.ETIMEDOUT, "the sandbox's agent is busy")
        try:
            if self.closed:
                raise AgentError(errno.EPIPE, "the sandbox's agent channel is closed")
            if self.pid_inside is None and not self.wait_hello(max(0.0, deadline - time.monotonic())):
                raise AgentError(errno.ETIMEDOUT, "the sandbox's agent did not start")
            rid = self._next
            self._next += 1
            try:
                self.sock.settimeout(max(0.001, deadline - time.monotonic()))
                self.sock.send(_encode(rid, request))
            except (socket.timeout, OSError) as exc:
                raise AgentError(
                    getattr(exc, "errno", None) or errno.EPIPE, "the sandbox's agent channel failed: %s" % exc
                ) from None
            while True:
                data, fds = self._recv(deadline)
                got, reply = _decode(data)
                if got == str(rid):
                    return reply, fds
                for fd in fds:  # the late answer to a request that timed out
                    os.close(fd)
        finally:
            self._lock.release()

    def close(self) -> None:
        self.closed = True
        try:
            self.sock.close()
        except OSError:
            pass


def oneshot_call(rt: Any, request: Mapping[str, Any], timeout: float) -> tuple[dict[str, Any], list[int]]:
    """agent_call without a resident agent: ``python3 -IS -c <agent>`` as a sandbox command (the
    same namespaces and capabilities), its channel as stdin; it answers one request and exits."""

    python = sandbox_python() if getattr(rt, "isolated", False) else None
    if python is None:
        raise AgentError(errno.ENOTSUP, "this sandbox has no agent (no isolated view with a Python 3)")
    chan, fd = AgentChannel.pair()
    try:
        try:
            proc = rt.spawn([python, "-IS", "-c", scripts.resource("agent.py")], stdin=fd)
        finally:
            os.close(fd)
        try:
            return chan.call(request, timeout)
        finally:
            if proc.poll() is None:
                try:
                    proc.wait(timeout=1.0)
                except Exception:
                    proc.kill()
                    proc.wait()
    finally:
        chan.close()
