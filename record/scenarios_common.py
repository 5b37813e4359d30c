"""What every recording scenario uses: ``Ctx`` (the images, the setup's sandbox and execd, what to delete
after), ``Scenario`` (one named entry of ``record.scenarios.SCENARIOS``), the standard resource limits, ``_create``
(a recorded create whose sandbox the teardown deletes), and the pieces several groups share (``EXIT3``, the
multipart ``_part``)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone
from typing import Any, Callable

from record.client import Execd, RecorderError, Session, created_id

NIL = "00000000-0000-0000-0000-000000000000"
RESOURCES = {"cpu": "500m", "memory": "512Mi"}
SMALL = {"cpu": "250m", "memory": "128Mi"}


@dataclasses.dataclass
class Ctx:
    image: str
    busybox_image: str
    missing_image: str
    sandbox_id: str | None = None
    execd: Execd | None = None
    created: list[str] = dataclasses.field(default_factory=list)
    secrets: list[str] = dataclasses.field(default_factory=list)  # learnt by a scenario (an egress token)

    def default_create(self, **extra: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "image": {"uri": self.image},
            "entrypoint": ["tail", "-f", "/dev/null"],
            "timeout": 1800,
            "resourceLimits": dict(RESOURCES),
            "metadata": {"purpose": "live-recording"},
        }
        body.update(extra)
        return body


@dataclasses.dataclass
class Scenario:
    name: str
    description: str
    run: Callable[[Session, Ctx], None]
    needs_sandbox: bool = False
    # Why a replay on the mock must skip this scenario (its outcome depends on timing or on the
    # recording host); empty = replayed.
    replay_skip: str = ""
    # For the converted live recordings (which carry no timing): pause before exchange i (seconds).
    live_waits: dict[int, float] = dataclasses.field(default_factory=dict)
    live_note: str = ""
    # (regex, replacement) pairs applied to both recordings before the drift check compares them
    drift_noise: tuple[tuple[str, str], ...] = ()


def _iso(delta_s: int) -> str:
    return (datetime.now(timezone.utc) + timedelta(seconds=delta_s)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _create(s: Session, ctx: Ctx, body: dict[str, Any], **kw: Any):
    r = s.lc("POST", "/v1/sandboxes", json=body, **kw)
    if r.status in (200, 201, 202):
        try:
            ctx.created.append(created_id(r))  # deleted by the teardown, whatever the scenario does next
        except RecorderError:
            pass  # the scenario's own created_id(r) says what is wrong
    return r


EXIT3 = "echo out; echo err >&2; exit 3"


BOUNDARY = "----livestacke1472477ddab4127"


def _part(name: str, filename: str, ctype: str, data: bytes, boundary: str = BOUNDARY) -> bytes:
    return (
        (
            f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"; filename="{filename}"\r\n'
            f"Content-Type: {ctype}\r\n\r\n"
        ).encode()
        + data
        + b"\r\n"
    )
