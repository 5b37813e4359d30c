"""The fixed list of named recording scenarios.

One scenario per file in the live recordings (``01_health_version`` ... ``18_sdk_sync_flow``, same
request sequence, so a re-recording can be diffed against the committed fixture), plus
``20_smoke_flow``: the smoke flow of tiers/flows/server/smoke_flow.py in one self-contained scenario.

A scenario with ``needs_sandbox`` gets a sandbox and its execd endpoint from an unrecorded setup
step (the live recordings 06-14 likewise used the sandbox created in 05), and an unrecorded teardown
deletes every sandbox the scenario created. The replay (``record.replay``) rebuilds the same setup.

This module is the list, in recording order; the scenarios themselves are in a module per group:
record/scenarios_lifecycle.py (01-05, 14-17), record/scenarios_execd.py (06-13), record/scenarios_flows.py
(18, 20), record/scenarios_inside.py (21-23), record/scenarios_docker.py (24-26), record/scenarios_code.py (27),
with what they share in record/scenarios_common.py.
"""

from __future__ import annotations

from record.scenarios_code import SCENARIOS as _CODE
from record.scenarios_common import NIL, RESOURCES, SMALL, Ctx, Scenario, _create
from record.scenarios_docker import s24, s25, s26
from record.scenarios_execd import s06, s07, s08, s09, s10, s11, s12, s13
from record.scenarios_flows import s18, s20
from record.scenarios_inside import (
    INSIDE_CWDS,
    INSIDE_FILES,
    INSIDE_NOISE,
    INSIDE_PROBES,
    PROBE_NOISE,
    SAME_PORT,
    inside_command,
    s21,
    s22,
    s23,
    serve_command,
)
from record.scenarios_lifecycle import s01, s02, s03, s04, s05, s14, s15, s16, s17

# what other modules import from here (the recorder, convert, the t0 tests, tiers/flows/sandbox/sandbox_inside.py)
__all__ = [
    "BY_NAME",
    "SCENARIOS",
    "Ctx",
    "Scenario",
    "NIL",
    "RESOURCES",
    "SMALL",
    "_create",
    "INSIDE_CWDS",
    "INSIDE_FILES",
    "INSIDE_NOISE",
    "INSIDE_PROBES",
    "PROBE_NOISE",
    "SAME_PORT",
    "inside_command",
    "serve_command",
]

SCENARIOS: list[Scenario] = [
    Scenario("01_health_version", "GET /health and /version, with and without the API key", s01),
    Scenario("02_auth_failures", "missing and wrong API key on list/create/get", s02),
    Scenario(
        "03_validation_422", "FastAPI 422 bodies: empty body, timeout < 60, empty entrypoint, bad JSON, bad date", s03
    ),
    Scenario("04_unknown_sandbox_404", "every sandbox route on an unknown id", s04),
    Scenario(
        "05_create_get_list_endpoints",
        "create, get, list with filters, endpoints incl. server proxy and bad ports",
        s05,
    ),
    Scenario(
        "06_execd_ping",
        "execd /ping with and without the /proxy/44772 prefix, via the server proxy, unknown route",
        s06,
        needs_sandbox=True,
    ),
    Scenario(
        "07_command_exit3_sse",
        "SSE command exiting 3, its status, logs of a foreground command",
        s07,
        needs_sandbox=True,
    ),
    Scenario(
        "08_command_sse_direct_and_server_proxy",
        "SSE command without the prefix and through the server proxy",
        s08,
        needs_sandbox=True,
    ),
    Scenario("09_command_timeout", "command killed by its 1 s timeout", s09, needs_sandbox=True),
    Scenario(
        "10_command_background_logs",
        "background command: status, logs with cursor, interrupt, errors",
        s10,
        needs_sandbox=True,
        live_waits={1: 1.5, 11: 0.5, 12: 0.5},
    ),
    Scenario(
        "11_command_argv_and_bad_requests",
        "argv (v1.1.0 execd rejects it) and malformed command requests",
        s11,
        needs_sandbox=True,
    ),
    Scenario(
        "12_command_output_framing",
        "line splitting of stdout/stderr, env/cwd, unicode, kill -9, exit 255",
        s12,
        needs_sandbox=True,
    ),
    Scenario(
        "13_files_and_directories",
        "mkdir, multipart upload, info, download with Range, list, search, mv, rm",
        s13,
        needs_sandbox=True,
    ),
    Scenario(
        "14_lifecycle_renew_pause_resume_delete",
        "renew, pause/resume and their 409s, delete and second delete",
        s14,
        needs_sandbox=True,
    ),
    Scenario(
        "15_create_variants",
        "busybox image with env (no bash), entrypoint exiting 1 -> Failed",
        s15,
        live_waits={7: 1.0},
    ),
    Scenario(
        "16_image_not_found",
        "create with an image that cannot be pulled",
        s16,
        replay_skip="",
        live_note="recorded in an earlier run against the same server (VERSIONS.md)",
    ),
    Scenario(
        "17_long_command_heartbeat",
        "7 s command: ping heartbeat every ~3 s",
        s17,
        replay_skip="timing: a 7 s wall-clock run whose subject, the ~3 s heartbeat cadence, is exactly what "
        "a replay cannot compare (ping count/position are timing); pings are checked in 07-18",
    ),
    Scenario("18_sdk_sync_flow", "the official Python SDK 1.1.1's request sequence", s18),
    Scenario("20_smoke_flow", "the smoke flow of tiers/flows/server/smoke_flow.py in one self-contained scenario", s20),
    Scenario(
        "21_containment_probes",
        "what a sandboxed process sees: capabilities, /dev, mounts, ids, masked /proc, "
        "read-only /proc/sys and /sys, no-new-privileges, ulimits",
        s21,
        needs_sandbox=True,
        drift_noise=PROBE_NOISE,
        replay_skip="host-specific output (container id as hostname, overlay layer paths, the Docker host's "
        "ulimits); the values are asserted by the containment tests (tiers/t1/sandbox/test_containment*)",
    ),
    Scenario(
        "22_sandbox_inside",
        "the inside of a 500m/512Mi sandbox: files API and cwd on the image's /etc, /usr, "
        "/var, /opt; ls /, ps, OOM exit, cgroup limits, CPU share, /etc/hosts, interfaces, reaching the host, "
        "disk, env/pwd/id",
        s22,
        needs_sandbox=True,
        drift_noise=INSIDE_NOISE,
        replay_skip="host-specific output (addresses, counters, measured CPU share); the values are asserted by "
        "tiers/flows/sandbox/sandbox_inside.py (t4 live, t1 on the mock)",
    ),
    Scenario(
        "23_same_port_two_sandboxes",
        "two sandboxes serve port 9000; each endpoint answers with its own files",
        s23,
        drift_noise=INSIDE_NOISE,
        replay_skip="background servers started by commands; asserted by tiers/flows/sandbox/sandbox_inside.py",
    ),
    Scenario(
        "24_volume_pvc",
        "a Docker named volume (pvc): created and written by one sandbox, mounted read-only by "
        "a second; removed with its creator (deleteOnSandboxTermination)",
        s24,
        drift_noise=INSIDE_NOISE,
        replay_skip="host-specific output (the volume's mount line: the Docker host's device and ext4 options); "
        "the flows are asserted by tiers/toolkit/volume_flows.py",
    ),
    Scenario(
        "25_snapshots",
        "snapshot a sandbox that wrote /tmp, /root, /workspace and removed an image file: 202 "
        "Creating then Ready, get/list with filters and pages, 404/409/422 errors, restore with snapshotId (files "
        "kept, processes and shell variables not, the source's env inherited), delete while in use (409, "
        "Deleting), delete after",
        s25,
        drift_noise=INSIDE_NOISE,
        replay_skip="the snapshot leaves Creating by itself (polled unrecorded); asserted by "
        "tiers/t1/docker/test_snapshots.py (mock) and tiers/t4/docker/test_live_snapshots.py (live)",
    ),
    Scenario(
        "26_network_policy",
        "networkPolicy with the egress image (local/egress:src3bb6fad, [egress] mode dns): "
        "create, the endpoint of 18080, the sidecar's /policy API, the validation answers (an invalid action: "
        "500 after the 30 s ready wait)",
        s26,
        replay_skip="needs a server with an egress image and the sidecar's token; asserted by "
        "tiers/t1/docker/test_egress*.py (mock) and tiers/t4/docker/test_live_egress.py (live)",
    ),
]

SCENARIOS += _CODE
BY_NAME = {sc.name: sc for sc in SCENARIOS}
