"""Case 8 "live": the mock next to a live OpenSandbox, measured in one run (``python -m bench --cases live``).

It needs a live server (``OPENSANDBOX_BASE_URL``, which may end in ``/v1``, ``OPENSANDBOX_API_KEY``; image
``OPENSANDBOX_IMAGE``, default ``local/python:3-slim``); without one it says so in one line and returns no rows.
The mock side is always the mock as a user starts it: ``python -m mock_opensandbox --port 0 --api-key <random>
--timing fast`` in a process of its own (and a second one at its default, faithful timing for create -> ready).
When the ``docker`` CLI has the live image, it is ``docker save``d once into a temporary directory and both mocks
get ``--image-dir`` (their sandboxes run that image's own root, docs/IMAGES.md); otherwise the mocks run the
host-tools view, and the rows and notes say which.

Measured, each side on a sandbox of its own (created once; entrypoint ``tail -f /dev/null``, 500m / 512Mi), one
run of each side per round in an order shuffled every round with a fixed seed:

* command round trip: ``POST /command`` of ``true`` on a new connection, the SSE body read line by line up to the
  terminal event (``execution_complete`` or ``error``), then the connection dropped (execd's ~1 s close unwaited);
  a third side in the same rounds, the floor (bench/floor.py: a one-thread Python server forking ``bash -c true``
  on the host), gives floor / live and mock / floor;
* a session command, a background command's first log line and a PTY start (bench/execd_ops.py);
* files: upload of 1 MiB (multipart, bench/direct.py) and its download, each on a new connection, timed apart;
* streaming: ``head -c N /dev/zero | base64 -w 76`` (8 MiB of output by default) to the terminal event, as MB/s
  of the SSE body received;
* create -> ready: ``POST /v1/sandboxes``, ``GET`` until Running, the execd endpoint, ``/ping`` until 200 (polled
  every 1 ms on the mocks, 5 ms live), then DELETE (not timed); the faithful mock as a third side;
* per idle sandbox: processes, RSS and PSS (bench/sandbox_costs.py's ``measure_idle``), mock then live.

Rows: ours = the mock, baseline = live, so every ratio is mock / live.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

from bench import direct, execd_ops, sandbox_costs

CASE = 8
SKIP_LINE = (
    "mock vs live: skipped: no live server "
    '(set OPENSANDBOX_BASE_URL and OPENSANDBOX_API_KEY: eval "$(./local-up.sh env)")'
)
DEFAULT_IMAGE = "local/python:3-slim"
EXECD_PORT = 44772
FILE_BYTES = 1024 * 1024
SEED = 8  # the shuffled order of the sides is the same in every run
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CODE_INTERP_SKIP = (
    "code interpreter: skipped: bench/code_interp.py measures one server per run through the SDK (a sandbox per "
    "measurement, whole streams read) and needs a pip-made Jupyter env for the mock and the code-interpreter image "
    "live; run `python -m bench.code_interp` once without and once with OPENSANDBOX_BASE_URL instead"
)


def _load() -> str:
    """The load part of `uptime` (the 1, 5 and 15 minute averages)."""
    try:
        out = subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
        return out.split("load average:", 1)[1].strip() if "load average:" in out else out
    except (OSError, subprocess.TimeoutExpired):
        with open("/proc/loadavg") as fh:
            return ", ".join(fh.read().split()[:3])


# --------------------------------------------------------------------------------------------- the sides


class MockProcess:
    """``python -m mock_opensandbox --port 0 --api-key <random> [--timing T] [--image-dir DIR]``, as a user runs it."""

    def __init__(self, tmp: str, timing: str | None, image_dir: str | None):
        self.api_key = secrets.token_hex(16)
        argv = [sys.executable, "-m", "mock_opensandbox", "--port", "0", "--api-key", self.api_key]
        argv += ["--timing", timing] if timing else []
        argv += ["--image-dir", image_dir] if image_dir else []
        self.argv = argv
        self.stderr_path = os.path.join(tmp, f"mock-{timing or 'default'}.stderr")
        self.lines: list[str] = []
        first = threading.Event()
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err)

        def drain() -> None:  # the banner, and whatever the mock prints later: never let its pipe fill
            for raw in self.proc.stdout:
                self.lines.append(raw.decode(errors="replace").rstrip("\n"))
                first.set()
            first.set()

        self._drain = threading.Thread(target=drain, daemon=True)
        self._drain.start()
        first.wait(120)
        head = self.lines[0] if self.lines else ""
        if not head.startswith("Mock OpenSandbox listening on "):
            self.stop()
            with open(self.stderr_path, errors="replace") as fh:
                tail = fh.read()[-800:]
            raise RuntimeError(f"the mock did not start ({' '.join(argv[2:])}): {head!r} {tail}")
        self.base_url = head.rsplit(" ", 1)[1].rstrip("/")
        self.pid = self.proc.pid

    def banner(self, prefix: str) -> str:
        """The banner line that starts with ``prefix`` (``Timing``, ``Sandbox isolation``), without the prefix."""
        line = next((line for line in list(self.lines) if line.startswith(prefix + ":")), "")
        return line[len(prefix) + 1 :].strip()

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # the mock kills its sandboxes and removes its root
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._drain.join(timeout=10)
        self.proc.stdout.close()


class FloorProcess:
    """``python -m bench.floor``: the command round trip's floor (a one-thread Python server forking ``bash -c
    true`` on the host), beside the mock and live in the same rounds; it ends when its stdin closes."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "bench.floor"], cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        line = self.proc.stdout.readline().decode().strip()
        if not line.isdigit():
            self.stop()
            raise RuntimeError(f"bench.floor did not start: {line!r}")
        self.url = f"127.0.0.1:{line}"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()  # its watcher exits
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()


class Side(sandbox_costs.Server):
    """One server as the bench sees it (sandbox_costs.Server: lifecycle on a new connection per request, execd
    through the endpoint), plus the wait for Running and what the mock says of a sandbox's view."""

    def __init__(self, label: str, base_url: str, api_key: str | None, image: str, poll: float, mock=None):
        super().__init__(label, base_url=base_url, api_key=api_key, image=image)
        self.poll, self.mock = poll, mock

    def _get(self, path: str) -> dict:
        status, data = sandbox_costs._call(self.base_url, "GET", path, self.headers, timeout=120)
        if status != 200:
            raise RuntimeError(f"{self.label}: GET {path} answered {status}: {data[:300]!r}")
        return json.loads(data)

    def ready(self, sid: str, budget: float = 180.0) -> tuple[str, dict]:
        """GET until Running, the endpoint, /ping until 200; polled every ``self.poll`` seconds."""
        deadline = time.monotonic() + budget
        while True:
            state = (self._get(f"/v1/sandboxes/{sid}").get("status") or {}).get("state")
            if state == "Running":
                break
            if state in ("Failed", "Terminated") or time.monotonic() > deadline:
                raise RuntimeError(f"{self.label}: sandbox {sid} is {state}, not Running")
            time.sleep(self.poll)
        self.wait_ready(sid, max(1.0, deadline - time.monotonic()), self.poll)
        return self.execd(sid)

    def create_ready(self) -> float:
        t0 = time.perf_counter()
        sid = self.create()
        self.ready(sid)
        took = time.perf_counter() - t0
        self.delete(sid)
        return took

    def view(self, sid: str) -> str:
        """The mock's view of a sandbox (``image`` or ``host-tools``); live: the container of the image."""
        if self.mock is None:
            return "container"
        try:
            return str(self._get(f"/__mock__/sandboxes/{sid}").get("view", {}).get("kind"))
        except (OSError, RuntimeError, ValueError):
            return "?"

    def close(self) -> None:
        self.stop()


# --------------------------------------------------------------------------------------------- execd


def command(url: str, headers: dict, cmd: str) -> tuple[float, int, str]:
    """``POST /command`` on a new connection, the SSE body read line by line up to the terminal event, then the
    connection dropped. Returns (seconds to the terminal event, body bytes read, terminal event type)."""
    host, port, prefix = direct._split(url)
    t0 = time.perf_counter()
    c = http.client.HTTPConnection(host, port, timeout=300)
    try:
        body = json.dumps({"command": cmd}).encode()
        hdrs = {**headers, "Content-Type": "application/json", "Accept": "text/event-stream"}
        c.request("POST", prefix + "/command", body=body, headers=hdrs)
        r = c.getresponse()
        if r.status != 200:
            raise RuntimeError(f"POST /command answered {r.status}: {r.read(300)!r}")
        nbytes = 0
        while True:
            line = r.readline()
            if not line:
                raise RuntimeError("the SSE stream ended without a terminal event")
            nbytes += len(line)
            if b"execution_complete" not in line and b"error" not in line:
                continue  # stdout/stderr (base64 text holds neither word), init, ping, blank separators
            text = line.strip()
            text = text[5:].strip() if text.startswith(b"data:") else text
            try:
                kind = json.loads(text).get("type")
            except ValueError:
                continue
            if kind in ("execution_complete", "error"):
                return time.perf_counter() - t0, nbytes, kind
    finally:
        c.close()


def upload(url: str, headers: dict, path: str, data: bytes) -> float:
    ex = direct.Execd(url, headers)  # a new connection, closed after the operation
    t0 = time.perf_counter()
    try:
        ex.upload(path, data)
        return time.perf_counter() - t0
    finally:
        ex.close()


def download(url: str, headers: dict, path: str, expect: bytes | None = None) -> float:
    ex = direct.Execd(url, headers)
    t0 = time.perf_counter()
    try:
        got = ex.download(path)
        took = time.perf_counter() - t0
    finally:
        ex.close()
    if expect is not None and got != expect:
        raise RuntimeError(f"download of {path}: {len(got)} bytes, not the {len(expect)} uploaded")
    return took


def interleave(sides: dict, n: int, warmup: int, seed: int = SEED) -> dict[str, list[float]]:
    """Each side's callable (it returns the seconds it measured) ``warmup`` times, then ``n`` rounds of one run per
    side, in an order shuffled every round (seeded: the same orders in every run)."""

    def run(name: str) -> float:
        try:
            return float(sides[name]())
        except (RuntimeError, direct.HttpFailure) as exc:  # which side failed, in the case's one-line error
            raise RuntimeError(f"{name}: {exc}") from exc

    for _ in range(warmup):
        for name in sides:
            run(name)
    out: dict[str, list[float]] = {name: [] for name in sides}
    names, rng = list(sides), random.Random(seed)
    for _ in range(n):
        rng.shuffle(names)
        for name in names:
            out[name].append(run(name))
    return out


# --------------------------------------------------------------------------------------------- the image


def same_image(image: str, tmp: str) -> tuple[str | None, str]:
    """(an --image-dir holding ``docker save`` of ``image``, or None; what was done, for the notes)."""
    docker = shutil.which("docker")
    if not docker:
        return None, "no `docker` CLI: the mock runs the host-tools view, not the live image"
    try:
        ins = subprocess.run([docker, "image", "inspect", image], capture_output=True, text=True, timeout=60)
        if ins.returncode != 0:
            why = (ins.stderr.strip().splitlines() or ["?"])[-1][:200]
            return None, f"`docker image inspect {image}` failed ({why}): the mock runs the host-tools view"
        image_dir = os.path.join(tmp, "images")
        os.makedirs(image_dir)
        t0 = time.perf_counter()
        save = subprocess.run(
            [docker, "save", "-o", os.path.join(image_dir, "live-image.tar"), image],
            capture_output=True,
            text=True,
            timeout=900,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"docker failed ({type(exc).__name__}: {exc}): the mock runs the host-tools view"
    if save.returncode != 0:
        return None, f"`docker save {image}` failed ({save.stderr.strip()[-200:]}): the mock runs the host-tools view"
    return image_dir, f"`docker save {image}` ({time.perf_counter() - t0:.1f} s) given to the mocks as --image-dir"


# --------------------------------------------------------------------------------------------- the case


def run_case(ctx, make_row) -> list:
    if ctx.target.kind != "live":
        ctx.log(SKIP_LINE)
        ctx.details["live"] = {"skipped": SKIP_LINE.split("skipped: ", 1)[1]}
        return []
    p = ctx.p
    warm = p.get("live_warmup", 1)
    image = os.environ.get("OPENSANDBOX_IMAGE") or DEFAULT_IMAGE
    load_start = _load()
    tmp = tempfile.mkdtemp(prefix="bench-live-")
    mocks: list[MockProcess] = []
    sides: list[Side] = []
    floor: FloorProcess | None = None
    try:
        image_dir, image_note = same_image(image, tmp)
        ctx.log(f"case live: {image_note}")
        fast = MockProcess(tmp, "fast", image_dir)
        mocks.append(fast)
        faithful = MockProcess(tmp, None, image_dir)
        mocks.append(faithful)
        mock = Side("mock", fast.base_url, fast.api_key, image, 0.001, fast)
        mock_f = Side("mock_faithful", faithful.base_url, faithful.api_key, image, 0.001, faithful)
        live = Side("live", ctx.target.base_url, ctx.target.api_key, image, 0.005)
        sides += [mock, mock_f, live]
        pair = (mock, live)
        sb = {s.label: s.create() for s in pair}  # the sandbox of cases a-d on each side (a first create unpacks)
        ep = {s.label: s.ready(sb[s.label]) for s in pair}
        views = {s.label: s.view(sb[s.label]) for s in pair}
        mock_f.create_ready()  # the faithful mock's first create (its image from the shared cache)
        ctx.log(f"case live: mock view {views['mock']}; command round trips")
        cmd_n = p.get("live_cmd_n", 20)

        def run_true(label: str) -> float:
            took, _, kind = command(*ep[label], "true")
            if kind != "execution_complete":
                raise RuntimeError(f"{label}: `true` ended with {kind}")
            return took

        floor = FloorProcess()
        ep["floor"] = (floor.url, {})
        cmd = interleave(
            {label: (lambda label=label: run_true(label)) for label in ("mock", "live", "floor")}, cmd_n, warm
        )
        floor.stop()
        ops_n = p.get("live_ops_n", 5)
        ctx.log("case live: session command, background command's first log line, PTY start")
        sess = {s.label: execd_ops.session_create(*ep[s.label]) for s in pair}
        incomplete: dict[str, list[str]] = {s.label: [] for s in pair}
        session = interleave(
            {
                s.label: (lambda s=s: execd_ops.session_run_retried(*ep[s.label], sess[s.label], incomplete[s.label]))
                for s in pair
            },
            ops_n,
            warm,
        )
        bg = interleave(
            {s.label: (lambda s=s: execd_ops.background_first_line(*ep[s.label])) for s in pair}, ops_n, warm
        )
        pty = interleave({s.label: (lambda s=s: execd_ops.pty_start(*ep[s.label])) for s in pair}, ops_n, warm)
        files_n = p.get("live_files_n", 4)
        data = os.urandom(FILE_BYTES)
        path = "/tmp/bench-vs-live.bin"
        ctx.log("case live: files")
        up = interleave({s.label: (lambda s=s: upload(*ep[s.label], path, data)) for s in pair}, files_n, warm)
        down = interleave(
            {s.label: (lambda s=s: download(*ep[s.label], path, data)) for s in pair}, files_n, warm, SEED + 1
        )
        stream_raw = p.get("live_stream_bytes", 6291456)
        stream_cmd = f"head -c {stream_raw} /dev/zero | base64 -w 76"
        body_bytes: dict[str, list[int]] = {s.label: [] for s in pair}

        def stream(label: str) -> float:
            took, nbytes, kind = command(*ep[label], stream_cmd)
            if kind != "execution_complete":
                raise RuntimeError(f"{label}: the stream command ended with {kind}")
            body_bytes[label].append(nbytes)
            return took * 1e6 / nbytes  # seconds per MB of SSE body: make_row's MB/s of 1 MB per sample

        ctx.log("case live: streaming")
        streamed = interleave({s.label: (lambda s=s: stream(s.label)) for s in pair}, p.get("live_stream_n", 2), warm)
        for s in pair:
            s.delete(sb[s.label])
        ctx.log("case live: create -> ready")
        created = interleave({s.label: s.create_ready for s in (mock, mock_f, live)}, p.get("live_create_n", 3), warm)
        ctx.log("case live: per idle sandbox")
        idle_n, settle = p.get("live_idle_n", 2), p.get("sandbox_settle_ms", 1000) / 1000
        idle = {}
        for s in pair:
            s.pid = s.mock.pid if s.mock else None  # the mock: its descendants; live: OPENSANDBOX_ID in env
            idle[s.label] = sandbox_costs.measure_idle(s, idle_n, settle)
            s.stop()
        banner = {
            "isolation": fast.banner("Sandbox isolation"),
            "timing": fast.banner("Timing"),
            "timing_faithful": faithful.banner("Timing"),
        }
    finally:
        for s in sides:
            s.close()
        for m in mocks:
            m.stop()
        if floor is not None:
            floor.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    load_end = _load()
    ctx.log(CODE_INTERP_SKIP)
    img = f"image {image}" if views["mock"] == "image" else f"host-tools view, live image {image}"
    mock_name = f"mock, --timing fast, {img}"
    live_name = f"live {ctx.target.base_url.split('://')[-1]}, {image}"
    out_mb = (-(-stream_raw // 3) * 4 * 77 / 76) / 1e6  # base64 -w 76: 76 characters and a newline per line
    order = f"one run per side per round, order shuffled every round (seed {SEED})"
    load = f"load (uptime) at the start of the case {load_start}, at its end {load_end}"

    def rounds(n: int) -> str:
        return f"{n} round" + ("" if n == 1 else "s")

    def row(
        key, title, unit, mock_s, live_s, note, target=None, mock_label=mock_name, nbytes=None, base_label=live_name
    ):
        r = make_row(
            id=f"live_{key}",
            case=CASE,
            title=f"Mock vs live: {title}",
            unit=unit,
            ours_name=mock_label,
            ours_s=mock_s,
            base_name=base_label,
            base_s=live_s,
            target=target,
            nbytes=nbytes,
            note=note + ("" if target else "; report only") + ("; " + load if key == "command_true" else ""),
        )
        r["rounds"] = len(mock_s)
        return r

    rows = [
        row(
            "command_true",
            f"command round trip `true` ({rounds(cmd_n)})",
            "ms",
            cmd["mock"],
            cmd["live"],
            "POST /command on a new connection, SSE read line by line to the terminal event, connection dropped; "
            + order,
            target=0.5,
        ),
        row(
            "command_true_floor",
            f"command round trip `true`, the floor vs live ({rounds(cmd_n)})",
            "ms",
            cmd["floor"],
            cmd["live"],
            "the floor: bench/floor.py, a one-thread Python server that forks `bash -c true` on the host (no "
            "containment, journal, validation or routing), in the same rounds as the row above: how far below live "
            "a Python server running real bash gets at all",
            mock_label="floor (bench/floor.py)",
        ),
        row(
            "command_true_mock_floor",
            f"command round trip `true`, mock vs the floor ({rounds(cmd_n)})",
            "ms",
            cmd["mock"],
            cmd["floor"],
            "the same rounds: what the mock adds to the floor",
            base_label="floor (bench/floor.py)",
        ),
        row(
            "create_ready",
            f"create -> ready ({rounds(len(created['mock']))})",
            "ms",
            created["mock"],
            created["live"],
            "POST /v1/sandboxes, GET until Running, endpoint, /ping until 200 (polled every 1 ms on the mock, 5 ms "
            "live), DELETE untimed; " + order,
            target=0.05,
        ),
        row(
            "create_ready_faithful",
            f"create -> ready, mock at its default timing ({rounds(len(created['mock_faithful']))})",
            "ms",
            created["mock_faithful"],
            created["live"],
            f"the mock without --timing fast (timing {banner['timing_faithful'] or 'faithful'}), "
            "same rounds as the row above",
            mock_label=mock_name.replace("--timing fast", "default timing"),
        ),
        row(
            "session_true",
            f"session command `true` ({rounds(ops_n)})",
            "ms",
            session["mock"],
            session["live"],
            "POST /session/{id}/run on a session made once, a new connection each, SSE to the terminal event "
            "(bench/execd_ops.py); " + order,
            target=0.5,
        ),
        row(
            "background_first_line",
            f"background command's first log line ({rounds(ops_n)})",
            "ms",
            bg["mock"],
            bg["live"],
            "POST /command background `echo; sleep 30`, its SSE to the end, then GET /command/{id}/logs every 1 ms "
            "until the line is in it (bench/execd_ops.py); " + order,
            target=0.5,
        ),
        row(
            "pty_start",
            f"PTY start ({rounds(ops_n)})",
            "ms",
            pty["mock"],
            pty["live"],
            "POST /pty, the WebSocket /pty/{id}/ws, frames to the first output byte (the prompt) "
            "(bench/execd_ops.py); " + order,
            target=0.5,
        ),
        row(
            "files_upload_1mib",
            f"files upload 1 MiB ({rounds(files_n)})",
            "ms",
            up["mock"],
            up["live"],
            "POST /files/upload multipart (bench/direct.py), a new connection each; " + order,
            target=0.5,
        ),
        row(
            "files_download_1mib",
            f"files download 1 MiB ({rounds(files_n)})",
            "ms",
            down["mock"],
            down["live"],
            "GET /files/download, a new connection each, content checked; " + order,
            target=0.5,
        ),
        row(
            "stream",
            f"streaming {out_mb:.1f} MB of base64 ({rounds(len(streamed['mock']))})",
            "MB/s",
            streamed["mock"],
            streamed["live"],
            f"`{stream_cmd}` to the terminal event, MB/s of the SSE body received (mock "
            f"{min(body_bytes['mock']):,} B, live {min(body_bytes['live']):,} B per run); " + order,
            nbytes=1_000_000,
        ),
    ]
    for what, key, unit in (("RSS", "rss_kb", "MiB"), ("PSS", "pss_kb", "MiB"), ("processes", "processes", "count")):
        vm, vl = idle["mock"].get(key), idle["live"].get(key)
        if vm is None or vl is None:
            continue
        scale = 1024.0 if unit == "MiB" else 1.0
        rows.append(
            row(
                f"idle_{key}",
                f"per idle sandbox: {what} ({idle_n} sandbox{'' if idle_n == 1 else 'es'})",
                unit,
                [vm / scale / idle_n],
                [vl / scale / idle_n],
                "bench/sandbox_costs.py measure_idle: the mock's descendant processes that came with the sandboxes, "
                "live the processes whose environment names the sandbox and their containerd-shim; total / "
                f"{idle_n}, after {settle:g} s idle",
            )
        )
    notes = [
        f"image: {image_note}; the mock's sandboxes got the {views['mock']} view",
        "mock: `python -m mock_opensandbox --port 0 --api-key <random> --timing fast"
        + (" --image-dir DIR`" if image_dir else "`")
        + f" (timing {banner['timing']}); the faithful one without --timing (timing {banner['timing_faithful']})",
        f"mock isolation: {banner['isolation']}",
        f"live: {ctx.target.base_url.split('://')[-1]}, image {image}",
        f"streaming: SSE body bytes per run, mock {body_bytes['mock'][:3]}, live {body_bytes['live'][:3]}",
        "session runs that ended without execution_complete and were run again: "
        + ", ".join(f"{k} {len(v)}" for k, v in incomplete.items()),
        load,
        CODE_INTERP_SKIP,
    ]
    ctx.details["live"] = {
        "image": image,
        "image_dir": bool(image_dir),
        "views": views,
        "notes": notes,
        "idle": idle,
        "code_interpreter": CODE_INTERP_SKIP,
    }
    for r in rows:
        ratio = "—" if r["ratio"] is None else f"{r['ratio']:.3f}x"
        ctx.log(f"{r['title']}: {ratio} mock / live (target {r['target'] or 'report only'})")
    return rows


__all__ = ["run_case", "SKIP_LINE", "MockProcess", "Side", "command", "interleave"]
