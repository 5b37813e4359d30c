"""A real execd binary running INSIDE a sandbox, the way the server runs it in a container, and the
mock's own in-sandbox agent in its place when the sandbox's execd is the mock's.

The server copies the execd binary into the container at ``/opt/opensandbox/execd`` and its
bootstrap.sh starts it in the background with ``EXECD_ENVS=/opt/opensandbox/.env`` (touched)
before the entrypoint (../shared/opensandbox/bootstrap.sh; server ``services/docker/runtime.py``
``OPENSANDBOX_DIR``). Here the binary is copied into the sandbox root (a throw-away directory) and
started by the mock's own bootstrap.sh (``scripts/bootstrap.sh``, PID 1 of the sandbox): the same
namespaces, view and capability set as every other sandbox process, PPID 1, with the flags
``--port P [-access-token T]``. In a sandbox with a network namespace of its own (``network="bridge"``,
the server's example config) it listens on 44772 inside and the host reaches it through a relay on
127.0.0.1:<ephemeral> (``relay.TCPRelay``, docker-proxy's role); with the host network it listens
on a free port of the host's 127.0.0.1.
"""

from __future__ import annotations

import errno
import os
import platform
import shutil
import signal
import socket
import struct
import subprocess
import time
from typing import Any, Mapping, Protocol, Sequence, TypedDict

from mock_opensandbox.runtime._util import children, kill, kill_and_reap, killpg, open_in_root, read_cmdline
from mock_opensandbox.runtime.agent import sandbox_python
from mock_opensandbox.runtime.holder import Holder
from mock_opensandbox.wire.relay import TCPRelay, free_port


class ExecdSpec(TypedDict):
    """prepare_execd's answer, kept on the sandbox until its PID 1's bootstrap.sh starts execd."""

    binary: str
    port: int
    flags: list[str]
    env: dict[str, str]  # PID 1's extra environment
    token: str | None
    args: list[str] | None
    started: bool  # PID 1 was started with it


class _Pid1(Protocol):
    """What this module uses of pid1.Pid1 (which imports this module: no import back)."""

    holder: Holder | None
    mode: str | None

    def ensure_holder(self) -> Holder | None: ...


class SandboxRuntime(Protocol):
    """What this module uses of sandbox.SandboxRuntime (which imports this module: no import back)."""

    root: str
    isolated: bool
    isolation_note: str
    terminated: bool
    _lock: Any
    _execd_spec: ExecdSpec | None

    @property
    def pid1(self) -> _Pid1: ...

    def connect(self, port: int, timeout: float | None = None) -> socket.socket: ...

    def spawn(
        self,
        argv: Sequence[str],
        *,
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
        stdin: Any = None,
        stdout: Any = None,
        stderr: Any = None,
        controlling_tty: bool = False,
        user: str | None = None,
    ) -> subprocess.Popen[bytes]: ...

    def use_execd(
        self,
        binary: str,
        *,
        port: int | None = None,
        token: str | None = None,
        env: Mapping[str, str] | None = None,
        args: list[str] | None = None,
    ) -> int: ...


EXECD_DIR = "/opt/opensandbox"  # server services/docker/runtime.py OPENSANDBOX_DIR
EXECD_PATH = EXECD_DIR + "/execd"  # bootstrap.sh: EXECD="${EXECD:=/opt/opensandbox/execd}"
EXECD_ENVS = EXECD_DIR + "/.env"  # bootstrap.sh: EXECD_ENVS default
EXECD_LOG = "/tmp/execd.log"  # where the mock keeps its output (QUIRKS.md)
READY_TIMEOUT = 15.0
INNER_PORT = 44772  # execd's port inside a container (server EXECD_PORT)


class ExecdProcess:
    """An execd process inside a sandbox: ``port`` on 127.0.0.1, ``stop()`` ends it (idempotent).
    With a network namespace of the sandbox's own, execd listens on ``inner_port`` inside and
    ``port`` is the host end of a relay to it (``relay``, like Docker's published port). The mock's
    one execd process class: also its stand-alone execd's (server.py, ``grace=0``: SIGKILL at once)."""

    def __init__(
        self,
        proc: "subprocess.Popen[bytes] | _HostProcess",
        port: int,
        runtime: "SandboxRuntime",
        relay: TCPRelay | None = None,
        inner_port: int | None = None,
        grace: float = 3.0,
    ):
        self.proc, self.grace = proc, grace
        self.port = port
        self.runtime = runtime
        self.relay = relay
        self.inner_port = inner_port if inner_port is not None else port

    @property
    def url(self) -> str:
        return "http://127.0.0.1:%d" % self.port

    def stop(self, timeout: float | None = None) -> None:
        """SIGTERM the execd (its process group when the mock started it), SIGKILL after timeout
        (``grace`` unless given; 0: at once), reap it; close the relay."""
        timeout = self.grace if timeout is None else timeout
        if self.relay is not None:
            self.relay.close()
        own_group = isinstance(self.proc, subprocess.Popen)  # bootstrap.sh's child shares PID 1's group
        if self.proc.poll() is None and timeout > 0:
            (killpg if own_group else kill)(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        if own_group:
            kill_and_reap(self.proc)  # type: ignore[arg-type]
        elif self.proc.poll() is None:
            kill(self.proc.pid, signal.SIGKILL)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:  # pragma: no cover - SIGKILL cannot be ignored
                pass

    def __enter__(self) -> "ExecdProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def install_binary(root: str, binary: str) -> None:
    """Copy the execd binary to /opt/opensandbox/execd of the sandbox root (0755)."""
    rel = EXECD_PATH.lstrip("/")
    with open(binary, "rb") as src:
        try:
            fd = open_in_root(root, rel, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o755)
        except OSError as exc:
            if exc.errno != errno.ETXTBSY:
                raise
            # a running copy (a second execd in this sandbox): replace the name, not the file
            dfd = open_in_root(root, os.path.dirname(rel), os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.unlink(os.path.basename(rel), dir_fd=dfd)
            finally:
                os.close(dfd)
            fd = open_in_root(root, rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o755)
        with os.fdopen(fd, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
            os.fchmod(dst.fileno(), 0o755)


IDLE_EXECD = ("/bin/cat", "/usr/bin/cat")  # reads a pipe nobody closes: blocks, ~1 MB resident


# An image's view has no host library: the idle execd there is a static program of the mock's own,
# 150 bytes of x86-64 machine code in an ELF file (read(0, buf, 1) until EOF or an error, then
# exit(0): what `cat` does with a pipe nobody closes). Other machines keep `cat` (an image whose libc
# cannot load it then has no execd process to show).
_IDLE_CODE_X86_64 = bytes.fromhex("31c031ff488d7424f8ba010000000f054885c07febb83c00000031ff0f05")


def static_idle_elf() -> bytes | None:

    if platform.machine() not in ("x86_64", "amd64"):
        return None
    base, code = 0x400000, _IDLE_CODE_X86_64
    size = 64 + 56 + len(code)
    ehdr = struct.pack(
        "<4sBBBBB7xHHIQQQIHHHHHH", b"\x7fELF", 2, 1, 1, 0, 0, 2, 62, 1, base + 120, 64, 0, 0, 64, 56, 1, 0, 0, 0
    )
    phdr = struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, size, size, 0x1000)  # PT_LOAD, R+X
    return ehdr + phdr + code


def idle_execd(image_home: str | None = None) -> str | None:
    """The host binary bound at /opt/opensandbox/execd when no resident agent is needed (root): a
    `cat` in the view's read-only /usr or /bin, None when there is none. image_home: the sandbox runs
    its image (rootfs.py), the static idle program is written there (outside its root)."""
    elf = static_idle_elf() if image_home is not None else None
    if elf is not None and image_home is not None:
        path = os.path.join(image_home, "execd-idle")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, 0o755)
        try:
            os.write(fd, elf)
            os.fchmod(fd, 0o755)
        finally:
            os.close(fd)
        return path
    for cand in IDLE_EXECD:
        real = os.path.realpath(cand)
        if real.startswith(("/usr/", "/bin/")) and os.path.isfile(real) and os.access(real, os.X_OK):
            return real
    return None


def install_agent(rt: "SandboxRuntime") -> str | None:
    """A placeholder /opt/opensandbox/execd (an empty 0755 file) in the sandbox root, over which
    view.py binds the sandbox's Python for the mock's agent (scripts/agent.py). Returns the
    interpreter's host path (inside /usr or /bin: its standard library is in the view too), None
    when the view has no Python 3 (the sandbox then has no execd process)."""
    python = sandbox_python()
    if python is None:
        return None
    try:
        fd = open_in_root(rt.root, EXECD_PATH.lstrip("/"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o755)
    except (OSError, ValueError):
        return None
    try:
        os.fchmod(fd, 0o755)
    finally:
        os.close(fd)
    return os.path.realpath(python)


def prepare_execd(
    rt: "SandboxRuntime",
    binary: str,
    *,
    port: int | None,
    token: str | None,
    env: Mapping[str, str] | None,
    args: list[str] | None,
) -> ExecdSpec:
    """What bootstrap.sh needs to start a real execd: PID 1's extra environment (bootstrap.sh reads
    and unsets OSB_EXECD_ARGS / OSB_EXECD_LOG)."""
    if not rt.isolated:
        raise RuntimeError(
            "a real execd runs only inside an isolated sandbox view, and this sandbox is not "
            "isolated: " + rt.isolation_note
        )
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        raise ValueError(f"execd binary is not an executable file: {binary!r}")
    if port is None:  # in a network namespace of its own, the port the server's containers use
        port = INNER_PORT if getattr(rt, "has_netns", False) else free_port()
    flags = ["--port", str(port)] + (["-access-token", token] if token else []) + list(args or [])
    if any(not f or any(c.isspace() for c in f) for f in flags):
        raise ValueError("execd flags must be non-empty words without spaces")
    full_env = {"EXECD_ENVS": EXECD_ENVS}  # what bootstrap.sh exports (live: no EXECD in a command's env)
    full_env.update(env or {})
    full_env.update(OSB_EXECD_ARGS=" ".join(flags), OSB_EXECD_LOG=EXECD_LOG)
    return {
        "binary": binary,
        "port": port,
        "flags": flags,
        "env": full_env,
        "token": token,
        "args": args,
        "started": False,
    }


class _HostProcess:
    """A sandbox process the mock did not fork itself (bootstrap.sh's child): pid, poll(), wait()."""

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None
        self._cmdline = read_cmdline(pid)

    def poll(self) -> int | None:
        if self.returncode is None:
            line = read_cmdline(self.pid)
            if not line or line != self._cmdline:
                self.returncode = -signal.SIGKILL  # gone (exit status unknown: PID 1 reaped it)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired("execd", timeout or 0)
            time.sleep(0.005)
        assert self.returncode is not None
        return self.returncode


def _bootstrap_execd(rt: "SandboxRuntime", timeout: float) -> _HostProcess | None:
    """The execd process bootstrap.sh started (a child of PID 1 running /opt/opensandbox/execd)."""
    holder = rt.pid1.holder
    if holder is None:
        return None
    want = EXECD_PATH.encode() + b"\0"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and holder.alive():
        for kid in children(holder.pid):
            line = read_cmdline(kid)
            if line and line.startswith(want):
                return _HostProcess(kid)
        time.sleep(0.005)
    return None


def start_execd(
    rt: "SandboxRuntime",
    binary: str,
    *,
    port: int | None = None,
    token: str | None = None,
    env: Mapping[str, str] | None = None,
    args: list[str] | None = None,
    timeout: float = READY_TIMEOUT,
) -> ExecdProcess:
    spec = rt._execd_spec
    if spec is None or spec["binary"] != binary or (port is not None and spec["port"] != port):
        with rt._lock:
            fresh = rt.pid1.holder is None
        if fresh:
            rt.use_execd(binary, port=port, token=token, env=env, args=args)
            spec = rt._execd_spec
    with rt._lock:
        if rt.terminated:
            raise RuntimeError("the sandbox is terminated")
        holder = rt.pid1.ensure_holder() if rt.pid1.mode is not None else None
    if spec is not None and spec.get("started") and holder is not None:
        proc = _bootstrap_execd(rt, timeout)
        if proc is None:
            raise RuntimeError("execd did not start (see %s in the sandbox)" % EXECD_LOG)
        return published(ExecdProcess(proc, spec["port"], rt), rt, timeout)
    return _spawn_execd(rt, binary, port=port, token=token, env=env, args=args, timeout=timeout)


def published(ex: ExecdProcess, rt: "SandboxRuntime", timeout: float) -> ExecdProcess:
    """ex once execd accepts connections; in the sandbox's own network namespace its port is
    published through a relay on the host's 127.0.0.1 (docker-proxy's role) and ex.port is that."""
    inside = getattr(rt, "has_netns", False)
    port = ex.inner_port
    if inside:
        try:
            ex.relay = TCPRelay(lambda: rt.connect(port, timeout=5.0), name="osb-execd-relay")
        except OSError:
            ex.stop()
            raise
        ex.port = ex.relay.port
    deadline = time.monotonic() + timeout
    while True:
        if ex.proc.poll() is not None:
            ex.stop()
            raise RuntimeError(
                "execd exited with status %s at start (see %s in the sandbox)" % (ex.proc.returncode, EXECD_LOG)
            )
        try:
            with (
                rt.connect(port, timeout=0.5) if inside else socket.create_connection(("127.0.0.1", port), timeout=0.5)
            ):
                return ex
        except OSError:
            if time.monotonic() > deadline:
                ex.stop()
                raise RuntimeError("execd did not listen on port %d within %.0f s" % (port, timeout)) from None
            time.sleep(0.02)


def _spawn_execd(
    rt: "SandboxRuntime",
    binary: str,
    *,
    port: int | None,
    token: str | None,
    env: Mapping[str, str] | None,
    args: list[str] | None,
    timeout: float,
) -> ExecdProcess:
    """A second execd, or one for a sandbox whose PID 1 started without it (or that has no PID 1 of
    its own): a sandbox command like any other (PPID 0 in `ps`)."""
    if not rt.isolated:
        raise RuntimeError(
            "a real execd runs only inside an isolated sandbox view, and this sandbox is not "
            "isolated: " + rt.isolation_note
        )
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        raise ValueError(f"execd binary is not an executable file: {binary!r}")
    inside = getattr(rt, "has_netns", False)
    if port is None:  # in a network namespace of its own, the port the server's containers use
        port = INNER_PORT if inside else free_port()
    install_binary(rt.root, binary)
    os.close(open_in_root(rt.root, EXECD_ENVS.lstrip("/"), os.O_WRONLY | os.O_CREAT | os.O_APPEND))
    argv = [EXECD_PATH, "--port", str(port)]
    if token:
        argv += ["-access-token", token]
    argv += list(args or [])
    full_env = {"EXECD": EXECD_PATH, "EXECD_ENVS": EXECD_ENVS}
    full_env.update(env or {})
    log = open_in_root(rt.root, EXECD_LOG.lstrip("/"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        proc = rt.spawn(argv, cwd="/", env=full_env, stdout=log, stderr=log)
    finally:
        os.close(log)
    return published(ExecdProcess(proc, port, rt), rt, timeout)
