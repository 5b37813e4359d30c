"""MockOpenSandbox: the whole mock (lifecycle listener + one execd per sandbox) as an in-process object.

    with MockOpenSandbox() as osb:
        client = MyClient(osb.base_url, api_key=osb.api_key)
    with MockOpenSandbox(MockOptions(execd_mode="latest", pids_limit=64)) as osb: ...

Like moto's ThreadedMotoServer: ``start()`` / ``stop()`` / context manager, ephemeral port by default. The
settings are one MockOptions (options.py); the wiring is here: the lifecycle routes (lifecycle/), the Docker
runtime service (docker/provisioner.py), and the workbench (workbench/) in front. Standard library only.
"""

from __future__ import annotations

import atexit
import ipaddress
import os
import secrets
import shutil
import socket
import sys
import tempfile
import threading
import uuid
from typing import Any, cast

from mock_opensandbox.docker import diagnostics
from mock_opensandbox.docker.egress import EgressSettings, configure
from mock_opensandbox.docker.gateway import Gateway
from mock_opensandbox.docker.images import ImagePuller, default_cache_dir
from mock_opensandbox.docker.provisioner import MockProvisioner
from mock_opensandbox.docker.snapshots import SnapshotStore
from mock_opensandbox.docker.volumes import VolumeStore
from mock_opensandbox.images import ImageStore
from mock_opensandbox.images.commit import Committer
from mock_opensandbox.lifecycle.app import LifecycleApp, LifecycleHandler
from mock_opensandbox.lifecycle.ingress import Ingress
from mock_opensandbox.lifecycle.k8s_sandboxes import K8sSandboxes
from mock_opensandbox.lifecycle.k8s_sandboxes_routes import install as install_k8s_sandboxes
from mock_opensandbox.lifecycle.model import Sandbox, SandboxStore
from mock_opensandbox.lifecycle.pools import PoolStore
from mock_opensandbox.options import DEFAULT_MAX_SANDBOX_TIMEOUT, EXECD_MODES, NETWORK_MODES, MockOptions
from mock_opensandbox.runtime import nethub, zygote
from mock_opensandbox.runtime._util import default_signals_for_children, inherited_signals_back, spread_subdirs
from mock_opensandbox.runtime.janitor import LEDGER as JANITOR_LEDGER
from mock_opensandbox.runtime.janitor import Janitor, reap_root
from mock_opensandbox.server_config import configured
from mock_opensandbox.wire.listener import Server
from mock_opensandbox.workbench.admin import AdminAPI, AdminLayer, MockBackend, assert_requested
from mock_opensandbox.workbench.fault_routes import add_fault_routes
from mock_opensandbox.workbench.faultinject import inject
from mock_opensandbox.workbench.faults import FaultRegistry
from mock_opensandbox.workbench.journal import Journal

__all__ = ["DEFAULT_MAX_SANDBOX_TIMEOUT", "EXECD_MODES", "NETWORK_MODES", "MockOpenSandbox", "MockOptions"]


def _is_sandbox_id(name: str) -> bool:
    """A sandbox directory's name in the root (lifecycle/model.py: str(uuid4()))."""
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


_OPTION_NAMES = frozenset(MockOptions.__dataclass_fields__)


class MockOpenSandbox:
    """The mock OpenSandbox server. Not started until ``start()`` (or ``with``).

    ``MockOpenSandbox(options)`` takes one MockOptions; keyword arguments are shorthand for changed
    settings (``MockOpenSandbox(execd_mode="latest")`` is ``MockOpenSandbox(MockOptions(execd_mode="latest"))``).
    Every setting reads back as an attribute (``osb.execd_bin``); ``osb.options`` is the whole set."""

    def __init__(self, options: MockOptions | None = None, /, **changes: Any):
        if options is not None and not isinstance(options, MockOptions):
            raise TypeError("MockOpenSandbox(options): a MockOptions, not %s" % type(options).__name__)
        o, self.config_notes = configured((options or MockOptions()).replace(**changes), options, changes)
        o = self.options = o.checked()  # config_notes: a key of the config file the mock does not honour, a line each
        self.generated_api_key = o.api_key is None and not o.insecure
        self._api_key = o.api_key if o.api_key is not None else (None if o.insecure else secrets.token_urlsafe(24))
        self._execd_mode: str = o.execd_mode  # the default for new sandboxes
        self._initial_execd_mode: str = o.execd_mode
        self.root = ""  # the sandbox roots' directory while started (o.root, or a temp dir)
        # what a dead mock leaves is found by this id (cgroups osb-mock-<id>-<sandbox>) and removed by
        # the janitor process (runtime/janitor.py)
        self.mock_id = secrets.token_hex(4)
        self.janitor = Janitor()
        # networkPolicy: a server with an egress image (docker/egress/); the mode in force (and egress_note, why
        # networkPolicy is refused on this host) is decided at start
        self.egress: EgressSettings = configure(
            o.egress_mode, o.egress_dns_upstream, o.egress_ready_timeout, o.egress_bin
        )
        self._warn = o.warn or (lambda msg: print(msg, file=sys.stderr, flush=True))
        # fault injection rules for every listener of this mock (workbench/faults.py, docs/FAULTS.md), with the
        # injector that faults their requests (workbench/faultinject.py); rules may be added before start()
        self.faults = FaultRegistry(verbose=o.verbose, injector=inject)
        # the workbench (workbench/admin.py, workbench/journal.py): request journal + /__mock__/ admin API and dashboard
        self.journal = Journal(secrets=lambda: (self._api_key or "", o.execd_token or ""))
        self.admin = AdminAPI(
            MockBackend(self), self.journal, self.faults, api_key=lambda: self._api_key, bind_host=lambda: o.host
        )
        self.volumes: VolumeStore | None = None  # while started (docker/volumes.py)
        self.images: ImagePuller | None = None  # while started with an image_dir (docker/images.py)
        self.snapshots: SnapshotStore | None = None  # while started (docker/snapshots.py)
        self.store: SandboxStore | None = None
        self.pools: PoolStore | None = None  # while started with runtime="kubernetes" (lifecycle/pools.py)
        self.k8s: K8sSandboxes | None = None  # its sandboxes' state (lifecycle/k8s_sandboxes.py), likewise
        # runtime="kubernetes" with gateway=True: [ingress] gateway endpoints and the gateway (docker/gateway.py)
        self.ingress: Ingress | None = None
        self._gateway: Gateway | None = None
        self.provisioner: MockProvisioner | None = None
        self._server: Server | None = None
        self._lock = threading.Lock()
        self._started = False
        self._signals_taken = False

    def __getattr__(self, name: str) -> Any:
        """A setting, read from ``options`` (osb.execd_bin, osb.network, ...)."""
        if name in _OPTION_NAMES:
            return getattr(self.__dict__["options"], name)
        raise AttributeError("%r object has no attribute %r" % (type(self).__name__, name))

    # -- the egress settings in force (docker/egress/: EgressSettings) ----------------------------------
    @property
    def egress_mode(self) -> str:
        return self.egress.mode

    @property
    def egress_note(self) -> str:
        return self.egress.note

    @property
    def egress_upstream(self) -> tuple[str, int]:
        return self.egress.upstream

    @property
    def egress_ready_timeout(self) -> float:
        return self.egress.ready_timeout

    # -- the workbench (workbench/admin.py, workbench/journal.py) --------------------------------------
    def requests(
        self, method: Any = None, path: Any = None, sandbox: str | None = None, **filters: Any
    ) -> list[dict[str, Any]]:
        """Journal entries, oldest first. Filters: method ("GET", "GET|POST"), path (regex), sandbox,
        listener ("lifecycle", "execd", "port"), status (404, "4xx"), fault (rule id or "*"), since, limit."""
        return self.journal.entries(method=method, path=path, sandbox=sandbox, **filters)

    def assert_requested(
        self,
        method: Any = None,
        path: Any = None,
        sandbox: str | None = None,
        *,
        count: int | None = None,
        at_least: int | None = None,
        **filters: Any,
    ) -> list[dict[str, Any]]:
        """WireMock's verify: the journal holds requests matching these filters (exactly ``count``, or at
        least ``at_least``, default 1); AssertionError saying what was seen."""
        return assert_requested(
            self.journal, count=count, at_least=at_least, method=method, path=path, sandbox=sandbox, **filters
        )

    def reset(self, sandbox: str | None = None, *, keep_volumes: bool = False) -> dict[str, Any]:
        """Remove every sandbox (processes killed, roots removed), named volume (unless keep_volumes), fault
        rule and journal entry; or only one sandbox with its scoped rules and its journal entries."""
        return self.admin.reset(sandbox, keep_volumes=keep_volumes)

    def sandbox_state(self, sandbox_id: str) -> dict[str, Any] | None:
        """Internal state of one sandbox (processes, root, TTL left, paused, execd mode...), None if unknown."""
        return self.admin.backend.sandbox(sandbox_id)

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
        host = self.options.host
        if host in ("0.0.0.0", "", "::"):
            host = "127.0.0.1"
        if ":" in host:
            host = "[%s]" % host
        return "http://%s:%d" % (host, self.port)

    @property
    def running_url(self) -> str | None:
        """base_url while the mock listens, else None."""
        return self.base_url if self._server is not None else None

    @property
    def initial_execd_mode(self) -> str:
        """The execd mode the mock was made with (``reset()`` sets ``execd_mode`` back to it)."""
        return self._initial_execd_mode

    @property
    def execd_mode(self) -> str:
        return self._execd_mode

    @execd_mode.setter
    def execd_mode(self, mode: str) -> None:
        if mode not in EXECD_MODES:
            raise ValueError("execd_mode must be one of %s" % ", ".join(EXECD_MODES))
        self._execd_mode = mode  # the default for sandboxes created from now on
        if self.provisioner is not None:
            self.provisioner.execd_mode = mode

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
        if self.options.execd_bin:
            raise ValueError("the execd mode of an execd process (execd_bin) cannot be changed")
        sb.execd_mode = mode
        execd = sb.execd
        if execd is not None:
            execd.set_mode(mode)

    # -- start / stop ------------------------------------------------------------------------------
    def start(self) -> "MockOpenSandbox":
        o = self.options
        with self._lock:
            if self._started:
                return self
            if not is_loopback_host(o.host):
                self._warn(
                    "WARNING: mock OpenSandbox listening on %s, not loopback: anyone who can reach this "
                    "address can run commands as your user. Use 127.0.0.1 unless you mean it." % o.host
                )
            if self.janitor.closed:
                self.janitor = Janitor()
            self.egress = self.egress.checked(o.egress_mode, o.network)
            default_signals_for_children()  # a container's processes never inherit ignored signals
            self._signals_taken = True
            self._make_root()
            try:
                self._wire()
            except BaseException:
                self._teardown()
                raise
            self._started = True
            zygote.hold()  # its sandboxes' PID 1s come from the view's zygote (runtime/zygote.py)
            nethub.hold()  # and their eth0 from the sandboxes' bridge (runtime/nethub.py)
            atexit.register(self.stop)
            return self

    def _make_root(self) -> None:
        o = self.options
        if o.root:
            os.makedirs(o.root, exist_ok=True)
            self.root = os.path.realpath(o.root)
            reap_root(self.root, _is_sandbox_id)  # what a dead mock (and its janitor) left in it
            self.janitor.ledger = os.path.join(self.root, JANITOR_LEDGER)  # what this one is about to make
            self.janitor.track("dir", self.janitor.ledger)  # gone with this mock's end, like what it lists
        else:
            self.root = os.path.realpath(tempfile.mkdtemp(prefix="mock-opensandbox-"))
            self.janitor.track("dir", self.root)
        spread_subdirs(self.root)  # each sandbox's tree in an ext4 block group of its own (runtime/_util.py)

    def _wire(self) -> None:
        """The Docker service (volumes, provisioner, images, snapshots) under the lifecycle routes, the
        workbench in front of them (its admin layer and /__mock__/faults routes), one listener."""
        o = self.options
        self.volumes = VolumeStore(o.volumes_dir or os.path.join(self.root, "volumes"), list(o.allowed_host_paths))
        if o.image_dir:
            self.images = ImagePuller(ImageStore(o.image_cache or default_cache_dir(), o.image_dir))
        self.provisioner = MockProvisioner(
            o,
            root=self.root,
            mock_id=self.mock_id,
            janitor=self.janitor,
            volumes=self.volumes,
            egress=self.egress,
            images=self.images,
            faults=self.faults,
            journal=self.journal,
            execd_mode=self._execd_mode,
        )
        self.store = SandboxStore(
            clock=o.clock,
            provisioner=self.provisioner,
            pull_fails=o.pull_fails,
            reap_interval=o.reap_interval,
            images=self.images,
        )
        self.snapshots = self._snapshot_store()
        if o.runtime == "kubernetes":  # the pools API and poolRef creates (lifecycle/pools.py)
            store = self.store
            self.pools = PoolStore(store.clock, alive=lambda sid: sid in store.snapshot())
        self.faults.reopen()
        lifecycle = LifecycleApp(
            self.store,
            self.provisioner,
            api_key=self._api_key,
            bind_host=o.host,
            verbose=o.verbose,
            faults=self.faults,
            max_timeout=o.max_sandbox_timeout,
            allowed_host_paths=list(o.allowed_host_paths),
            volumes=self.volumes,
            snapshots=self.snapshots,
            diagnostics=diagnostics,
            pools=self.pools,
            ingress=self._start_gateway(),
        )
        if self.pools is not None:  # the Kubernetes runtime's sandbox answers (lifecycle/k8s_sandboxes_routes.py)
            self.k8s = install_k8s_sandboxes(lifecycle, o.sandbox_create_timeout, o.pool_acquisition_timeout)
        add_fault_routes(lifecycle.router, self.faults)  # /__mock__/faults behind the API key (docs/FAULTS.md)
        app = AdminLayer(lifecycle, self.admin)  # /__mock__/ workbench routes in front (workbench/admin.py)
        app.journal = self.journal
        srv_cls: type[Server] = Server
        if ":" in o.host:
            srv_cls = cast("type[Server]", type("Server6", (Server,), {"address_family": socket.AF_INET6}))
        self._server = srv_cls((o.host, o.port), LifecycleHandler, app)
        self._server.start(name="mock-osb-lifecycle")

    def stop(self) -> None:
        """Terminate every sandbox process, close every listener, remove the temp root. Idempotent."""
        with self._lock:
            if not self._started and self.store is None and self._server is None:
                return
            was_started, self._started = self._started, False
            self.faults.close()  # stalled, delayed and dribbling requests end now
            self._teardown()
            if was_started:
                zygote.release()  # after the sandboxes: the last mock of this process ends it
                nethub.release()
            if self._signals_taken:
                self._signals_taken = False
                inherited_signals_back()
            try:
                atexit.unregister(self.stop)
            except Exception:  # pragma: no cover
                pass

    def _start_gateway(self) -> Ingress | None:
        o = self.options
        if o.runtime != "kubernetes" or not o.gateway:
            return None
        self.ingress = Ingress(o.gateway_route, o.secure_access_keys, o.secure_access_active_key)
        assert self.store is not None and self.provisioner is not None  # _wire made them
        # 127.0.0.1, an ephemeral port; a sandbox's port is reached where the provisioner says
        self._gateway = Gateway(self.store, self.provisioner, self.ingress, verbose=o.verbose)
        self._gateway.start()
        return self.ingress

    def _teardown(self) -> None:
        if self.k8s is not None:  # creates waiting for a pod answer now
            self.k8s.closing.set()
            self.k8s = None
        if self._gateway is not None:
            try:
                self._gateway.stop()
            finally:
                self._gateway, self.ingress = None, None
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
        self.pools = None
        if self.snapshots is not None:  # the mock's snapshots go with it (their images too, from any cache)
            self.snapshots.clear()
            self.snapshots = None
            if self.root:  # the store of its own (no --image-dir), also under a --root that stays
                shutil.rmtree(os.path.join(self.root, "snapshot-images"), ignore_errors=True)
        if self.images is not None:
            self.images.store.close()  # the cache stays on disk for the next run
            self.images = None
        if self.root and not self.options.root:
            shutil.rmtree(self.root, ignore_errors=True)
        self.janitor.close()  # everything is removed: it finds nothing left and exits

    def _snapshot_store(self) -> SnapshotStore:
        """Snapshots (docker/snapshots.py) committing into the image store (images/commit.py): the --image-dir
        store's cache, else a store of this mock's own under its root (docs/IMAGES.md, "Snapshots")."""

        def own_store() -> Any:
            if self.images is not None:
                return self.images.store
            return ImageStore(os.path.join(self.root, "snapshot-images"), local_daemon=False, registry=False)

        c = Committer(own_store)
        assert self.store is not None  # _wire made it
        return SnapshotStore(self.store, c, c.remove)

    def __enter__(self) -> "MockOpenSandbox":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = self.base_url if self._server is not None else "stopped"
        return "<MockOpenSandbox %s>" % state
