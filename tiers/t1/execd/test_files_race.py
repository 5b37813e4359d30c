"""The files API against a swap race (hostile, inside a mock sandbox, bounded by a count and a
deadline): code in the sandbox swaps a directory ``a`` (holding the host path of a canary directory)
with a symlink ``b -> /`` in a loop (renameat2 RENAME_EXCHANGE), while the test hammers download,
upload, chmod, mv and delete, and sessions, PTYs and commands with a ``cwd``, under
``/tmp/race/a/<canary>/``. A path check done before the kernel's
own walk (lstat by lstat, then open(2) of the string) lets the swapped-in link take the walk to the
host's "/"; openat2(RESOLVE_IN_ROOT) on the sandbox's root (mock_opensandbox/runtime/openat2.py) never leaves
it. The canary must stay untouched (names, contents, modes), no download may return its content, and
every request gets an HTTP answer with execd's own error shapes."""

from __future__ import annotations

import json
import os
import secrets
import stat
import threading
import time

import pytest

from mock_opensandbox.runtime import openat2
from tiers.t1.conftest_execd import Client
from tiers.t1.execd.test_execd_files import upload

RACE_SECONDS = float(os.environ.get("OSB_RACE_SECONDS", "3"))  # 10 s is the measurement by hand
MAX_REQUESTS = 200_000

SWAPPER = r"""
import ctypes, os, sys, time
canary, seconds = sys.argv[1], float(sys.argv[2])
os.makedirs("/tmp/race/a" + canary, exist_ok=True)
with open("/tmp/race/a" + canary + "/secret", "w") as fh:
    fh.write("inside")
os.symlink("/", "/tmp/race/b")
libc = ctypes.CDLL(None, use_errno=True)
end, n = time.time() + seconds, 0
while time.time() < end:
    if libc.renameat2(-100, b"/tmp/race/a", -100, b"/tmp/race/b", 2) == 0:  # RENAME_EXCHANGE
        n += 1
print("swaps", n, flush=True)
"""


def snapshot(d: str) -> dict[str, tuple[int, bytes]]:
    out: dict[str, tuple[int, bytes]] = {}
    if not os.path.isdir(d):
        return {"<the canary directory itself is gone>": (0, b"")}
    for name in sorted(os.listdir(d)):
        p = os.path.join(d, name)
        st = os.lstat(p)
        out[name] = (st.st_mode, open(p, "rb").read() if stat.S_ISREG(st.st_mode) else b"")
    return out


@pytest.mark.spec_exempt("hostile race: answers are checked for shape, not against the spec")
def test_swap_race_never_reaches_the_host(make_execd, runtime, tmp_path):
    if not runtime.isolated:
        pytest.skip("needs an isolated sandbox (the swapper runs inside it)")
    canary = str(tmp_path / "canary")
    os.mkdir(canary)
    token = "HOST-CANARY-" + secrets.token_hex(8)
    with open(os.path.join(canary, "secret"), "w") as fh:
        fh.write(token)
    os.chmod(os.path.join(canary, "secret"), 0o600)
    with open(os.path.join(canary, "keep"), "w") as fh:
        fh.write("keep")
    os.chmod(canary, 0o755)
    before = snapshot(canary)
    c = Client(make_execd().port)
    r = upload(c, [("/tmp/swapper.py", SWAPPER.encode(), None)])
    assert r.status == 200
    r = c.run(f"python3 /tmp/swapper.py {canary} {RACE_SECONDS}", background=True)
    assert r.status == 200, r.text
    base = "/tmp/race/a" + canary
    deadline = time.monotonic() + RACE_SECONDS
    counts = {"requests": 0, "leaked_reads": 0, "bad": 0}
    bad: list[str] = []
    lock = threading.Lock()

    def check(r, what: str) -> None:
        with lock:
            counts["requests"] += 1
            if r.status > 500:
                counts["bad"] += 1
                bad.append(f"{what}: {r.status}")
            elif r.status >= 300:
                try:
                    # the first JSON value: a failed POST /pty writes its 201 JSON after the error
                    body = json.JSONDecoder().raw_decode(r.body.decode())[0]
                    assert isinstance(body, dict) and set(body) <= {"code", "message"} and body.get("code")
                except Exception:  # noqa: BLE001 - any malformed answer is a finding
                    counts["bad"] += 1
                    bad.append(f"{what}: {r.status} {r.body[:200]!r}")
            if token.encode() in r.body:
                counts["leaked_reads"] += 1

    def hammer(i: int) -> None:
        try:
            (loop if i else cwd_loop)(i)
        except Exception as exc:  # noqa: BLE001 - a dropped request or a broken answer is a finding
            with lock:
                counts["bad"] += 1
                bad.append(f"request failed: {exc!r}")

    def loop(i: int) -> None:
        k = 0
        while time.monotonic() < deadline and counts["requests"] < MAX_REQUESTS:
            k += 1
            check(c.get(f"/files/download?path={base}/secret", timeout=10), "download")
            check(upload(c, [(f"{base}/new-{i}-{k}", b"pwned", None), (f"{base}/keep", b"pwned", None)]), "upload")
            check(c.post("/files/permissions", {f"{base}/secret": {"mode": 777}}), "chmod")
            check(c.post("/files/mv", [{"src": f"{base}/keep", "dest": f"{base}/moved-{i}-{k}"}]), "mv")
            check(c.delete(f"/files?path={base}/secret"), "delete")
            check(c.delete(f"/directories?path={base}"), "rmdir")

    def cwd_loop(i: int) -> None:
        # the working directories of sessions, PTYs and commands: MkdirAll / stat by the mock
        k = 0
        while time.monotonic() < deadline and counts["requests"] < MAX_REQUESTS:
            k += 1
            r = c.post("/session", {"cwd": f"{base}/sess-{k}"})
            check(r, "session cwd")
            if r.status == 200:
                c.delete("/session/" + json.loads(r.body)["session_id"])
            r = c.post("/pty", {"cwd": f"{base}/pty-{k}"})
            check(r, "pty cwd")
            if r.status == 201:
                c.delete("/pty/" + json.loads(r.body)["session_id"])
            check(c.run("true", cwd=base), "command cwd")

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(RACE_SECONDS + 60)
    after = snapshot(canary)
    changed = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
    print(
        f"race: {counts['requests']} requests, {counts['leaked_reads']} host reads, "
        f"{len(changed)} canary entries changed or added, {counts['bad']} malformed answers",
        bad[:3],
    )
    assert not any(t.is_alive() for t in threads)
    assert counts["leaked_reads"] == 0
    assert not changed, sorted(changed)
    assert stat.S_IMODE(os.stat(canary).st_mode) == 0o755
    assert not bad, bad[:5]
    assert counts["requests"] > 50


def test_openat2_never_leaves_the_root(tmp_path):
    if not openat2.AVAILABLE:
        pytest.skip(openat2.NOTE)
    root = tmp_path / "root"
    root.mkdir()
    os.symlink("/", root / "up")
    (tmp_path / "outside").write_text("host")
    with pytest.raises(FileNotFoundError):
        openat2.open_in(str(root), f"/up/{tmp_path}/outside", os.O_RDONLY)
    with pytest.raises(FileNotFoundError):
        openat2.open_in(str(root), "/../../outside", os.O_RDONLY)
