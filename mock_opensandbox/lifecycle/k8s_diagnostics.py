"""The diagnostics of the Kubernetes runtime (``--runtime kubernetes``), the text only, no HTTP: what server 1.1.1's
``K8sDiagnosticsMixin`` (server services/k8s/k8s_diagnostics.py) and api/devops.py say about a sandbox's pod, for
the mock's sandbox as the pod ``<id>-0`` of its BatchSandbox (template mode). Its routes are
lifecycle/k8s_diagnostics_routes.py's; the query checks, the scopes and the inline JSON are
lifecycle/diagnostics_routes.py's (the same FastAPI routes on both runtimes).

What the mock makes up (QUIRKS.md, "Kubernetes runtime: sandboxes"): the node (``mock-node``), the pod and host IP
(``127.0.0.1``) and the namespace (``opensandbox``, the server's default); the pod has no events; its log is the mock
sandbox's own container log.
"""

from __future__ import annotations

from datetime import datetime, timezone

from mock_opensandbox.lifecycle import quirks
from mock_opensandbox.lifecycle.k8s_workloads import Workload
from mock_opensandbox.lifecycle.model import Sandbox
from mock_opensandbox.lifecycle.quirks import MockError

NAMESPACE, NODE, POD_IP = "opensandbox", "mock-node", "127.0.0.1"
# the BatchSandbox pod's containers and init containers (server services/k8s/batchsandbox_provider.py, the
# execd-installer init container of provider_common.py); the log container by default (k8s_diagnostics.py)
CONTAINERS, INIT_CONTAINERS = ("sandbox",), ("execd-installer",)
NO_EVENTS = "(no events)"
B = "batch-sandbox.sandbox.opensandbox.io/"  # the controller's pod labels (upstream batchsandbox_controller.go)


def pod_name(sb: Sandbox) -> str:
    return sb.id + "-0"


def _k8s_time(dt: datetime) -> str:
    """A V1Pod datetime as str() gives it: ``2026-12-06 19:38:34+00:00`` (whole seconds)."""
    return str(dt.astimezone(timezone.utc).replace(microsecond=0))


def inspect_text(sb: Sandbox, w: Workload | None) -> str:
    """k8s_diagnostics.py get_sandbox_inspect: the pod; a pod not yet Ready shows no node, IPs or containers."""
    ready = w is not None and w.phase != "Pending"
    started = _k8s_time(sb.started_at)
    lines = [
        "Pod Name:       " + pod_name(sb),
        "Namespace:      " + NAMESPACE,
        "Node:           " + (NODE if ready else "N/A"),
        "Phase:          " + ("Running" if ready else "Pending"),
        "Pod IP:         " + (POD_IP if ready else "None"),
        "Host IP:        " + (POD_IP if ready else "None"),
        "Start Time:     " + (started if ready else "None"),
    ]
    if ready:
        lines += ["", "Containers:"]
        for name in CONTAINERS:
            lines += [
                "  %s:" % name,
                "    Ready:          True",
                "    Restart Count:  0",
                "    Image:          " + sb.image["uri"],
                "    State:          Running (since %s)" % started,
            ]
        lines += ["", "Conditions:"]
        lines += ["  %s: True (reason=N/A)" % c for c in ("PodScheduled", "Initialized", "ContainersReady", "Ready")]
    labels = dict(sb.label_metadata, **{B + "name": sb.id, B + "pod-index": "0", quirks.RESERVED_PREFIX + "id": sb.id})
    lines += ["", "Labels:"] + ["  %s=%s" % (k, v) for k, v in sorted(labels.items())]
    if sb.resource_limits:  # requests = limits (server services/k8s/create_helpers.py)
        lines += ["", "Resources:", "  sandbox:"]
        lines += ["    Requests: %r" % dict(sb.resource_limits), "    Limits:   %r" % dict(sb.resource_limits)]
    return "\n".join(lines)


def check_container(name: str | None, sb: Sandbox) -> None:
    """k8s_diagnostics.py _resolve_log_container: a ``container`` the pod does not have → 404."""
    names = list(CONTAINERS + INIT_CONTAINERS)
    if name and name not in names:
        raise MockError(quirks.K8S_CONTAINER_NOT_FOUND, container=name, pod=pod_name(sb), names=names)


def summary_text(sid: str, sb: Sandbox, w: Workload | None, tail: int, logs: str) -> str:
    """api/devops.py get_sandbox_diagnostics_summary over the pod's inspect, events and log tail (``logs``)."""
    bar, sub = "=" * 72, "-" * 40
    parts = [bar, "SANDBOX DIAGNOSTICS SUMMARY", "Sandbox ID: %s" % sid, bar, "", sub, "INSPECT", sub]
    parts += [inspect_text(sb, w), "", sub, "EVENTS", sub, NO_EVENTS, "", sub]
    parts += ["LOGS (last %d lines)" % tail, sub, logs]
    return "\n".join(parts) + "\n"
