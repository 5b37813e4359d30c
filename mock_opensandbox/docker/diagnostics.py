"""The Docker diagnostics text of the mock's lifecycle server (server api/devops.py and
services/docker/docker_diagnostics.py): a sandbox's container logs, events, ``docker inspect``-like
summary and labels, and the inline JSON shape of a scoped answer. Plain functions of a ``Sandbox``
(lifecycle/model.py) and the server's clock; lifecycle/diagnostics_routes.py calls them. No HTTP.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

from mock_opensandbox.lifecycle.container_log import docker_ts
from mock_opensandbox.lifecycle.quirks import EXTENSIONS_PREFIX


def inline(sid: str, kind: str, scope: str, content: str, truncated: bool, warning: str) -> dict[str, Any]:
    out: dict[str, Any] = {
        "sandboxId": sid,
        "kind": kind,
        "scope": scope,
        "delivery": "inline",
        "contentType": "text/plain; charset=utf-8",
        "content": content,
        "contentLength": len(content.encode("utf-8")),
        "truncated": truncated,
    }
    if scope == "all":
        out["warnings"] = [warning]
    return out


def limit_lines(content: str, limit: int, keep_tail: bool) -> tuple[str, bool]:
    lines = content.splitlines(keepends=True)
    if len(lines) <= limit:
        return content, False
    return "".join(lines[-limit:] if keep_tail else lines[:limit]), True


def logs_text(sb: Any, tail: int, since: str | None = None, *, now: datetime) -> str:
    """The container's log tail (Docker's ``since``: whole seconds; an unreadable duration means 10 minutes)."""
    text = sb.log.tail(tail)
    if since:
        m = re.fullmatch(r"(\d+)\s*([smhd])", since.strip().lower())
        secs = int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)] if m else 600
        cutoff = (now - timedelta(seconds=secs)).astimezone(timezone.utc)
        stamp = cutoff.strftime("%Y-%m-%dT%H:%M:%S")  # Docker's since is whole seconds
        text = "".join(ln for ln in text.splitlines(keepends=True) if ln[:19] >= stamp)
    return text or "(no logs)"


def docker_state(sb: Any) -> dict[str, Any]:
    with sb.lock:
        exited, paused = sb.exit_code is not None, sb.paused
        started = docker_ts(sb.started_at)
        finished = docker_ts(sb.finished_at) if exited and sb.finished_at else "0001-01-01T00:00:00Z"
        return {
            "Status": "exited" if exited else ("paused" if paused else "running"),
            "Running": not exited,
            "Paused": paused and not exited,
            "ExitCode": sb.exit_code if exited else 0,
            "StartedAt": started,
            "FinishedAt": finished,
            "Created": started,
        }


def events_text(sb: Any) -> str:
    st = docker_state(sb)
    lines = [
        "Container:  %s (sandbox-%s)" % (sb.container_id[:12], sb.id),
        "Status:     %s" % st["Status"],
        "Created:    %s" % st["Created"],
        "Started:    %s" % st["StartedAt"],
    ]
    if st["FinishedAt"] != "0001-01-01T00:00:00Z":
        lines.append("Finished:   %s" % st["FinishedAt"])
    if st["ExitCode"]:
        lines.append("Event:      Exited with code %d" % st["ExitCode"])
    return "\n".join(lines)


def labels(sb: Any) -> dict[str, str]:
    labels = dict(sb.metadata or {})
    labels["opensandbox.io/id"] = sb.id
    if sb.expires_at is None:
        labels["opensandbox.io/manual-cleanup"] = "true"
    else:
        labels["opensandbox.io/expires-at"] = sb.expires_at.isoformat()
    if sb.platform:
        labels["opensandbox.io/platform-os"] = sb.platform["os"]
        labels["opensandbox.io/platform-arch"] = sb.platform["arch"]
    for k, v in (sb.extensions or {}).items():
        labels["opensandbox.io/extensions." + k[len(EXTENSIONS_PREFIX) :]] = v
    if sb.execd_port:
        labels["opensandbox.io/embedding-proxy-port"] = str(sb.execd_port)
    return labels


def inspect_text(sb: Any) -> str:
    st = docker_state(sb)
    lines = [
        "Container ID:   %s" % sb.container_id[:12],
        "Name:           sandbox-%s" % sb.id,
        "Image:          %s" % sb.image["uri"],
        "Status:         %s" % st["Status"],
        "Running:        %s" % st["Running"],
        "Paused:         %s" % st["Paused"],
        "OOMKilled:      False",
        "Exit Code:      %s" % st["ExitCode"],
        "Started At:     %s" % st["StartedAt"],
        "Finished At:    %s" % st["FinishedAt"],
        "",
        "Resources:",
    ]
    nano, mem = (sb.limits or {}).get("cpu"), (sb.limits or {}).get("memory")
    if nano:
        lines.append("  CPU:          %.2f cores" % (nano / 1e9))
    if mem:
        lines.append("  Memory:       %d MiB" % (mem // (1024 * 1024)))
    lines += ["", "Network:", "  bridge: 127.0.0.1"]
    if sb.execd_port:
        lines += ["", "Ports:", "  44772/tcp -> 127.0.0.1:%d" % sb.execd_port]
    lines += ["", "Labels:"] + ["  %s=%s" % kv for kv in sorted(labels(sb).items())]
    env = ["%s=%s" % kv for kv in (sb.env or {}).items()] + ["OPENSANDBOX_ID=%s" % sb.id]
    img = getattr(sb, "rootfs_image", None)
    if img is not None:  # Docker's Config.Env: the container's, then the image's other variables (live)
        have = {e.split("=", 1)[0] for e in env}
        env += [e for e in img.env if "=" in e and e.split("=", 1)[0] not in have]
    lines += ["", "Environment:"]
    for entry in env:
        key = entry.split("=", 1)[0]
        masked = any(w in key.upper() for w in ("SECRET", "TOKEN", "PASSWORD", "KEY"))
        lines.append("  %s=***" % key if masked else "  %s" % entry)
    return "\n".join(lines)


def summary_text(sid: str, sb: Any, tail: int, *, now: datetime) -> str:
    """GET .../diagnostics/summary: inspect, events and the log tail in one text."""
    bar, sub = "=" * 72, "-" * 40
    parts = [
        bar,
        "SANDBOX DIAGNOSTICS SUMMARY",
        "Sandbox ID: %s" % sid,
        bar,
        "",
        sub,
        "INSPECT",
        sub,
        inspect_text(sb),
        "",
        sub,
        "EVENTS",
        sub,
        events_text(sb),
        "",
        sub,
        "LOGS (last %d lines)" % tail,
        sub,
        logs_text(sb, tail, now=now),
    ]
    return "\n".join(parts) + "\n"
