"""The Docker runtime service of the mock (server services/docker/ at 3bb6fad): one "container" per sandbox.

``MockProvisioner`` gives every sandbox a SandboxRuntime (its root and processes, runtime/), the image's tree
or a snapshot's (images/), its volumes (docker/volumes.py), an execd (the in-process one, execd/, or an
execd process: runtime/execdproc.py), its egress sidecar (docker/egress/) and, on demand, a listener for the
published container port 8080 (lifecycle/proxy.py). ``ContainerState`` is what it keeps per sandbox
(``Sandbox.container``). Its collaborators are named in its constructor (the settings, MockOptions; the
janitor, the volume and image stores, the workbench's fault rules and journal as wire/listener.py declares them,
the egress settings); the facade (server.py) builds it and never hears from it. Standard library only.
"""

from __future__ import annotations

import os
import socket
import subprocess
import threading
import time
from dataclasses import dataclass
from typing import Any

from mock_opensandbox.docker.egress import AUTH_HEADER, EgressSettings, start_for, stop_for
from mock_opensandbox.docker.images import ImagePuller
from mock_opensandbox.docker.volumes import VolumeStore, start_failed
from mock_opensandbox.execd.server import ExecdServer
from mock_opensandbox.images.commit import restore_into
from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.lifecycle.k8s_diagnostics import pod_name
from mock_opensandbox.lifecycle.model import Provisioner, Sandbox
from mock_opensandbox.lifecycle.proxy import PortForwardApp, PortForwardHandler
from mock_opensandbox.lifecycle.validation_checks import resolve_resource_limits
from mock_opensandbox.options import MockOptions
from mock_opensandbox.runtime import SandboxRuntime, jupyterenv
from mock_opensandbox.runtime._util import rmtree
from mock_opensandbox.runtime.cgroups import Limits
from mock_opensandbox.runtime.execdproc import ExecdProcess, published
from mock_opensandbox.runtime.holder import write_dockerenv
from mock_opensandbox.runtime.janitor import Janitor
from mock_opensandbox.runtime.mounts import VolumeTargetError, plan
from mock_opensandbox.runtime.openat2 import NOTE as files_note  # "" when openat2(RESOLVE_IN_ROOT) confines files
from mock_opensandbox.runtime.pid1 import SandboxTerminated
from mock_opensandbox.runtime.probe import isolation_header, probe_result
from mock_opensandbox.runtime.rootfs import RootfsError, UserNotFound
from mock_opensandbox.runtime.sandbox import network_note
from mock_opensandbox.wire.listener import FaultRules, RequestJournal, Server
from mock_opensandbox.wire.relay import free_port


@dataclass
class ContainerState:
    """What the provisioner keeps for one sandbox (``Sandbox.container``); ``lock`` guards ``http``,
    ``execd_stopped`` and the sandbox's ``execd``."""

    lock: threading.Lock
    argv: list[str] | None = None  # the entrypoint PID 1 runs (a code-interpreter image's, with --jupyter-env)
    execd_port: int | None = None  # a real execd's port, chosen before PID 1 starts (runtime.use_execd)
    execd_stopped: bool = False  # execd.stop() was called (once per sandbox)
    http: Server | None = None  # the listener standing in for the published port 8080 (wire/listener.py Server)
    egress: Any = None  # the egress sidecar (docker/egress/), while the sandbox runs


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


def sandbox_limits(sb: Sandbox, pids_limit: int | None) -> Limits:
    """The sandbox's cgroup limits: resourceLimits (server container_ops.py mem_limit, nano_cpus)
    and [docker] pids_limit (runtime/cgroups.py)."""
    try:
        r = resolve_resource_limits(sb.resource_limits)
    except Exception:  # noqa: BLE001 - validated at create; never fail a start over it
        r = {}
    return Limits(memory=r.get("memory"), nano_cpus=r.get("cpu"), pids=pids_limit)


class _ExitedExecd:
    """The execd of a sandbox whose main process ended before execd listened (nothing to stop)."""

    def __init__(self, port: int):
        self.port = port

    def stop(self) -> None:
        pass


class MockProvisioner(Provisioner):
    """Gives every sandbox a SandboxRuntime (root dir + processes), an execd listener and, on demand, a
    listener standing in for the published container port 8080."""

    def __init__(
        self,
        options: MockOptions,
        *,
        root: str,
        mock_id: str,
        janitor: Janitor,
        volumes: VolumeStore,
        egress: EgressSettings,
        images: ImagePuller | None = None,
        faults: FaultRules | None = None,
        journal: RequestJournal | None = None,
        execd_mode: str | None = None,
    ):
        """``options``: the settings; ``root``: the directory of the sandboxes' roots; ``mock_id``: names their
        cgroups (osb-mock-<id>-<sandbox>); ``janitor``: removes what a dead mock leaves (runtime/janitor.py);
        ``volumes``: named volumes and binds (docker/volumes.py); ``egress``: the networkPolicy sidecars' settings
        (docker/egress/); ``images``: the image store with an image_dir (docker/images.py), else None; ``faults``
        and ``journal``: the workbench's fault rules and request journal for every listener it opens, or None;
        ``execd_mode``: the execd mode of sandboxes created from now on (the facade sets ``execd_mode``)."""
        self.opts = o = options
        self.root, self.mock_id, self.janitor = root, mock_id, janitor
        self.volumes, self.images, self.egress = volumes, images, egress
        self.faults, self.journal = faults, journal
        self.execd_mode: str = execd_mode or o.execd_mode
        self._lock = threading.Lock()  # creates a sandbox's ContainerState once (state())
        # decided once per start() of the mock (execd_bin and isolate are settings)
        self.mock_execd = bool(o.execd_bin and _is_mock_execd(o.execd_bin))
        isolate = o.isolate
        if self.mock_execd:
            # the mock's own stand-alone execd (a wrapper around `python -m mock_opensandbox.execd`)
            # needs the host's interpreter and this repository: it runs on the host with cwd = the
            # sandbox root (bootstrap.sh starts execd with cwd = the container's) and contains what it runs
            if isolate is None:
                isolate = False
        elif o.execd_bin and isolate is False:
            # any other execd (the real binary) runs only inside an isolated sandbox view, like the
            # server's container (runtime/execdproc.py); without one the sandbox fails to start
            isolate = None
        self.isolate: bool | None = isolate  # what every SandboxRuntime of this mock gets

    def state(self, sb: Sandbox) -> ContainerState:
        """The sandbox's ContainerState, made on first use (an endpoint may be asked for before start ends)."""
        st: ContainerState | None = sb.container
        if st is None:
            with self._lock:
                st = sb.container
                if st is None:
                    st = sb.container = ContainerState(threading.Lock())
        return st

    # -- lifecycle --------------------------------------------------------------------------------
    def start(self, sb: Sandbox) -> Any:
        o = self.opts
        st = self.state(sb)
        root = os.path.join(self.root, sb.id)
        if o.root:
            self.janitor.track("dir", root)  # the temp root as a whole is tracked at start()
        # server services/docker/container_ops.py: [docker] sandbox_env, the request's env, then
        # OPENSANDBOX_ID=<sandbox id> last (Docker keeps the last of a repeated name)
        env = {k: v for k, v in (sb.env or {}).items() if v is not None}
        jenv = jupyterenv.for_image(o.jupyter_env, sb.image)
        if jenv:  # the code-interpreter image's ENV; the request's env wins
            env = dict(jupyterenv.sandbox_env(jenv), **env)
        env["OPENSANDBOX_ID"] = sb.id
        try:  # the image's own tree as the root when the mock has an image store (docs/IMAGES.md)
            runtime = SandboxRuntime(
                root,
                env=env,
                isolate=self.isolate,
                network=o.network,
                limits=sandbox_limits(sb, o.pids_limit),
                cgroup_name="osb-mock-%s-%s" % (self.mock_id, sb.id),
                janitor=self.janitor,
                image=sb.rootfs_image,
                # Docker: the container's short id (diagnostics' "Container ID"); Kubernetes: the pod's name
                # (its "Pod Name"): QUIRKS.md, "Hostname"
                hostname=pod_name(sb) if o.runtime == "kubernetes" else sb.container_id[:12],
            )
        except (RootfsError, UserNotFound) as exc:
            rmtree(root)  # (a partial copy made as non-root may hold 0555 directories)
            raise start_failed(str(exc)) from None
        sb.runtime = runtime
        if sb.snapshot_image is not None:  # snapshotId: what the snapshot holds (images/commit.py)
            restore_into(sb, runtime)
        if o.runtime != "kubernetes":  # Docker's /.dockerenv; a pod's container runtime makes none (QUIRKS)
            try:
                write_dockerenv(runtime.root)
            except OSError:
                pass
        if sb.volumes is not None:
            self._plan_volumes(sb, runtime)
        if jenv and runtime.isolated:  # the env bound read-only at its own path, with the volumes (before PID 1)
            jupyterenv.bind_into(runtime, sb.volumes, jenv)
        sb.execd_mode = self.execd_mode
        if o.execd_bin and not self.mock_execd:
            # a real execd is the sandbox's /opt/opensandbox/execd: PID 1's bootstrap.sh starts it, then
            # the entrypoint (raises when the sandbox is not isolated)
            st.execd_port = runtime.use_execd(o.execd_bin, token=o.execd_token or None)
        # server services/docker: the container runs bootstrap.sh -> execd &, then "$@" &
        st.argv, own = jupyterenv.entrypoint_for(sb.entrypoint, runtime) if jenv else (sb.entrypoint, 0)
        entry = self._start_entrypoint(sb, runtime)
        if jenv and own:  # the entrypoint's Jupyter, inside the sandbox
            jupyterenv.start_logged(runtime, jenv, sb.log, (OSError, ValueError, SandboxTerminated))
        if o.execd_bin:
            try:
                sb.execd = self._start_execd_process(sb, runtime)
            except SandboxTerminated as exc:  # its holder: view.py could not mount the volumes
                if (sb.volumes is None and sb.rootfs_image is None) or sb.deleted:
                    raise
                raise start_failed(str(exc)) from None
            except RuntimeError:
                if not isinstance(entry, int) and entry.poll() is None:
                    raise
                sb.execd = _ExitedExecd(st.execd_port or 0)  # the container ended at once
        else:
            sb.execd = self._start_execd_server(sb, runtime)
        sb.execd_port = sb.execd.port
        if sb.network_policy is not None and self.egress.mode != "off":
            # raises the server's 500 (a policy the sidecar refuses)
            st.egress = start_for(sb, runtime, self.egress, self.janitor)
        holder = runtime.pid1.holder
        if holder is not None:  # like `docker start`: create answers once the entrypoint runs (Holder.settle)
            holder.settle()
        return entry

    @property
    def egress_settings(self) -> tuple[str, str]:
        """([egress] mode or "off" without an egress image, docker network_mode) for create's checks."""
        return self.egress.mode, self.opts.network

    def _start_entrypoint(self, sb: Sandbox, runtime: Any) -> Any:
        try:
            # the container's stdout+stderr feed the diagnostics logs (docker logs)
            proc = runtime.start_entrypoint(
                self.state(sb).argv or sb.entrypoint, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
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
        vs = self.volumes
        vs.mount_ossfs(sb.volumes)
        if not sb.volumes.mounts:
            return
        if not runtime.isolated:
            raise start_failed(
                "the mock cannot mount volumes into a sandbox without a mount namespace of its "
                "own (%s)" % runtime.isolation_note
            )
        try:
            runtime.volumes = plan(runtime.root, runtime.paths.resolve_in_root, sb.volumes.mounts)  # before PID 1
        except VolumeTargetError as exc:
            raise start_failed(str(exc)) from None
        vs.attach(sb.id, sb.volumes)

    def required_headers(self, sb: Sandbox) -> dict[str, str] | None:
        # the Kubernetes runtime has a real gateway (docker/gateway.py) that deletes the header before execd
        if not self.opts.gateway or self.opts.runtime == "kubernetes":
            return None
        return {quirks.INGRESS_HEADER: "%s-%d" % (sb.id, quirks.EXECD_PORT)}

    def _start_execd_server(self, sb: Sandbox, runtime: Any) -> Any:
        o = self.opts
        execd = ExecdServer(
            runtime,
            host="127.0.0.1",
            port=0,
            mode=sb.execd_mode or self.execd_mode,  # set at create (above); the default otherwise
            access_token=o.execd_token,
            required_headers=self.required_headers(sb),
            close_delay=o.execd_close_delay,
            tail_interval=o.execd_tail_interval,
            context_wait=o.code_context_wait,
            unknown_language_wait=o.code_unknown_language_wait,
            verbose=o.verbose,
            start_delay=o.execd_start_delay,
            # fault rules and the request journal (workbench/admin.py) reach its listener too
            faults=self.faults,
            sandbox_id=sb.id,
            journal=self.journal,
        )
        execd.start()
        return execd

    def _start_execd_process(self, sb: Sandbox, runtime: Any) -> Any:
        m = self.opts
        if not self.mock_execd:
            # bootstrap.sh semantics inside the sandbox: /opt/opensandbox/execd, same namespaces and
            # capabilities as every sandbox process (raises when the sandbox is not isolated); in its
            # own network namespace it listens on 44772 and .port is the host end of a relay
            return runtime.start_execd(m.execd_bin, port=self.state(sb).execd_port, token=m.execd_token or None)
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
        self._stop_egress(sb)  # its egress sidecar shares the namespace: it goes with it
        self._stop_execd(sb)
        if sb.runtime is not None:
            sb.runtime.terminate()

    def _stop_execd(self, sb: Sandbox) -> None:
        st = sb.container
        if st is None:  # never started
            return
        with st.lock:
            execd, already = sb.execd, st.execd_stopped
            st.execd_stopped = True
        if execd is not None and not already:
            execd.stop()

    def _stop_egress(self, sb: Sandbox) -> None:
        st = sb.container
        if st is None:
            return
        with st.lock:
            sidecar, st.egress = st.egress, None
        if sidecar is not None:
            stop_for(sidecar)

    def pause(self, sb: Sandbox) -> None:
        if sb.runtime is not None:
            sb.runtime.pause()  # SIGSTOP every process group (docker pause: the cgroup freezer), execd included
            _wait_stopped(sb.runtime.process_groups())  # docker pause returns once the container is frozen

    def resume(self, sb: Sandbox) -> None:
        if sb.runtime is not None:
            sb.runtime.resume()

    def stop(self, sb: Sandbox) -> None:
        st = sb.container
        http = None
        if st is not None:
            with st.lock:
                http, st.http = st.http, None
        if http is not None:
            http.stop()
        self._stop_egress(sb)
        if sb.runtime is not None and sb.runtime.paused:
            sb.runtime.resume()  # let a frozen in-process execd's waiters finish before closing
        self._stop_execd(sb)
        if sb.runtime is not None:
            sb.runtime.cleanup()
            if self.opts.root:
                self.janitor.untrack("dir", sb.runtime.home)
        if sb.volumes is not None:
            self.volumes.abandon(sb.volumes, sb.id)  # deleteOnSandboxTermination

    def isolation(self) -> str:
        """One line for /health's x-mock-isolation header: "isolated" or "host; <why>"."""
        if self.isolate is False:
            return (
                "host; isolation disabled (commands run with cwd/HOME/TMPDIR inside the sandbox root)"
                + self._images_note()
            )
        head = isolation_header()
        net = network_note(self.opts.network) if head.startswith("isolated") else ""
        egress = "; egress off (%s)" % self.egress.note if self.egress.note else ""
        return (
            (head + "; " + net if net else head)
            + ("; " + files_note if files_note else "")
            + self._images_note()
            + egress
        )

    def _images_note(self) -> str:
        """x-mock-isolation's image part: "; images from <sources> (cache <dir>)" when the mock has an image
        store; nothing without one (every sandbox gets the host-tools view, as before)."""
        images = self.images
        if images is None:
            return ""
        ok, _, _, pid_mode = probe_result()
        if self.isolate is False or not ok or pid_mode is None:  # rootfs.py needs a PID 1 of the sandbox's own
            return "; " + images.describe() + ", pulled only: sandboxes get the host-tools view"
        return "; " + images.describe()

    # -- endpoints --------------------------------------------------------------------------------
    def endpoint(self, sb: Sandbox, port: int) -> tuple[str, dict[str, str] | None]:
        """Docker bridge mode (server services/docker/networking.py, recording 05): 8080 has its own
        published host port, every other port goes through execd's /proxy/<port>."""
        headers = None
        if self.opts.gateway and self.opts.runtime != "kubernetes":  # kubernetes: the pod's own address (gateway.py)
            # [choice] gateway (header route mode) keeps the direct address but requires the routing
            # header on every execd request (QUIRKS.md, "gateway")
            headers = {quirks.INGRESS_HEADER: "%s-%d" % (sb.id, quirks.EXECD_PORT)}
        sidecar = sb.container.egress if sb.container is not None else None
        if port == quirks.EGRESS_PORT and sidecar is not None:
            # networking.py _attach_egress_auth_headers: the sidecar's token on the endpoint of 18080
            headers = dict(headers or {}, **{AUTH_HEADER: sidecar.token})
        if port == quirks.HTTP_PORT:
            return "127.0.0.1:%d" % self._http_listener(sb), headers
        if port == quirks.EXECD_PORT and self.opts.execd_bin:
            # an execd process: its published port (a relay to 44772 in the sandbox's network
            # namespace, or its own host port with the host network) is the bare address
            # (server services/docker/networking.py: 'endpoint: "127.0.0.1:<p>"', fixtures/05_*)
            return "127.0.0.1:%d" % (sb.execd_port or 0), headers
        return "127.0.0.1:%d/proxy/%d" % (sb.execd_port or 0, port), headers

    def _http_listener(self, sb: Sandbox) -> int:
        st = self.state(sb)
        with st.lock:
            srv = st.http
            if srv is None:
                if sb.deleted:
                    return 0
                rt = sb.runtime
                connect = None
                if rt is not None and getattr(rt, "has_netns", False):
                    # Docker publishes 8080 itself: straight to the sandbox's own port 8080
                    def connect() -> socket.socket:
                        sock: socket.socket = rt.connect(quirks.HTTP_PORT, timeout=10)
                        return sock

                app = PortForwardApp(
                    lambda: self._http_target(sb),
                    verbose=self.opts.verbose,
                    faults=self.faults,
                    sandbox_id=sb.id,
                    journal=self.journal,
                    connect=connect,
                )
                srv = Server(("127.0.0.1", 0), PortForwardHandler, app)
                srv.start(name="mock-osb-8080-%s" % sb.id[:8])
                st.http = srv
            return srv.port

    def _http_target(self, sb: Sandbox) -> tuple[str, dict[str, str]]:
        if sb.runtime is not None and getattr(sb.runtime, "has_netns", False):
            return "127.0.0.1:%d" % quirks.HTTP_PORT, {}  # reached with runtime.connect (_http_listener)
        headers: dict[str, str] = {}
        if self.opts.execd_token:
            headers["X-EXECD-ACCESS-TOKEN"] = self.opts.execd_token
        headers.update(self.required_headers(sb) or {})
        return "127.0.0.1:%d/proxy/%d" % (sb.execd_port or 0, quirks.HTTP_PORT), headers
