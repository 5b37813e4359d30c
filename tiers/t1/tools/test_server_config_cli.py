"""``python -m mock_opensandbox --config <local-up's server.toml>``: the banner names the keys the mock does not
honour, the API key is the file's, and a sandbox's create -> Running -> ``POST /command`` round trip works."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys

from tiers.t0.tools.test_server_config import REPO, render_local_up
from tiers.toolkit.waits import wait_until

CREATE = {
    "image": {"uri": "local/python:3-slim"},
    "entrypoint": ["tail", "-f", "/dev/null"],
    "timeout": 600,
    "resourceLimits": {"cpu": "500m", "memory": "512Mi"},
}


def call(hostport: str, method: str, path: str, body: dict | None = None, key: str | None = None):
    host, _, port = hostport.partition(":")
    c = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        headers = {"Content-Type": "application/json", **({"OPEN-SANDBOX-API-KEY": key} if key else {})}
        c.request(method, path, json.dumps(body) if body is not None else None, headers)
        r = c.getresponse()
        return r.status, r.read()
    finally:
        c.close()


def test_local_up_config_serves_as_the_docker_mode(tmp_path):
    path = tmp_path / "server.toml"
    path.write_text(render_local_up(OSB_ALLOWED_HOST_PATHS=str(tmp_path)))
    proc = subprocess.Popen(
        [sys.executable, "-m", "mock_opensandbox", "--config", str(path), "--port", "0", "--timing", "fast"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": REPO},
    )  # fmt: skip
    try:
        lines: list[str] = []
        while not any("Press Ctrl-C" in ln for ln in lines):
            line = proc.stdout.readline()
            assert line, proc.stderr.read()
            lines.append(line)
        assert [ln.split(" not honoured")[0] for ln in lines if ln.startswith("config: ")] == [
            "config: [store] type",
            "config: [store] path",
            "config: [proxy] resolve_internal",
        ]
        assert not any("API key (generated" in ln for ln in lines)
        hostport = next(ln for ln in lines if "listening on" in ln).rsplit("/", 1)[1].strip()
        assert call(hostport, "GET", "/v1/sandboxes")[0] == 401  # the file's api_key is required
        assert call(hostport, "GET", "/v1/sandboxes", key="wrong")[0] == 401
        status, body = call(hostport, "POST", "/v1/sandboxes", CREATE, key="KEY1")
        assert status == 202, body
        sid = json.loads(body)["id"]

        def running() -> bool:
            return (
                json.loads(call(hostport, "GET", "/v1/sandboxes/" + sid, key="KEY1")[1])["status"]["state"] == "Running"
            )

        assert wait_until(running, timeout=30)
        ep = json.loads(call(hostport, "GET", "/v1/sandboxes/%s/endpoints/44772" % sid, key="KEY1")[1])["endpoint"]
        exec_hostport, _, prefix = ep.partition("/")
        status, body = call(exec_hostport, "POST", "/%s/command" % prefix, {"command": "echo from-config"})
        assert status == 200
        texts = [json.loads(f)["text"] for f in body.decode().split("\n\n") if '"stdout"' in f]
        assert texts == ["from-config"]
        assert call(hostport, "DELETE", "/v1/sandboxes/" + sid, key="KEY1")[0] == 204
    finally:
        proc.terminate()
        assert proc.wait(30) == 0
        proc.stdout.close()
        proc.stderr.close()
