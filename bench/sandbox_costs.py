"""Case 7 "sandbox": what one sandbox costs the mock (QUIRKS.md, Sandbox runtime), A/B against another mock tree in one run.

Two mocks run side by side, each in its own process started from its own tree: **A** the baseline (by default
main at 5f292ba, checked out by ``python -m bench`` into a temporary git worktree that it removes afterwards,
or any tree given with ``--sandbox-baseline-tree``) and **B** this repository's tree. Measured, A and B
interleaved (A B A B ...) so that the machine's load hits both alike:

* **create -> ready**: ``POST /v1/sandboxes`` (``resourceLimits`` cpu 500m / memory 512Mi, so that a mock that
  applies limits pays for them) until the sandbox's execd answers ``GET /ping`` (polled every 5 ms);
* **command round trip**: ``POST /command`` of ``true`` to the terminal event, on a warm sandbox, back to
  back and once more with ``sandbox_cmd_gap_ms`` (50) between commands: what a kernel cost that only the
  first of a burst pays (a cgroup v1 move waits for an RCU grace period unless another came a moment
  before) shows only there;
* **per idle sandbox**: after ``sandbox_idle_n`` sandboxes have been created and left idle for a second, the
  host processes that belong to them and their memory: every descendant of the mock's process (the holder or
  ``unshare``, PID 1, the entrypoint, an execd or agent inside the sandbox, relays, slirp4netns...) plus any
  process whose environment carries ``OPENSANDBOX_ID`` of one of them (a container whose processes were
  reparented, e.g. by ``runc run -d``); RSS summed (``VmRSS``), PSS summed where ``/proc/PID/smaps_rollup``
  exists, divided by the number of sandboxes; plus the growth of the mock process's own RSS per sandbox (an
  in-process execd costs memory there, not in a process of its own).

Against a live server (``OPENSANDBOX_BASE_URL``) the live server's create -> ready is measured too, as
context (not a target).
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

from tiers.toolkit.procs import read_text

DEFAULT_BASELINE_REV = "5f292ba"
# a mock runs any image name; live: OPENSANDBOX_IMAGE
BODY = {
    "image": {"uri": "python:3"},
    "entrypoint": ["tail", "-f", "/dev/null"],
    "timeout": 900,
    "resourceLimits": {"cpu": "500m", "memory": "512Mi"},
    "metadata": {"purpose": "bench-sandbox-costs"},
}
EXECD_PORT = 44772

# Started in the tree under test (cwd + PYTHONPATH = the tree): a mock with the defaults of that tree.
SERVER = r"""
import json, os, sys
import mock_opensandbox
from mock_opensandbox.server import MockOpenSandbox
m = MockOpenSandbox(**json.loads(sys.argv[1])).start()
print(json.dumps({"base_url": m.base_url, "api_key": m.api_key, "execd_token": getattr(m, "execd_token", None),
                  "pid": os.getpid(), "package": os.path.dirname(mock_opensandbox.__file__)}), flush=True)
sys.stdin.read()
m.stop()
"""


# ------------------------------------------------------------------------------------------- HTTP


def _call(
    url: str, method: str, path: str, headers: dict, body: bytes | None = None, timeout: float = 60.0
) -> tuple[int, bytes]:
    p = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
    c = http.client.HTTPConnection(p.hostname, p.port or 80, timeout=timeout)
    try:
        c.request(method, p.path.rstrip("/") + path, body=body, headers=headers)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


class Server:
    """A mock started from ``tree`` in its own process, or a live server (``tree`` None)."""

    def __init__(
        self,
        label: str,
        tree: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        mock_kwargs: dict | None = None,
        image: str | None = None,
    ):
        """``mock_kwargs``: MockOpenSandbox's keyword arguments (JSON values; e.g. ``image_dir``);
        ``image``: the create's ``image.uri`` instead of BODY's (bench/images.py: an image of the store)."""
        self.label, self.tree, self.proc, self.pid, self.token = label, tree, None, None, None
        self.package, self.image = None, image
        if tree is not None:
            env = {**os.environ, "PYTHONPATH": tree, "PYTHONDONTWRITEBYTECODE": "1"}
            self.proc = subprocess.Popen(
                [sys.executable, "-c", SERVER, json.dumps(mock_kwargs or {})],
                cwd=tree,
                env=env,
                text=True,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"the mock of {tree} did not start (rc={self.proc.poll()})")
            info = json.loads(line)
            base_url, api_key, self.token, self.pid = (
                info["base_url"],
                info["api_key"],
                info["execd_token"],
                info["pid"],
            )
            self.package = info["package"]  # which mock_opensandbox the process imported (the tree's own)
        base = (base_url or "").rstrip("/")
        self.base_url = base[:-3] if base.endswith("/v1") else base
        self.headers = {"OPEN-SANDBOX-API-KEY": api_key or "", "Content-Type": "application/json"}
        self.sandboxes: list[str] = []

    def create(self) -> str:
        body = dict(BODY)
        if self.tree is None:  # live: an image the server has (./local-up.sh env)
            body["image"] = {"uri": os.environ.get("OPENSANDBOX_IMAGE") or "python:3.12-slim"}
        if self.image:
            body["image"] = {"uri": self.image}
        status, data = _call(self.base_url, "POST", "/v1/sandboxes", self.headers, json.dumps(body).encode())
        if status != 202:
            raise RuntimeError(f"{self.label}: create answered {status}: {data[:200]!r}")
        sid = json.loads(data)["id"]
        self.sandboxes.append(sid)
        return sid

    def execd(self, sid: str) -> tuple[str, dict]:
        status, data = _call(self.base_url, "GET", f"/v1/sandboxes/{sid}/endpoints/{EXECD_PORT}", self.headers)
        if status != 200:
            raise RuntimeError(f"{self.label}: endpoint answered {status}: {data[:200]!r}")
        ep = json.loads(data)
        headers = dict(ep.get("headers") or {})
        if self.token:
            headers["X-EXECD-ACCESS-TOKEN"] = self.token
        return ep["endpoint"], headers

    def wait_ready(self, sid: str, budget: float = 60.0, poll: float = 0.005) -> None:
        url, headers = self.execd(sid)
        deadline = time.monotonic() + budget
        while True:
            try:
                if _call(url, "GET", "/ping", headers, timeout=5)[0] == 200:
                    return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.label}: execd of {sid} never answered /ping")
            time.sleep(poll)

    def command_true(self, url: str, headers: dict) -> None:
        """POST /command `true`, read to the terminal event and drop the connection (the ~1 s close unwaited)."""
        p = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
        c = http.client.HTTPConnection(p.hostname, p.port or 80, timeout=60)
        try:
            c.request(
                "POST",
                p.path.rstrip("/") + "/command",
                body=b'{"command": "true"}',
                headers={**headers, "Content-Type": "application/json", "Accept": "text/event-stream"},
            )
            r = c.getresponse()
            buf = b""
            while b"execution_complete" not in buf and b'"error"' not in buf:
                chunk = r.read1(65536)
                if not chunk:
                    break
                buf += chunk
            if r.status != 200 or b"execution_complete" not in buf:
                raise RuntimeError(f"{self.label}: POST /command answered {r.status}: {buf[:200]!r}")
        finally:
            c.close()

    def delete(self, sid: str) -> None:
        try:
            _call(self.base_url, "DELETE", f"/v1/sandboxes/{sid}", self.headers)
        except OSError:
            pass
        if sid in self.sandboxes:
            self.sandboxes.remove(sid)

    def stop(self) -> None:
        for sid in list(self.sandboxes):
            self.delete(sid)
        if self.proc is not None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait()
            self.proc.stdout.close()


# ------------------------------------------------------------------------------------------- /proc


def _ppids() -> dict[int, int]:
    out = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            stat = read_text(f"/proc/{name}/stat")
            if stat:
                out[int(name)] = int(stat.rsplit(")", 1)[1].split()[1])
    return out


def _descendants(root: int, ppids: dict[int, int]) -> set[int]:
    children: dict[int, list[int]] = {}
    for pid, ppid in ppids.items():
        children.setdefault(ppid, []).append(pid)
    out, todo = set(), [root]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def _kb(text: str, key: str) -> int | None:
    for line in text.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return None


def proc_memory(pid: int) -> dict:
    status = read_text(f"/proc/{pid}/status")
    rollup = read_text(f"/proc/{pid}/smaps_rollup")
    args = read_text(f"/proc/{pid}/cmdline").replace("\0", " ").strip() or read_text(f"/proc/{pid}/comm").strip()
    stat = read_text(f"/proc/{pid}/stat")
    start = int(stat.rsplit(")", 1)[1].split()[19]) if stat else None  # field 22: start time (pids are reused)
    return {
        "pid": pid,
        "start": start,
        "args": args[:100],
        "rss_kb": _kb(status, "VmRSS") or 0,
        "pss_kb": _kb(rollup, "Pss") if rollup else None,
    }


def sandbox_processes(server_pid: int | None, sids: list[str]) -> list[int]:
    """Descendants of the mock's process, plus processes whose environment names one of ``sids``."""
    ppids = _ppids()
    pids = _descendants(server_pid, ppids) if server_pid else set()
    marks = [f"OPENSANDBOX_ID={sid}".encode() for sid in sids]
    for pid in ppids:
        if pid in pids or pid == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as fh:
                env = fh.read()
        except OSError:
            continue
        if any(m in env for m in marks):
            pids.add(pid)
            parent = ppids.get(pid)
            if parent and read_text(f"/proc/{parent}/comm").startswith("containerd-shim"):
                pids.add(parent)  # Docker: the shim that holds the container is the sandbox's too
    return sorted(pids)


# ------------------------------------------------------------------------------------------- the case


def baseline_tree(rev: str, repo: str, tmp: str, log) -> tuple[str, callable]:
    """``git worktree add --detach`` of ``rev`` under ``tmp``; returns (path, remove)."""
    path = os.path.join(tmp, "osb-bench-a")
    subprocess.run(
        ["git", "-C", repo, "worktree", "add", "--detach", "--quiet", path, rev],
        check=True,
        capture_output=True,
        text=True,
    )
    log(f"case sandbox: baseline A = {rev} in {path}")

    def remove() -> None:
        subprocess.run(["git", "-C", repo, "worktree", "remove", "--force", path], capture_output=True, text=True)
        shutil.rmtree(path, ignore_errors=True)
        subprocess.run(["git", "-C", repo, "worktree", "prune"], capture_output=True, text=True)

    return path, remove


def _rev_of(tree: str) -> str:
    try:
        return (
            subprocess.run(
                ["git", "-C", tree, "log", "-1", "--format=%h %cI"], capture_output=True, text=True, timeout=10
            ).stdout.strip()
            or "?"
        )
    except (OSError, subprocess.TimeoutExpired):
        return "?"


def fd_count(pid: int | None) -> int | None:
    """How many fds the process holds (/proc/PID/fd), None when it cannot be read."""
    try:
        return len(os.listdir(f"/proc/{pid}/fd")) if pid else None
    except OSError:
        return None


def measure_idle(server: Server, n: int, settle: float) -> dict:
    """What ``n`` idle sandboxes add: their processes (not the mock's own helpers that ran before them, the
    janitor and the view's zygote: one per mock, like the server's RSS growth reported beside), RSS and PSS."""
    base_rss = proc_memory(server.pid)["rss_kb"] if server.pid else None
    base_fds = fd_count(server.pid)
    helpers = set(sandbox_processes(server.pid, []))
    sids = []
    for _ in range(n):
        sid = server.create()
        server.wait_ready(sid)
        sids.append(sid)
    time.sleep(settle)
    procs = [proc_memory(pid) for pid in sandbox_processes(server.pid, sids) if pid not in helpers]
    grown = (proc_memory(server.pid)["rss_kb"] - base_rss) if server.pid else None
    fds = fd_count(server.pid)
    fds_grown = fds - base_fds if fds is not None and base_fds is not None else None
    for sid in sids:
        server.delete(sid)
    pss = [p["pss_kb"] for p in procs if p["pss_kb"] is not None]
    return {
        "sandboxes": n,
        "processes": len(procs),
        "rss_kb": sum(p["rss_kb"] for p in procs),
        "pss_kb": sum(pss) if len(pss) == len(procs) and procs else None,
        "server_rss_growth_kb": grown,
        "server_fds": fds_grown,
        "one_sandbox": procs[: len(procs) // n] if n else [],
    }


def run_case(ctx, make_row) -> list:
    p = ctx.p
    n, warm, idle_n = p.get("sandbox_n", 20), p.get("sandbox_warmup", 2), p.get("sandbox_idle_n", 5)
    cmd_n = p.get("sandbox_cmd_n", 30)
    gap = p.get("sandbox_cmd_gap_ms", 50) / 1000
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    tmp = tempfile.mkdtemp(prefix="bench-sandbox-")
    remove = None
    servers: list[Server] = []
    try:
        tree_a = getattr(ctx, "sandbox_baseline_tree", None)
        if not tree_a:
            tree_a, remove = baseline_tree(
                getattr(ctx, "sandbox_baseline_rev", None) or DEFAULT_BASELINE_REV, repo, tmp, ctx.log
            )
        a, b = Server("A", tree_a), Server("B", repo)
        servers += [a, b]
        live = None
        if ctx.target.kind == "live":
            live = Server("live", None, ctx.target.base_url, ctx.target.api_key)
            servers.append(live)
        sides = [s for s in (a, b, live) if s is not None]
        times: dict[str, list[float]] = {s.label: [] for s in sides}
        # the order flips every round (A B, B A, ...): what one side's request leaves behind (a reaped
        # process, a closing stream) falls on the other side as often as on itself
        for i in range(warm + n):
            for s in sides if i % 2 == 0 else sides[::-1]:
                t0 = time.perf_counter()
                sid = s.create()
                s.wait_ready(sid)
                dt = time.perf_counter() - t0
                s.delete(sid)
                if i >= warm:
                    times[s.label].append(dt)
        cmd: dict[str, list[float]] = {"A": [], "B": []}
        warm_sb = {s.label: s.create() for s in (a, b)}
        eps = {}
        for s in (a, b):
            s.wait_ready(warm_sb[s.label])
            eps[s.label] = s.execd(warm_sb[s.label])
        for i in range(3 + cmd_n):
            for s in (a, b) if i % 2 == 0 else (b, a):
                t0 = time.perf_counter()
                s.command_true(*eps[s.label])
                if i >= 3:
                    cmd[s.label].append(time.perf_counter() - t0)
        sparse: dict[str, list[float]] = {"A": [], "B": []}
        for i in range(1 + max(1, cmd_n // 2)):
            for s in (a, b) if i % 2 == 0 else (b, a):
                time.sleep(gap)
                t0 = time.perf_counter()
                s.command_true(*eps[s.label])
                if i >= 1:
                    sparse[s.label].append(time.perf_counter() - t0)
        for s in (a, b):
            s.delete(warm_sb[s.label])
        idle = {s.label: measure_idle(s, idle_n, p.get("sandbox_settle_ms", 1000) / 1000) for s in sides}
        ctx.details["sandbox"] = {
            "A": {"tree": tree_a, "rev": _rev_of(tree_a), "package": a.package},
            "B": {"tree": repo, "rev": _rev_of(repo), "package": b.package},
            "idle": idle,
            "body": BODY,
        }
    finally:
        for s in servers:
            s.stop()
        if remove:
            remove()
        shutil.rmtree(tmp, ignore_errors=True)
    a_name = f"A: mock at {ctx.details['sandbox']['A']['rev'].split()[0]}"
    rows = [
        make_row(
            id="sandbox_create_ready",
            case=7,
            title="Sandbox create -> execd /ping answers",
            unit="ms",
            ours_name="B: mock of this tree",
            ours_s=times["B"],
            base_name=a_name,
            base_s=times["A"],
            target=1.5,
            note="resourceLimits 500m/512Mi; A and B interleaved, each in its own process",
        ),
        make_row(
            id="sandbox_command_true",
            case=7,
            title="Command round trip on the mock: `true` to the terminal event",
            unit="ms",
            ours_name="B: mock of this tree",
            ours_s=cmd["B"],
            base_name=a_name,
            base_s=cmd["A"],
            target=1.05,
            note="direct POST /command, fresh connection",
        ),
        make_row(
            id="sandbox_command_true_sparse",
            case=7,
            title="Command round trip on the mock, one every %d ms" % round(gap * 1000),
            unit="ms",
            ours_name="B: mock of this tree",
            ours_s=sparse["B"],
            base_name=a_name,
            base_s=sparse["A"],
            target=1.05,
            note="as above, after %d ms idle: a cost the first command of a burst pays shows here" % round(gap * 1000),
        ),
    ]
    if live is not None:
        rows.append(
            make_row(
                id="sandbox_create_ready_live",
                case=7,
                title="Sandbox create -> ready, live server",
                unit="ms",
                ours_name="live server",
                ours_s=times["live"],
                base_name=a_name,
                base_s=times["A"],
                note="context: Docker container start vs the mock",
            )
        )
    for what, key, unit in (
        ("RSS", "rss_kb", "MiB"),
        ("PSS", "pss_kb", "MiB"),
        ("processes", "processes", "count"),
        ("mock process RSS growth", "server_rss_growth_kb", "MiB"),
        ("fds held by the mock process", "server_fds", "count"),
    ):
        va, vb = idle["A"].get(key), idle["B"].get(key)
        if va is None or vb is None:
            continue
        scale = 1024.0 if unit == "MiB" else 1.0
        vl = idle["live"].get(key) if live is not None else None
        if vl is not None and key not in ("server_rss_growth_kb", "server_fds"):
            rows.append(
                make_row(
                    id=f"sandbox_idle_{key}_live",
                    case=7,
                    title=f"Per idle sandbox, live: {what}",
                    unit=unit,
                    ours_name="live server (container processes + containerd-shim)",
                    ours_s=[vl / scale / idle_n],
                    base_name=a_name,
                    base_s=[va / scale / idle_n],
                    note="context: the processes whose environment names the sandbox, and their shim",
                )
            )
        row = make_row(
            id=f"sandbox_idle_{key}",
            case=7,
            title=f"Per idle sandbox: {what}",
            unit=unit,
            ours_name="B: mock of this tree",
            ours_s=[vb / scale / idle_n],
            base_name=a_name,
            base_s=[va / scale / idle_n],
            note=f"{idle_n} idle sandboxes, total / {idle_n}"
            + ("; target <= 15 MB per idle sandbox" if key == "rss_kb" else ""),
        )
        rows.append(row)
    return rows


__all__ = ["run_case", "Server", "sandbox_processes", "proc_memory"]
