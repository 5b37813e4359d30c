"""Sandbox records and the sandbox table: ids, states, metadata, TTL, pagination and filters. No HTTP.

What a sandbox *runs* (root directory, entrypoint process, execd) is delegated to a ``Provisioner``
(server.py wires the real one: SandboxRuntime + ExecdServer); tests use a fake. What its container prints (the
boot lines, the timestamped log) is lifecycle/container_log.py.
"""

from __future__ import annotations

import builtins
import math
import re
import threading
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence, TypeVar
from urllib.parse import quote_plus

from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.lifecycle.container_log import ContainerLog, boot_log
from mock_opensandbox.lifecycle.quirks import MockError
from mock_opensandbox.runtime._util import container_id

Clock = Callable[[], datetime]


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


T = TypeVar("T")


def paginate(items: Sequence[T], page: int, page_size: int) -> tuple[list[T], dict[str, Any]]:
    """One page of ``items`` (already filtered and sorted) and the server's ``pagination`` block (server
    docker_service.py list_sandboxes and snapshot_service.py list: totalPages is ceil(total / pageSize), 0
    when empty; a page past the last is an empty list). The one copy for the sandbox and snapshot lists."""
    if page < 1 or page_size < 1:  # (the routes' query checks answer 422 before this is reached)
        raise ValueError("page and page_size must be >= 1")
    total = len(items)
    pages = math.ceil(total / page_size) if total else 0
    start = (page - 1) * page_size
    return list(items[start : start + page_size]), {
        "page": page,
        "pageSize": page_size,
        "totalItems": total,
        "totalPages": pages,
        "hasNextPage": page < pages,
    }


class FakeClock:
    """A settable clock for tests: ``clock()`` returns the current fake time, ``advance(s)`` moves it."""

    def __init__(self, start: datetime | None = None):
        self._now = start or datetime(2026, 11, 29, 7, 46, 42, 558200, tzinfo=timezone.utc)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def set(self, when: datetime) -> None:
        with self._lock:
            self._now = when


def format_ts(dt: datetime) -> str:
    """Pydantic's JSON form of an aware UTC datetime: microseconds only when non-zero, ``Z`` suffix
    (recording 05: "2026-11-29T07:46:42.558200Z"; recording 14: "2026-11-29T09:47:06Z")."""
    dt = dt.astimezone(timezone.utc)
    s = dt.strftime("%Y-%m-%dT%H:%M:%S")
    if dt.microsecond:
        s += ".%06d" % dt.microsecond
    return s + "Z"


# -- metadata labels (server services/validators.py: Kubernetes label syntax) --------------------------
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS_SUBDOMAIN_RE = re.compile(r"^(?:%s\.)*%s$" % (_DNS_LABEL, _DNS_LABEL))
_LABEL_NAME_RE = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
RESERVED_LABEL_PREFIX = "opensandbox.io/"


def _fullmatch(rx: "re.Pattern[str]", s: str) -> bool:
    # ``$`` also matches before a trailing newline; labels must not end with one.
    return rx.match(s) is not None and not s.endswith("\n")


def is_valid_label_key(key: str) -> bool:
    if "/" in key:
        prefix, name = key.split("/", 1)
        if not prefix or not name or len(prefix) > 253 or not _fullmatch(_DNS_SUBDOMAIN_RE, prefix):
            return False
    else:
        name = key
    return len(name) <= 63 and _fullmatch(_LABEL_NAME_RE, name)


def is_valid_label_value(value: str) -> bool:
    return len(value) <= 63 and _fullmatch(_LABEL_VALUE_RE, value)


def validate_metadata(metadata: Mapping[str, str] | None) -> None:
    """Raise MockError(SANDBOX::INVALID_METADATA_LABEL) for the first bad key or value, like the server."""
    if not metadata:
        return
    for key, value in metadata.items():
        if key.startswith(RESERVED_LABEL_PREFIX):
            raise MockError(quirks.METADATA_RESERVED_KEY, key=key)
        if not is_valid_label_key(key):
            raise MockError(quirks.METADATA_INVALID_KEY, key=key)
        if not is_valid_label_value(value):
            raise MockError(quirks.METADATA_INVALID_VALUE, value=value)


def apply_metadata_patch(sb: "Sandbox", patch: Mapping[str, str | None]) -> None:
    """A JSON Merge Patch of ``sb``'s metadata as both runtimes' patch_sandbox_metadata applies it, after the
    sandbox was found: reserved keys first (null ones too), then label syntax, then the merge (null removes)."""
    for key in patch:
        if key.startswith(quirks.RESERVED_PREFIX):
            raise MockError(quirks.PATCH_RESERVED_KEY, key=key)
    validate_metadata({k: v for k, v in patch.items() if v is not None})
    with sb.lock:
        merged = dict(sb.metadata or {})
        for k, v in patch.items():
            if v is None:
                merged.pop(k, None)
            else:
                merged[k] = v
        sb.metadata = merged


def docker_pull_params(uri: str) -> tuple[str, str]:
    """(repository, tag) the way docker-py splits an image reference before /images/create."""
    if "@" in uri:
        repo, digest = uri.split("@", 1)
        return repo, digest
    head, sep, tail = uri.rpartition(":")
    if sep and "/" not in tail:
        return head, tail
    return uri, "latest"


def default_pull_fails(uri: str) -> bool:
    # [choice] recording 16 used "local/does-not-exist:1"; any image name containing it fails to pull.
    return "does-not-exist" in uri


# -- records -----------------------------------------------------------------------------------------
class Sandbox:
    """One sandbox. Status is derived on read from (paused, entrypoint exit) like the server derives it
    from Docker's container state (server services/docker/docker_service.py _container_to_sandbox)."""

    def __init__(
        self,
        *,
        image: dict[str, Any],
        entrypoint: list[str],
        env: dict[str, str] | None,
        metadata: dict[str, str] | None,
        resource_limits: dict[str, str] | None,
        timeout: int | None,
        created_at: datetime,
        expires_at: datetime | None,
    ):
        self.id = str(uuid.uuid4())
        self.image = image
        self.entrypoint = list(entrypoint)
        self.env = dict(env or {})
        self.metadata = dict(metadata) if metadata is not None else None
        # the container's labels keep the create's metadata (a PATCH goes to the server's metadata store);
        # a snapshot's image keeps these labels
        self.label_metadata = dict(metadata or {})
        self.resource_limits = dict(resource_limits or {})
        self.timeout = timeout
        self.created_at = created_at  # the create request's time (create response)
        self.started_at = created_at  # the "container Created" time (GET createdAt)
        self.expires_at = expires_at
        self.finished_at: datetime | None = None
        self.exit_code: int | None = None
        self.paused = False
        self.deleted = False
        self.lock = threading.RLock()
        # filled by the provisioner
        self.runtime: Any = None
        self.execd: Any = None
        self.execd_port: int | None = None
        self.execd_mode: str | None = None
        self.entry_proc: Any = None
        self.container: Any = None  # the provisioner's own per-sandbox state (docker/provisioner.py ContainerState)
        self.platform: dict[str, str] | None = None
        self.rootfs_image: Any = None  # the image store's Image when the mock has an image store
        self.snapshot_id: str | None = None  # restored from this snapshot (GET: snapshotId, no image)
        self.inherited_metadata: dict[str, str] = {}  # the snapshot image's labels (shown under metadata)
        self.snapshot_image: Any = None
        self.extensions: dict[str, str] | None = None
        self.limits: dict[str, Any] = {}
        self.volumes: Any = None  # volumes.Prepared of the create request (None: no volumes)
        self.network_policy: dict[str, Any] | None = None  # the create request's networkPolicy (egress/ sidecar)
        self.log = ContainerLog()
        self.container_id = container_id()

    @property
    def manual_cleanup(self) -> bool:
        """No timeout at create: the server labels the container opensandbox.io/manual-cleanup=true."""
        return self.timeout is None

    # -- state ---------------------------------------------------------------------------------------
    @property
    def exited(self) -> bool:
        return self.exit_code is not None

    def status_tuple(self) -> tuple[str, str, str, datetime]:
        if self.exit_code is not None:
            at = self.finished_at or self.started_at
            if self.exit_code == 0:
                return (*quirks.STATUS_EXITED_OK, at)
            st, reason, msg = quirks.STATUS_EXITED_ERROR
            return st, reason, msg.format(code=self.exit_code), at
        if self.paused:
            return (*quirks.STATUS_PAUSED, self.started_at)
        return (*quirks.STATUS_RUNNING, self.started_at)

    @property
    def state(self) -> str:
        return self.status_tuple()[0]

    def _status_json(self, triple: tuple[str, str, str, datetime]) -> dict[str, str]:
        st, reason, msg, at = triple
        return {"state": st, "reason": reason, "message": msg, "lastTransitionAt": format_ts(at)}

    # -- JSON (key order as recorded) ----------------------------------------------------------------
    def create_json(self) -> dict[str, Any]:
        """Body of the 202 create response (recordings 05, 15, 18): no image, status 'started successfully'."""
        out: dict[str, Any] = {"id": self.id, "status": self._status_json((*quirks.STATUS_CREATED, self.created_at))}
        if self.metadata is not None:
            out["metadata"] = dict(self.metadata)
        if self.extensions:
            out["extensions"] = dict(self.extensions)
        if self.platform:
            out["platform"] = dict(self.platform)
        if self.expires_at is not None:
            out["expiresAt"] = format_ts(self.expires_at)
        out["createdAt"] = format_ts(self.created_at)
        out["entrypoint"] = list(self.entrypoint)
        return out

    def to_json(self) -> dict[str, Any]:
        """Body of GET /sandboxes/{id} and of list items (recordings 05, 14, 15)."""
        with self.lock:
            out: dict[str, Any] = {"id": self.id}
            if self.snapshot_id is not None:  # server docker_service.py: no image for a restored sandbox
                out["snapshotId"] = self.snapshot_id
            else:
                out["image"] = {"uri": self.image["uri"]}
            if self.platform:  # server: from the opensandbox.io/platform-* labels
                out["platform"] = dict(self.platform)
            out["status"] = self._status_json(self.status_tuple())
            md = dict(self.inherited_metadata, **(self.metadata or {}))
            if md:  # labels -> metadata, empty -> omitted
                out["metadata"] = md
            if self.extensions:
                out["extensions"] = dict(self.extensions)
            out["entrypoint"] = list(self.entrypoint)
            if self.expires_at is not None:
                out["expiresAt"] = format_ts(self.expires_at)
            out["createdAt"] = format_ts(self.started_at)
            return out


class ImagePull(Protocol):
    """The image store as a create pulls (docker/images.py ImagePuller): the image, or the server's MockError."""

    def pull(self, uri: str, auth: dict[str, Any] | None, platform: dict[str, str] | None) -> Any: ...


class Provisioner:
    """What makes a sandbox run. The base class runs nothing (pure model)."""

    def start(self, sb: Sandbox) -> Any:
        """Create the sandbox's resources and start its entrypoint; return the process (``wait()``) or None."""
        return None

    def on_exit(self, sb: Sandbox) -> None:
        """The entrypoint exited: the container stopped (execd goes away with it)."""

    def pause(self, sb: Sandbox) -> None: ...
    def resume(self, sb: Sandbox) -> None: ...

    def stop(self, sb: Sandbox) -> None:
        """Delete: terminate every process, close every listener, remove the root. Idempotent."""


class SandboxStore:
    """The thread-safe sandbox table. Expired sandboxes are deleted by a reaper thread, like the
    server's per-sandbox expiration timer (server services/docker/docker_service.py _expire_sandbox)."""

    def __init__(
        self,
        *,
        clock: Clock | None = None,
        provisioner: Provisioner | None = None,
        pull_fails: Callable[[str], bool] | Iterable[str] | None = None,
        reap_interval: float = 0.1,
        start_reaper: bool = True,
        images: ImagePull | None = None,
    ):
        self.clock: Clock = clock or utcnow
        self.provisioner = provisioner or Provisioner()
        self.images = images  # the image store (docker/images.py ImagePuller) or None: no pull
        if pull_fails is None:
            self._pull_fails: Callable[[str], bool] = default_pull_fails
        elif callable(pull_fails):
            self._pull_fails = pull_fails
        else:
            names = frozenset(pull_fails)
            self._pull_fails = lambda uri: any(n in uri for n in names)
        self._lock = threading.RLock()
        self._items: dict[str, Sandbox] = {}
        self._closed = False
        self._wake = threading.Event()
        self._reap_interval = reap_interval
        self._reaper: threading.Thread | None = None
        if start_reaper:
            self._reaper = threading.Thread(target=self._reap_loop, name="mock-osb-reaper", daemon=True)
            self._reaper.start()

    # -- queries -------------------------------------------------------------------------------------
    def get(self, sandbox_id: str) -> Sandbox:
        with self._lock:
            sb = self._items.get(sandbox_id)
        if sb is None or sb.deleted:
            raise MockError(quirks.SANDBOX_NOT_FOUND, id=sandbox_id)
        return sb

    def snapshot(self) -> dict[str, Sandbox]:
        with self._lock:
            return dict(self._items)

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    def list(
        self,
        *,
        states: Iterable[str] | None = None,
        metadata: Mapping[str, str] | None = None,
        page: int = 1,
        page_size: int = quirks.DEFAULT_PAGE_SIZE,
    ) -> tuple[list[Sandbox], dict[str, Any]]:
        """Filter (state OR within, case-insensitive; metadata equality AND), newest first, then paginate
        (server services/helpers.py matches_filter, docker_service.py list_sandboxes)."""
        wanted = {s.lower() for s in states} if states else None
        with self._lock:
            items = [sb for sb in self._items.values() if not sb.deleted]
        out = []
        for sb in items:
            if wanted is not None and sb.state.lower() not in wanted:
                continue
            if metadata:
                md = dict(sb.inherited_metadata, **(sb.metadata or {}))
                if any(md.get(k) != v for k, v in metadata.items()):
                    continue
            out.append(sb)
        out.sort(key=lambda s: s.started_at, reverse=True)
        return paginate(out, page, page_size)

    # -- commands ------------------------------------------------------------------------------------
    def create(
        self,
        *,
        image: dict[str, Any],
        entrypoint: builtins.list[str],
        env: dict[str, str] | None = None,
        metadata: dict[str, str] | None = None,
        resource_limits: dict[str, str] | None = None,
        timeout: int | None = None,
        platform: dict[str, str] | None = None,
        extensions: dict[str, str] | None = None,
        limits: dict[str, Any] | None = None,
        volumes: Any = None,
        image_auth: dict[str, str] | None = None,
        snapshot: Any = None,
        network_policy: dict[str, Any] | None = None,
    ) -> Sandbox:
        validate_metadata(metadata)
        uri = image["uri"]
        if snapshot is not None:  # restore (docker/snapshots.py): the snapshot's committed image, no pull
            pulled = snapshot.rootfs_image()
        elif self._pull_fails(uri):
            repo, tag = docker_pull_params(uri)
            raise MockError(quirks.IMAGE_PULL_FAILED, image=uri, tag=quote_plus(tag), repo=quote_plus(repo))
        # the image store (docker/images.py ImagePuller), when the mock has one: the server pulls before it
        # creates the container; image_auth is used for that pull only and never kept
        else:
            pulled = self.images.pull(uri, image_auth, platform) if self.images is not None else None
        now = self.clock()
        expires = None
        if timeout is not None:
            try:
                expires = now + timedelta(seconds=timeout)
            except (OverflowError, ValueError):
                raise MockError(quirks.TIMEOUT_TOO_LARGE, timeout=timeout) from None
        sb = Sandbox(
            image=image,
            entrypoint=entrypoint,
            env=env,
            metadata=metadata,
            resource_limits=resource_limits,
            timeout=timeout,
            created_at=now,
            expires_at=expires,
        )
        sb.platform = dict(platform) if platform else None
        sb.rootfs_image = pulled  # an images.Image (layers, config) or None: the host-tools view
        if snapshot is not None:
            sb.snapshot_id = snapshot.id
            sb.inherited_metadata = dict(snapshot.metadata)
            sb.snapshot_image = snapshot.image  # what the provisioner restores into a host-tools root
        sb.extensions = dict(extensions) if extensions else None
        sb.limits = dict(limits or {})
        sb.volumes = volumes
        sb.network_policy = network_policy  # the provisioner starts its egress sidecar (egress/)
        sb.log = ContainerLog(self.clock)
        sb.log.feed(boot_log(now))
        with self._lock:
            if self._closed:
                raise MockError(quirks.INTERNAL_ERROR, error="the mock is shutting down")
            self._items[sb.id] = sb
        # the container's own creation time comes a little after the request (recording 05): Docker stamps
        # Created when it makes the container, before the start (moby daemon/container.go newContainer), so it is
        # taken before the provisioner builds and starts the sandbox, whatever that takes on a busy host
        sb.started_at = max(self.clock(), now)
        try:
            proc = self.provisioner.start(sb)
        except BaseException:
            with self._lock:
                self._items.pop(sb.id, None)
            sb.deleted = True
            self.provisioner.stop(sb)
            raise
        with sb.lock:
            gone = sb.deleted
        if gone:  # disposed while it started (close() at shutdown): its stop() may have come before the
            # runtime existed, so stop again now that everything is there (stop is idempotent)
            self.provisioner.stop(sb)
            raise MockError(quirks.INTERNAL_ERROR, error="the sandbox was deleted while it started")
        sb.entry_proc = proc
        if isinstance(proc, int):  # the entrypoint could not even start: exit status right away
            self._mark_exited(sb, proc)
        elif proc is not None and hasattr(proc, "wait"):
            threading.Thread(
                target=self._watch_entrypoint, args=(sb, proc), name="mock-osb-entry-%s" % sb.id[:8], daemon=True
            ).start()
        self._wake.set()
        return sb

    def _watch_entrypoint(self, sb: Sandbox, proc: Any) -> None:
        try:
            rc = proc.wait()
        except Exception:  # pragma: no cover - defensive
            rc = 1
        if rc is None:
            return
        if rc < 0:  # killed by a signal: Docker reports 128 + signal
            rc = 128 - rc
        self._mark_exited(sb, rc)

    def _mark_exited(self, sb: Sandbox, rc: int) -> None:
        finished = self.clock()
        with sb.lock:
            if sb.deleted or sb.exit_code is not None:
                return
        try:  # the container is gone before the API reports it (execd unreachable from then on)
            self.provisioner.on_exit(sb)
        except Exception:  # pragma: no cover - an exit hook must not kill the watcher
            pass
        with sb.lock:
            if sb.exit_code is None:
                sb.exit_code = rc
                sb.finished_at = finished
                sb.paused = False

    def pause(self, sandbox_id: str) -> None:
        sb = self.get(sandbox_id)
        with sb.lock:
            if sb.deleted:
                raise MockError(quirks.SANDBOX_NOT_FOUND, id=sandbox_id)
            if sb.exited or sb.paused:
                raise MockError(quirks.SANDBOX_NOT_RUNNING)
            self.provisioner.pause(sb)
            sb.paused = True

    def resume(self, sandbox_id: str) -> None:
        sb = self.get(sandbox_id)
        with sb.lock:
            if sb.deleted:
                raise MockError(quirks.SANDBOX_NOT_FOUND, id=sandbox_id)
            if not sb.paused or sb.exited:
                raise MockError(quirks.SANDBOX_NOT_PAUSED)
            self.provisioner.resume(sb)
            sb.paused = False

    def renew(self, sandbox_id: str, expires_at: datetime) -> datetime:
        """Set an absolute expiry; naive datetimes are UTC; it must lie in the future
        (recording 14; server services/validators.py ensure_future_expiration)."""
        sb = self.get(sandbox_id)
        when = (
            expires_at.replace(tzinfo=timezone.utc)
            if expires_at.tzinfo is None
            else expires_at.astimezone(timezone.utc)
        )
        if when <= self.clock():
            raise MockError(quirks.INVALID_EXPIRATION)
        if sb.manual_cleanup:  # server services/docker/docker_service.py renew_expiration
            raise MockError(quirks.RENEW_MANUAL_CLEANUP, id=sandbox_id)
        with sb.lock:
            if sb.deleted:
                raise MockError(quirks.SANDBOX_NOT_FOUND, id=sandbox_id)
            sb.expires_at = when
        self._wake.set()
        return when

    def delete(self, sandbox_id: str) -> None:
        with self._lock:
            sb = self._items.pop(sandbox_id, None)
        if sb is None:
            raise MockError(quirks.SANDBOX_NOT_FOUND, id=sandbox_id)
        self._dispose(sb)

    def _dispose(self, sb: Sandbox) -> None:
        with sb.lock:
            sb.deleted = True
        self.provisioner.stop(sb)

    # -- TTL -----------------------------------------------------------------------------------------
    def reap(self) -> builtins.list[str]:  # (`list` is a method of this class)
        """Delete every sandbox whose expiresAt has passed; returns their ids."""
        now = self.clock()
        with self._lock:
            due = [sb for sb in self._items.values() if sb.expires_at is not None and sb.expires_at <= now]
            for sb in due:
                self._items.pop(sb.id, None)
        for sb in due:
            try:
                self._dispose(sb)
            except Exception:  # pragma: no cover - keep reaping the others
                pass
        return [sb.id for sb in due]

    def _reap_loop(self) -> None:
        while not self._closed:
            self._wake.wait(self._reap_interval)
            self._wake.clear()
            if self._closed:
                break
            try:
                self.reap()
            except Exception:  # pragma: no cover
                pass

    def close(self) -> None:
        """Delete every sandbox and stop the reaper. Idempotent."""
        with self._lock:
            self._closed = True
            items = list(self._items.values())
            self._items.clear()
        self._wake.set()
        for sb in items:
            try:
                self._dispose(sb)
            except Exception:  # pragma: no cover
                pass
        if self._reaper is not None and self._reaper is not threading.current_thread():
            self._reaper.join(timeout=5)
            self._reaper = None
