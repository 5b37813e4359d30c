"""t1: MockOpenSandbox.stop() leaves nothing behind: no process it started (including backgrounded,
setsid'd and SIGSTOPped ones), no temp dir, no listening port, no listener thread."""

from __future__ import annotations

import http.client
import importlib.util
import json
import os
import sys
import threading
import time

import pytest

from mock_opensandbox.runtime import nethub, zygote
from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit import procs, rest
from tiers.toolkit.procs import alive as _alive
from tiers.toolkit.procs import descendants as _children_tree
from tiers.toolkit.procs import pids as _proc_entries
from tiers.toolkit.procs import refers_to as _refers_to
from tiers.toolkit.waits import port_closed
from tiers.toolkit.waits import wait_until as wait

BODY = {"image": {"uri": "python:3"}, "entrypoint": ["sleep", "300"], "resourceLimits": {}, "timeout": 600}


class C:
    def __init__(self, osb: MockOpenSandbox):
        self.hostport = osb.base_url.split("://")[1]
        self.key = osb.api_key

    def call(self, method, path, body=None, hostport=None):
        r = rest.call(hostport or self.hostport, method, path, body, {"OPEN-SANDBOX-API-KEY": self.key})
        return r.status, r.body


def _exercise(osb: MockOpenSandbox) -> tuple[set[int], set[int]]:
    """Create sandboxes that leave all kinds of processes and listeners; return (pids, ports)."""
    c = C(osb)
    ports = {osb.port}
    ids = []
    for _ in range(3):
        status, body = c.call("POST", "/v1/sandboxes", BODY)
        assert status == 202, body
        ids.append(json.loads(body)["id"])
    for sid in ids:
        ep = json.loads(c.call("GET", "/v1/sandboxes/%s/endpoints/44772" % sid)[1])["endpoint"]
        hostport, _, prefix = ep.partition("/")
        ports.add(int(hostport.rsplit(":", 1)[1]))
        ep8080 = json.loads(c.call("GET", "/v1/sandboxes/%s/endpoints/8080" % sid)[1])["endpoint"]
        ports.add(int(ep8080.rsplit(":", 1)[1]))
        for cmd in (
            "echo fg",
            "sleep 300 & echo bg",
            "setsid sleep 301 > /dev/null 2>&1 < /dev/null & echo daemon",
            "nohup sh -c 'sleep 302' >/dev/null 2>&1 &",
        ):
            status, _ = c.call("POST", "/%s/command" % prefix, {"command": cmd}, hostport=hostport)
            assert status == 200
        status, _ = c.call(
            "POST", "/%s/command" % prefix, {"command": "sleep 303", "background": True}, hostport=hostport
        )
        assert status == 200
    # one frozen sandbox, and one SSE stream still open through the server proxy when the mock stops
    assert c.call("POST", "/v1/sandboxes/%s/pause" % ids[0])[0] == 202
    stream = http.client.HTTPConnection(c.hostport, timeout=30)
    stream.request(
        "POST",
        "/v1/sandboxes/%s/proxy/44772/command" % ids[1],
        body=json.dumps({"command": "sleep 304"}),
        headers={"Content-Type": "application/json"},
    )
    r = stream.getresponse()
    assert r.status == 200
    r.read1(100)
    time.sleep(0.3)  # let the backgrounded shells detach
    pids = {p for p in _proc_entries() if _refers_to(p, osb.root)} | _children_tree(os.getpid())
    return pids, ports


def _assert_clean(osb_root: str, pids: set[int], ports: set[int], before_threads: set[str]) -> None:
    assert wait(lambda: not [p for p in pids if _alive(p)]), [(p, procs.stat(p)) for p in pids if _alive(p)]
    assert not os.path.exists(osb_root)
    leaked = [p for p in _proc_entries() if _alive(p) and _refers_to(p, osb_root)]
    assert leaked == []
    assert all(port_closed(p) for p in ports), [p for p in ports if not port_closed(p)]
    listener_prefixes = ("mock-osb-", "execd-")
    assert wait(
        lambda: (
            not [
                t.name
                for t in threading.enumerate()
                if t.name.startswith(listener_prefixes) and t.name not in before_threads
            ]
        )
    )


def test_stop_leaves_no_process_dir_port_or_thread():
    before_threads = {t.name for t in threading.enumerate()}
    before_children = _children_tree(os.getpid())
    osb = MockOpenSandbox(execd_close_delay=0).start()
    try:
        pids, ports = _exercise(osb)
        pids -= before_children
        assert len(pids) >= 6  # entrypoints + the commands above
        root = osb.root
    finally:
        osb.stop()
    _assert_clean(root, pids, ports, before_threads)
    osb.stop()  # idempotent


def test_context_manager_and_delete_clean_up_per_sandbox():
    before_children = _children_tree(os.getpid())
    with MockOpenSandbox(execd_close_delay=0) as osb:
        c = C(osb)
        sid = json.loads(c.call("POST", "/v1/sandboxes", BODY)[1])["id"]
        sb = osb.sandboxes[sid]
        ep = json.loads(c.call("GET", "/v1/sandboxes/%s/endpoints/44772" % sid)[1])["endpoint"]
        hostport, _, prefix = ep.partition("/")
        c.call(
            "POST",
            "/%s/command" % prefix,
            {"command": "setsid sleep 305 >/dev/null 2>&1 < /dev/null &"},
            hostport=hostport,
        )
        time.sleep(0.2)
        # the mock's janitor (runtime/janitor.py), the view's zygote (runtime/zygote.py) and the sandboxes' bridge
        # (runtime/nethub.py: its slirp4netns) live as long as the mock, not the sandbox
        pids = (
            ({p for p in _proc_entries() if _refers_to(p, sb.runtime.root)} | _children_tree(os.getpid()))
            - before_children
            - {osb.janitor.pid, zygote.pid(), nethub.stack_pid()}
        )
        assert pids
        assert c.call("DELETE", "/v1/sandboxes/" + sid)[0] == 204
        assert wait(lambda: not [p for p in pids if _alive(p)])
        assert not os.path.exists(sb.runtime.root)
        assert port_closed(int(hostport.rsplit(":", 1)[1]))
        root = osb.root
    assert not os.path.exists(root)


@pytest.mark.skipif(
    importlib.util.find_spec("mock_opensandbox.execd.__main__") is None,
    reason="the stand-alone execd (python -m mock_opensandbox.execd) is not available",
)
def test_execd_process_mode_leaves_nothing(tmp_path):
    wrapper = tmp_path / "execd"
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    wrapper.write_text('#!/bin/sh\nPYTHONPATH=%s exec %s -m mock_opensandbox.execd "$@"\n' % (repo, sys.executable))
    wrapper.chmod(0o755)
    before_threads = {t.name for t in threading.enumerate()}
    before_children = _children_tree(os.getpid())
    osb = MockOpenSandbox(execd_bin=str(wrapper)).start()  # not isolated by default in process mode
    try:
        c = C(osb)
        sid = json.loads(c.call("POST", "/v1/sandboxes", BODY)[1])["id"]
        ep = json.loads(c.call("GET", "/v1/sandboxes/%s/endpoints/44772" % sid)[1])["endpoint"]
        hostport, _, prefix = ep.partition("/")
        # no "//ping" when the endpoint has no path prefix: Gin does not clean paths (tiers/diff unknown.paths)
        assert c.call("GET", "/" + "/".join(x for x in (prefix, "ping") if x), hostport=hostport)[0] == 200
        assert osb.sandboxes[sid].runtime.isolated is False
        assert c.call("POST", "/v1/sandboxes/%s/pause" % sid)[0] == 202
        pids = _children_tree(os.getpid()) - before_children
        ports = {osb.port, int(hostport.rsplit(":", 1)[1])}
        root = osb.root
    finally:
        osb.stop()
    _assert_clean(root, pids, ports, before_threads)
