"""A container's processes start with every signal at its default action, whatever the API caller's were
(containerd and runc start them, not the process that asked the server). exec(2) keeps an ignored signal,
so a mock started with SIGHUP, SIGINT and SIGQUIT ignored (`nohup`, or `cmd &` in a script without job
control) handed them on to every sandbox process: Ctrl-C in a sandbox's terminal did not stop `sleep`
(found when `.ci/run` was started that way). The mock now gives each inherited SIG_IGN a handler that
does nothing while it runs (runtime/_util.py), and puts it back when it stops."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tiers.toolkit.marks import needs_isolation

pytestmark = needs_isolation
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

CHILD = r"""
import json, signal, subprocess
from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit import rest
from tiers.toolkit.waits import wait_until

IGNORED = (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT)
for s in IGNORED:
    signal.signal(s, signal.SIG_IGN)
out = {}
with MockOpenSandbox() as m:
    h = {"OPEN-SANDBOX-API-KEY": m.api_key}
    r = rest.call(m.base_url, "POST", "/v1/sandboxes", {"image": {"uri": "python:3"}, "timeout": 120,
                  "entrypoint": ["tail", "-f", "/dev/null"], "resourceLimits": {"cpu": "500m", "memory": "512Mi"}}, h)
    sid = json.loads(r.body)["id"]
    assert wait_until(lambda: json.loads(rest.call(m.base_url, "GET", "/v1/sandboxes/" + sid, None, h).body)
                      ["status"]["state"] == "Running", 30), "never Running"
    rt = m.store.get(sid).runtime
    for name, path in (("command", "/proc/self/status"), ("pid1", "/proc/1/status")):
        p = rt.spawn(["grep", "^SigIgn", path], stdout=subprocess.PIPE)
        out[name] = p.communicate(timeout=30)[0].decode().split()[-1]
    out["mock_while_running"] = [signal.getsignal(s) == signal.SIG_IGN for s in IGNORED]
out["mock_after_stop"] = [signal.getsignal(s) == signal.SIG_IGN for s in IGNORED]
print(json.dumps(out))
"""


def test_sandbox_processes_do_not_inherit_the_mocks_ignored_signals():
    proc = subprocess.run(
        [sys.executable, "-c", CHILD],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": REPO},
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    hup_int_quit = 0b111  # bits 1-3 of SigIgn: SIGHUP, SIGINT, SIGQUIT
    assert int(out["command"], 16) & hup_int_quit == 0, out
    assert int(out["pid1"], 16) & hup_int_quit == 0, out
    assert out["mock_while_running"] == [False, False, False]  # a handler that does nothing: still ignored
    assert out["mock_after_stop"] == [True, True, True]  # and given back as it was
