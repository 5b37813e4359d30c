"""MockOptions: every setting of a MockOpenSandbox, in one frozen dataclass.

The command line (``python -m mock_opensandbox``, __main__.py) and the pytest fixtures
(pytest_opensandbox_mock.py) both build one; ``MockOpenSandbox(options)`` takes it.

    opts = MockOptions(execd_mode="latest", pids_limit=64)
    with MockOpenSandbox(opts) as osb: ...
    with MockOpenSandbox(opts, verbose=True) as osb: ...   # dataclasses.replace(opts, verbose=True)

``checked()`` validates and normalises (ValueError saying which setting is wrong). The server's own
settings keep the server's names and defaults: ``max_sandbox_timeout`` ([server]
max_sandbox_timeout_seconds), ``pids_limit`` ([docker] pids_limit), ``allowed_host_paths`` ([storage]),
``network`` ([docker] network_mode), ``egress_*`` ([egress]). Standard library only.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Iterable

from mock_opensandbox.lifecycle.signing import KeyRing
from mock_opensandbox.runtime.cgroups import DEFAULT_PIDS_LIMIT
from mock_opensandbox.runtime.jupyterenv import check as check_jupyter_env

EXECD_MODES = ("v1.1.0", "latest")
TIMINGS = ("faithful", "fast")
# runtime="kubernetes": the server's [runtime] type kubernetes as far as the mock answers it (QUIRKS.md, "Kubernetes
# runtime: pools" and "... sandboxes"): the /v1/pools API, extensions.poolRef creates and the sandbox lifecycle
RUNTIMES = ("docker", "kubernetes")
GATEWAY_ROUTES = ("header", "uri")  # lifecycle/ingress.py ROUTES (server GatewayRouteModeConfig, without wildcard)
# timing="fast": the delays of a real server that no client's outcome depends on, each set to 0 (docs/MOCK.md,
# "Timing"): execd's refusal of connections for a moment after Running (a client polls /ping through it) and
# the ~1 s a finished command's SSE stream stays open (the official SDK's commands.run reads it to its end).
# The code interpreter's retries for a language its Jupyter server has no kernel spec of (execd's backoff retries
# past any client's timeout; a client meets its own timeout, the fast timing a 500 at once).
# Kept: the code interpreter's 100 ms idle poll (it decides which output a /code run's stream carries) and
# the ~3 s heartbeat cadence (events, not waits).
# And the tail: execd reads a running foreground command's files every 100 ms (tailStdPipe); fast, every 5 ms
# while output comes, doubling up to 100 ms while none does (a poll: not 0). Its output's events are the same;
# only when they leave changes.
FAST_TIMING = {
    "execd_start_delay": 0.0,
    "execd_close_delay": 0.0,
    "code_unknown_language_wait": 0.0,
    "execd_tail_interval": 0.005,
}
NETWORK_MODES = ("bridge", "host")  # runtime/netns.py NETWORK_MODES
DEFAULT_MAX_SANDBOX_TIMEOUT = 86400  # server examples/example.config.toml [server] max_sandbox_timeout_seconds


@dataclass(frozen=True)
class MockOptions:
    """The settings of one mock. Defaults are a mock on 127.0.0.1, an ephemeral port, a generated API key."""

    # -- the lifecycle listener ------------------------------------------------------------------------
    host: str = "127.0.0.1"
    port: int = 0  # 0 = ephemeral; the bound port is MockOpenSandbox.port
    api_key: str | None = None  # None: generated per run (unless insecure)
    insecure: bool = False  # no API key at all
    verbose: bool = False
    clock: Callable[[], datetime] | None = None  # the server's clock (timestamps, expiry, Date)
    warn: Callable[[str], None] | None = None  # where start() warnings go (default: stderr)
    # an opensandbox-server 1.1.1 config file (server_config.py): what it sets is the default under every setting
    # given explicitly; None: the file named by $OSB_MOCK_CONFIG, if any, without its host, port and API key; "": none
    config: str | None = None
    # -- execd ---------------------------------------------------------------------------------------------
    execd_mode: str = "v1.1.0"  # the in-process execd's generation (QUIRKS.md, execd modes)
    execd_token: str | None = None  # X-EXECD-ACCESS-TOKEN every execd request must carry
    gateway: bool = False  # the ingress routing header on every execd request
    execd_close_delay: float = 1.0  # execd v1.0.19 keeps a stream open ~1 s after its last event
    execd_tail_interval: float = 0.1  # seconds between execd's reads of a running command's files (tailStdPipe)
    execd_start_delay: float = 0.0  # seconds a new execd refuses connections although the create says Running
    execd_bin: str | None = None  # a real execd (or the mock's stand-alone one) per sandbox instead of in-process
    # POST /code/context retries a failing kernel start until the client leaves, as execd's kernelWaitingBackoff
    # does (an unknown language never answers); a number of seconds bounds it (then 500 with the last error)
    code_context_wait: float | None = None
    # ... and once the Jupyter server has answered with no kernel spec of the language, retries for this long at
    # most (None: as code_context_wait; the fast timing: 0, a 500 at once)
    code_unknown_language_wait: float | None = None
    timing: str = "faithful"  # "fast": every delay in FAST_TIMING set to 0, whatever the fields above say
    runtime: str = "docker"  # the server's [runtime] type: "docker" or "kubernetes" (pools, poolRef; RUNTIMES)
    # runtime="kubernetes": [kubernetes] sandbox_create_timeout_seconds (server default 60): how long a create waits
    # for a pod that is not Ready (a fault rule of kind "pod", docs/FAULTS.md) before its 504 POD_READY_TIMEOUT
    sandbox_create_timeout: float = 60.0
    # [kubernetes] pool_acquisition_timeout_seconds (server default 30): how long a create waits while its workload
    # reports exhausted Pool capacity (a fault rule of kind "pod", pod "capacity") before its 429
    pool_acquisition_timeout: float = 30.0
    # runtime="kubernetes" with gateway=True: [ingress] mode "gateway", a real gateway in front of the sandboxes
    # (docker/gateway.py), its route mode "header" | "uri", and [ingress.secure_access] keys "<id>=<base64>,..."
    # (None: one random key "a"), the active one ("": the first id) (QUIRKS.md, "Kubernetes runtime: gateway ...")
    gateway_route: str = "header"
    secure_access_keys: str | None = None
    secure_access_active_key: str = ""
    # -- sandboxes -----------------------------------------------------------------------------------------
    root: str | None = None  # where sandbox roots live (None: a temp dir removed at stop)
    isolate: bool | None = None  # None: isolated where the host can, False: on the host
    reap_interval: float = 0.1  # how often expired sandboxes are reaped (seconds)
    pull_fails: Callable[[str], bool] | Iterable[str] | None = None  # images whose pull fails
    max_sandbox_timeout: int | None = DEFAULT_MAX_SANDBOX_TIMEOUT  # 0/None: no upper bound
    pids_limit: int | None = DEFAULT_PIDS_LIMIT  # 0/None: no limit
    network: str = "bridge"  # "bridge": a network namespace per sandbox; "host": the host's
    volumes_dir: str | None = None  # named volumes (default <root>/volumes)
    allowed_host_paths: tuple[str, ...] = field(default=())  # host binds only under these ([] = none)
    image_dir: str | None = None  # the image store's sources (docs/IMAGES.md); None: no image store
    image_cache: str | None = None  # its unpacked layers (default ~/.cache/mock-opensandbox/images)
    jupyter_env: str | None = None  # a Jupyter env for code-interpreter images (runtime/jupyterenv.py)
    # -- networkPolicy (docker/egress/) --------------------------------------------------------------------
    egress_mode: str | None = None  # off | dns | dns+nft; None: dns where this host can run it
    egress_dns_upstream: str | None = None  # IPv4[:PORT] the policy resolvers forward to
    egress_ready_timeout: float = 30.0  # the server's wait for a sidecar's /healthz
    egress_bin: str | None = None  # the real egress sidecar binary instead of the mock's

    def replace(self, **changes: Any) -> "MockOptions":
        """A copy with these settings changed (TypeError naming an unknown one)."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise TypeError("unknown MockOptions setting(s): %s" % ", ".join(unknown))
        return dataclasses.replace(self, **changes) if changes else self

    def checked(self) -> "MockOptions":
        """These options validated (ValueError saying which is wrong) and normalised: 0 -> None for
        max_sandbox_timeout and pids_limit, allowed_host_paths a tuple of str, jupyter_env its real path."""
        if self.execd_mode not in EXECD_MODES:
            raise ValueError("execd_mode must be one of %s, not %r" % (", ".join(EXECD_MODES), self.execd_mode))
        port = self.port
        if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
            raise ValueError("port must be an integer between 0 and 65535")
        key = self.api_key
        if key is not None and (not key or any(c in key for c in "\r\n\x00")):
            raise ValueError("api_key must be a non-empty string without control characters")
        timeout = None if self.max_sandbox_timeout == 0 else self.max_sandbox_timeout
        if timeout is not None and (not isinstance(timeout, int) or isinstance(timeout, bool) or timeout < 60):
            raise ValueError("max_sandbox_timeout must be an integer >= 60 (seconds), or 0/None for no limit")
        pids = None if self.pids_limit == 0 else self.pids_limit
        if pids is not None and (not isinstance(pids, int) or isinstance(pids, bool) or pids < 1):
            raise ValueError("pids_limit must be a positive integer, or 0/None for no limit")
        if isinstance(self.sandbox_create_timeout, bool) or not self.sandbox_create_timeout > 0:
            raise ValueError("sandbox_create_timeout must be a positive number of seconds")
        if isinstance(self.pool_acquisition_timeout, bool) or not self.pool_acquisition_timeout > 0:
            raise ValueError("pool_acquisition_timeout must be a positive number of seconds")
        if self.runtime not in RUNTIMES:
            raise ValueError("runtime must be one of %s, not %r" % (", ".join(RUNTIMES), self.runtime))
        if self.gateway_route not in GATEWAY_ROUTES:
            raise ValueError(
                "gateway_route must be one of %s, not %r" % (", ".join(GATEWAY_ROUTES), self.gateway_route)
            )
        if self.secure_access_keys is not None or self.secure_access_active_key:
            KeyRing(self.secure_access_keys, self.secure_access_active_key)  # raises ValueError saying what is wrong
        if self.timing not in TIMINGS:
            raise ValueError("timing must be one of %s, not %r" % (", ".join(TIMINGS), self.timing))
        delay = self.execd_close_delay
        if not isinstance(delay, (int, float)) or not delay >= 0 or delay == float("inf"):
            raise ValueError("execd_close_delay must be a number of seconds >= 0")
        tail = self.execd_tail_interval
        if not isinstance(tail, (int, float)) or isinstance(tail, bool) or not 0.001 <= tail <= 60:
            raise ValueError("execd_tail_interval must be a number of seconds from 0.001 to 60")
        wait = self.code_context_wait
        if wait is not None and (not isinstance(wait, (int, float)) or isinstance(wait, bool) or not 0 < wait < 1e9):
            raise ValueError("code_context_wait must be a number of seconds > 0, or None (until the client leaves)")
        wait = self.code_unknown_language_wait
        if wait is not None and (not isinstance(wait, (int, float)) or isinstance(wait, bool) or not 0 <= wait < 1e9):
            raise ValueError("code_unknown_language_wait must be a number of seconds >= 0, or None")
        hosts = tuple(str(p) for p in self.allowed_host_paths)
        for p in hosts:
            if not p.startswith("/"):
                raise ValueError("allowed_host_paths must be absolute paths, not %r" % p)
        if self.network not in NETWORK_MODES:
            raise ValueError("network must be one of %s, not %r" % (", ".join(NETWORK_MODES), self.network))
        if self.image_dir is not None and not os.path.isdir(self.image_dir):
            raise ValueError("image_dir %r is not a directory" % self.image_dir)
        jenv = self.jupyter_env
        if jenv is not None:
            problem = check_jupyter_env(jenv)
            if problem:
                raise ValueError(problem)
            jenv = os.path.realpath(jenv)  # bound into sandboxes at its real path
        fast: dict[str, Any] = dict(FAST_TIMING) if self.timing == "fast" else {}
        return dataclasses.replace(
            self, max_sandbox_timeout=timeout, pids_limit=pids, allowed_host_paths=hosts, jupyter_env=jenv, **fast
        )
