"""Recorded lifecycle-server behaviours as data: status codes, error codes, messages, and where each came from.

Sources: ``recording NN`` = fixtures/NN_*.json (real opensandbox-server 1.1.1);
``server <file>`` = opensandbox-group/OpenSandbox server/opensandbox_server/<file>; ``QUIRKS.md <section>`` =
a row of mock_opensandbox/QUIRKS.md; ``[choice]`` = the mock's own decision (reason in QUIRKS.md).
"""

from __future__ import annotations

from typing import Any, NamedTuple


class Quirk(NamedTuple):
    status: int
    code: str
    message: str  # str.format template
    source: str

    def body(self, **kw: Any) -> dict[str, str]:
        return {"code": self.code, "message": self.message.format(**kw)}


class MockError(Exception):
    """A typed error the HTTP layer turns into ``quirk.status`` + ``{"code","message"}``."""

    def __init__(self, quirk: Quirk, **kw: Any):
        self.quirk = quirk
        self.kw = kw
        super().__init__(quirk.message.format(**kw))

    @property
    def status(self) -> int:
        return self.quirk.status

    def body(self) -> dict[str, str]:
        return self.quirk.body(**self.kw)


# -- authentication (recording 02; server middleware/auth.py) ----------------------------------------
MISSING_API_KEY = Quirk(
    401,
    "MISSING_API_KEY",
    "Authentication credentials are missing. Provide API key via OPEN-SANDBOX-API-KEY header.",
    "recording 02",
)
INVALID_API_KEY = Quirk(
    401, "INVALID_API_KEY", "Authentication credentials are invalid. Check your API key and try again.", "recording 02"
)

# -- sandbox state (recordings 04, 14) --------------------------------------------------------------
SANDBOX_NOT_FOUND = Quirk(404, "DOCKER::SANDBOX_NOT_FOUND", "Sandbox {id} not found.", "recording 04")
SANDBOX_NOT_RUNNING = Quirk(409, "DOCKER::SANDBOX_NOT_RUNNING", "Sandbox is not in a running state.", "recording 14")
SANDBOX_NOT_PAUSED = Quirk(409, "DOCKER::SANDBOX_NOT_PAUSED", "Sandbox is not in a paused state.", "recording 14")
INVALID_EXPIRATION = Quirk(
    400, "DOCKER::INVALID_EXPIRATION", "New expiration time must be in the future.", "recording 14"
)
RENEW_MANUAL_CLEANUP = Quirk(
    409,
    "DOCKER::INVALID_EXPIRATION",
    "Sandbox {id} does not have automatic expiration enabled.",
    "server services/docker/docker_service.py renew_expiration; oracle",
)
INVALID_PORT = Quirk(400, "DOCKER::INVALID_PORT", "Port must be between 1 and 65535.", "recording 05")

# -- create (recording 16; server services/validators.py, services/docker/*) -----------------------
# The tail after the image name is what the recording machine's Docker daemon said; kept verbatim
# except the repository/tag, which are computed from the requested URI the way docker-py does.
IMAGE_PULL_FAILED = Quirk(
    500,
    "DOCKER::SANDBOX_IMAGE_PULL_FAILED",
    "Failed to pull image {image}: 500 Server Error for http+docker://localhost/v1.41/images/create"
    '?tag={tag}&fromImage={repo}: Internal Server Error ("Get "https://registry-1.docker.io/v2/": '
    'dial tcp: lookup registry-1.docker.io on 10.255.255.53:53: no such host")',
    "recording 16",
)
# With an image store (--image-dir): the same code and prefix, the docker-py error built from what the store
# met (docker/images.py docker_error_text); no sandbox exists afterwards.
IMAGE_PULL_FAILED_STORE = Quirk(
    500,
    "DOCKER::SANDBOX_IMAGE_PULL_FAILED",
    "Failed to pull image {image}: {error}",
    "server services/docker/container_ops.py _pull_image; recording 16",
)
METADATA_RESERVED_KEY = Quirk(
    400,
    "SANDBOX::INVALID_METADATA_LABEL",
    "Metadata key '{key}' uses the reserved prefix 'opensandbox.io/'. "
    "Keys under this prefix are managed by the system and cannot be set via metadata.",
    "server services/validators.py ensure_metadata_labels",
)
METADATA_INVALID_KEY = Quirk(
    400,
    "SANDBOX::INVALID_METADATA_LABEL",
    "Metadata key '{key}' is invalid: must be either a name or a DNS-subdomain prefix and name separated by /, "
    "where the name is up to 63 characters and matches [A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?, and the "
    "optional prefix is a valid DNS subdomain up to 253 characters.",
    "server services/validators.py ensure_metadata_labels",
)
METADATA_INVALID_VALUE = Quirk(
    400,
    "SANDBOX::INVALID_METADATA_LABEL",
    "Metadata value '{value}' is invalid: must be 63 characters or less, start/end with an alphanumeric "
    "character, and contain only alphanumeric, '-', '_', or '.' characters.",
    "server services/validators.py ensure_metadata_labels",
)
RESERVED_PREFIX = "opensandbox.io/"  # server services/constants.py RESERVED_LABEL_PREFIX
PATCH_RESERVED_KEY = Quirk(
    400,
    "INVALID_METADATA_LABEL",
    "Metadata key '{key}' is reserved (opensandbox.io/ prefix).",
    "server services/docker/docker_service.py patch_sandbox_metadata; oracle",
)
TIMEOUT_TOO_LARGE = Quirk(
    400,
    "SANDBOX::INVALID_PARAMETER",
    "Sandbox timeout {timeout}s is too large to represent safely.",
    "server services/validators.py calculate_expiration_or_raise",
)
NETWORK_POLICY_UNSUPPORTED = Quirk(
    400,
    "SANDBOX::INVALID_PARAMETER",
    "egress.image must be configured when networkPolicy is provided.",
    "server services/validators.py ensure_egress_configured (no egress image)",
)
SECURE_ACCESS_UNSUPPORTED = Quirk(
    400,
    "SANDBOX::INVALID_PARAMETER",
    "secureAccess is not supported when runtime.type='docker'. Use the Kubernetes runtime to create secured sandboxes.",
    "server services/docker/networking.py _ensure_secure_access_support",
)
VOLUMES_UNSUPPORTED = Quirk(
    400, "SANDBOX::INVALID_PARAMETER", "volumes are not supported by the mock OpenSandbox.", "[choice]"
)
SNAPSHOTS_UNSUPPORTED = Quirk(
    501,
    "SNAPSHOT::NOT_IMPLEMENTED",
    "Snapshot creation is not implemented by the mock OpenSandbox.",
    "[choice] code of server services/snapshot_service.py create_snapshot (runtime "
    "without snapshots): a LifecycleApp whose SnapshotStore has no committer only; MockOpenSandbox "
    "commits like the Docker runtime (docker/snapshots.py)",
)
SNAPSHOT_NOT_FOUND = Quirk(
    404,
    "SNAPSHOT::NOT_FOUND",
    "Snapshot {id} not found",
    "server services/snapshot_service.py get_snapshot/delete_snapshot; oracle",
)
SNAPSHOT_SOURCE_NOT_RUNNING = Quirk(
    409,
    "SNAPSHOT::INVALID_SOURCE_STATE",
    "Snapshot can only be created from a Running sandbox.",
    "server services/snapshot_service.py _ensure_source_sandbox_running; recording 25",
)
# snapshots of the Docker runtime (QUIRKS.md, Snapshots; recording 25; server services/snapshot_service.py,
# services/snapshot_restore.py, services/docker/snapshot_runtime.py)
SNAPSHOT_CREATING = Quirk(
    409,
    "SNAPSHOT::INVALID_STATE",
    "Snapshot {id} is still being created and cannot be deleted",
    "server services/snapshot_service.py delete_snapshot; seen live",
)
SNAPSHOT_DELETE_CONFLICT = Quirk(
    409,
    "SNAPSHOT::DELETE_CONFLICT",
    "snapshot image cannot be deleted due to a conflict",
    "recording 25; server services/docker/snapshot_runtime.py delete_snapshot "
    "(docker rmi answers 409 while a container uses the image)",
)
SNAPSHOT_NOT_READY = Quirk(
    409,
    "SNAPSHOT::NOT_READY",
    "Snapshot {id} is not ready for restore.",
    "recording 25; server services/snapshot_restore.py",
)
# (state, reason, message) of a snapshot record (server services/snapshot_service.py, snapshot_runtime.py)
SNAPSHOT_ACCEPTED = ("Creating", "snapshot_accepted", "Snapshot creation accepted.")
SNAPSHOT_READY = ("Ready", "snapshot_runtime_ready", "Docker snapshot image created successfully.")
SNAPSHOT_FAILED_REASON = "snapshot_runtime_failed"  # message: the runtime's exception text
SNAPSHOT_DELETING = ("Deleting", "snapshot_delete_requested", "Snapshot deletion requested.")
SNAPSHOT_RESTORE_ENTRYPOINT = ["tail", "-f", "/dev/null"]  # server services/snapshot_restore.py
TEMPLATES_UNSUPPORTED = Quirk(
    501,
    "FSB::API_NOT_SUPPORTED",
    "Template management requires the kubernetes runtime.",
    "server api/templates.py (docker runtime); oracle",
)
POOLS_UNSUPPORTED = Quirk(
    501,
    "KUBERNETES::POOL_NOT_SUPPORTED",
    "Pool management is only available when runtime.type is 'kubernetes'.",
    "server api/pool.py (docker runtime); oracle",
)
# -- pools of the Kubernetes runtime (--runtime kubernetes; lifecycle/pools.py, lifecycle/pools_routes.py) ---------
POOL_ALREADY_EXISTS = Quirk(
    409,
    "KUBERNETES::POOL_ALREADY_EXISTS",
    "Pool '{name}' already exists.",
    "server services/k8s/pool_service.py create_pool (the API server's 409 AlreadyExists); oracle k8s",
)
POOL_NOT_FOUND = Quirk(
    404,
    "KUBERNETES::POOL_NOT_FOUND",
    "Pool '{name}' not found.",
    "server services/k8s/pool_service.py get/update/delete_pool, services/k8s/kubernetes_service.py "
    "_ensure_pool_ref_exists; oracle k8s",
)
# a poolRef create with no idle pod and the pool at poolMax: the server waits sandbox_create_timeout_seconds for a
# pod the controller never gives (it sets no PoolAllocationPending at 3bb6fad, so no POOL_CAPACITY_EXHAUSTED);
# the mock answers at once [choice]
POOL_POD_READY_TIMEOUT = Quirk(
    504,
    "KUBERNETES::POD_READY_TIMEOUT",
    "Timeout waiting for sandbox {id} to be Running with IP. Elapsed: {elapsed:.1f}s, Last state: Pending",
    "server services/k8s/kubernetes_service.py _wait_for_sandbox_ready; [choice] no wait",
)
POOL_MODE_NETWORK_POLICY = Quirk(
    400,
    "SANDBOX::INVALID_PARAMETER",
    "networkPolicy cannot be used together with extensions.poolRef because pooled pods are pre-created. "
    "Remove 'networkPolicy' from the request or use template mode.",
    "server services/k8s/kubernetes_service.py _ensure_pool_mode_compatible",
)
POOL_MODE_CREDENTIAL_PROXY = Quirk(
    400,
    "SANDBOX::INVALID_PARAMETER",
    "credentialProxy.enabled cannot be used together with extensions.poolRef because pooled pods are "
    "pre-created. Disable credential proxy or use template mode.",
    "server services/k8s/kubernetes_service.py _ensure_pool_mode_compatible",
)
POOL_MODE_VOLUMES = Quirk(
    400,
    "SANDBOX::INVALID_PARAMETER",
    "Pool mode (extensions.poolRef) does not support volumes. Remove 'volumes' from the request or use template mode.",
    "server services/k8s/kubernetes_service.py create_sandbox",
)
POOL_MODE_PLATFORM = Quirk(
    400,
    "SANDBOX::INVALID_PARAMETER",
    "platform is not supported together with extensions.poolRef yet. Pool-level platform modeling is not "
    "available in this iteration.",
    "server services/k8s/batchsandbox_provider.py create_workload (ValueError -> 400)",
)
K8S_SECURE_ACCESS_UNSUPPORTED = Quirk(
    400,
    "SANDBOX::INVALID_PARAMETER",
    "secureAccess is currently supported only for Kubernetes sandboxes exposed through ingress.mode='gateway'. "
    "Configure ingress gateway mode or disable secureAccess.",
    "server services/k8s/kubernetes_service.py _ensure_secure_access_support (no [ingress] gateway)",
)
POOL_REF_KEY = "poolRef"  # extensions["poolRef"] (server services/k8s/kubernetes_service.py create_sandbox)
# (state, reason, message) of a BatchSandbox in phase Succeed (server services/k8s/batchsandbox_provider.py
# get_status); lastTransitionAt is its Ready condition's time, whole seconds
K8S_STATUS_RUNNING = ("Running", "RUNNING", "Sandbox is running")
K8S_DEFAULT_ENTRYPOINT = ["tail", "-f", "/dev/null"]  # server services/k8s/provider_common.py DEFAULT_ENTRYPOINT

# -- Kubernetes runtime: sandboxes (lifecycle/k8s_sandboxes.py; QUIRKS.md "Kubernetes runtime: sandboxes") -------------
# (state, reason, message) by BatchSandbox phase (server services/k8s/batchsandbox_provider.py get_status phase_map)
K8S_STATUS_PENDING = ("Pending", "CREATING", "Sandbox is being created")
K8S_STATUS_PAUSED = ("Paused", "PAUSED", "Sandbox is paused")
# a workload whose PoolAllocationPending condition is True, its message empty (batchsandbox_provider.py get_status)
K8S_STATUS_POOL_CAPACITY = ("Pending", "POOL_CAPACITY_EXHAUSTED", "Pool capacity is currently unavailable")
# the template-mode pod's command: the execd bootstrap before the request's entrypoint (provider_common.py)
K8S_BOOTSTRAP = "/opt/opensandbox/bootstrap.sh"
K8S_SANDBOX_NOT_FOUND = Quirk(
    404,
    "KUBERNETES::SANDBOX_NOT_FOUND",
    "Sandbox '{id}' not found",
    "server services/k8s/error_helpers.py (get, delete, renew, metadata), batchsandbox_provider.py pause/resume; "
    "oracle k8s",
)
K8S_INVALID_STATE = Quirk(
    409,
    "KUBERNETES::INVALID_STATE",
    "{message}",
    "server services/k8s/kubernetes_service.py pause/resume_sandbox (ValueError of batchsandbox_provider.py "
    "pause/resume_sandbox -> 409); oracle k8s",
)
K8S_POD_FAILED = Quirk(
    500,
    "KUBERNETES::POD_FAILED",
    "Sandbox {id} failed: {total}/{total} observed pods failed; primary reason={reason}; sample pod={id}-0",
    "server services/k8s/kubernetes_service.py _wait_for_sandbox_ready (the PodFailed condition's message of "
    "upstream kubernetes/internal/controller/batchsandbox_status.go at 3bb6fad); oracle k8s",
)
# a namespace ResourceQuota on the count of BatchSandboxes (a fault rule of kind pod, "quota"): used = limited =
# the workloads there are; the quota's name is the mock's own
K8S_QUOTA_NAME = "sandbox-quota"
_K8S_COUNT = "count/batchsandboxes.sandbox.opensandbox.io"
K8S_QUOTA_EXCEEDED = Quirk(
    403,
    "KUBERNETES::QUOTA_EXCEEDED",
    'Namespace ResourceQuota exceeded: batchsandboxes.sandbox.opensandbox.io "{id}" is forbidden: exceeded quota: '
    + "{quota}, requested: %s=1, used: %s={used}, limited: %s={used}" % (_K8S_COUNT, _K8S_COUNT, _K8S_COUNT),
    "server services/k8s/kubernetes_service.py create_sandbox, error_helpers.py _build_quota_exceeded_error and "
    "_quota_rejection_message (the API server's 403: k8s.io/apiserver resourcequota admission 'exceeded quota: ...', "
    "apimachinery errors.NewForbidden); oracle k8s",
)
K8S_POOL_CAPACITY_EXHAUSTED = Quirk(
    429,
    "KUBERNETES::POOL_CAPACITY_EXHAUSTED",
    "No Pool capacity became available before the acquisition timeout.",
    "server services/k8s/kubernetes_service.py _wait_for_sandbox_ready, _pool_capacity_exhausted_error (with "
    "Retry-After: the configured pool_acquisition_timeout_seconds, whole, at least 1); oracle k8s",
)
K8S_CONTAINER_NOT_FOUND = Quirk(
    404,
    "KUBERNETES::SANDBOX_NOT_FOUND",
    "Container '{container}' not found on pod '{pod}'. Available: {names}",
    "server services/k8s/k8s_diagnostics.py _resolve_log_container; oracle k8s",
)
K8S_POD_READY_TIMEOUT = Quirk(
    504,
    "KUBERNETES::POD_READY_TIMEOUT",
    "Timeout waiting for sandbox {id} to be Running with IP. Elapsed: {elapsed:.1f}s, Last state: Pending",
    "server services/k8s/kubernetes_service.py _wait_for_sandbox_ready; oracle k8s",
)
FSB_SANDBOX_NOT_FOUND = Quirk(
    404,
    "GENERAL::UNKNOWN_ERROR",
    "Fsb sandbox not found.",
    "server api/network_policy.py _fsb_service + main.py _normalize_error_detail",
)
DIAGNOSTICS_SCOPE_UNSUPPORTED = Quirk(
    400,
    "DIAGNOSTICS_SCOPE_UNSUPPORTED",
    "Unsupported {kind} diagnostics scope {scope}. Supported scopes: {supported}.",
    "server services/diagnostics.py unsupported_scope_error",
)
DIAG_LOGS_ALL_WARNING = "The current backend only contributes sandbox container logs to the all scope."
DIAG_EVENTS_ALL_WARNING = "The current backend only contributes runtime events to the all scope."
BACKEND_RESPONSE_FAILED = Quirk(
    502,
    "BACKEND_RESPONSE_FAILED",
    "The backend sandbox {endpoint} dropped the connection or sent an invalid response: {error}",
    "server api/proxy.py _proxy_http_request",
)
EGRESS_PORT = 18080  # the egress sidecar's policy API (server api/network_policy.py)
INVALID_METADATA_FORMAT = Quirk(
    400, "INVALID_METADATA_FORMAT", "Invalid metadata format: {error}", "server api/lifecycle.py list_sandboxes"
)

# -- endpoints and proxy (server api/lifecycle.py, services/docker/networking.py, api/proxy.py) ----
SIGNED_ROUTES_UNSUPPORTED = Quirk(
    400,
    "SANDBOX::API_NOT_SUPPORTED",
    "Signed routes (expires parameter) are not supported when runtime.type='docker'. "
    "Use the Kubernetes runtime for signed routes.",
    "server services/docker/networking.py get_endpoint",
)
SERVER_PROXY_WITH_EXPIRES = Quirk(
    400,
    "SANDBOX::INVALID_PARAMETER",
    "use_server_proxy cannot be combined with expires; signed endpoints require the gateway route.",
    "server api/lifecycle.py get_sandbox_endpoint",
)
BACKEND_CONNECTION_FAILED = Quirk(
    502,
    "BACKEND_CONNECTION_FAILED",
    "Could not connect to the backend sandbox endpoint='{endpoint}' headers=None: {error}",
    "server api/proxy.py _proxy_http_request",
)
WEBSOCKET_UNSUPPORTED_DETAIL = "Websocket upgrade is not supported yet"  # server api/proxy.py (HTTPException detail)

# -- mock-only safety checks ([choice], see QUIRKS.md) ------------------------------------------------
HOST_NOT_ALLOWED = Quirk(
    403,
    "MOCK::HOST_NOT_ALLOWED",
    "Host header '{host}' is not allowed: the mock only answers loopback names or its bound "
    "address (DNS-rebinding protection).",
    "[choice]",
)
ORIGIN_NOT_ALLOWED = Quirk(
    403,
    "MOCK::ORIGIN_NOT_ALLOWED",
    "Requests with an Origin header (browser requests) are refused by the mock.",
    "[choice]",
)
INTERNAL_ERROR = Quirk(500, "SANDBOX::INTERNAL_ERROR", "{error}", "[choice] code from server services/constants.py")

# -- FastAPI defaults (no ErrorResponse shape) --------------------------------------------------------
FASTAPI_NOT_FOUND = {"detail": "Not Found"}  # Starlette 404 for an unknown route
FASTAPI_METHOD_NOT_ALLOWED = {"detail": "Method Not Allowed"}  # Starlette 405

# -- static answers ---------------------------------------------------------------------------------
HEALTH_BODY = {"status": "healthy"}  # recording 01
VERSION_BODY = {"version": "1.1.1"}  # recording 01

# status/reason/message triples (recordings 05, 14, 15; server services/docker/docker_service.py)
STATUS_CREATED = ("Running", "CONTAINER_RUNNING", "Sandbox container started successfully.")
STATUS_RUNNING = ("Running", "CONTAINER_RUNNING", "Sandbox container is running.")
STATUS_PAUSED = ("Paused", "CONTAINER_PAUSED", "Sandbox container is paused.")
STATUS_EXITED_OK = ("Terminated", "CONTAINER_EXITED", "Sandbox container exited successfully.")
STATUS_EXITED_ERROR = ("Failed", "CONTAINER_EXITED_ERROR", "Sandbox container exited with code {code}.")

# execd's start banner in a container's logs (live stack, execd v1.0.19 from ../shared/opensandbox/execd)
EXECD_BANNER = {
    "version": "v1.0.19",
    "commit": "3bb6fad3d8b60bca70384c75a1f061c7514e248b",
    "built": "2026-12-01T05:44:47Z",
    "go": "go1.27.3",
}
EXECD_PORT = 44772  # execd's port inside a sandbox (recording 05; QUIRKS.md, Endpoints)
HTTP_PORT = 8080  # the second port Docker bridge mode publishes (server services/docker/networking.py)
MAX_PAGE_SIZE = 200  # server api/lifecycle.py list_sandboxes: Query(20, ge=1, le=200)
DEFAULT_PAGE_SIZE = 20  # recording 05
MIN_TIMEOUT = 60  # recording 03
INGRESS_HEADER = "OpenSandbox-Ingress-To"  # server services/constants.py (gateway header route mode)

EXTENSIONS_PREFIX = "opensandbox.extensions."  # server extensions/keys.py: echoed back as labels
