"""A real execd binary running INSIDE a sandbox, the way the server runs it in a container.

The server copies the execd binary into the container at ``/opt/opensandbox/execd`` and its
bootstrap.sh starts it in the background with ``EXECD_ENVS=/opt/opensandbox/.env`` (touched)
before the entrypoint (../shared/opensandbox/bootstrap.sh; server ``services/docker/runtime.py``
``OPENSANDBOX_DIR``). Here the binary is copied into the sandbox root (a throw-away directory) and
started through ``SandboxRuntime.spawn``: the same namespaces, view and capability set as every
other sandbox process. In a sandbox with a network namespace of its own (``network="bridge"``,
the server's example config) it listens on 44772 inside and the host reaches it through a relay on
127.0.0.1:<ephemeral> (``relay.TCPRelay``, docker-proxy's role); with the host network it listens
on a free port of the host's 127.0.0.1.
"""
from __future__ import annotations

import errno
import os
import shutil
import signal
import socket
import subprocess
import time
from typing import TYPE_CHECKING, Any, Mapping

from ._util import kill_and_reap, killpg

if TYPE_CHECKING:  # pragma: no cover
    from .sandbox import SandboxRuntime

EXECD_DIR = "/opt/opensandbox"          # server services/docker/runtime.py OPENSANDBOX_DIR
EXECD_PATH = EXECD_DIR + "/execd"       # bootstrap.sh: EXECD="${EXECD:=/opt/opensandbox/execd}"
EXECD_ENVS = EXECD_DIR + "/.env"        # bootstrap.sh: EXECD_ENVS default
EXECD_LOG = "/tmp/execd.log"            # where the mock keeps its output (QUIRKS.md)
READY_TIMEOUT = 15.0
INNER_PORT = 44772                      # execd's port inside a container (server EXECD_PORT)


class ExecdProcess:
    """An execd process inside a sandbox: ``port`` on 127.0.0.1, ``stop()`` ends it (idempotent).
    With a network namespace of the sandbox's own, execd listens on ``inner_port`` inside and
    ``port`` is the host end of a relay to it (``relay``, like Docker's published port)."""

    def __init__(self, proc: subprocess.Popen, port: int, runtime: "SandboxRuntime", relay: Any = None,
                 inner_port: int | None = None):
        self.proc = proc
        self.port = port
        self.runtime = runtime
        self.relay = relay
        self.inner_port = inner_port if inner_port is not None else port

    @property
    def url(self) -> str:
        return "http://127.0.0.1:%d" % self.port

    def stop(self, timeout: float = 3.0) -> None:
        """SIGTERM the execd's process group, SIGKILL after timeout, reap it; close the relay."""
        if self.relay is not None:
            self.relay.close()
        if self.proc.poll() is None:
            killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        kill_and_reap(self.proc)

    def __enter__(self) -> "ExecdProcess":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _open_in_root(root: str, rel: str, flags: int, mode: int = 0o644) -> int:
    """Open <root>/<rel> without following any symlink (a sandbox process may have planted one:
    the mock must never write outside the root); missing directories are created (0755)."""
    parts = [p for p in rel.split("/") if p]
    if not parts or any(p in (".", "..") for p in parts):
        raise ValueError(f"bad path inside the sandbox: {rel!r}")
    dfd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in parts[:-1]:
            try:
                nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            except FileNotFoundError:
                os.mkdir(name, 0o755, dir_fd=dfd)
                nfd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dfd)
            os.close(dfd)
            dfd = nfd
        fd = os.open(parts[-1], flags | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, mode, dir_fd=dfd)
        want = os.path.stat.S_ISDIR if flags & os.O_DIRECTORY else os.path.stat.S_ISREG
        if not want(os.fstat(fd).st_mode):
            os.close(fd)
            raise OSError(errno.EEXIST, "not a regular file or directory", rel)
        if not flags & os.O_DIRECTORY:
            os.set_blocking(fd, True)
        return fd
    finally:
        os.close(dfd)


def install_binary(root: str, binary: str) -> None:
    """Copy the execd binary to /opt/opensandbox/execd of the sandbox root (0755)."""
    rel = EXECD_PATH.lstrip("/")
    with open(binary, "rb") as src:
        try:
            fd = _open_in_root(root, rel, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o755)
        except OSError as exc:
            if exc.errno != errno.ETXTBSY:
                raise
            # a running copy (a second execd in this sandbox): replace the name, not the file
            dfd = _open_in_root(root, os.path.dirname(rel), os.O_RDONLY | os.O_DIRECTORY)
            try:
                os.unlink(os.path.basename(rel), dir_fd=dfd)
            finally:
                os.close(dfd)
            fd = _open_in_root(root, rel, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o755)
        with os.fdopen(fd, "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
            os.fchmod(dst.fileno(), 0o755)


def start_execd(rt: "SandboxRuntime", binary: str, *, port: int | None = None, token: str | None = None,
                env: Mapping[str, str] | None = None, args: list[str] | None = None,
                timeout: float = READY_TIMEOUT) -> ExecdProcess:
    if not rt.isolated:
        raise RuntimeError("a real execd runs only inside an isolated sandbox view, and this sandbox is not "
                           "isolated: " + rt.isolation_note)
    if not (os.path.isfile(binary) and os.access(binary, os.X_OK)):
        raise ValueError(f"execd binary is not an executable file: {binary!r}")
    inside = getattr(rt, "has_netns", False)
    if port is None:  # in a network namespace of its own, the port the server's containers use
        port = INNER_PORT if inside else free_port()
    install_binary(rt.root, binary)
    os.close(_open_in_root(rt.root, EXECD_ENVS.lstrip("/"), os.O_WRONLY | os.O_CREAT | os.O_APPEND))
    argv = [EXECD_PATH, "--port", str(port)]
    if token:
        argv += ["-access-token", token]
    argv += list(args or [])
    full_env = {"EXECD": EXECD_PATH, "EXECD_ENVS": EXECD_ENVS}
    full_env.update(env or {})
    log = _open_in_root(rt.root, EXECD_LOG.lstrip("/"), os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    try:
        proc = rt.spawn(argv, cwd="/", env=full_env, stdout=log, stderr=log)
    finally:
        os.close(log)
    ex = ExecdProcess(proc, port, rt)
    if inside:  # the published port: a relay on the host's 127.0.0.1 into the sandbox (docker-proxy)
        from ..relay import TCPRelay

        try:
            ex.relay = TCPRelay(lambda: rt.connect(port, timeout=5.0), name="osb-execd-relay")
        except OSError:
            ex.stop()
            raise
        ex.port = ex.relay.port
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            ex.stop()
            raise RuntimeError("execd exited with status %s at start (see %s in the sandbox)" % (
                proc.returncode, EXECD_LOG))
        try:
            with (rt.connect(port, timeout=0.5) if inside else socket.create_connection(("127.0.0.1", port),
                                                                                         timeout=0.5)):
                return ex
        except OSError:
            if time.monotonic() > deadline:
                ex.stop()
                raise RuntimeError("execd did not listen on port %d within %.0f s" % (port, timeout)) from None
            time.sleep(0.02)
