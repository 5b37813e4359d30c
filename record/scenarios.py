"""The fixed list of named recording scenarios.

One scenario per file in the live recordings (``01_health_version`` ... ``18_sdk_sync_flow``, same
request sequence, so a re-recording can be diffed against the committed fixture), plus
``20_smoke_flow``: the smoke flow of tiers/smoke_flow.py in one self-contained scenario.

A scenario with ``needs_sandbox`` gets a sandbox and its execd endpoint from an unrecorded setup
step (the live recordings 06-14 likewise used the sandbox created in 05), and an unrecorded teardown
deletes every sandbox the scenario created. The replay (``record.replay``) rebuilds the same setup.
"""

from __future__ import annotations

import dataclasses
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Callable
from urllib.parse import urlsplit

from record.client import Execd, RecorderError, Session, created_id, execd_from

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


# -- scenarios --------------------------------------------------------------------------------------
def s01(s: Session, ctx: Ctx) -> None:
    s.lc("GET", "/health", auth=False)
    s.lc("GET", "/version", auth=False)
    s.lc("GET", "/health")
    s.lc("GET", "/version")


def s02(s: Session, ctx: Ctx) -> None:
    s.lc("GET", "/v1/sandboxes", auth=False)
    s.lc("GET", "/v1/sandboxes", auth="wrong-key")
    _create(s, ctx, ctx.default_create(), auth=False)
    s.lc("GET", f"/v1/sandboxes/{NIL}", auth=False)


def s03(s: Session, ctx: Ctx) -> None:
    base = {"image": {"uri": ctx.image}, "entrypoint": ["tail", "-f", "/dev/null"]}
    _create(s, ctx, {})
    _create(s, ctx, {**base, "timeout": 10, "resourceLimits": dict(RESOURCES)})
    _create(s, ctx, {"image": {"uri": ctx.image}, "entrypoint": [], "resourceLimits": dict(RESOURCES)})
    s.lc("POST", "/v1/sandboxes", content=b"{not json", headers={"Content-Type": "application/json"})
    s.lc("POST", f"/v1/sandboxes/{NIL}/renew-expiration", json={"expiresAt": "not-a-date"})


def s04(s: Session, ctx: Ctx) -> None:
    s.lc("GET", f"/v1/sandboxes/{NIL}")
    s.lc("DELETE", f"/v1/sandboxes/{NIL}")
    s.lc("GET", f"/v1/sandboxes/{NIL}/endpoints/44772")
    s.lc("POST", f"/v1/sandboxes/{NIL}/pause")
    s.lc("POST", f"/v1/sandboxes/{NIL}/resume")
    s.lc("POST", f"/v1/sandboxes/{NIL}/renew-expiration", json={"expiresAt": _iso(3600)})
    s.lc("GET", "/v1/sandboxes/not-a-uuid")


def s05(s: Session, ctx: Ctx) -> None:
    r = _create(s, ctx, ctx.default_create())
    sid = created_id(r)
    s.lc("GET", f"/v1/sandboxes/{sid}")
    s.lc("GET", "/v1/sandboxes")
    s.lc("GET", "/v1/sandboxes?state=Running&metadata=purpose%3Dlive-recording&page=1&pageSize=10")
    s.lc("GET", "/v1/sandboxes?state=Paused")
    s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772")
    s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/8080")
    s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772?use_server_proxy=true")
    s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/0")
    s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/70000")


def s06(s: Session, ctx: Ctx) -> None:
    ex = ctx.execd
    assert ex is not None
    ex.get("/ping")
    ex.get("/ping", prefix=False)
    s.lc("GET", f"/v1/sandboxes/{ctx.sandbox_id}/proxy/44772/ping")
    ex.get("/no-such-route")


EXIT3 = "echo out; echo err >&2; exit 3"


def s07(s: Session, ctx: Ctx) -> None:
    ex = ctx.execd
    assert ex is not None
    r = ex.command({"command": EXIT3})
    cid = r.sse_events()[0]["text"]
    ex.get(f"/command/status/{cid}")
    ex.get(f"/command/{cid}/logs")


def s08(s: Session, ctx: Ctx) -> None:
    ex = ctx.execd
    assert ex is not None
    ex.command({"command": EXIT3}, prefix=False)
    s.lc(
        "POST",
        f"/v1/sandboxes/{ctx.sandbox_id}/proxy/44772/command",
        json={"command": EXIT3},
        headers={"Accept": "text/event-stream", "Cache-Control": "no-cache"},
    )
    ex.command({"command": "true"})
    ex.command({"command": "exit 0"})


def s09(s: Session, ctx: Ctx) -> None:
    assert ctx.execd is not None
    ctx.execd.command({"command": "echo start; sleep 10; echo never", "timeout": 1000})


def s10(s: Session, ctx: Ctx) -> None:
    ex = ctx.execd
    assert ex is not None
    r = ex.command(
        {"command": "for i in 1 2 3; do echo line$i; sleep 0.3; done; echo bg-err >&2; exit 5", "background": True}
    )
    cid = r.sse_events()[0]["text"]
    s.sleep(1.5)
    ex.get(f"/command/status/{cid}")
    r = ex.get(f"/command/{cid}/logs")
    ex.get(f"/command/{cid}/logs")
    ex.get(f"/command/{cid}/logs?cursor=2")
    tail = r.headers.get("Execd-Commands-Tail-Cursor") or "0"
    ex.get(f"/command/{cid}/logs?cursor={tail}")
    ex.get(f"/command/status/{cid}")
    ex.get("/command/status/no-such-command")
    ex.get("/command/no-such-command/logs")
    r = ex.command({"command": "echo started; sleep 30; echo never", "background": True})
    cid2 = r.sse_events()[0]["text"]
    ex.get(f"/command/status/{cid2}")
    s.sleep(0.5)  # let "echo started" run before the interrupt (the live run took ~1.5 s here)
    ex.request("DELETE", f"/command?id={cid2}")
    s.sleep(0.5)
    ex.get(f"/command/status/{cid2}")
    ex.get(f"/command/{cid2}/logs")
    ex.request("DELETE", "/command?id=no-such-command")
    ex.request("DELETE", "/command")


def s11(s: Session, ctx: Ctx) -> None:
    ex = ctx.execd
    assert ex is not None
    ex.command({"argv": ["echo", "hi"]})
    ex.command({"command": ["echo", "hi"]})
    ex.command({"command": "echo argv-field-ignored?", "argv": ["echo", "hi"]})
    ex.command({})
    ex.request(
        "POST",
        "/command",
        content=b"{not json",
        headers={"Accept": "text/event-stream", "Cache-Control": "no-cache", "Content-Type": "application/json"},
    )
    ex.command({"command": "echo x", "timeout": -5})
    ex.command({"command": "echo x", "cwd": "/no/such/dir"})
    ex.command({"command": "/no/such/binary"})


def s12(s: Session, ctx: Ctx) -> None:
    ex = ctx.execd
    assert ex is not None
    ex.command({"command": "printf 'a\\r\\nb\\n\\nc'"})
    ex.command({"command": "printf 'no-newline'; printf 'err-no-newline' >&2"})
    ex.command({"command": "seq 1 50"})
    ex.command({"command": 'pwd; echo "FOO=$FOO"; id -u', "cwd": "/tmp", "envs": {"FOO": "bar baz"}})
    ex.command({"command": "echo 'h\u00e9llo \u2603'; echo '{\"json\": true}'; echo 'data: fake'"})
    ex.command({"command": "echo one; sleep 1.2; echo two"})
    ex.command({"command": "kill -9 $$"})
    ex.command({"command": "exit 255"})


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


def s13(s: Session, ctx: Ctx) -> None:
    ex = ctx.execd
    assert ex is not None
    d = "/tmp/livework"
    ex.request("POST", "/directories", json={d: {"mode": 755}, f"{d}/sub/deeper": {"mode": 700}})
    body = (
        _part("metadata", "metadata", "application/json", b'{"path": "/tmp/livework/hello.txt", "mode": 644}')
        + _part("file", "hello.txt", "application/octet-stream", b"hello world\nline2\r\nline3")
        + _part("metadata", "metadata", "application/json", b'{"path": "/tmp/livework/sub/data.csv"}')
        + _part("file", "data.csv", "application/octet-stream", b"a,b\n1,2\n")
        + f"--{BOUNDARY}--\r\n".encode()
    )
    ex.request(
        "POST", "/files/upload", content=body, headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    )
    ex.get(f"/files/info?path={d}/hello.txt&path={d}/sub")
    ex.get(f"/files/download?path={d}/hello.txt")
    ex.get(f"/files/download?path={d}/hello.txt", headers={"Range": "bytes=0-4"})
    ex.get(f"/directories/list?path={d}")
    ex.get(f"/directories/list?path={d}&depth=3")
    ex.get(f"/files/search?path={d}&pattern=%2A.txt")
    ex.get(f"/files/search?path={d}&pattern=%2A%2A/%2A.csv")
    ex.request("POST", "/files/mv", json=[{"src": f"{d}/hello.txt", "dest": f"{d}/renamed.txt"}])
    ex.get(f"/files/info?path={d}/renamed.txt")
    ex.get(f"/files/info?path={d}/hello.txt")
    ex.get(f"/files/download?path={d}/hello.txt")
    ex.request("DELETE", f"/files?path={d}/renamed.txt")
    ex.request("DELETE", f"/files?path={d}/renamed.txt")
    ex.request("DELETE", f"/directories?path={d}")
    ex.get(f"/directories/list?path={d}")
    ex.get("/files/download")
    ex.request("POST", "/files/upload", json={})
    ex.request("POST", "/files/mv", json={"src": "/a", "dest": "/b"})


def s14(s: Session, ctx: Ctx) -> None:
    ex, sid = ctx.execd, ctx.sandbox_id
    assert ex is not None
    s.lc("POST", f"/v1/sandboxes/{sid}/renew-expiration", json={"expiresAt": _iso(7200)})
    s.lc("POST", f"/v1/sandboxes/{sid}/renew-expiration", json={"expiresAt": _iso(-3600)})
    s.lc("GET", f"/v1/sandboxes/{sid}")
    s.lc("POST", f"/v1/sandboxes/{sid}/pause")
    s.lc("GET", f"/v1/sandboxes/{sid}")
    s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772")
    s.lc("POST", f"/v1/sandboxes/{sid}/pause")
    s.lc("POST", f"/v1/sandboxes/{sid}/resume")
    s.lc("GET", f"/v1/sandboxes/{sid}")
    s.lc("POST", f"/v1/sandboxes/{sid}/resume")
    s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772")
    ex.get("/ping")
    ex.command({"command": "echo after-resume"})
    s.lc("DELETE", f"/v1/sandboxes/{sid}")
    s.lc("DELETE", f"/v1/sandboxes/{sid}")
    s.lc("GET", f"/v1/sandboxes/{sid}")
    s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772")


def s15(s: Session, ctx: Ctx) -> None:
    r = _create(
        s,
        ctx,
        {
            "image": {"uri": ctx.busybox_image},
            "entrypoint": ["tail", "-f", "/dev/null"],
            "resourceLimits": dict(SMALL),
            "env": {"HELLO": "world"},
        },
    )
    sid = created_id(r)
    r = s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772")
    ex = execd_from(s, r)
    s.wait_ready(ex)  # unrecorded: Docker's readiness window (accepted, then dropped) before execd listens
    ex.get("/ping")
    ex.command({"command": "echo $HELLO; echo $0; ls /bin/bash 2>&1; exit 7"})
    s.lc("GET", f"/v1/sandboxes/{sid}")
    s.lc("DELETE", f"/v1/sandboxes/{sid}")
    r = _create(
        s,
        ctx,
        {
            "image": {"uri": ctx.image},
            "entrypoint": ["sh", "-c", "exit 1"],
            "timeout": 600,
            "resourceLimits": dict(SMALL),
        },
    )
    sid = created_id(r)
    s.sleep(1.0)
    s.lc("GET", f"/v1/sandboxes/{sid}")
    s.lc("GET", f"/v1/sandboxes/{sid}")
    s.lc("GET", f"/v1/sandboxes/{sid}")
    s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772")
    s.lc("DELETE", f"/v1/sandboxes/{sid}")


def s16(s: Session, ctx: Ctx) -> None:
    _create(
        s,
        ctx,
        {
            "image": {"uri": ctx.missing_image},
            "entrypoint": ["tail", "-f", "/dev/null"],
            "timeout": 600,
            "resourceLimits": dict(SMALL),
        },
    )


def s17(s: Session, ctx: Ctx) -> None:
    r = _create(s, ctx, ctx.default_create())
    sid = created_id(r)
    r = s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772")
    ex = execd_from(s, r)
    s.wait_ready(ex)  # unrecorded: Docker's readiness window (accepted, then dropped) before execd listens
    ex.get("/ping")
    ex.command({"command": "echo a; sleep 7; echo b"})
    s.lc("DELETE", f"/v1/sandboxes/{sid}")


SDK_HEADERS = {
    "User-Agent": "OpenSandbox-Python-SDK/1.1.1",
    "OPEN-SANDBOX-CLIENT-IP": "192.0.2.2",
    "Accept-Encoding": "gzip, deflate",
}
SDK_BOUNDARY = "opensandbox_2c3ec9d588d4bb2f_1795938459"


def s18(s: Session, ctx: Ctx) -> None:
    """The official SDK's request sequence (recording 18), replayed with the same headers and bodies."""
    h = dict(SDK_HEADERS)
    body = {
        "image": {"uri": ctx.image},
        "timeout": 600,
        "resourceLimits": dict(RESOURCES),
        "metadata": {"via": "sdk"},
        "entrypoint": ["tail", "-f", "/dev/null"],
        "secureAccess": False,
    }
    r = _create(s, ctx, body, headers=h, json_compact=True)
    sid = created_id(r)
    r = s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772?use_server_proxy=false", headers=h)
    ex = execd_from(s, r)
    s.wait_ready(ex)  # unrecorded: Docker's readiness window (accepted, then dropped) before execd listens
    s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/18080?use_server_proxy=false", headers=h)
    ex.get("/ping", headers=h)
    ex.request(
        "POST",
        "/command",
        json={"command": EXIT3},
        json_compact=True,
        headers={**h, "Accept": "text/event-stream", "Cache-Control": "no-cache"},
    )
    up = (
        _part(
            "metadata",
            "metadata",
            "application/json",
            b'{"path": "/tmp/sdk.txt", "owner": null, "group": null, "mode": 755}',
            SDK_BOUNDARY,
        )
        + _part("file", "sdk.txt", "text/plain; charset=utf-8", b"hello from sdk\n", SDK_BOUNDARY)
        + f"--{SDK_BOUNDARY}--\r\n".encode()
    )
    ex.request(
        "POST",
        "/files/upload",
        content=[up],  # an iterable: sent chunked, like the SDK
        headers={**h, "content-type": f"multipart/form-data; boundary={SDK_BOUNDARY}"},
    )
    ex.get("/files/download?path=%2Ftmp%2Fsdk.txt", headers=h)
    s.lc("GET", f"/v1/sandboxes/{sid}", headers=h)
    s.lc("DELETE", f"/v1/sandboxes/{sid}", headers=h)


def s20(s: Session, ctx: Ctx) -> None:
    """The smoke flow (tiers/smoke_flow.py): auth, create/get/list/endpoint, SSE exec with exit codes and timeout,
    background command with log cursor and interrupt, files, renew, pause/resume, kill, second kill."""
    s.lc("GET", "/v1/sandboxes", auth=False)
    r = _create(s, ctx, ctx.default_create(timeout=600))
    sid = created_id(r)
    s.lc("GET", f"/v1/sandboxes/{sid}")
    s.lc("GET", "/v1/sandboxes?metadata=purpose%3Dlive-recording")
    r = s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772")
    ex = execd_from(s, r)
    s.wait_ready(ex)  # unrecorded: Docker's readiness window (accepted, then dropped) before execd listens
    ex.get("/ping")
    ex.command({"command": "echo hi"})
    ex.command({"command": EXIT3})
    ex.command({"command": "echo start; sleep 10", "timeout": 500})
    r = ex.command({"command": "echo l1; echo l2; sleep 30", "background": True})
    cid = r.sse_events()[0]["text"]
    s.sleep(0.5)
    ex.get(f"/command/{cid}/logs")
    ex.get(f"/command/{cid}/logs?cursor=1")
    ex.request("DELETE", f"/command?id={cid}")
    s.sleep(0.3)
    ex.get(f"/command/status/{cid}")
    d = "/tmp/smoke"
    ex.request("POST", "/directories", json={d: {"mode": 755}})
    body = (
        _part("metadata", "metadata", "application/json", b'{"path": "/tmp/smoke/a.txt"}')
        + _part("file", "a.txt", "application/octet-stream", b"abc\n")
        + f"--{BOUNDARY}--\r\n".encode()
    )
    ex.request(
        "POST", "/files/upload", content=body, headers={"Content-Type": f"multipart/form-data; boundary={BOUNDARY}"}
    )
    ex.get(f"/files/info?path={d}/a.txt")
    ex.get(f"/directories/list?path={d}")
    ex.get(f"/files/search?path={d}&pattern=%2A.txt")
    ex.request("POST", "/files/mv", json=[{"src": f"{d}/a.txt", "dest": f"{d}/b.txt"}])
    ex.get(f"/files/download?path={d}/b.txt")
    ex.request("DELETE", f"/files?path={d}/b.txt")
    ex.request("DELETE", f"/directories?path={d}")
    s.lc("POST", f"/v1/sandboxes/{sid}/renew-expiration", json={"expiresAt": _iso(3600)})
    s.lc("POST", f"/v1/sandboxes/{sid}/pause")
    s.lc("GET", f"/v1/sandboxes/{sid}")
    s.lc("POST", f"/v1/sandboxes/{sid}/resume")
    ex.command({"command": "echo back"})
    s.lc("DELETE", f"/v1/sandboxes/{sid}")
    s.lc("DELETE", f"/v1/sandboxes/{sid}")


# The containment probes (QUIRKS.md, Containment): what a process inside a real sandbox sees and may do. Each one is a
# plain command through execd, recorded raw (tiers/t1/sandbox/containment_probes.py reads the fixture by command text);
# raw outputs of the same commands: /work/coord/live-probes/ (2026-12-01).
CONTAINMENT_PROBES: list[tuple[str, str]] = [
    ("capabilities", "grep Cap /proc/self/status"),
    ("dev", "ls -la /dev"),
    ("mountinfo", "cat /proc/self/mountinfo"),
    ("id", "id"),
    ("etc_hostname", "cat /etc/hostname"),
    ("etc_passwd", "cat /etc/passwd"),
    ("etc_shadow", "ls -la /etc/shadow"),
    ("remount_usr", "mount -o remount,rw /usr"),
    ("proc_hostname", "cat /proc/sys/kernel/hostname"),
    ("drop_caches", "echo 1 > /proc/sys/vm/drop_caches"),
    ("sys_fs_cgroup", "ls /sys/fs/cgroup"),
    ("touch_cgroup", "touch /sys/fs/cgroup/x"),
    ("proc_kcore", "cat /proc/kcore | head -c1"),
    ("proc_keys", "ls /proc/keys"),
    ("nonewprivs", "cat /proc/1/status | grep -i nonewprivs"),
    ("ulimit", "ulimit -a"),
]
# What differs between two sandboxes of the same stack, blanked on both sides by the drift check (--check):
# container ids, mount and peer-group ids, overlay layer names, file times.
PROBE_NOISE: tuple[tuple[str, str], ...] = (
    (r"[0-9a-f]{64}", "<id64>"),
    (r"\b[0-9a-f]{12}\b", "<id12>"),
    (r'"text":"\d+ \d+ \d+:\d+ ', '"text":"<mnt> <parent> <dev> '),
    (r"(master|shared):\d+", r"\1:<n>"),
    (r"overlay2/(l/)?[A-Za-z0-9]+", r"overlay2/\1<layer>"),
    (r"[A-Z][a-z]{2} [ 0-9]\d \d\d:\d\d", "<mtime>"),
)


def s21(s: Session, ctx: Ctx) -> None:
    ex = ctx.execd
    assert ex is not None
    for _name, cmd in CONTAINMENT_PROBES:
        ex.command({"command": cmd})


# What the inside of a sandbox shows (tiers/sandbox_inside.py): the files API, cwd, the root, processes, cgroup limits, the
# network and the image's defaults, in a sandbox created with RESOURCES (500m / 512Mi). The commands are plain
# shell run through execd and recorded raw; tiers/sandbox_inside.py holds the checks and reads this fixture by
# command text. "@SERVER_PORT@" stands for the lifecycle server's port (the recorder fills it in; the probes
# print no host:port pair, so the scrubber leaves their output alone).
INSIDE_FILES: list[tuple[str, str]] = [
    ("files_info_os_release", "/files/info?path=/etc/os-release"),
    ("files_download_passwd", "/files/download?path=/etc/passwd"),
    ("files_search_python3", "/files/search?path=/usr/bin&pattern=python3%2A"),
]
INSIDE_CWDS: tuple[str, ...] = ("/usr/lib", "/var/log", "/opt")
_CGROUP_FILES = (
    "memory/memory.limit_in_bytes memory/memory.memsw.limit_in_bytes pids/pids.max "
    "cpu/cpu.cfs_quota_us cpu/cpu.cfs_period_us memory.max memory.swap.max pids.max cpu.max"
)
_CPU_SHARE = """python3 - <<'EOF'
import os, time
def usage():
    p = "/sys/fs/cgroup/cpuacct/cpuacct.usage"
    if os.path.exists(p):
        return int(open(p).read()) / 1e9
    return int(dict(line.split() for line in open("/sys/fs/cgroup/cpu.stat"))["usage_usec"]) / 1e6
def stat():
    for p in ("/sys/fs/cgroup/cpu/cpu.stat", "/sys/fs/cgroup/cpu.stat"):
        if os.path.exists(p):
            st = dict(line.split() for line in open(p))
            return int(st.get("nr_periods", 0)), int(st.get("nr_throttled", 0))
    return 0, 0
u0, s0, t0 = usage(), stat(), time.monotonic()
while time.monotonic() - t0 < 2:
    pass
u1, s1, t1 = usage(), stat(), time.monotonic()
print("share=%.1f" % ((u1 - u0) / (t1 - t0)))
print("cfs_periods=%s" % ("yes" if s1[0] > s0[0] else "no"))
print("throttled=%s" % ("yes" if s1[1] > s0[1] else "no"))
EOF"""
_CONNECT = """python3 - <<'EOF'
import socket, struct
def probe(host, port):
    s = socket.socket()
    s.settimeout(2)
    try:
        s.connect((host, port))
        return "connected"
    except socket.timeout:
        return "timeout"
    except OSError as exc:
        return "refused" if exc.errno == 111 else "errno%d" % exc.errno
    finally:
        s.close()
gw = None
for line in open("/proc/net/route").read().splitlines()[1:]:
    f = line.split()
    if len(f) > 2 and f[1] == "00000000":
        gw = socket.inet_ntoa(struct.pack("<I", int(f[2], 16)))
print("loopback_server=" + probe("127.0.0.1", @SERVER_PORT@))
print("gateway_server=" + (probe(gw, @SERVER_PORT@) if gw else "no-default-route"))
print("loopback_execd=" + probe("127.0.0.1", 44772))
EOF"""
INSIDE_PROBES: list[tuple[str, str]] = [
    ("ls_root", "ls /"),
    ("opt_opensandbox", "ls -la /opt/opensandbox"),
    ("ps", "ps -eo pid,ppid,args"),
    ("oom_1g", "python3 -c 'b = b\"x\" * (1 << 30)'; echo exit=$?"),
    (
        "cgroup_limits",
        f'for f in {_CGROUP_FILES}; do [ -e /sys/fs/cgroup/$f ] && echo "$f=$(cat /sys/fs/cgroup/$f)"; done; true',
    ),
    ("cpu_share", _CPU_SHARE),
    ("etc_net_files", "cat /etc/hosts; echo ---; cat /etc/resolv.conf; echo ---; cat /etc/hostname"),
    ("net_dev_route", "cat /proc/net/dev; echo ---; cat /proc/net/route"),
    ("connect_host", _CONNECT),
    ("df_mount", "df /tmp; echo ---; mount | grep -E ' / | /tmp '"),
    ("identity", "env | sort; echo ---; pwd; id"),
]
INSIDE_NOISE: tuple[tuple[str, str], ...] = PROBE_NOISE + (
    (r"172\.17\.\d+\.\d+", "<bridge-ip>"),  # the container's address on the docker bridge
    (r"\\t[0-9a-f]{12}\b", r"\\t<id12>"),  # its hostname after a tab (JSON "\t") in /etc/hosts
    (r'("text":" *(?:lo|eth0):)[ 0-9]+', r"\1<counters>"),  # /proc/net/dev byte and packet counters
    (r'("text":"\S+ +)\d+ +\d+ +\d+ +\d+%', r"\1<df>"),  # df sizes
    (r'"text":" +\d+ +\d+ ps -eo pid,ppid,args"', '"text":"<ps itself>"'),
    (r"line 1: +\d+ Killed", "line 1: <pid> Killed"),  # bash's job report of the OOM kill
    (r"nameserver [0-9a-fA-F.:]+", "nameserver <host's>"),  # Docker copies the host's resolver
    (r"OPENSANDBOX_ID=[^\"]+", "OPENSANDBOX_ID=<sandbox id>"),  # the setup's sandbox (never in a recorded answer)
    (r"share=\d\.\d", "share=<measured>"),  # a measurement: the quota bounds it at 0.5
    (r"throttled=(yes|no)", "throttled=<load>"),  # throttled only when the host left it 0.5
    (r'"text":" +\d+ +1 ', '"text":"<pid> 1 '),  # ps: the pids of execd and the entrypoint
)


def server_port(s: Session) -> str:
    return str(urlsplit(s.base_url).port or (443 if s.scheme == "https" else 80))


def inside_command(cmd: str, port: str) -> str:
    return cmd.replace("@SERVER_PORT@", port)


def s22(s: Session, ctx: Ctx) -> None:
    ex = ctx.execd
    assert ex is not None
    for _name, path in INSIDE_FILES:
        ex.get(path)
    for cwd in INSIDE_CWDS:
        ex.command({"command": "pwd", "cwd": cwd})
    port = server_port(s)
    for _name, cmd in INSIDE_PROBES:
        ex.command({"command": inside_command(cmd, port)})


# Two sandboxes serve the same in-sandbox port; each endpoint answers with its own sandbox's files (bridge
# network: one network namespace per container, execd's /proxy/9000 relays inside it).
SAME_PORT = 9000
SERVE_TEMPLATE = (
    "mkdir -p /tmp/www && echo 'i am @WHO@' > /tmp/www/who.txt && cd /tmp/www && "
    "(nohup python3 -m http.server @PORT@ --bind 127.0.0.1 >/dev/null 2>&1 &); "
    "for i in $(seq 50); do python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", @PORT@), 1)' "
    "2>/dev/null && break; sleep 0.1; done; echo serving"
)


def serve_command(who: str, port: int = SAME_PORT) -> str:
    """Serve a file saying ``i am <who>`` (the sandbox's id) on ``port``, from 127.0.0.1 inside the sandbox."""
    return SERVE_TEMPLATE.replace("@PORT@", str(port)).replace("@WHO@", who)


def s23(s: Session, ctx: Ctx) -> None:
    sandboxes = []
    for _ in range(2):
        sid = created_id(_create(s, ctx, ctx.default_create()))
        ex = execd_from(s, s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772"))
        s.wait_ready(ex)  # unrecorded: Docker's readiness window (accepted, then dropped) before execd listens
        sandboxes.append((sid, ex))
    for sid, ex in sandboxes:
        ex.command({"command": serve_command(sid)})
    for sid, _ex in sandboxes:
        r = s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/{SAME_PORT}")
        Execd(s, r.json()["endpoint"], r.json().get("headers") or {}).get("/who.txt")
    for sid, _ex in sandboxes:
        s.lc("DELETE", f"/v1/sandboxes/{sid}")


# A Docker named volume (``pvc``; QUIRKS.md, Volumes): created by the first sandbox, which writes it, and mounted read-only
# by a second sandbox while the first one runs. The first create asks for deleteOnSandboxTermination: server 1.1.1
# removes a volume only when the sandbox whose create made it is deleted (services/docker/volumes.py
# ``was_created``), so deleting the reader first and the writer last leaves no volume behind.
VOLUME_CLAIM = "osb-record-vol"


def s24(s: Session, ctx: Ctx) -> None:
    rw = {"name": "data", "pvc": {"claimName": VOLUME_CLAIM, "deleteOnSandboxTermination": True}, "mountPath": "/data"}
    writer = created_id(_create(s, ctx, ctx.default_create(volumes=[rw])))
    ex = execd_from(s, s.lc("GET", f"/v1/sandboxes/{writer}/endpoints/44772"))
    s.wait_ready(ex)
    ex.command({"command": "mount | grep -E ' /data '; echo hello > /data/f.txt; ls -la /data"})
    ro = {"name": "data", "pvc": {"claimName": VOLUME_CLAIM}, "mountPath": "/mnt/ro", "readOnly": True}
    reader = created_id(_create(s, ctx, ctx.default_create(volumes=[ro])))
    s.lc("GET", f"/v1/sandboxes/{reader}")
    ex = execd_from(s, s.lc("GET", f"/v1/sandboxes/{reader}/endpoints/44772"))
    s.wait_ready(ex)
    ex.command({"command": "mount | grep -E ' /mnt/ro '; cat /mnt/ro/f.txt; touch /mnt/ro/x"})
    s.lc("DELETE", f"/v1/sandboxes/{reader}")
    s.lc("DELETE", f"/v1/sandboxes/{writer}")


# Snapshots (QUIRKS.md, Snapshots; server services/snapshot_service.py, services/docker/snapshot_runtime.py: docker
# commit). The source writes /tmp, /root and /workspace, removes an image file, starts a background process and
# exports a variable in its shell; the restored sandbox shows which of these the commit kept. The snapshot is
# polled (unrecorded) until it leaves Creating: Docker's commit takes 0.4-0.8 s here, during which the source
# sandbox reads Paused (commit pauses the container), so a recorded poll would be timing.
SNAP_NAME = "osb-record-snap"
SNAP_WRITE = (
    "echo a > /tmp/a.txt; echo r > /root/r.txt; mkdir -p /workspace; echo w > /workspace/w.txt; "
    "rm /etc/issue.net; (sleep 600 &); export FOO=bar; echo written"
)
SNAP_READ = (
    "cat /tmp/a.txt /root/r.txt /workspace/w.txt; ls /etc/issue.net; "
    "echo sleepers=$(ps -eo args | grep -c '^sleep 600'); echo FOO=$FOO SRC_VAR=$SRC_VAR REQ_VAR=$REQ_VAR"
)


def _snapshot_settled(s: Session, snap: str, timeout: float = 60.0) -> None:
    """Unrecorded GETs until the snapshot leaves Creating."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = s.lc("GET", f"/v1/snapshots/{snap}", record=False)
        if r.status != 200 or r.json()["status"]["state"] != "Creating":
            return
        time.sleep(0.2)
    raise RecorderError(f"GET /v1/snapshots/{snap}: still Creating after {timeout:g} s")


def _snapshot_and_settle(s: Session, src: str, snaps: list[str], **body: Any) -> str:
    """POST a snapshot of ``src`` (``body``: the request's ``json=``, or none), wait (unrecorded) until it leaves
    Creating, then the recorded GET of it. Its id, also appended to ``snaps`` for the scenario's cleanup."""
    r = s.lc("POST", f"/v1/sandboxes/{src}/snapshots", **body)
    snap = created_id(r, "POST /v1/sandboxes/{id}/snapshots")
    snaps.append(snap)
    _snapshot_settled(s, snap)
    s.lc("GET", f"/v1/snapshots/{snap}")
    return snap


def s25(s: Session, ctx: Ctx) -> None:
    snaps: list[str] = []
    try:
        _s25(s, ctx, snaps)
    finally:  # sandboxes first (a snapshot in use cannot be deleted), then the snapshots, unrecorded
        for sid in ctx.created:
            s.delete_sandbox(sid)
        for snap in snaps:
            try:
                s.lc("DELETE", f"/v1/snapshots/{snap}", record=False)
            except RecorderError:
                pass


def _s25(s: Session, ctx: Ctx, snaps: list[str]) -> None:
    src = created_id(_create(s, ctx, ctx.default_create(env={"SRC_VAR": "s"})))
    ex = execd_from(s, s.lc("GET", f"/v1/sandboxes/{src}/endpoints/44772"))
    s.wait_ready(ex)
    ex.command({"command": SNAP_WRITE})
    snap = _snapshot_and_settle(s, src, snaps, json={"name": SNAP_NAME})
    s.lc("GET", f"/v1/snapshots?sandboxId={src}")
    s.lc("GET", f"/v1/snapshots?sandboxId={src}&name={SNAP_NAME}")
    s.lc("GET", f"/v1/snapshots?sandboxId={src}&name=other")
    s.lc("GET", f"/v1/snapshots?sandboxId={src}&state=Creating")
    s.lc("GET", f"/v1/snapshots?sandboxId={src}&state=Failed&state=Ready&page=1&pageSize=1")
    s.lc("GET", f"/v1/snapshots?sandboxId={src}&page=2&pageSize=1")
    s.lc("GET", "/v1/snapshots?page=0&pageSize=201")
    s.lc("POST", f"/v1/sandboxes/{src}/snapshots", json={"name": ""})
    s.lc("POST", f"/v1/sandboxes/{NIL}/snapshots", json={})
    s.lc("GET", f"/v1/snapshots/{NIL}")
    s.lc("DELETE", f"/v1/snapshots/{NIL}")
    _create(s, ctx, {"snapshotId": NIL, "timeout": 600, "resourceLimits": dict(SMALL)})
    _create(
        s,
        ctx,
        {
            "snapshotId": snap,
            "image": {"uri": ctx.image},
            "entrypoint": ["tail", "-f", "/dev/null"],
            "timeout": 600,
            "resourceLimits": dict(SMALL),
        },
    )
    r = _create(s, ctx, {"snapshotId": snap, "timeout": 600, "resourceLimits": dict(SMALL), "env": {"REQ_VAR": "r"}})
    restored = created_id(r)
    s.lc("GET", f"/v1/sandboxes/{restored}")
    ex2 = execd_from(s, s.lc("GET", f"/v1/sandboxes/{restored}/endpoints/44772"))
    s.wait_ready(ex2)
    ex2.command({"command": SNAP_READ})
    s.lc("DELETE", f"/v1/snapshots/{snap}")
    s.lc("GET", f"/v1/snapshots/{snap}")
    s.lc("DELETE", f"/v1/snapshots/{snap}")
    _create(s, ctx, {"snapshotId": snap, "timeout": 600, "resourceLimits": dict(SMALL)})
    s.lc("POST", f"/v1/sandboxes/{restored}/pause")
    s.lc("POST", f"/v1/sandboxes/{restored}/snapshots", json={})
    s.lc("DELETE", f"/v1/sandboxes/{restored}")
    s.lc("DELETE", f"/v1/snapshots/{snap}")
    s.lc("GET", f"/v1/snapshots/{snap}")
    snap2 = _snapshot_and_settle(s, src, snaps)
    s.lc("DELETE", f"/v1/sandboxes/{src}")
    s.lc("GET", f"/v1/snapshots?sandboxId={src}")
    s.lc("DELETE", f"/v1/snapshots/{snap2}")
    s.lc("GET", f"/v1/snapshots?sandboxId={src}")


EGRESS_AUTH = "OPENSANDBOX-EGRESS-AUTH"


def s26(s: Session, ctx: Ctx) -> None:
    """networkPolicy with the egress image: creates with a policy and the validation answers, the endpoint of
    18080 and its header, the sidecar's /policy API (401 without the header, GET, PATCH, DELETE, POST, reset)."""
    pol = {"defaultAction": "deny", "egress": [{"action": "allow", "target": "pypi.org"}]}
    r = _create(s, ctx, ctx.default_create(networkPolicy=pol))
    sid = created_id(r)
    s.lc("GET", f"/v1/sandboxes/{sid}")
    ep = s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/18080")
    side = execd_from(s, ep)
    ctx.secrets.extend(side.headers.values())
    s.wait_ready(s.execd_endpoint(sid))  # unrecorded: the published ports' readiness window
    s.request("GET", side.origin + side.prefix + "/policy")
    side.get("/healthz")
    side.get("/policy")
    side.request("PATCH", "/policy", json=[])
    side.request("PATCH", "/policy", json=[{"action": "allow", "target": "files.pythonhosted.org"}])
    side.request("PATCH", "/policy", json=[{"action": "deny", "target": "FILES.pythonhosted.org"}])
    side.request("DELETE", "/policy", json=["pypi.org", "unknown.invalid"])
    side.request("DELETE", "/policy", json=["nothing.invalid"])
    side.request("POST", "/policy", json={"defaultAction": "allow", "egress": [{"action": "maybe", "target": "x"}]})
    side.request(
        "PUT", "/policy", json={"defaultAction": "allow", "egress": [{"action": "deny", "target": "pypi.org"}]}
    )
    side.get("/policy")
    side.request("POST", "/policy", content=b"")
    side.request("OPTIONS", "/policy")
    side.get("/nothing")
    for bad in (
        {"defaultAction": "whatever"},
        {"defaultAction": "deny"},
        {"egress": [{"action": "allow", "target": ""}]},
        "deny",
    ):
        r = _create(s, ctx, ctx.default_create(networkPolicy=bad))
    _create(s, ctx, ctx.default_create(networkPolicy={"egress": [{"action": "maybe", "target": "x.test"}]}))


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
    Scenario("20_smoke_flow", "the smoke flow of tiers/smoke_flow.py in one self-contained scenario", s20),
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
        "tiers/sandbox_inside.py (t4 live, t1 on the mock)",
    ),
    Scenario(
        "23_same_port_two_sandboxes",
        "two sandboxes serve port 9000; each endpoint answers with its own files",
        s23,
        drift_noise=INSIDE_NOISE,
        replay_skip="background servers started by commands; asserted by tiers/sandbox_inside.py",
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

from record.scenarios_code import SCENARIOS as _CODE  # noqa: E402 (needs Scenario, Ctx above)

SCENARIOS += _CODE
BY_NAME = {sc.name: sc for sc in SCENARIOS}
