"""Probes of one sandbox's file system and process list through the mock's HTTP APIs (QUIRKS.md, Files and directories:
"Files and view"): what the files API, `cwd`, sessions and commands see is the sandbox's own view - the image's /etc,
the read-only system directories, an image-like root, /opt/opensandbox - and `ps` shows bootstrap.sh, execd and the
entrypoint like the real sandbox (values in fixtures/22_sandbox_inside.json).

Run in the test process (root) by tiers/t1/sandbox/test_sandbox_view.py, and as a script by an unprivileged
user (`python3 view_probes.py` prints one JSON object): the same probes, the non-root paths (user
namespace, the helper, the agent)."""

from __future__ import annotations

import http.client
import json
import os
import sys
import urllib.parse
from typing import Any

if __name__ == "__main__":  # run as a script: the repository joins sys.path
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))))

# python:3.12-slim `ls /` (fixtures/22_sandbox_inside.json)
IMAGE_LS = "bin boot dev etc home lib lib64 media mnt opt proc root run sbin srv sys tmp usr var".split()
PS_LIVE = {1: (0, "/bin/sh /opt/opensandbox/bootstrap.sh tail -f /dev/null")}


class Execd:
    """HTTP calls to one sandbox's execd (through its endpoint)."""

    def __init__(self, osb: Any, sid: str):
        self.osb = osb
        c = http.client.HTTPConnection(osb.base_url.split("://")[1], timeout=30)
        c.request("GET", f"/v1/sandboxes/{sid}/endpoints/44772", headers={"OPEN-SANDBOX-API-KEY": osb.api_key or ""})
        ep = json.loads(c.getresponse().read())
        c.close()
        self.hostport, _, prefix = ep["endpoint"].partition("/")
        self.prefix = "/" + prefix if prefix else ""
        self.headers = dict(ep.get("headers") or {})

    def call(
        self,
        method: str,
        path: str,
        query: list | None = None,
        body: bytes | None = None,
        ctype: str = "application/json",
    ) -> tuple[int, bytes]:
        url = self.prefix + path + ("?" + urllib.parse.urlencode(query) if query else "")
        c = http.client.HTTPConnection(self.hostport, timeout=60)
        try:
            c.request(method, url, body=body, headers=dict(self.headers, **{"Content-Type": ctype}))
            r = c.getresponse()
            return r.status, r.read()
        finally:
            c.close()

    def json(self, method: str, path: str, query: list | None = None, body: Any = None) -> tuple[int, Any]:
        st, raw = self.call(method, path, query, json.dumps(body).encode() if body is not None else None)
        try:
            return st, json.loads(raw)
        except ValueError:
            return st, raw.decode("utf-8", "replace")

    def run(self, command: str, cwd: str | None = None) -> tuple[str, str]:
        """(stdout, error evalue or "") of POST /command."""
        from mock_opensandbox.wire import sse

        body: dict[str, Any] = {"command": command}
        if cwd is not None:
            body["cwd"] = cwd
        st, raw = self.call("POST", "/command", body=json.dumps(body).encode())
        if st != 200:
            return "", "HTTP %d %s" % (st, raw[:200].decode("utf-8", "replace"))
        out, err = [], ""
        for ev in sse.parse_stream([raw]):
            if ev.get("type") == "stdout":
                out.append(ev["text"])
            elif ev.get("type") == "error":
                err = ev["error"].get("evalue") or "?"
        return "\n".join(out), err

    def upload(self, path: str, data: bytes) -> tuple[int, Any]:
        from mock_opensandbox.wire.formdata import encode

        body, ctype = encode(
            [
                ("metadata", "metadata", "application/json", json.dumps({"path": path}).encode()),
                ("file", "file", "application/octet-stream", data),
            ]
        )
        st, raw = self.call("POST", "/files/upload", body=body, ctype=ctype)
        try:
            return st, json.loads(raw) if raw else None
        except ValueError:
            return st, raw.decode("utf-8", "replace")


def probe(osb: Any, sid: str) -> dict[str, Any]:
    """Every observation, as JSON-able data (the test asserts on it)."""
    ex = Execd(osb, sid)
    out: dict[str, Any] = {}
    st, info = ex.json("GET", "/files/info", [("path", "/etc/os-release"), ("path", "/etc/passwd")])
    out["info"] = [st, info]
    st, raw = ex.call("GET", "/files/download", [("path", "/etc/passwd")])
    out["download_passwd"] = [st, raw.decode("utf-8", "replace")]
    st, found = ex.json("GET", "/files/search", [("path", "/usr/bin"), ("pattern", "python3*")])
    out["search_python"] = [st, [f["path"] for f in found] if isinstance(found, list) else found]
    out["cwd"] = {wd: ex.run("pwd", cwd=wd) for wd in ("/usr/lib", "/var/log", "/opt")}
    out["ls_root"] = ex.run("ls /")
    out["ls_opt"] = ex.run("ls /opt/opensandbox")
    out["ps"] = ex.run("ps -eo pid=,ppid=,args=")
    # symlinks inside pointing at absolute host paths: the sandbox's own files, never the host's
    ex.run("ln -s /etc/shadow /tmp/shadow-link; ln -s /root /tmp/root-link; echo sandbox-root > /root/mine")
    st, raw = ex.call("GET", "/files/download", [("path", "/tmp/shadow-link")])
    out["shadow_via_link"] = [st, raw.decode("utf-8", "replace")]
    out["shadow_inside"] = ex.run("cat /etc/shadow")
    st, raw = ex.call("GET", "/files/download", [("path", "/tmp/root-link/mine")])
    out["root_mine_via_link"] = [st, raw.decode("utf-8", "replace")]
    # writes: a read-only system directory fails like the real execd; /etc is the sandbox's own
    out["upload_usr"] = list(ex.upload("/usr/osb-view-probe", b"x"))
    out["upload_etc"] = list(ex.upload("/etc/osb-view-probe.conf", b"mine"))
    out["etc_inside"] = ex.run("cat /etc/osb-view-probe.conf")
    # a bash session run in /var (the official SDK's sessions run the same route)
    st, sess = ex.json("POST", "/session", body={})
    out["session_create"] = [st, sess]
    if st == 200 and isinstance(sess, dict):
        sid2 = sess.get("session_id") or sess.get("sessionId") or ""
        st, raw = ex.call("POST", f"/session/{sid2}/run", body=json.dumps({"command": "pwd", "cwd": "/var"}).encode())
        out["session_run"] = [st, raw.decode("utf-8", "replace")]
    rt = osb.sandboxes[sid].runtime
    for key, req in (("agent_ping", {"op": "ping"}), ("agent_refused", {"op": "connect", "port": 1})):
        try:
            out[key] = rt.agent_call(req)[0]
        except Exception as exc:  # an observation like the others (a mock without the agent)
            out[key] = repr(exc)
    out["uid"] = os.geteuid()
    return out


def host_shadow() -> str | None:
    try:
        with open("/etc/shadow") as fh:
            return fh.read()
    except OSError:
        return None


def main() -> None:
    from mock_opensandbox.server import MockOpenSandbox

    osb = MockOpenSandbox(execd_close_delay=0).start()
    try:
        _st, sid = create(osb)
        print(json.dumps(probe(osb, sid)))
    finally:
        osb.stop()


def create(osb: Any) -> tuple[int, str]:
    c = http.client.HTTPConnection(osb.base_url.split("://")[1], timeout=60)
    c.request(
        "POST",
        "/v1/sandboxes",
        body=json.dumps(
            {
                "image": {"uri": "python:3.12-slim"},
                "entrypoint": ["tail", "-f", "/dev/null"],
                "timeout": 600,
                "resourceLimits": {"cpu": "500m", "memory": "512Mi"},
            }
        ),
        headers={"OPEN-SANDBOX-API-KEY": osb.api_key or "", "Content-Type": "application/json"},
    )
    r = c.getresponse()
    body = json.loads(r.read())
    c.close()
    assert r.status == 202, body
    return r.status, body["id"]


if __name__ == "__main__":
    main()
