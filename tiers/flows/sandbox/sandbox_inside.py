"""What the inside of a sandbox shows (fixtures/22_sandbox_inside.json), one probe list for every tier.

The probes are the commands and execd requests of recorder scenario 22 (``record/scenarios_inside.py``:
``INSIDE_FILES``, ``INSIDE_CWDS``, ``INSIDE_PROBES``), run in a sandbox created with
``"resourceLimits": {"cpu": "500m", "memory": "512Mi"}``. Each probe has a check that asserts what the real
sandbox shows: the values of ``fixtures/22_sandbox_inside.json`` (recorded from
opensandbox-server 1.1.1 + Docker 20.10 + execd v1.0.19 by ``python -m record``). ``same_port_two_sandboxes``
is scenario 23: two sandboxes serving port 9000, each endpoint answering with its own files.

``Target`` talks to any OpenSandbox server over HTTP with the standard library only (``tiers.flows.server.smoke_flow``), so
the same assertions run on the live server (tiers/t4/sandbox/test_live_inside.py) and on the mock
(tiers/t1/sandbox/test_sandbox_inside.py). Checks accept cgroup v1 and v2 file names and do not depend on the host's
load (the CPU probe asserts the CFS quota at work and an upper bound on the share, never a lower bound).
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
import urllib.parse
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

from record.scenarios import (
    INSIDE_CWDS,
    INSIDE_FILES,
    INSIDE_PROBES,
    RESOURCES,
    SAME_PORT,
    inside_command,
    serve_command,
)
from tiers.flows.server.smoke_flow import Reply, output_of, request, server_root, stream_command
from tiers.toolkit.waits import wait_until

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
FIXTURE = os.path.join(REPO, "fixtures", "22_sandbox_inside.json")
EXECD_PORT = 44772
GIB = 1 << 30


class Result(NamedTuple):
    status: int  # HTTP status of the request
    rc: int  # exit status of a command (0 without an error event); -1 for a files request
    out: str  # stdout (a command) or the body (a files request)
    err: str  # stderr


# --------------------------------------------------------------------------------------------- the recording


def _events(body: str) -> List[dict]:
    out = []
    for chunk in body.split("\n\n"):
        chunk = re.sub(r"\{\{[a-z_:0-9]+\}\}", "0", chunk.strip())
        if chunk:
            out.append(json.loads(chunk))
    return out


def _result_of(ex: dict) -> Result:
    resp = ex["response"]
    body = resp.get("body") or ""
    if ex["request"]["path"].endswith("/command"):
        evs = _events(body)
        rc = next((int(e["error"].get("evalue") or 1) for e in evs if e.get("type") == "error"), 0)
        return Result(resp["status"], rc, output_of(evs, "stdout"), output_of(evs, "stderr"))
    return Result(resp["status"], -1, body, "")


def recorded() -> Dict[str, Result]:
    """probe name -> what the real sandbox answered (fixtures/22_sandbox_inside.json, in probe order)."""
    with open(FIXTURE, encoding="utf-8") as fh:
        exchanges = json.load(fh)["exchanges"]
    names = [n for n, _ in INSIDE_FILES] + ["cwd " + c for c in INSIDE_CWDS] + [n for n, _ in INSIDE_PROBES]
    assert len(names) == len(exchanges), "fixture 22 and the probe list disagree: re-record scenario 22"
    return {n: _result_of(ex) for n, ex in zip(names, exchanges, strict=True)}


REC = recorded()


# --------------------------------------------------------------------------------------------- the server


class Target:
    """One OpenSandbox server (live or mock): lifecycle at ``base_url``, each sandbox's execd at its endpoint."""

    def __init__(self, base_url: str, api_key: str, image: str, execd_token: Optional[str] = None):
        self.root = server_root(base_url)
        self.api_key = api_key
        self.image = image
        self.execd_token = execd_token
        self.server_port = str(urllib.parse.urlsplit(self.root).port or 80)
        self.created: List[str] = []

    def life(self, method: str, path: str, **kw) -> Reply:
        return request(method, self.root, path, headers={"OPEN-SANDBOX-API-KEY": self.api_key}, **kw)

    def create(self, **extra) -> str:
        body = {
            "image": {"uri": self.image},
            "entrypoint": ["tail", "-f", "/dev/null"],
            "timeout": 900,
            "resourceLimits": dict(RESOURCES),
            "metadata": {"purpose": "sandbox-inside"},
        }
        body.update(extra)
        r = self.life("POST", "/v1/sandboxes", json_body=body, timeout=120)
        assert r.status == 202, r
        sid = r.json()["id"]
        self.created.append(sid)
        self.wait_ready(sid)
        return sid

    def delete(self, sid: str) -> None:
        try:
            self.life("DELETE", f"/v1/sandboxes/{sid}")
        except OSError:
            pass
        if sid in self.created:
            self.created.remove(sid)

    def delete_all(self) -> None:
        for sid in list(self.created):
            self.delete(sid)

    def endpoint(self, sid: str, port: int = EXECD_PORT) -> Tuple[str, Dict[str, str]]:
        r = self.life("GET", f"/v1/sandboxes/{sid}/endpoints/{port}")
        assert r.status == 200, r
        data = r.json()
        headers = dict(data.get("headers") or {})
        if self.execd_token and port == EXECD_PORT:
            headers["X-EXECD-ACCESS-TOKEN"] = self.execd_token
        ep = data["endpoint"]
        return (ep if "://" in ep else "http://" + ep), headers

    def wait_ready(self, sid: str, timeout: float = 60.0) -> None:
        """GET /ping until 200, through refused and dropped connections (Docker's window before execd listens)."""
        url, headers = self.endpoint(sid)

        def answers() -> bool:
            try:
                return request("GET", url, "/ping", headers=headers, timeout=5).status == 200
            except OSError:
                return False

        assert wait_until(answers, timeout, 0.1), f"execd of {sid} never answered /ping"

    def command(self, sid: str, cmd: str, cwd: Optional[str] = None, timeout: float = 90.0) -> Result:
        url, headers = self.endpoint(sid)
        payload: dict = {"command": cmd}
        if cwd is not None:
            payload["cwd"] = cwd
        status, _h, events = stream_command(url, {**headers, "Accept": "text/event-stream"}, payload, timeout=timeout)
        if status != 200:
            return Result(status, -1, "", events[0].get("body", "") if events else "")
        rc = next((int(e["error"].get("evalue") or 1) for e in events if e.get("type") == "error"), 0)
        return Result(status, rc, output_of(events, "stdout"), output_of(events, "stderr"))

    def execd_get(self, sid: str, path: str) -> Result:
        url, headers = self.endpoint(sid)
        r = request("GET", url, path, headers=headers)
        return Result(r.status, -1, r.body.decode("utf-8", "replace"), "")

    def fetch(self, sid: str, port: int, path: str) -> Reply:
        url, headers = self.endpoint(sid, port)
        return request("GET", url, path, headers=headers)


class Inside(NamedTuple):
    """What a check may use besides the result: the target and the sandbox the probe ran in."""

    target: Target
    sid: str


class Probe(NamedTuple):
    name: str
    kind: str  # "files" (GET on execd), "cwd" (POST /command with cwd) or "command"
    arg: str  # the path, the cwd or the command (with @SERVER_PORT@)
    check: Callable[[Result, Inside], None]

    def run(self, ins: Inside) -> Result:
        if self.kind == "files":
            return ins.target.execd_get(ins.sid, self.arg)
        if self.kind == "cwd":
            return ins.target.command(ins.sid, "pwd", cwd=self.arg)
        return ins.target.command(ins.sid, inside_command(self.arg, ins.target.server_port))


# --------------------------------------------------------------------------------------------- the checks


def _lines(text: str) -> List[str]:
    return [line for line in text.splitlines() if line]


def _kv(text: str) -> Dict[str, str]:
    return dict(line.split("=", 1) for line in _lines(text) if "=" in line)


def _check_info(res: Result, ins: Inside) -> None:
    assert res.status == 200, res  # the mock of 5f292ba: 404 FILE_NOT_FOUND (its files API saw the host dir)
    info = json.loads(res.out)
    assert info["/etc/os-release"]["path"] == "/etc/os-release", res


def _check_download(res: Result, ins: Inside) -> None:
    assert res.status == 200, res
    assert res.out.startswith("root:x:0:0:root:/root:"), res
    cat = ins.target.command(ins.sid, "cat /etc/passwd")
    assert res.out == cat.out, "the files API and a command see different /etc/passwd files"


def _check_search(res: Result, ins: Inside) -> None:
    assert res.status == 200, res
    paths = {item["path"] for item in json.loads(res.out)}
    assert "/usr/bin/python3" in paths, res
    assert all(re.fullmatch(r"/usr/bin/python3[^/]*", p) for p in paths), paths


def _cwd_check(cwd: str) -> Callable[[Result, Inside], None]:
    def check(res: Result, ins: Inside) -> None:
        # the mock of 5f292ba: 400 "working directory does not exist" (it looked for the host's directory)
        assert (res.status, res.rc) == (200, 0), res
        assert _lines(res.out) == _lines(REC["cwd " + cwd].out) == [cwd], res

    return check


def _check_ls_root(res: Result, ins: Inside) -> None:
    assert res.rc == 0, res
    missing = set(_lines(REC["ls_root"].out)) - set(_lines(res.out))
    assert not missing, f"the root lacks {sorted(missing)} (a Debian image has them): {_lines(res.out)}"


def _check_opt(res: Result, ins: Inside) -> None:
    assert res.rc == 0, res
    names = {line.split()[-1] for line in _lines(res.out)[1:]}
    assert {"bootstrap.sh", "execd"} <= names, res


def _ps(text: str) -> List[Tuple[int, int, str]]:
    rows = []
    for line in _lines(text)[1:]:
        pid, ppid, args = line.split(None, 2)
        rows.append((int(pid), int(ppid), args))
    return rows


def _check_ps(res: Result, ins: Inside) -> None:
    assert res.rc == 0, res
    rows = _ps(res.out)
    want = {args: ppid for _pid, ppid, args in _ps(REC["ps"].out) if not args.startswith("ps ")}
    # recorded: 1 /bin/sh /opt/opensandbox/bootstrap.sh tail -f /dev/null; /opt/opensandbox/execd and the
    # entrypoint, both children of PID 1
    pid1 = [args for pid, _ppid, args in rows if pid == 1]
    assert pid1 == ["/bin/sh /opt/opensandbox/bootstrap.sh tail -f /dev/null"], rows
    got = {args: ppid for _pid, ppid, args in rows}
    for args, ppid in want.items():
        if ppid != 0:
            assert got.get(args) == ppid, f"no {args!r} with parent {ppid}: {rows}"


def _check_oom(res: Result, ins: Inside) -> None:
    assert _lines(res.out) == ["exit=137"], res  # recorded: killed by the 512Mi limit (the old mock: exit=0)


def _check_cgroup(res: Result, ins: Inside) -> None:
    got = _kv(res.out)
    mem = got.get("memory/memory.limit_in_bytes") or got.get("memory.max")
    assert mem == "536870912", got  # 512Mi
    assert (got.get("pids/pids.max") or got.get("pids.max")) == "4096", got  # the server's pids_limit default
    if "cpu.max" in got:  # v2: "quota period"
        assert got["cpu.max"] == "50000 100000", got
    else:
        assert (got.get("cpu/cpu.cfs_quota_us"), got.get("cpu/cpu.cfs_period_us")) == ("50000", "100000"), got
    if "memory/memory.memsw.limit_in_bytes" in got:  # Docker: swap limit = 2 x memory when unset
        assert got["memory/memory.memsw.limit_in_bytes"] == str(2 * 536870912), got


def _check_cpu(res: Result, ins: Inside) -> None:
    got = _kv(res.out)
    assert got.get("cfs_periods") == "yes", f"no CFS quota at work on a 2 s busy loop: {got}"
    assert float(got["share"]) <= 0.6, f"a 500m sandbox got {got['share']} of a core"  # recorded 0.5


def _check_etc(res: Result, ins: Inside) -> None:
    hosts, _resolv, hostname = (res.out.split("---\n") + ["", ""])[:3]
    name = hostname.strip()
    assert re.fullmatch(r"[0-9a-f]{12}", name), res
    rows = [line.split() for line in _lines(hosts)]
    assert ["127.0.0.1", "localhost"] in rows, hosts
    assert any(len(r) == 2 and r[1] == name and r[0] != "127.0.0.1" for r in rows), (
        f"/etc/hosts does not map the hostname {name} to the sandbox's address: {hosts}"
    )


def _ifaces(text: str) -> List[str]:
    return [line.split(":", 1)[0].strip() for line in _lines(text)[2:] if ":" in line]


def _check_net(res: Result, ins: Inside) -> None:
    dev, _route = (res.out.split("---\n") + [""])[:2]
    names = _ifaces(dev)
    assert "lo" in names, names
    others = [n for n in names if n != "lo"]
    # recorded: lo and eth0 (its own network namespace); a sandbox on the host's network sees the host's devices
    assert len(others) <= 1 and not any(n.startswith(("docker", "veth", "br-")) for n in others), names
    try:  # the machine running the test (the host, for the mock and for local-up) lists other devices
        with open("/proc/net/dev", encoding="ascii") as fh:
            host = _ifaces(fh.read())
    except OSError:
        host = []
    assert not host or names != host, f"the sandbox sees the host's network devices {host}"


def _check_connect(res: Result, ins: Inside) -> None:
    got = _kv(res.out)
    assert got.get("loopback_server") != "connected", (
        f"the host's 127.0.0.1:{ins.target.server_port} is reachable from inside: {got}"
    )
    assert got.get("gateway_server") != "connected", got
    assert got.get("loopback_execd") == "connected", f"execd does not listen inside the sandbox: {got}"


def _check_df(res: Result, ins: Inside) -> None:
    df, mount = (res.out.split("---\n") + [""])[:2]
    assert res.rc == 0, res
    assert _lines(df)[0].startswith("Filesystem"), res
    assert any(" on / type " in line for line in _lines(mount)), res


def _check_identity(res: Result, ins: Inside) -> None:
    env_text, rest = (res.out.split("---\n") + [""])[:2]
    env = _kv(env_text)
    assert _lines(rest) == ["/", "uid=0(root) gid=0(root) groups=0(root)"], res
    rec = _kv(REC["identity"].out.split("---\n")[0])
    for key in ("HOME", "PATH", "EXECD_ENVS"):
        assert env.get(key) == rec[key], (key, env)
    assert env.get("OPENSANDBOX_ID") == ins.sid, env
    assert re.fullmatch(r"[0-9a-f]{12}", env.get("HOSTNAME", "")), env


CHECKS: Dict[str, Callable[[Result, Inside], None]] = {
    "files_info_os_release": _check_info,
    "files_download_passwd": _check_download,
    "files_search_python3": _check_search,
    "ls_root": _check_ls_root,
    "opt_opensandbox": _check_opt,
    "ps": _check_ps,
    "oom_1g": _check_oom,
    "cgroup_limits": _check_cgroup,
    "cpu_share": _check_cpu,
    "etc_net_files": _check_etc,
    "net_dev_route": _check_net,
    "connect_host": _check_connect,
    "df_mount": _check_df,
    "identity": _check_identity,
}


def probes() -> List[Probe]:
    out = [Probe(name, "files", path, CHECKS[name]) for name, path in INSIDE_FILES]
    out += [Probe("cwd " + cwd, "cwd", cwd, _cwd_check(cwd)) for cwd in INSIDE_CWDS]
    out += [Probe(name, "command", cmd, CHECKS[name]) for name, cmd in INSIDE_PROBES]
    return out


PROBES = {p.name: p for p in probes()}
NAMES = list(PROBES)


PROC_STATS = 'for f in /proc/[0-9]*/stat; do read -r line < "$f" && echo "$line"; done'


def pid1_session(ins: Inside) -> Dict[int, Tuple[int, int, int]]:
    """PID 1 leads its own session and process group, and so do its children (execd, the entrypoint) belong to
    both: /proc/N/stat's pgrp and session are 1, as runc makes a container's init (measured live by
    tiers/t4/sandbox/test_live_inside.py, the mock's PID 1 by tiers/t1/sandbox/test_sandbox_inside.py)."""
    res = ins.target.command(ins.sid, PROC_STATS)
    assert res.rc == 0, res
    rows = {}
    for line in _lines(res.out):
        pid, rest = line.split(" (", 1)
        _state, ppid, pgrp, sid = rest.rsplit(") ", 1)[1].split()[:4]
        rows[int(pid)] = (int(ppid), int(pgrp), int(sid))
    assert rows.get(1) == (0, 1, 1), rows
    kids = [pid for pid, (ppid, _, _) in rows.items() if ppid == 1]
    assert len(kids) >= 2 and all(rows[k][1:] == (1, 1) for k in kids), rows  # execd and the entrypoint
    command = {pid: row for pid, row in rows.items() if pid != 1 and row[0] != 1}  # the probe's own shell
    assert len(command) == 1 and all(row[1] == pid for pid, row in command.items()), rows  # a group of its own
    return command  # {pid: (ppid, pgrp, session)}: the session differs (QUIRKS, "Joining, as root")


def same_port_two_sandboxes(target: Target, port: int = SAME_PORT) -> None:
    """Scenario 23: each of two sandboxes serves its own id on ``port`` (9000 recorded; on 127.0.0.1 inside);
    each endpoint answers with its own. A mock without its own network binds it on the host's loopback: pass a
    free ephemeral port there."""
    sids = [target.create(), target.create()]
    try:
        for sid in sids:
            res = target.command(sid, serve_command(sid, port))
            assert _lines(res.out)[-1:] == ["serving"], res
        for sid in sids:
            r = target.fetch(sid, port, "/who.txt")
            assert (r.status, r.body.decode().strip()) == (200, f"i am {sid}"), r
    finally:
        for sid in sids:
            target.delete(sid)


# eth0 as a command inside reads it (the address from SIOCGIFADDR, the rest from /sys, /proc and /etc/hosts)
ETH0_FACTS = r"""python3 - <<'PY'
import fcntl, os, socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
print("ip=" + socket.inet_ntoa(fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", b"eth0"))[20:24]))
for f in ("address", "tx_queue_len", "operstate", "mtu"):
    print(f + "=" + open("/sys/class/net/eth0/" + f).read().strip())
print("tun_flags=%s" % os.path.exists("/sys/class/net/eth0/tun_flags"))
print("inet6=%d" % len(open("/proc/net/if_inet6").read().split()))
gw = [r.split() for r in open("/proc/net/route") if r.split()[1] == "00000000"]
print("gateway=" + (socket.inet_ntoa(struct.pack("<I", int(gw[0][2], 16))) if gw else "-"))
print("hosts=" + open("/etc/hosts").read().splitlines()[-1].split()[0])
PY"""
PEER_PORT = 9001
PEER_FETCH = (
    'python3 -c "import urllib.request; '
    "print(urllib.request.urlopen('http://@IP@:@PORT@/who.txt', timeout=5).read().decode().strip())\""
)


def eth0_facts(target: Target, sid: str) -> Dict[str, str]:
    """A sandbox's eth0 on Docker's default bridge (live, local-up with Docker 20.10): a veth (no tun_flags), up,
    txqueuelen 0, MTU 1500, its own 172.17.0.N whose bytes end the MAC Docker gives it (02:42:ac:11:..), IPv6
    off, the default route via 172.17.0.1, and /etc/hosts mapping the hostname to that address."""
    res = target.command(sid, ETH0_FACTS)
    assert res.rc == 0, res
    got = _kv(res.out)
    ip = got.get("ip", "")
    assert ip.startswith("172.17.") and ip != "172.17.0.1", got
    mac = "02:42:" + ":".join("%02x" % int(b) for b in ip.split("."))
    want = {"address": mac, "tx_queue_len": "0", "operstate": "up", "mtu": "1500", "tun_flags": "False"}
    want.update({"inet6": "0", "gateway": "172.17.0.1", "hosts": ip})
    assert {k: got.get(k) for k in want} == want, got
    return got


def bridge_peers(target: Target, port: int = PEER_PORT) -> None:
    """Two sandboxes on the bridge, as two containers on Docker's: each has eth0 as above, the addresses differ,
    and one reaches a server the other binds on its eth0 address."""
    sids = [target.create(), target.create()]
    try:
        a, b = (eth0_facts(target, sid)["ip"] for sid in sids)
        assert a != b, (a, b)
        serve = serve_command(sids[1], port).replace("127.0.0.1", b)
        assert _lines(target.command(sids[1], serve).out)[-1:] == ["serving"]
        res = target.command(sids[0], PEER_FETCH.replace("@IP@", b).replace("@PORT@", str(port)))
        assert (res.rc, res.out.strip()) == (0, f"i am {sids[1]}"), res
    finally:
        for sid in sids:
            target.delete(sid)


def directory_download(ins: Inside, path: str = "/tmp") -> Dict[str, str]:
    """GET /files/download of a directory, read raw. Live (Docker's overlay) gives one of three, by the directory:
    * 200 with the download headers and Content-Length 2**63 - 1 (Go's Seek to the end of a directory), then the
      connection closes with no body: a directory the sandbox wrote in or made (the binary on a plain directory);
    * the same with 500: a directory as the image has it (``/tmp`` of a fresh sandbox);
    * 500 ``seeker can't seek`` (net/http serveError, text/plain, nosniff), the connection kept: ``/``, ``/etc``.
    The official SDK raises "peer closed connection without sending complete message body (received 0 bytes,
    expected 9223372036854775807)" for the first two. Returns the head's status and lower-cased headers."""
    import socket

    url, headers = ins.target.endpoint(ins.sid)
    u = urllib.parse.urlsplit(url)
    head = "GET %s/files/download?path=%s HTTP/1.1\r\nHost: %s\r\n" % (u.path.rstrip("/"), path, u.netloc)
    head += "".join("%s: %s\r\n" % kv for kv in headers.items()) + "\r\n"
    with socket.create_connection((u.hostname, u.port or 80), timeout=15) as s:
        s.sendall(head.encode())
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = s.recv(65536)
            assert chunk, f"no answer to a download of {path}: {data!r}"
            data += chunk
        raw_head, _, body = data.partition(b"\r\n\r\n")
        lines = raw_head.decode("latin-1").split("\r\n")
        got = {k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
        got[":status"] = lines[0].split(" ", 2)[1]
        if got.get("content-length") == "9223372036854775807":
            body += b"".join(iter(lambda: s.recv(65536), b""))  # to EOF: the server ends the cut-off answer
            want = {
                "content-type": "application/octet-stream",
                "accept-ranges": "bytes",
                "content-disposition": 'attachment; filename="%s"' % (path.rstrip("/").rsplit("/", 1)[-1] or "/"),
            }
            assert got[":status"] in ("200", "500") and {k: got.get(k) for k in want} == want, got
            assert "last-modified" in got and body == b"", (got, body[:200])
        else:
            while len(body) < int(got.get("content-length", "0")):
                body += s.recv(65536)
            assert got[":status"] == "500" and got.get("content-type") == "text/plain; charset=utf-8", got
            assert body == b"seeker can't seek\n", body[:200]
    return got


SIGIGN = "grep ^SigIgn /proc/self/status"
SIGINT_DISPOSITIONS = {  # sigint_dispositions' answer, live (2026-12-07) and on the mock
    "session": "0000000000000002",
    "command": "0000000000000000",
    "session during a command": "0000000000000000",
    "session after it": "0000000000000002",
}


def sigint_dispositions(ins: Inside) -> Dict[str, str]:
    """The SigIgn line of a process started by a session run while no command runs, by ``POST /command``, by a
    session run while a foreground command runs, and by one after it ended. execd comes in with SIGINT ignored
    (bootstrap.sh's ``execd &``), catches every signal while a command run lasts and puts them back when it
    returns (QUIRKS "SIGINT of a PTY shell or a session"): live 0000000000000002, 0, 0, 2."""
    url, headers = ins.target.endpoint(ins.sid)
    session = json.loads(request("POST", url, "/session", headers=headers, json_body={}).body)["session_id"]

    def run() -> str:
        status, _h, events = stream_command(url, headers, {"command": SIGIGN}, path="/session/%s/run" % session)
        assert status == 200, events
        return output_of(events, "stdout").split()[-1]

    out = {"session": run(), "command": ins.target.command(ins.sid, SIGIGN).out.split()[-1]}
    # the session's run once the foreground command is seen running: its marker file, looked for through the files
    # API (another command would end its own run and put execd's signals back meanwhile); a fixed 0.7 s wait
    # missed a start that came late under load (live: 2 instead of 0)
    marker = "/tmp/.sigint-dispositions-fg"
    fg = threading.Thread(target=ins.target.command, args=(ins.sid, "touch %s; sleep 3" % marker))
    fg.start()
    info = "/files/info?" + urllib.parse.urlencode({"path": marker})
    assert wait_until(lambda: request("GET", url, info, headers=headers).status == 200, 10), "the command never ran"
    out["session during a command"] = run()
    fg.join(30)
    request("DELETE", url, "/files?" + urllib.parse.urlencode({"path": marker}), headers=headers)
    out["session after it"] = run()
    return out


STDIN_AND_SESSION_ENV = {  # stdin_and_session_env's answer, live (2026-12-07) and on the mock
    "command": ["lr-x------", "/dev/null", "refused"],
    "session": ["lr-x------", "/dev/null", "refused"],
    "script": ["export", "PWD='/'"],
}
STDIN_PROBE = "ls -l /proc/self/fd/0 | cut -c1-10; readlink /proc/self/fd/0; (echo x >&0) 2>/dev/null || echo refused"


def stdin_and_session_env(ins: Inside) -> Dict[str, List[str]]:
    """A command's and a session's stdin (/dev/null opened read-only: Go's exec.Cmd and execd's background
    ``os.Open``, so writing to it fails) and the PWD a session's script exports (bootstrap.sh's sh exports it to
    execd, whose environment a session starts from). Live: ``lr-x------`` (its open mode), ``/dev/null``, ``refused`` for the
    foreground, background and session runs alike, and ``export PWD='/'`` in the script."""
    url, headers = ins.target.endpoint(ins.sid)
    session = json.loads(request("POST", url, "/session", headers=headers, json_body={}).body)["session_id"]
    _s, _h, events = stream_command(url, headers, {"command": STDIN_PROBE}, path="/session/%s/run" % session)
    _s, _h, script = stream_command(
        url, headers, {"command": "grep '^export PWD=' $0"}, path="/session/%s/run" % session
    )
    return {
        "command": ins.target.command(ins.sid, STDIN_PROBE).out.split(),
        "session": output_of(events, "stdout").split(),
        "script": output_of(script, "stdout").split(),
    }


DOCKERENV = ["-rwxr-xr-x 0 0 0 /.dockerenv", "fresh"]  # dockerenv's answer, live (2026-12-08) and on the mock


def dockerenv(ins: Inside) -> List[str]:
    """Docker's ``/.dockerenv`` (moby's init layer: empty, 0755, root's), what code inside reads to know it runs
    in a Docker container, made with the container: its time is within a minute of now."""
    out = ins.target.command(
        ins.sid,
        "stat -c '%A %s %u %g %n' /.dockerenv; [ $(( $(date +%s) - $(stat -c %Y /.dockerenv) )) -lt 60 ] && echo fresh",
    ).out
    return _lines(out)


EXECD_FILES = {  # execd_files' answer, live (2026-12-07) and on the mock
    "names": ["BG.output", "FG.stderr", "FG.stdout"],
    "modes": ["BG.output 755 root", "FG.stderr 755 root", "FG.stdout 755 root"],
    "contents": ["hello", "err", "bg"],
    "fresh": "made as the run starts",
}


def execd_files(ins: Inside) -> Dict[str, object]:
    """execd's files of a run in the sandbox's /tmp, never removed (runtime/command.go at 3bb6fad): a foreground
    command's ``<id>.stdout`` and ``<id>.stderr``, a background command's ``<id>.output``, mode 0755, holding the
    output; a command sees its own two, empty, when it starts. ``fresh``: a run's empty file was modified (made)
    within 0.3 s before the run read the clock, though the run before it ended 0.6 s earlier (the mock makes the
    next run's files ahead, once an answer is out: its link of one sets the times)."""
    url, headers = ins.target.endpoint(ins.sid)

    def run(cmd: str, background: bool = False) -> str:
        payload = {"command": cmd, "background": background}
        _st, _h, events = stream_command(url, headers, payload)
        return next(e["text"] for e in events if e.get("type") == "init")

    run("true")
    time.sleep(0.6)
    clock = run("date +%s.%N")
    fg = run("echo hello; echo err >&2")
    bg = run("echo bg", background=True)
    time.sleep(1.0)
    listing = ins.target.command(ins.sid, "ls /tmp; stat -c '%a %U %s %n' /tmp/*." + "{stdout,stderr,output}").out
    names = sorted(n.replace(fg, "FG").replace(bg, "BG") for n in listing.split() if "." in n and "/" not in n)
    modes = sorted(  # stat's "MODE OWNER SIZE PATH" lines of this test's two runs: "<name> MODE OWNER"
        line.replace(fg, "FG").replace(bg, "BG").rsplit("/", 1)[-1] + " " + " ".join(line.split()[:2])
        for line in listing.splitlines()
        if "/tmp/" in line and (fg in line or bg in line)
    )
    contents = ins.target.command(ins.sid, "cat /tmp/%s.stdout /tmp/%s.stderr /tmp/%s.output" % (fg, fg, bg)).out
    ran, made = ins.target.command(
        ins.sid, "cat /tmp/%s.stdout; stat -c %%.3Y /tmp/%s.stderr" % (clock, clock)
    ).out.split()
    age = float(ran) - float(made)
    return {
        "names": [n for n in names if n.startswith(("FG", "BG"))],
        "modes": modes,
        "contents": contents.split(),
        "fresh": "made as the run starts" if 0 <= age < 0.3 else "made %.3f s before the run" % age,
    }


EXECD_FDS = {  # execd_fds' answer, live (2026-12-07) and on the mock
    "seekable": "True True",
    "fd2": "/tmp/ID.stderr",
    "truncated": "b c",
    "late": "early",
    "late_quick": True,
    "removed": "x",
    "partial_rewritten": "XYZ",
    "partial_cut": "x",
    "bg": ["/tmp/ID.output", "True"],
    "bg_removed": (
        400,
        "error open combined output file for command ID: open /tmp/ID.output: no such file or directory",
    ),
}


def execd_fds(ins: Inside) -> Dict[str, object]:
    """A command's fd 1 and fd 2 are execd's files of the run themselves (read-write, seekable), which execd reads
    back by their paths while it runs and once at its exit (tailStdPipe, runtime/command_common.go at 3bb6fad):
    ``> /dev/stderr`` truncates the file (what came before is lost), a file removed loses what follows, a child
    left running does not hold the run open, an unfinished line is read again at each tick (what the command then
    rewrites or cuts of it is what comes); a background command's logs are its ``<id>.output`` read by its path
    (400 once removed)."""
    url, headers = ins.target.endpoint(ins.sid)

    def run(cmd: str) -> Tuple[str, str, str, float]:
        t0 = time.monotonic()
        _st, _h, events = stream_command(url, headers, {"command": cmd})
        took = time.monotonic() - t0
        cid = next(e["text"] for e in events if e.get("type") == "init")
        out = " ".join(output_of(events, "stdout").split()).replace(cid, "ID")
        return cid, out, " ".join(output_of(events, "stderr").split()).replace(cid, "ID"), took

    seekable = run("python3 -c 'import sys; print(sys.stdout.seekable(), sys.stderr.seekable())'")[1]
    fd2 = run("readlink /proc/self/fd/2 >&2")[2]
    truncated = run("echo a >&2; echo b > /dev/stderr; echo c >&2")[2]
    _cid, late, _e, took = run("(sleep 1; echo late) & echo early")
    removed = run("echo x; sleep 0.3; rm -f \"$(readlink /proc/self/fd/2 | sed 's/stderr$/stdout/')\"; echo y")[1]
    # "abc" unfinished at three ticks, then rewritten in place / the file cut and "x" written (readFromPos keeps its
    # position at an unfinished line's start)
    unfinished = "python3 -c 'import os, time; os.write(1, b\"abc\"); time.sleep(0.3); %s'"
    rewritten = run(unfinished % 'os.pwrite(1, b"XYZ\\n", 0)')[1]
    cut = run(unfinished % 'os.ftruncate(1, 0); os.lseek(1, 0, 0); os.write(1, b"x\\n")')[1]
    bg_cmd = "readlink /proc/self/fd/2; python3 -c 'import sys; print(sys.stdout.seekable())'; sleep 0.5; "
    bg_cmd += 'rm -f "$(readlink /proc/self/fd/2)"; sleep 30'
    _st, _h, events = stream_command(url, headers, {"command": bg_cmd, "background": True})
    bg = next(e["text"] for e in events if e.get("type") == "init")

    def logs() -> Reply:
        return request("GET", url, "/command/%s/logs?cursor=0" % bg, headers=headers)

    wait_until(lambda: logs().body.endswith(b"True\n"), 10)
    bg_out = logs().body.decode().replace(bg, "ID").split()
    wait_until(lambda: logs().status == 400, 10)
    gone = logs()
    request("DELETE", url, "/command?id=" + bg, headers=headers)
    return {
        "seekable": seekable,
        "fd2": fd2,
        "truncated": truncated,
        "late": late,
        "late_quick": took < 0.8,
        "removed": removed,
        "partial_rewritten": rewritten,
        "partial_cut": cut,
        "bg": bg_out,
        "bg_removed": (gone.status, json.loads(gone.body or b"{}").get("message", "").replace(bg, "ID")),
    }


EXECD_FAILED_STARTS = {  # execd_failed_starts' answer, live (2026-12-07) and on the mock
    "nul": (2, "fork/exec /usr/bin/bash: invalid argument"),
    "denied": (2, "fork/exec /usr/bin/bash: permission denied"),
    "nul_background": (1, "error running commands failed to start commands: fork/exec /usr/bin/bash: invalid argument"),
    "nul_background_status": (False, 255, "fork/exec /usr/bin/bash: invalid argument"),
}


def execd_failed_starts(ins: Inside) -> Dict[str, object]:
    """A run whose start fails after execd made its files (a NUL in the command, a working directory its user
    cannot enter) leaves them in /tmp (runCommand / runBackgroundCommand make them first, runtime/command.go at
    3bb6fad); a background one answers ``init``, ``ping`` and RunCommand's error JSON in the stream, and keeps a
    status with exit code 255. Each value: (files the run left, its error event's value or the JSON's message; the
    heartbeat's first ping races the error event live: QUIRKS "NUL byte in a command")."""
    url, headers = ins.target.endpoint(ins.sid)

    def count() -> int:  # (its own run's two files included)
        return int(ins.target.command(ins.sid, "ls /tmp | grep -c -E '[.](stdout|stderr|output)$'").out.strip())

    def run(payload: Dict[str, object]) -> Tuple[int, List[dict], bytes]:
        before = count()
        r = request("POST", url, "/command", headers=headers, json_body=payload)
        frames = [f.strip() for f in r.body.split(b"\n\n") if f.strip()]
        events = [json.loads(f) for f in frames if f.startswith(b'{"type"')]
        return count() - before - 2, events, frames[-1] if frames else b""  # (less the second count's own two)

    made, events, _last = run({"command": "tr\u0000ue"})
    nul = (made, next((e["error"]["evalue"] for e in events if e.get("type") == "error"), None))
    made, events, _last = run({"command": "true", "cwd": "/root", "uid": 65534})
    denied = (made, next((e["error"]["evalue"] for e in events if e.get("type") == "error"), None))
    made, events, last = run({"command": "tr\u0000ue", "background": True})
    cid = next(e["text"] for e in events if e.get("type") == "init")
    status = json.loads(request("GET", url, "/command/status/" + cid, headers=headers).body)
    return {
        "nul": nul,
        "denied": denied,
        "nul_background": (made, json.loads(last).get("message")),
        "nul_background_status": (status.get("running"), status.get("exit_code"), status.get("error")),
    }
