"""The official CLI (opensandbox-cli 1.1.1, unchanged, in its own venv) through every command group that
works on a Docker server: sandbox, command (run, background, status, logs, interrupt, session), file,
diagnostics (+ the deprecated devops texts), metrics, and the groups whose answer on Docker is an error
(egress without a sidecar, templates) or empty (snapshots). The same steps run against the mock (t2) and a
live server (t4); ``run_flow`` returns one ``Step`` per CLI call.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from typing import Callable

from tiers.toolkit.procs import close_and_wait
from tiers.toolkit.waits import wait_until

from . import python_env


@dataclass
class Step:
    name: str
    ok: bool
    detail: str = ""


RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cli_runner.py")


class Cli:
    """The CLI's own entry point in one long-lived process of its venv (cli_runner.py)."""

    def __init__(self, py: str, domain: str, api_key: str, home: str):
        self.domain, self.api_key, self.home = domain, api_key, home
        self.steps: list[Step] = []
        env = dict(os.environ, HOME=home, NO_COLOR="1", COLUMNS="200", PYTHONWARNINGS="ignore")
        self.proc = subprocess.Popen(
            [py, RUNNER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=home,
        )
        if not json.loads(self.proc.stdout.readline() or "{}").get("ready"):
            self.close()
            raise RuntimeError("the CLI runner did not start")

    def close(self) -> None:
        close_and_wait(self.proc, 30)

    def run(self, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
        argv = [
            "--no-color",
            "--api-key",
            self.api_key,
            "--domain",
            self.domain,
            "--protocol",
            "http",
            "--config",
            os.path.join(self.home, "config.toml"),
            *args,
        ]
        self.proc.stdin.write(json.dumps({"args": argv, "stdin": stdin}) + "\n")
        self.proc.stdin.flush()
        r = json.loads(self.proc.stdout.readline())
        return subprocess.CompletedProcess(list(args), r["rc"], r["stdout"], r["stderr"])

    def step(
        self, name: str, args: list[str], check: Callable[[subprocess.CompletedProcess], bool], **kw
    ) -> subprocess.CompletedProcess:
        r = self.run(*args, **kw)
        try:
            ok = bool(check(r))
        except Exception as e:  # a check that cannot parse the output fails the step
            ok = False
            r.stderr += "\ncheck raised %r" % e
        self.steps.append(
            Step(name, ok, "" if ok else "rc=%s\n%s\n%s" % (r.returncode, r.stdout[-1500:], r.stderr[-1500:]))
        )
        return r


def cli_python() -> str:
    return python_env("cli", "requirements-cli.txt")


def _json(r: subprocess.CompletedProcess):
    return json.loads(r.stdout)


def run_flow(domain: str, api_key: str, image: str) -> list[Step]:
    with tempfile.TemporaryDirectory(prefix="osb-cli-home-") as home:
        c = Cli(cli_python(), domain, api_key, home)
        try:
            return _run(c, home, image)
        finally:
            c.close()


def _run(c: "Cli", home: str, image: str) -> list[Step]:
    r = c.step(
        "sandbox create",
        [
            "sandbox",
            "create",
            "--image",
            image,
            "--entrypoint",
            "tail",
            "--entrypoint",
            "-f",
            "--entrypoint",
            "/dev/null",
            "-t",
            "10m",
            "-m",
            "team=cli",
            "-o",
            "json",
        ],
        lambda r: r.returncode == 0 and _json(r)["id"],
    )
    if r.returncode != 0:
        return c.steps
    sid = _json(r)["id"]
    try:
        _flow(c, sid, home)
    finally:
        c.step("sandbox kill", ["sandbox", "kill", sid], lambda r: r.returncode == 0)
        c.step(
            "sandbox get (after kill)",
            ["sandbox", "get", sid, "-o", "json"],
            lambda r: "not found" in (r.stdout + r.stderr).lower(),
        )
    return c.steps


def _flow(c: Cli, sid: str, home: str) -> None:
    c.step(
        "sandbox get",
        ["sandbox", "get", sid, "-o", "json"],
        lambda r: _json(r)["status"]["state"] == "Running" and _json(r)["metadata"] == {"team": "cli"},
    )
    c.step("sandbox list", ["sandbox", "list", "-o", "json"], lambda r: sid in [i["id"] for i in _json(r)["items"]])
    c.step("sandbox health", ["sandbox", "health", sid], lambda r: r.returncode == 0 and "healthy" in r.stdout)
    c.step(
        "sandbox metrics",
        ["sandbox", "metrics", sid, "-o", "json"],
        lambda r: _json(r)["cpu_count"] > 0 and _json(r)["memory_total_in_mib"] > 0,
    )
    c.step(
        "sandbox endpoint",
        ["sandbox", "endpoint", sid, "-p", "44772", "-o", "json"],
        lambda r: _json(r)["endpoint"].endswith("/proxy/44772"),
    )
    c.step(
        "sandbox renew",
        ["sandbox", "renew", sid, "-t", "20m", "-o", "json"],
        lambda r: _json(r)["sandbox_id"] == sid and _json(r)["expires_at"],
    )

    # -- command
    c.step(
        "command run",
        ["command", "run", sid, "--", "echo", "hello-cli"],
        lambda r: r.returncode == 0 and r.stdout.strip() == "hello-cli",
    )
    c.step(
        "command run (workdir)",
        ["command", "run", sid, "-w", "/tmp", "--", "pwd"],
        lambda r: r.stdout.strip() == "/tmp",
    )
    bg = c.step(
        "command run --background",
        ["command", "run", sid, "-d", "-o", "json", "--", "sh", "-c", "echo started; sleep 60"],
        lambda r: _json(r)["execution_id"] and _json(r)["mode"] == "background",
    )
    eid = _json(bg)["execution_id"] if bg.returncode == 0 else "none"
    # the background command prints before it sleeps
    wait_until(lambda: "started" in c.run("command", "logs", sid, eid, "-o", "json").stdout, 20, 0.2)
    c.step(
        "command status (running)",
        ["command", "status", sid, eid, "-o", "json"],
        lambda r: _json(r)["running"] is True and _json(r)["id"] == eid,
    )
    c.step("command logs", ["command", "logs", sid, eid, "-o", "json"], lambda r: "started" in _json(r)["content"])
    c.step("command interrupt", ["command", "interrupt", sid, eid], lambda r: r.returncode == 0)

    def stopped() -> bool:
        st = c.run("command", "status", sid, eid, "-o", "json")
        return st.returncode == 0 and json.loads(st.stdout)["running"] is False

    wait_until(stopped, 20, 0.2)
    c.step(
        "command status (interrupted)",
        ["command", "status", sid, eid, "-o", "json"],
        lambda r: _json(r)["running"] is False and _json(r)["finished_at"],
    )
    ses = c.step(
        "command session create", ["command", "session", "create", sid, "-o", "json"], lambda r: _json(r)["session_id"]
    )
    if ses.returncode == 0:
        ssid = _json(ses)["session_id"]
        # (the CLI shell-quotes each payload word: a bash snippet is one word each for cd/export/echo)
        c.step(
            "command session run (state)",
            ["command", "session", "run", sid, ssid, "--", "cd", "/tmp"],
            lambda r: r.returncode == 0,
        )
        c.step(
            "command session run (env)",
            ["command", "session", "run", sid, ssid, "--", "export", "OSB_X=42"],
            lambda r: r.returncode == 0,
        )
        c.step(
            "command session run (kept)",
            ["command", "session", "run", sid, ssid, "--", "printenv", "OSB_X"],
            lambda r: r.stdout.strip() == "42",
        )
        c.step(
            "command session run (cwd kept)",
            ["command", "session", "run", sid, ssid, "--", "pwd"],
            lambda r: r.stdout.strip() == "/tmp",
        )
        c.step("command session delete", ["command", "session", "delete", sid, ssid], lambda r: r.returncode == 0)

    # -- file
    c.step(
        "file write",
        ["file", "write", sid, "/tmp/cli/a.txt", "-c", "hello file", "-o", "json"],
        lambda r: _json(r)["status"] == "ok",
    )
    c.step("file cat", ["file", "cat", sid, "/tmp/cli/a.txt"], lambda r: r.stdout == "hello file")
    c.step(
        "file info",
        ["file", "info", sid, "/tmp/cli/a.txt", "-o", "json"],
        lambda r: _json(r)[0]["size"] == 10 and _json(r)[0]["entry_type"] == "file",
    )
    c.step(
        "file replace",
        ["file", "replace", sid, "/tmp/cli/a.txt", "--old", "file", "--new", "world"],
        lambda r: r.returncode == 0,
    )
    c.step("file cat (replaced)", ["file", "cat", sid, "/tmp/cli/a.txt"], lambda r: r.stdout == "hello world")
    c.step("file mkdir", ["file", "mkdir", sid, "/tmp/cli/d"], lambda r: r.returncode == 0)
    local = os.path.join(home, "up.bin")
    with open(local, "wb") as fh:
        fh.write(bytes(range(256)) * 8)
    c.step("file upload", ["file", "upload", sid, local, "/tmp/cli/d/up.bin"], lambda r: r.returncode == 0)
    back = os.path.join(home, "down.bin")
    c.step(
        "file download",
        ["file", "download", sid, "/tmp/cli/d/up.bin", back],
        lambda r: r.returncode == 0 and open(back, "rb").read() == bytes(range(256)) * 8,
    )
    c.step(
        "file search",
        ["file", "search", sid, "/tmp/cli", "-p", "*.bin", "-o", "json"],
        lambda r: "/tmp/cli/d/up.bin" in r.stdout,
    )
    c.step("file chmod", ["file", "chmod", sid, "/tmp/cli/d/up.bin", "--mode", "0600"], lambda r: r.returncode == 0)
    c.step(
        "file info (mode)",
        ["file", "info", sid, "/tmp/cli/d/up.bin", "-o", "json"],
        lambda r: _json(r)[0]["mode"] == 600,
    )
    c.step("file mv", ["file", "mv", sid, "/tmp/cli/d/up.bin", "/tmp/cli/moved.bin"], lambda r: r.returncode == 0)
    c.step("file rm", ["file", "rm", sid, "/tmp/cli/moved.bin"], lambda r: r.returncode == 0)
    c.step("file rmdir", ["file", "rmdir", sid, "/tmp/cli/d"], lambda r: r.returncode == 0)
    c.step(
        "file cat (removed)",
        ["file", "cat", sid, "/tmp/cli/moved.bin"],
        lambda r: (
            r.returncode != 0
            or "not found" in (r.stdout + r.stderr).lower()
            or "no such file" in (r.stdout + r.stderr).lower()
        ),
    )

    # -- diagnostics (stable JSON) and the deprecated devops texts
    # (execd logs every request to the container's stdout: the first lines may be past the last 100)
    c.step(
        "diagnostics logs",
        ["diagnostics", "logs", sid, "-s", "container", "-o", "json"],
        lambda r: _json(r)["kind"] == "logs" and _json(r)["content"].startswith("20"),
    )
    c.step(
        "diagnostics logs (json, all)",
        ["diagnostics", "logs", sid, "-s", "all", "-o", "json"],
        lambda r: _json(r)["scope"] == "all" and _json(r)["warnings"],
    )
    c.step(
        "diagnostics events",
        ["diagnostics", "events", sid, "-s", "runtime"],
        lambda r: r.returncode == 0 and "Status:     running" in r.stdout and "(sandbox-%s)" % sid in r.stdout,
    )
    c.step(
        "diagnostics logs (bad scope)",
        ["diagnostics", "logs", sid, "-s", "pod"],
        lambda r: "DIAGNOSTICS_SCOPE_UNSUPPORTED" in r.stdout + r.stderr,
    )
    c.step(
        "devops inspect",
        ["devops", "inspect", sid],
        lambda r: "Container ID:" in r.stdout and "opensandbox.io/id=%s" % sid in r.stdout,
    )
    c.step("devops summary", ["devops", "summary", sid], lambda r: "SANDBOX DIAGNOSTICS SUMMARY" in r.stdout)

    # -- groups whose answer on a Docker server is empty or an error
    c.step("snapshot list", ["snapshot", "list", "-o", "json"], lambda r: r.returncode == 0 and "items" in _json(r))
    c.step(
        "snapshot get (unknown)",
        ["snapshot", "get", "snap-does-not-exist"],
        lambda r: "SNAPSHOT::NOT_FOUND" in r.stdout + r.stderr,
    )
    c.step("template list", ["template", "list"], lambda r: "FSB::API_NOT_SUPPORTED" in r.stdout + r.stderr)
    c.step("egress get (no sidecar)", ["egress", "get", sid], lambda r: "HTTP 502" in r.stdout + r.stderr)

    c.step("sandbox pause", ["sandbox", "pause", sid], lambda r: r.returncode == 0)
    c.step(
        "sandbox get (paused)", ["sandbox", "get", sid, "-o", "json"], lambda r: _json(r)["status"]["state"] == "Paused"
    )
    c.step("sandbox pause (again)", ["sandbox", "pause", sid], lambda r: "SANDBOX_NOT_RUNNING" in r.stdout + r.stderr)
    c.step("sandbox resume", ["sandbox", "resume", sid], lambda r: r.returncode == 0)
    c.step(
        "command run (after resume)",
        ["command", "run", sid, "--", "echo", "back"],
        lambda r: r.stdout.strip() == "back",
    )


def summary(steps: list[Step]) -> str:
    bad = [s for s in steps if not s.ok]
    return "%d/%d CLI steps passed%s" % (
        len(steps) - len(bad),
        len(steps),
        "".join("\n--- %s: %s" % (s.name, s.detail) for s in bad),
    )
