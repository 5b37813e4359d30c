"""MockOpenSandbox: the whole mock (lifecycle listener + one execd per sandbox) as an in-process object.

    with MockOpenSandbox() as osb:
        client = MyClient(osb.base_url, api_key=osb.api_key)

Like moto's ThreadedMotoServer: ``start()`` / ``stop()`` / context manager, ephemeral port by default.
Standard library only.
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime
from typing import Any, Callable, Iterable

from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.workbench.admin import AdminAPI, AdminLayer, MockBackend, WorkbenchMixin
from mock_opensandbox.workbench.faults import FaultRegistry
from mock_opensandbox.wire.http1 import Server
from mock_opensandbox.workbench.journal import Journal
from mock_opensandbox.lifecycle.routes import LifecycleApp, LifecycleHandler
from mock_opensandbox.lifecycle.model import Provisioner, Sandbox, SandboxStore
from mock_opensandbox.wire.relay import free_port
from mock_opensandbox.lifecycle.proxy import PortForwardApp, PortForwardHandler
from mock_opensandbox.runtime.cgroups import DEFAULT_PIDS_LIMIT
from mock_opensandbox.runtime._util import default_signals_for_children, inherited_signals_back
from mock_opensandbox.runtime.jupyterenv import check as check_jupyter_env
from mock_opensandbox.runtime.janitor import LEDGER as JANITOR_LEDGER
from mock_opensandbox.runtime.janitor import Janitor, reap_root
from mock_opensandbox.runtime.sandbox import SandboxTerminated
from mock_opensandbox.docker.volumes import VolumeStore, start_failed

EXECD_MODES = ("v1.1.0", "latest")
NETWORK_MODES = ("bridge", "host")  # runtime/netns.py NETWORK_MODES
DEFAULT_MAX_SANDBOX_TIMEOUT = 86400  # server examples/example.config.toml [server] max_sandbox_timeout_seconds


def _is_sandbox_id(name: str) -> bool:
    """A sandbox directory's name in the root (lifecycle/model.py: str(uuid4()))."""
    import uuid

    try:
        return str(uuid.UUID(name)) == name
    except ValueError:
        return False


def is_loopback_host(host: str) -> bool:
    """True for localhost and loopback addresses (127.0.0.0/8, ::1)."""
    h = host.strip().strip("[]").lower()
    if h == "localhost" or h.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def _wait_stopped(pgids: list[int], timeout: float = 2.0) -> None:
    """Wait until every process of these process groups is stopped (SIGSTOP is delivered asynchronously)."""
    if not pgids:
        return
    wanted = set(pgids)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = False
        try:
            names = os.listdir("/proc")
        except OSError:
            return
        for name in names:
            if not name.isdigit():
                continue
            try:
                with open("/proc/%s/stat" % name, "rb") as fh:
                    fields = fh.read().rsplit(b")", 1)[1].split()
            except OSError:
                continue
            if len(fields) > 2 and int(fields[2]) in wanted and fields[0] not in (b"T", b"t", b"Z", b"X"):
                running = True
                break
        if not running:
            return
        time.sleep(0.005)


def _is_mock_execd(path: str) -> bool:
    """A small script that runs the mock's own stand-alone execd (`-m mock_opensandbox.execd`)."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(4096)
    except OSError:
        return False
    return head.startswith(b"#!") and b"mock_opensandbox.execd" in head


class _ExitedExecd:
    """The execd of a sandbox whose main process ended before execd listened (nothing to stop)."""

    def __init__(self, port: int):
        self.port = port

    def stop(self) -> None:
        pass


class MockProvisioner(Provisioner):
    """Gives every sandbox a SandboxRuntime (root dir + processes), an execd listener and, on demand, a
    listener standing in for the published container port 8080."""

    def __init__(self, mock: "MockOpenSandbox"):
        self.mock = mock
        # decided once per start() of the mock (execd_bin and isolate are constructor settings)
        self.mock_execd = bool(mock.execd_bin) and _is_mock_execd(mock.execd_bin)
        isolate = mock.isolate
        if self.mock_execd:
            # the mock's own stand-alone execd (a wrapper around `python -m mock_opensandbox.execd`)
            # needs the host's interpreter and this repository: it runs on the host with cwd = the
            # sandbox root (seed 000 §5.3) and contains the commands it runs by itself
            if isolate is None:
                isolate = False
        elif mock.execd_bin and isolate is False:
            # any other execd (the real binary) runs only inside an isolated sandbox view, like the
            # server's container (runtime/execdproc.py); without one the sandbox fails to start
            isolate = None
        self.isolate: bool | None = isolate  # what every SandboxRuntime of this mock gets

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self, sb: Sandbox) -> Any:
        from mock_opensandbox.runtime import SandboxRuntime

        m = self.mock
        root = os.path.join(m.root, sb.id)
        if m._root_given:
            m.janitor.track("dir", root)  # the temp root as a whole is tracked at start()
        # server services/docker/container_ops.py: [docker] sandbox_env, the request's env, then
        # OPENSANDBOX_ID=<sandbox id> last (Docker keeps the last of a repeated name)
        env = {k: v for k, v in (sb.env or {}).items() if v is not None}
        from mock_opensandbox.runtime import jupyterenv  # a code-interpreter image's Jupyter (--jupyter-env)

        jenv = jupyterenv.for_image(m.jupyter_env, sb.image)
        if jenv:  # the code-interpreter image's ENV; the request's env wins
            env = dict(jupyterenv.sandbox_env(jenv), **env)
        env["OPENSANDBOX_ID"] = sb.id
        from mock_opensandbox.runtime.rootfs import RootfsError, UserNotFound

        try:  # issue 21: the image's own tree as the root when the mock has an image store
            runtime = SandboxRuntime(
                root,
                env=env,
                isolate=self.isolate,
                network=m.network,
                limits=m.sandbox_limits(sb),
                cgroup_name="osb-mock-%s-%s" % (m.mock_id, sb.id),
                janitor=m.janitor,
                image=sb.rootfs_image,
            )
        except (RootfsError, UserNotFound) as exc:
            from mock_opensandbox.runtime._util import rmtree

            rmtree(root)  # (a partial copy made as non-root may hold 0555 directories)
            raise start_failed(str(exc)) from None
        sb.runtime = runtime
        if sb.snapshot_image is not None:  # snapshotId: what the snapshot holds (images/commit.py)
            from mock_opensandbox.images.commit import restore_into

            restore_into(sb, runtime)
        if sb.volumes is not None:
            self._plan_volumes(sb, runtime)
        if jenv and runtime.isolated:  # the env bound read-only at its own path, with the volumes (before PID 1)
            jupyterenv.bind_into(runtime, sb.volumes, jenv)
        sb.execd_mode = m.execd_mode
        sb.resources["lock"] = threading.Lock()
        if m.execd_bin and not self.mock_execd:
            # a real execd is the sandbox's /opt/opensandbox/execd: PID 1's bootstrap.sh starts it, then
            # the entrypoint (raises when the sandbox is not isolated)
            sb.resources["execd_port"] = runtime.use_execd(m.execd_bin, token=m.execd_token or None)
        # server services/docker: the container runs bootstrap.sh -> execd &, then "$@" &
        sb.resources["argv"], own = jupyterenv.entrypoint_for(sb.entrypoint, runtime) if jenv else (sb.entrypoint, 0)
        entry = self._start_entrypoint(sb, runtime)
        if jenv and own:  # the entrypoint's Jupyter, inside the sandbox
            jupyterenv.start_logged(runtime, jenv, sb.log, (OSError, ValueError, SandboxTerminated))
        if m.execd_bin:
            try:
                sb.execd = self._start_execd_process(sb, runtime)
            except SandboxTerminated as exc:  # its holder: view.py could not mount the volumes
                if (sb.volumes is None and sb.rootfs_image is None) or sb.deleted:
                    raise
                raise start_failed(str(exc)) from None
            except RuntimeError:
                if not isinstance(entry, int) and entry.poll() is None:
                    raise
                sb.execd = _ExitedExecd(sb.resources.get("execd_port", 0))  # the container ended at once
        else:
            sb.execd = self._start_execd_server(sb, runtime)
        sb.execd_port = sb.execd.port
        if sb.network_policy is not None and m.egress_mode != "off":
            from mock_opensandbox.docker.egress import start_for

            start_for(sb, runtime, m)  # raises the server's 500 (a policy the sidecar refuses)
        return entry

    @property
    def egress_settings(self) -> tuple[str, str]:
        """([egress] mode or "off" without an egress image, docker network_mode) for create's checks."""
        return self.mock.egress_mode, self.mock.network

    def _start_entrypoint(self, sb: Sandbox, runtime: Any) -> Any:
        try:
            # the container's stdout+stderr feed the diagnostics logs (docker logs)
            proc = runtime.start_entrypoint(
                sb.resources.get("argv", sb.entrypoint), stdout=subprocess.PIPE, stderr=subprocess.STDOUT
            )
            if getattr(proc, "stdout", None) is not None:
                sb.log.pump(proc.stdout)
            return proc
        except SandboxTerminated as exc:
            if (sb.volumes is None and sb.rootfs_image is None) or sb.deleted:
                raise
            raise start_failed(str(exc)) from None  # view.py could not mount them (fails closed)
        except FileNotFoundError:
            return 127  # sh: exec: not found
        except PermissionError:
            return 126
        except (OSError, ValueError):
            return 127

    def _plan_volumes(self, sb: Sandbox, runtime: Any) -> None:
        """server _provision_sandbox: ossfs mounts, then the container's binds (docker/volumes.py, runtime/mounts.py)."""
        from mock_opensandbox.runtime.mounts import VolumeTargetError, plan

        vs = self.mock.volumes
        vs.mount_ossfs(sb.volumes)
        if not sb.volumes.mounts:
            return
        if not runtime.isolated:
            raise start_failed(
                "the mock cannot mount volumes into a sandbox without a mount namespace of its "
                "own (%s)" % runtime.isolation_note
            )
        try:
            runtime.volumes = plan(runtime.root, runtime.resolve_in_root, sb.volumes.mounts)  # before PID 1
        except VolumeTargetError as exc:
            raise start_failed(str(exc)) from None
        vs.attach(sb.id, sb.volumes)

    def _required_headers(self, sb: Sandbox) -> dict[str, str] | None:
        if not self.mock.gateway:
            return None
        return {quirks.INGRESS_HEADER: "%s-%d" % (sb.id, quirks.EXECD_PORT)}

    def _start_execd_server(self, sb: Sandbox, runtime: Any) -> Any:
        from mock_opensandbox.execd.server import ExecdServer

        execd = ExecdServer(
            runtime,
            host="127.0.0.1",
            port=0,
            mode=sb.execd_mode,
            access_token=self.mock.execd_token,
            required_headers=self._required_headers(sb),
            close_delay=self.mock.execd_close_delay,
            verbose=self.mock.verbose,
            start_delay=self.mock.execd_start_delay,
            # fault rules and the request journal (workbench/admin.py) reach its listener too
            faults=self.mock.faults,
            sandbox_id=sb.id,
            journal=self.mock.journal,
        )
        execd.start()
        return execd

    def _start_execd_process(self, sb: Sandbox, runtime: Any) -> Any:
        from mock_opensandbox.runtime.execdproc import ExecdProcess, published

        m = self.mock
        if not self.mock_execd:
            # bootstrap.sh semantics inside the sandbox: /opt/opensandbox/execd, same namespaces and
            # capabilities as every sandbox process (raises when the sandbox is not isolated); in its
            # own network namespace it listens on 44772 and .port is the host end of a relay
            return runtime.start_execd(m.execd_bin, port=sb.resources.get("execd_port"), token=m.execd_token or None)
        port = free_port()
        argv = [m.execd_bin, "--port", str(port)]
        if m.execd_token:
            argv += ["-access-token", m.execd_token]
        log = open(os.path.join(runtime.root, "tmp", "execd.log"), "ab")  # like bootstrap.sh >/tmp/execd.log
        try:
            proc = runtime.spawn(argv, cwd="/", stdout=log, stderr=subprocess.STDOUT)
        finally:
            log.close()
        # runtime/execdproc.py's ExecdProcess: once it listens (15 s at most); stop() SIGKILLs its group at once
        return published(ExecdProcess(proc, port, runtime, grace=0), runtime, 15.0)

    def on_exit(self, sb: Sandbox) -> None:
        # the container stopped: execd and every other process in it go away; the root stays until delete
        from mock_opensandbox.docker.egress import stop_for

        stop_for(sb)  # its egress sidecar shares the namespace: it goes with it
        self._stop_execd(sb)
        if sb.runtime is not None:
            sb.runtime.terminate()

    def _stop_execd(self, sb: Sandbox) -> None:
        lock = sb.resources.get("lock")
        if lock is None:
            return
        with lock:
            execd, sb.resources["execd_stopped"] = sb.execd, True
        if execd is not None and not getattr(execd, "_mock_stopped", False):
            try:
                execd._mock_stopped = True
            except AttributeError:  # pragma: no cover
                pass
            execd.stop()

    def pause(self, sb: Sandbox) -> None:
        if sb.runtime is not None:
            sb.runtime.pause()  # SIGSTOP every process group (seed 000 §5.3), execd process included
            _wait_stopped(sb.runtime.process_groups())  # docker pause returns once the container is frozen

    def resume(self, sb: Sandbox) -> None:
        if sb.runtime is not None:
            sb.runtime.resume()

    def stop(self, sb: Sandbox) -> None:
        lock = sb.resources.get("lock")
        http = None
        if lock is not None:
            with lock:
                http = sb.resources.pop("http", None)
        if http is not None:
            http.stop()
        from mock_opensandbox.docker.egress import stop_for

        stop_for(sb)
        if sb.runtime is not None and sb.runtime.paused:
            sb.runtime.resume()  # let a frozen in-process execd's waiters finish before closing
        self._stop_execd(sb)
        if sb.runtime is not None:
            sb.runtime.cleanup()
            if self.mock._root_given:
                self.mock.janitor.untrack("dir", sb.runtime.home)
        if sb.volumes is not None and self.mock.volumes is not None:
            self.mock.volumes.abandon(sb.volumes, sb.id)  # deleteOnSandboxTermination

    def isolation(self) -> str:
        """One line for /health's x-mock-isolation header: "isolated" or "host; <why>"."""
        if self.isolate is False:
            return (
                "host; isolation disabled (commands run with cwd/HOME/TMPDIR inside the sandbox root)"
                + self._images_note()
            )
        from mock_opensandbox.runtime.probe import isolation_header
        from mock_opensandbox.runtime.sandbox import network_note
        from mock_opensandbox.runtime.openat2 import (
            NOTE as files_note,
        )  # "" when openat2(RESOLVE_IN_ROOT) confines the files API

        head = isolation_header()
        net = network_note(self.mock.network) if head.startswith("isolated") else ""
        egress = "; egress off (%s)" % self.mock.egress_note if self.mock.egress_note else ""
        return (
            (head + "; " + net if net else head)
            + ("; " + files_note if files_note else "")
            + self._images_note()
            + egress
        )

    def _images_note(self) -> str:
        """x-mock-isolation's image part: "; images from <sources> (cache <dir>)" when the mock has an image
        store; nothing without one (every sandbox gets the host-tools view, as before)."""
        images = self.mock.images
        if images is None:
            return ""
        from mock_opensandbox.runtime.probe import probe_result

        ok, _, _, pid_mode = probe_result()
        if self.isolate is False or not ok or pid_mode is None:  # rootfs.py needs a PID 1 of the sandbox's own
            return "; " + images.describe() + ", pulled only: sandboxes get the host-tools view"
        return "; " + images.describe()

    # -- endpoints --------------------------------------------------------------------------------
    def endpoint(self, sb: Sandbox, port: int) -> tuple[str, dict[str, str] | None]:
        """Docker bridge mode (server services/docker/networking.py, recording 05): 8080 has its own
        published host port, every other port goes through execd's /proxy/<port>."""
        headers = None
        if self.mock.gateway:
            # [choice] gateway (header route mode) keeps the direct address but requires the routing
            # header on every execd request (seed 000 §5.4 "gateway mode")
            headers = {quirks.INGRESS_HEADER: "%s-%d" % (sb.id, quirks.EXECD_PORT)}
        sidecar = sb.resources.get("egress")
        if port == quirks.EGRESS_PORT and sidecar is not None:
            # networking.py _attach_egress_auth_headers: the sidecar's token on the endpoint of 18080
            from mock_opensandbox.docker.egress import AUTH_HEADER

            headers = dict(headers or {}, **{AUTH_HEADER: sidecar.token})
        if port == quirks.HTTP_PORT:
            return "127.0.0.1:%d" % self._http_listener(sb), headers
        if port == quirks.EXECD_PORT and self.mock.execd_bin:
            # an execd process: its published port (a relay to 44772 in the sandbox's network
            # namespace, or its own host port with the host network) is the bare address
            # (server services/docker/networking.py; seed 000 §5.3 'endpoint: "127.0.0.1:<p>"')
            return "127.0.0.1:%d" % (sb.execd_port or 0), headers
        return "127.0.0.1:%d/proxy/%d" % (sb.execd_port or 0, port), headers

    def _http_listener(self, sb: Sandbox) -> int:
        lock = sb.resources.setdefault("lock", threading.Lock())
        with lock:
            srv = sb.resources.get("http")
            if srv is None:
                if sb.deleted:
                    return 0
                rt = sb.runtime
                connect = None
                if rt is not None and getattr(rt, "has_netns", False):
                    # Docker publishes 8080 itself: straight to the sandbox's own port 8080
                    def connect() -> socket.socket:
                        return rt.connect(quirks.HTTP_PORT, timeout=10)

                app = PortForwardApp(
                    lambda: self._http_target(sb),
                    verbose=self.mock.verbose,
                    faults=self.mock.faults,
                    sandbox_id=sb.id,
                    journal=self.mock.journal,
                    connect=connect,
                )
                srv = Server(("127.0.0.1", 0), PortForwardHandler, app)
                srv.start(name="mock-osb-8080-%s" % sb.id[:8])
                sb.resources["http"] = srv
            return srv.port

    def _http_target(self, sb: Sandbox) -> tuple[str, dict[str, str]]:
        if sb.runtime is not None and getattr(sb.runtime, "has_netns", False):
            return "127.0.0.1:%d" % quirks.HTTP_PORT, {}  # reached with runtime.connect (_http_listener)
        headers: dict[str, str] = {}
        if self.mock.execd_token:
            headers["X-EXECD-ACCESS-TOKEN"] = self.mock.execd_token
        headers.update(self._required_headers(sb) or {})
        return "127.0.0.1:%d/proxy/%d" % (sb.execd_port or 0, quirks.HTTP_PORT), headers


class MockOpenSandbox(WorkbenchMixin):
    """The mock OpenSandbox server. Not started until ``start()`` (or ``with``)."""

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        api_key: str | None = None,
        insecure: bool = False,
        execd_mode: str = "v1.1.0",
        execd_token: str | None = None,
        gateway: bool = False,
        root: str | None = None,
        execd_close_delay: float = 1.0,
        execd_bin: str | None = None,
        clock: Callable[[], datetime] | None = None,
        *,
        verbose: bool = False,
        pull_fails: Callable[[str], bool] | Iterable[str] | None = None,
        isolate: bool | None = None,
        reap_interval: float = 0.1,
        warn: Callable[[str], None] | None = None,
        execd_start_delay: float = 0.0,
        max_sandbox_timeout: int | None = DEFAULT_MAX_SANDBOX_TIMEOUT,
        network: str = "bridge",
        volumes_dir: str | None = None,
        allowed_host_paths: Iterable[str] = (),
        pids_limit: int | None = DEFAULT_PIDS_LIMIT,
        image_dir: str | None = None,
        image_cache: str | None = None,
        egress_mode: str | None = None,
        egress_dns_upstream: str | None = None,
        egress_ready_timeout: float = 30.0,
        jupyter_env: str | None = None,
        egress_bin: str | None = None,
    ):
        if execd_mode not in EXECD_MODES:
            raise ValueError("execd_mode must be one of %s, not %r" % (", ".join(EXECD_MODES), execd_mode))
        if not isinstance(port, int) or not 0 <= port <= 65535:
            raise ValueError("port must be an integer between 0 and 65535")
        if api_key is not None and (not api_key or any(c in api_key for c in "\r\n\x00")):
            raise ValueError("api_key must be a non-empty string without control characters")
        self.host = host
        self.requested_port = port
        self.insecure = insecure
        self.generated_api_key = api_key is None and not insecure
        self._api_key = api_key if api_key is not None else (None if insecure else secrets.token_urlsafe(24))
        self._execd_mode = execd_mode
        self.execd_token = execd_token
        self.gateway = gateway
        self._root_given = root
        self.root = ""
        self.execd_close_delay = execd_close_delay
        # seconds a new sandbox's execd refuses connections although the create already says Running
        # (DEVELOPERS.md "Running arrives before execd answers /ping"); 0 keeps test suites fast
        self.execd_start_delay = execd_start_delay
        # server [server] max_sandbox_timeout_seconds: 86400 in the server's example config; 0 or None
        # = unset (no upper bound)
        if max_sandbox_timeout == 0:
            max_sandbox_timeout = None
        if max_sandbox_timeout is not None and (not isinstance(max_sandbox_timeout, int) or max_sandbox_timeout < 60):
            raise ValueError("max_sandbox_timeout must be an integer >= 60 (seconds), or 0/None for no limit")
        self.max_sandbox_timeout = max_sandbox_timeout
        # server [docker] pids_limit (4096, config.py default and example config); 0 or None = no limit
        if pids_limit == 0:
            pids_limit = None
        if pids_limit is not None and (
            not isinstance(pids_limit, int) or isinstance(pids_limit, bool) or pids_limit < 1
        ):
            raise ValueError("pids_limit must be a positive integer, or 0/None for no limit")
        self.pids_limit = pids_limit
        if (
            not isinstance(execd_close_delay, (int, float))
            or not execd_close_delay >= 0
            or execd_close_delay == float("inf")
        ):
            raise ValueError("execd_close_delay must be a number of seconds >= 0")
        # what a dead mock leaves is found by this id (cgroups osb-mock-<id>-<sandbox>) and removed by
        # the janitor process (runtime/janitor.py)
        self.mock_id = secrets.token_hex(4)
        self.janitor = Janitor()
        # volumes (docker/volumes.py): named volumes under volumes_dir (default <root>/volumes, gone with a temp
        # root); host binds only under allowed_host_paths (server [storage] allowed_host_paths, [] = none)
        self.allowed_host_paths = [str(p) for p in allowed_host_paths]
        for p in self.allowed_host_paths:
            if not p.startswith("/"):
                raise ValueError("allowed_host_paths must be absolute paths, not %r" % p)
        self._volumes_dir = volumes_dir
        self.volumes: VolumeStore | None = None
        self.execd_bin = execd_bin
        # "bridge" (the server's example config): a network namespace per sandbox, published ports
        # relayed from 127.0.0.1; "host": the sandboxes share the host's network (runtime/netns.py)
        if network not in NETWORK_MODES:
            raise ValueError("network must be one of %s, not %r" % (", ".join(NETWORK_MODES), network))
        self.network = network
        from mock_opensandbox.docker.egress import configure  # networkPolicy: a server with an egress image (egress/)

        self.egress_mode_given: str | None = egress_mode
        self.egress_mode, self.egress_upstream, self.egress_ready_timeout, self.egress_bin = configure(
            egress_mode, egress_dns_upstream, egress_ready_timeout, egress_bin
        )
        self.egress_note = ""  # why networkPolicy is refused on this host (set at start)
        self.clock = clock
        self.verbose = verbose
        self.pull_fails = pull_fails
        self.isolate = isolate
        self.reap_interval = reap_interval
        self._warn = warn or (lambda msg: print(msg, file=sys.stderr, flush=True))
        # fault injection rules for every listener of this mock (workbench/faults.py, docs/FAULTS.md); rules may be
        # added before start()
        self.faults = FaultRegistry(verbose=verbose)
        # the workbench (workbench/admin.py, workbench/journal.py): request journal + /__mock__/ admin API and dashboard
        self._initial_execd_mode = execd_mode
        self.journal = Journal(secrets=lambda: (self._api_key or "", self.execd_token or ""))
        self.admin = AdminAPI(
            MockBackend(self), self.journal, self.faults, api_key=lambda: self._api_key, bind_host=lambda: self.host
        )
        # the image store (images/, docs/IMAGES.md): made at start() when image_dir is given
        if image_dir is not None and not os.path.isdir(image_dir):
            raise ValueError("image_dir %r is not a directory" % image_dir)
        self.image_dir = image_dir
        self.image_cache = image_cache
        # a pip-made Jupyter env for code-interpreter images (runtime/jupyterenv.py, docs: --jupyter-env)
        if jupyter_env is not None and check_jupyter_env(jupyter_env):
            raise ValueError(check_jupyter_env(jupyter_env))
        self.jupyter_env = os.path.realpath(jupyter_env) if jupyter_env else None  # bound at its real path
        self.images: Any = None  # images.mock.ImagePuller while started with an image_dir
        self.snapshots: Any = None  # snapshots.SnapshotStore while started
        self.store: SandboxStore | None = None
        self.provisioner: MockProvisioner | None = None
        self._server: Server | None = None
        self._lock = threading.Lock()
        self._started = False

    # -- properties --------------------------------------------------------------------------------
    @property
    def api_key(self) -> str | None:
        return self._api_key

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the mock is not started")
        return self._server.port

    @property
    def base_url(self) -> str:
        host = self.host
        if host in ("0.0.0.0", "", "::"):
            host = "127.0.0.1"
        if ":" in host:
            host = "[%s]" % host
        return "http://%s:%d" % (host, self.port)

    @property
    def execd_mode(self) -> str:
        return self._execd_mode

    @execd_mode.setter
    def execd_mode(self, mode: str) -> None:
        if mode not in EXECD_MODES:
            raise ValueError("execd_mode must be one of %s" % ", ".join(EXECD_MODES))
        self._execd_mode = mode  # the default for sandboxes created from now on

    @property
    def sandboxes(self) -> dict[str, Sandbox]:
        """Live sandboxes by id (a copy of the table; the Sandbox objects are the model's)."""
        return self.store.snapshot() if self.store is not None else {}

    def set_execd_mode(self, sandbox_id: str, mode: str) -> None:
        """Switch one sandbox's in-process execd between "v1.1.0" and "latest" behaviour."""
        if mode not in EXECD_MODES:
            raise ValueError("execd mode must be one of %s" % ", ".join(EXECD_MODES))
        if self.store is None:
            raise RuntimeError("the mock is not started")
        sb = self.store.get(sandbox_id)
        if self.execd_bin:
            raise ValueError("the execd mode of an execd process (execd_bin) cannot be changed")
        sb.execd_mode = mode
        execd = sb.execd
        if execd is not None:
            execd.set_mode(mode)

    # -- start / stop ------------------------------------------------------------------------------
    def start(self) -> "MockOpenSandbox":
        with self._lock:
            if self._started:
                return self
            if not is_loopback_host(self.host):
                self._warn(
                    "WARNING: mock OpenSandbox listening on %s, not loopback: anyone who can reach this "
                    "address can run commands as your user. Use 127.0.0.1 unless you mean it." % self.host
                )
            if self.janitor.closed:
                self.janitor = Janitor()
            from mock_opensandbox.docker.egress import check_host

            check_host(self)
            default_signals_for_children()  # a container's processes never inherit ignored signals
            self._signals_taken = True
            if self._root_given:
                os.makedirs(self._root_given, exist_ok=True)
                self.root = os.path.realpath(self._root_given)
                reap_root(self.root, _is_sandbox_id)  # what a dead mock (and its janitor) left in it
                self.janitor.ledger = os.path.join(self.root, JANITOR_LEDGER)  # what this one is about to make
                self.janitor.track("dir", self.janitor.ledger)  # gone with this mock's end, like what it lists
            else:
                self.root = os.path.realpath(tempfile.mkdtemp(prefix="mock-opensandbox-"))
                self.janitor.track("dir", self.root)
            try:
                self.volumes = VolumeStore(
                    self._volumes_dir or os.path.join(self.root, "volumes"), self.allowed_host_paths
                )
                self.provisioner = MockProvisioner(self)
                self.store = SandboxStore(
                    clock=self.clock,
                    provisioner=self.provisioner,
                    pull_fails=self.pull_fails,
                    reap_interval=self.reap_interval,
                )
                if self.image_dir:
                    from mock_opensandbox.images import ImageStore
                    from mock_opensandbox.docker.images import ImagePuller, default_cache_dir

                    self.images = ImagePuller(ImageStore(self.image_cache or default_cache_dir(), self.image_dir))
                    self.store.images = self.images
                self.snapshots = self._snapshot_store()
                self.faults.reopen()
                app = LifecycleApp(
                    self.store,
                    self.provisioner,
                    api_key=self._api_key,
                    bind_host=self.host,
                    verbose=self.verbose,
                    faults=self.faults,
                    max_timeout=self.max_sandbox_timeout,
                    allowed_host_paths=self.allowed_host_paths,
                    volumes=self.volumes,
                )
                app.snapshots = self.snapshots
                app = AdminLayer(app, self.admin)  # /__mock__/ workbench routes in front (workbench/admin.py)
                app.journal = self.journal
                family_host = self.host
                if ":" in family_host:
                    srv_cls = type("Server6", (Server,), {"address_family": socket.AF_INET6})
                else:
                    srv_cls = Server
                self._server = srv_cls((family_host, self.requested_port), LifecycleHandler, app)
                self._server.start(name="mock-osb-lifecycle")
            except BaseException:
                self._teardown()
                raise
            self._started = True
            atexit.register(self.stop)
            return self

    def stop(self) -> None:
        """Terminate every sandbox process, close every listener, remove the temp root. Idempotent."""
        with self._lock:
            if not self._started and self.store is None and self._server is None:
                return
            self._started = False
            self.faults.close()  # stalled, delayed and dribbling requests end now
            self._teardown()
            if getattr(self, "_signals_taken", False):
                self._signals_taken = False
                inherited_signals_back()
            try:
                atexit.unregister(self.stop)
            except Exception:  # pragma: no cover
                pass

    def _teardown(self) -> None:
        if self._server is not None:
            try:
                self._server.stop()
            finally:
                self._server = None
        if self.store is not None:
            try:
                self.store.close()
            finally:
                self.store = None
        if self.snapshots is not None:  # the mock's snapshots go with it (their images too, from any cache)
            self.snapshots.clear()
            self.snapshots = None
            if self.root:  # the store of its own (no --image-dir), also under a --root that stays
                shutil.rmtree(os.path.join(self.root, "snapshot-images"), ignore_errors=True)
        if self.images is not None:
            self.images.store.close()  # the cache stays on disk for the next run
            self.images = None
        if self.root and not self._root_given:
            shutil.rmtree(self.root, ignore_errors=True)
        self.janitor.close()  # everything is removed: it finds nothing left and exits

    def _snapshot_store(self) -> Any:
        """Snapshots (docker/snapshots.py) committing into the image store (images/commit.py): the --image-dir
        store's cache, else a store of this mock's own under its root (docs/IMAGES.md, "Snapshots")."""
        from mock_opensandbox.images.commit import Committer
        from mock_opensandbox.docker.snapshots import SnapshotStore

        def own_store() -> Any:
            if self.images is not None:
                return self.images.store
            from mock_opensandbox.images import ImageStore

            return ImageStore(os.path.join(self.root, "snapshot-images"), local_daemon=False, registry=False)

        c = Committer(own_store)
        return SnapshotStore(self.store, c, c.remove)

    def sandbox_limits(self, sb: Sandbox) -> Any:
        """The sandbox's cgroup limits: resourceLimits (server container_ops.py mem_limit, nano_cpus)
        and [docker] pids_limit (runtime/cgroups.py)."""
        from mock_opensandbox.runtime.cgroups import Limits
        from mock_opensandbox.lifecycle.validation import resolve_resource_limits

        try:
            r = resolve_resource_limits(sb.resource_limits)
        except Exception:  # noqa: BLE001 - validated at create; never fail a start over it
            r = {}
        return Limits(memory=r.get("memory"), nano_cpus=r.get("cpu"), pids=self.pids_limit)

    def __enter__(self) -> "MockOpenSandbox":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = self.base_url if self._server is not None else "stopped"
        return "<MockOpenSandbox %s>" % state
