"""t0: fixturefile.Appender under a crash: a write that fails puts the previous whole fixture back;
a process killed in the middle of writing an exchange leaves every exchange recorded before it intact, and
``repair`` cuts the file back to them. The crash is real and bounded: a child process with a small
RLIMIT_FSIZE, whose next write past it fails (EFBIG, SIGXFSZ ignored) or kills it (SIGXFSZ)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

from mock_opensandbox.workbench import fixturefile as F

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
CHILD = r"""
import os, resource, signal, sys
from mock_opensandbox.workbench import fixturefile as F
path, mode = sys.argv[1:3]
a = F.Appender(path, F.make("crash", "d", {"where": "here"}, {}, []))
for i in range(2):
    a.append({"request": {"method": "GET", "path": "/%d" % i}, "response": {"status": 200, "body": "é" * 50}})
signal.signal(signal.SIGXFSZ, signal.SIG_IGN if mode == "raise" else signal.SIG_DFL)  # Python ignores it
resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path) + 1000, resource.RLIM_INFINITY))
try:
    a.append({"request": {"method": "GET", "path": "/big"}, "response": {"status": 200, "body": "y" * 200000}})
except OSError as e:
    print("raised", e.errno)
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
a.append({"request": {"method": "GET", "path": "/after"}, "response": {"status": 204, "body": None}})
"""


def _child(path: str, mode: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", CHILD, path, mode], cwd=REPO, capture_output=True, text=True, timeout=60
    )


def _paths(fx):
    return [x["request"]["path"] for x in fx["exchanges"]]


def test_a_write_that_fails_leaves_the_previous_whole_fixture(tmp_path):
    path = str(tmp_path / "rec.json")
    r = _child(path, "raise")
    assert r.returncode == 0 and r.stdout.startswith("raised "), r.stderr
    fx = F.load(path)  # whole after the failure, and appended to after it
    assert _paths(fx) == ["/0", "/1", "/after"]
    assert open(path, encoding="utf-8").read() == F.dumps(fx)
    assert F.repair(path) == 3 and open(path, encoding="utf-8").read() == F.dumps(fx)  # a whole one stays


def test_a_kill_during_a_write_loses_nothing_recorded_before_it(tmp_path):
    path = str(tmp_path / "rec.json")
    r = _child(path, "kill")
    assert r.returncode == -signal.SIGXFSZ, (r.returncode, r.stderr)  # killed in the middle of the write
    with pytest.raises(ValueError, match="repair"):
        F.load(path)
    assert F.repair(path) == 2
    fx = F.load(path)
    assert _paths(fx) == ["/0", "/1"] and fx["exchanges"][1]["response"]["body"] == "é" * 50
    assert fx["recorded"] == {"where": "here"}
    assert open(path, encoding="utf-8").read() == F.dumps(fx)


def test_repair_of_a_recording_cut_inside_its_first_exchange_keeps_the_head(tmp_path):
    path = str(tmp_path / "rec.json")
    a = F.Appender(path, F.make("s", "d", {}, {"replayable": True}, []))
    a.append({"request": {"path": "/0"}, "response": {"status": 200}})
    raw = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(raw[: raw.index(b'"response"')])
    assert F.repair(path) == 0
    assert F.load(path) == F.make("s", "d", {}, {"replayable": True}, [])
    with open(path, "w") as f:
        f.write('{"no": "fixture"')
    with pytest.raises(ValueError):
        F.repair(path)
