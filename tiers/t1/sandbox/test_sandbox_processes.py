"""t1: a mock sandbox looks like a container to `ps` (QUIRKS.md, Sandbox runtime: a real sandbox lists PID 1
`/bin/sh /opt/opensandbox/bootstrap.sh tail -f /dev/null`, execd and `tail -f /dev/null`, nothing of
the host). Every process of a sandbox shares one PID namespace held by its main process; commands
run through execd join it; two sandboxes never see each other; delete leaves no process.

Also: execd's reverse proxy keeps repeated headers and drops X-Forwarded-Host (src pkg/web/proxy.go).
"""

from __future__ import annotations

import http.client
import json
import os
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mock_opensandbox.execd.server import ExecdServer
from mock_opensandbox.runtime import SandboxNotRunning, SandboxRuntime, probe_isolation
from mock_opensandbox.runtime.janitor import LEDGER
from mock_opensandbox.server import MockOpenSandbox
from mock_opensandbox.wire import sse
from tiers.toolkit import rest
from tiers.toolkit.procs import alive as _alive
from tiers.toolkit.waits import wait_until as _wait

BODY = {"image": {"uri": "python:3"}, "entrypoint": ["tail", "-f", "/dev/null"], "resourceLimits": {}}
PS = "ps -e -o pid=,ppid=,stat=,args=; true"  # `; true` keeps bash from exec'ing ps itself


def _pidns_available() -> bool:
    ok, _ = probe_isolation()
    if not ok:
        return False
    d = tempfile.mkdtemp(prefix="osb-t1-")
    rt = SandboxRuntime(os.path.join(d, "root"))
    try:
        return rt.pid_namespace
    finally:
        rt.cleanup()
        os.rmdir(d)


pytestmark = pytest.mark.skipif(
    not _pidns_available(), reason="no per-sandbox PID namespace here: " + " ".join(probe_isolation()[1].split())
)


# -- helpers ------------------------------------------------------------------------------------


class Api:
    def __init__(self, osb: MockOpenSandbox):
        self.osb = osb
        self.hostport = osb.base_url.split("://")[1]

    def call(self, method: str, path: str, body=None, hostport: str | None = None) -> tuple[int, bytes]:
        r = rest.call(hostport or self.hostport, method, path, body, {"OPEN-SANDBOX-API-KEY": self.osb.api_key or ""})
        return r.status, r.body

    def create(self) -> str:
        status, body = self.call("POST", "/v1/sandboxes", BODY)
        assert status == 202, body
        return json.loads(body)["id"]

    def run(self, sid: str, command: str, background: bool = False) -> list[dict]:
        ep = json.loads(self.call("GET", f"/v1/sandboxes/{sid}/endpoints/44772")[1])["endpoint"]
        hostport, _, prefix = ep.partition("/")
        status, body = self.call(
            "POST", f"/{prefix}/command", {"command": command, "background": background}, hostport=hostport
        )
        assert status == 200, body
        return list(sse.parse_stream([body]))

    def ps(self, sid: str) -> list[tuple[int, int, str, str]]:
        """(pid, ppid, stat, args) of every process the sandbox's `ps` shows."""
        events = self.run(sid, PS)
        assert events[-1]["type"] == "execution_complete", events
        rows = []
        for e in events:
            if e["type"] == "stdout":
                pid, ppid, stat, args = e["text"].split(None, 3)
                rows.append((int(pid), int(ppid), stat, args))
        return rows


def _pidns_members(pidns: str) -> set[int]:
    """Host pids of every process in the PID namespace `pidns` ("pid:[inode]")."""
    out = set()
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                if os.readlink(f"/proc/{name}/ns/pid") == pidns:
                    out.add(int(name))
            except OSError:
                pass
    return out


@pytest.fixture(scope="module")
def api():
    osb = MockOpenSandbox(execd_close_delay=0).start()
    try:
        yield Api(osb)
    finally:
        osb.stop()


# -- ps in a sandbox ----------------------------------------------------------------------------


def test_ps_shows_only_the_sandbox(api):
    sid = api.create()
    try:
        rows = api.ps(sid)
        by_pid = {pid: (ppid, args) for pid, ppid, _, args in rows}
        # what the real sandbox shows (fixtures/22_sandbox_inside.json): PID 1 runs bootstrap.sh, which started
        # /opt/opensandbox/execd and then the entrypoint, both its children
        assert by_pid[1] == (0, "/bin/sh /opt/opensandbox/bootstrap.sh tail -f /dev/null"), rows
        assert [a for _, (pp, a) in by_pid.items() if a == "tail -f /dev/null" and pp == 1], rows
        assert [a for _, (pp, a) in by_pid.items() if a == "/opt/opensandbox/execd" and pp == 1], rows
        # the command itself (bash -c ...) and its ps, nothing else: no pytest, no mock, no host daemon
        others = sorted(
            a for p, (_, a) in by_pid.items() if p != 1 and a not in ("tail -f /dev/null", "/opt/opensandbox/execd")
        )
        assert others == sorted([f"bash -c {PS}", "ps -e -o pid=,ppid=,stat=,args="]), rows
        assert not any("pytest" in a or "python" in a for _, _, _, a in rows)
        # /proc agrees with ps (a fresh procfs, not the host's)
        events = api.run(sid, "ls /proc | grep -c '^[0-9]'")
        count = int("".join(e["text"] for e in events if e["type"] == "stdout").strip())
        assert count <= 7, count
        # and the view is still the container's: root, cwd, id
        out = [e["text"] for e in api.run(sid, "id -u; cd /var/log && pwd") if e["type"] == "stdout"]
        assert out == ["0", "/var/log"]
    finally:
        api.call("DELETE", f"/v1/sandboxes/{sid}")


def test_commands_of_one_sandbox_see_each_other_and_orphans_are_reaped(api):
    sid = api.create()
    try:
        events = api.run(sid, "sleep 30", background=True)
        assert events[0]["type"] == "init"
        # a command that leaves an orphan behind: init (PID 1) adopts and reaps it, no zombie stays
        api.run(sid, "sleep 0.1 > /dev/null 2>&1 &")
        assert _wait(lambda: any(a == "sleep 30" for *_, a in api.ps(sid)))
        time.sleep(0.3)
        rows = api.ps(sid)
        assert [r for r in rows if r[3] == "sleep 30"], rows
        assert not [r for r in rows if r[2].startswith("Z")], rows
        assert not [r for r in rows if r[3] == "sleep 0.1"], rows
    finally:
        api.call("DELETE", f"/v1/sandboxes/{sid}")


def test_two_sandboxes_do_not_see_each_other(api):
    a, b = api.create(), api.create()
    try:
        api.run(a, "sleep 31", background=True)
        api.run(b, "sleep 32", background=True)
        assert _wait(lambda: any(r[3] == "sleep 31" for r in api.ps(a)))
        assert _wait(lambda: any(r[3] == "sleep 32" for r in api.ps(b)))
        rows_a, rows_b = api.ps(a), api.ps(b)
        assert not [r for r in rows_a if r[3] == "sleep 32"], rows_a
        assert not [r for r in rows_b if r[3] == "sleep 31"], rows_b
        # each has its own PID 1
        assert [r for r in rows_a if r[0] == 1] and [r for r in rows_b if r[0] == 1]
        ns_a = api.osb.sandboxes[a].runtime.pid1.holder.pidns_id
        ns_b = api.osb.sandboxes[b].runtime.pid1.holder.pidns_id
        assert ns_a and ns_b and ns_a != ns_b
    finally:
        api.call("DELETE", f"/v1/sandboxes/{a}")
        api.call("DELETE", f"/v1/sandboxes/{b}")


def test_delete_leaves_no_process(api):
    sid = api.create()
    api.run(sid, "sleep 33", background=True)
    api.run(sid, "setsid sleep 34 > /dev/null 2>&1 < /dev/null & echo daemon")
    api.run(sid, "nohup sh -c 'sleep 35' > /dev/null 2>&1 &")
    rt = api.osb.sandboxes[sid].runtime
    holder = rt.pid1.holder
    assert holder is not None
    assert _wait(lambda: len(_pidns_members(holder.pidns_id)) >= 5)  # init, tail, 3 sleeps (+ shells)
    members = _pidns_members(holder.pidns_id) | {holder.proc.pid}
    # the namespace held open while it is looked at: once freed, its inode number can be a new sandbox's (another
    # test's, in parallel), whose processes would then show as this one's
    ns = os.open(f"/proc/{holder.proc.pid}/ns/pid", os.O_RDONLY)
    try:
        assert os.readlink(f"/proc/self/fd/{ns}") == holder.pidns_id
        assert api.call("DELETE", f"/v1/sandboxes/{sid}")[0] == 204
        assert _wait(lambda: not [p for p in members if _alive(p)]), [p for p in members if _alive(p)]

        def left() -> list[int]:
            return [p for p in _pidns_members(holder.pidns_id) if _alive(p)]

        assert _wait(lambda: not left()), left()
    finally:
        os.close(ns)


def test_paused_sandbox_freezes_every_process(api):
    sid = api.create()
    try:
        api.run(sid, "sleep 36", background=True)
        holder = api.osb.sandboxes[sid].runtime.pid1.holder
        assert _wait(lambda: len(_pidns_members(holder.pidns_id)) >= 3)
        assert api.call("POST", f"/v1/sandboxes/{sid}/pause")[0] == 202

        def states():
            out = []
            for p in _pidns_members(holder.pidns_id):
                try:
                    with open(f"/proc/{p}/stat", "rb") as fh:
                        out.append(fh.read().rsplit(b")", 1)[1].split()[0])
                except OSError:
                    pass
            return out

        assert _wait(lambda: states() and all(s in (b"T", b"t") for s in states())), states()
        assert api.call("POST", f"/v1/sandboxes/{sid}/resume")[0] == 202
        assert _wait(lambda: all(s not in (b"T", b"t") for s in states())), states()
    finally:
        api.call("DELETE", f"/v1/sandboxes/{sid}")


def test_a_sandbox_deleted_while_it_starts_leaves_no_process(tmp_path):
    """close() at shutdown (or a delete) may dispose a sandbox whose start is still running, before it
    has a runtime to stop: the create then stops it itself, and nothing of it stays."""
    with MockOpenSandbox(root=str(tmp_path / "osb")) as osb:
        real_start = osb.provisioner.start

        def start_after_a_delete(sb):
            osb.store.delete(sb.id)  # the dispose comes first: sb.runtime does not exist yet
            return real_start(sb)

        osb.provisioner.start = start_after_a_delete
        before = _holders()
        status, body = Api(osb).call("POST", "/v1/sandboxes", BODY)
        assert status == 500 and b"deleted while it started" in body, (status, body)
        assert _wait(lambda: not (_holders() - before)), _holders() - before
        # (the ledger of what this mock makes stays until its end: runtime/janitor.py LEDGER)
        assert [n for n in os.listdir(tmp_path / "osb") if n != LEDGER] == []


def _holders() -> set[int]:
    """This process's live sandbox PID 1s (procs.sandbox_holders)."""
    from tiers.toolkit.procs import sandbox_holders

    return sandbox_holders()


# -- the runtime underneath ---------------------------------------------------------------------


def test_main_process_exit_ends_the_sandbox(tmp_path):
    rt = SandboxRuntime(str(tmp_path / "root"))
    try:
        assert rt.pid_namespace
        ep = rt.start_entrypoint(["sh", "-c", "sleep 0.2; exit 3"])
        bg = rt.spawn(["sleep", "30"])
        # PID 1 gone: the kernel kills the whole namespace (and PID 1 finishes exiting once the mock
        # has reaped what it forked into the namespace, so reap the command first)
        assert bg.wait(timeout=10) == -9
        assert ep.wait(timeout=10) == 3  # the container's exit code is the entrypoint's
        with pytest.raises(SandboxNotRunning, match="exited with status 3"):
            rt.spawn(["true"])
    finally:
        rt.cleanup()


def test_entrypoint_killed_inside_gives_128_plus_signal(tmp_path):
    rt = SandboxRuntime(str(tmp_path / "root"))
    try:
        ep = rt.start_entrypoint(["sleep", "30"])
        k = rt.spawn(["sh", "-c", "sleep 0.1; pkill -KILL -x sleep"])
        k.wait(timeout=10)  # 0, or -9 when the dying namespace takes pkill with it
        assert ep.wait(timeout=10) == 137  # `docker` reports 128 + 9 (the init's exit status)
    finally:
        rt.cleanup()


def test_runtime_without_entrypoint_gets_a_main_process(tmp_path):
    """A stand-alone runtime (no start_entrypoint) still has one PID namespace: PID 1, execd + tail."""
    rt = SandboxRuntime(str(tmp_path / "root"))
    try:
        import subprocess

        a = rt.spawn(["sleep", "30"])
        want = sorted(
            [
                "/bin/sh /opt/opensandbox/bootstrap.sh tail -f /dev/null",
                "tail -f /dev/null",
                "/opt/opensandbox/execd",
                "sleep 30",
                "ps -e -o pid=,args=",
            ]
        )
        seen: list[list[str]] = []

        def listing() -> bool:  # spawn returns before the nsenter/setpriv stages have exec'd `sleep`
            p = rt.spawn(["ps", "-e", "-o", "pid=,args="], stdout=subprocess.PIPE)
            out = p.communicate(timeout=10)[0].decode().splitlines()
            seen.append(sorted(line.split(None, 1)[1] for line in out))
            return seen[-1] == want

        assert _wait(listing), seen[-1]
        assert rt.process_groups() == [a.pid]  # the implicit main process is the runtime's own
    finally:
        rt.cleanup()
    assert a.poll() is not None


_DIES_WITH_MOCK = r"""
import os, sys, threading
sys.path.insert(0, sys.argv[2])
from mock_opensandbox.runtime import SandboxRuntime
from tiers.toolkit.procs import alive
rt = SandboxRuntime(sys.argv[1])
t = threading.Thread(target=lambda: rt.spawn(["true"]).wait())  # like a request thread: it ends
t.start()
t.join()
h = rt.pid1.holder
print(h.proc.pid, h.pid, int(alive(h.proc.pid) and alive(h.pid)), flush=True)
os.kill(os.getpid(), 9)  # the mock dies without any cleanup
"""


def test_sandbox_dies_with_the_mock_process(tmp_path):
    """A mock killed outright (SIGKILL, no terminate) leaves no sandbox behind: the holder (outer
    unshare) and PID 1 go with it, but not with the request thread that started them."""
    import subprocess
    import sys

    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    out = (
        subprocess.run(
            [sys.executable, "-c", _DIES_WITH_MOCK, str(tmp_path / "root"), repo], stdout=subprocess.PIPE, timeout=60
        )
        .stdout.decode()
        .split()
    )
    assert len(out) == 3, out
    outer, pid1, alive_after_thread = int(out[0]), int(out[1]), out[2]
    try:
        assert alive_after_thread == "1"  # the spawning thread's end did not take the sandbox along
        assert _wait(lambda: not _alive(outer) and not _alive(pid1)), (outer, pid1)
    finally:
        for pid in (outer, pid1):
            if _alive(pid):
                os.kill(pid, 9)


# -- execd reverse proxy headers (pkg/web/proxy.go over httputil.ReverseProxy) -------------------


class _Echo(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *a):  # quiet
        pass

    def do_GET(self):
        body = json.dumps([[k, v] for k, v in self.headers.items()]).encode()
        self.send_response(200)
        self.send_header("Set-Cookie", "a=1; Path=/")
        self.send_header("Set-Cookie", "b=2; Path=/")
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def test_proxy_keeps_repeated_headers_and_drops_forwarded_host(tmp_path):
    up = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=up.serve_forever, daemon=True).start()
    rt = SandboxRuntime(str(tmp_path / "root"), isolate=False)
    srv = ExecdServer(rt, close_delay=0)
    srv.start()
    try:
        c = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
        c.putrequest("GET", f"/proxy/{up.server_address[1]}/x")
        c.putheader("X-Multi", "one")
        c.putheader("X-Multi", "two")
        c.putheader("X-Forwarded-Host", "client.example")
        c.endheaders()
        r = c.getresponse()
        seen = json.loads(r.read())
        cookies = [v for k, v in r.getheaders() if k.lower() == "set-cookie"]
        c.close()
        assert r.status == 200
        assert cookies == ["a=1; Path=/", "b=2; Path=/"]
        assert [v for k, v in seen if k.lower() == "x-multi"] == ["one", "two"]
        assert not [k for k, _ in seen if k.lower() == "x-forwarded-host"]
        assert [v for k, v in seen if k.lower() == "x-forwarded-proto"] == ["http"]
        assert len([k for k, _ in r.getheaders() if k.lower() == "date"]) == 1
    finally:
        srv.stop()
        rt.cleanup()
        up.shutdown()
        up.server_close()
