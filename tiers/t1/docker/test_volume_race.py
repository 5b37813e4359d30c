"""A volume's ``subPath`` against a swap race (hostile, inside a mock sandbox, bounded by a count and a
deadline): a sandbox mounting a named volume swaps its directory ``a`` (holding the host path of a
canary directory) with a symlink ``b -> /`` in a loop (renameat2 RENAME_EXCHANGE), while the mock
prepares creates that name ``subPath: a/<canary>/made-N`` of that volume. realpath() then a walk of its
string raced (readlink EINVAL: a plain 500) and could create the missing tail wherever the link
pointed; openat2(RESOLVE_BENEATH) on the volume's fd (volumes.sub_path_beneath) answers the server's
400 VOLUME::INVALID_SUB_PATH or prepares the mount inside the volume, and the canary stays untouched.
"""

from __future__ import annotations

import os
import time

from mock_opensandbox.lifecycle.quirks import MockError
from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit import volume_flows as vf
from tiers.toolkit.marks import needs_isolation

pytestmark = needs_isolation

RACE_SECONDS = float(os.environ.get("OSB_RACE_SECONDS", "1.5"))
MAX_PREPARES = 50_000

SWAPPER = r"""
import ctypes, os, sys, time
canary, seconds = sys.argv[1], float(sys.argv[2])
os.makedirs("/data/a" + canary, exist_ok=True)
os.symlink("/", "/data/b")
libc = ctypes.CDLL(None, use_errno=True)
open("/data/started", "w").close()
end = time.time() + seconds
while time.time() < end:
    libc.renameat2(-100, b"/data/a", -100, b"/data/b", 2)  # RENAME_EXCHANGE
"""


def test_sub_path_swap_race_stays_in_the_volume(tmp_path):
    canary = tmp_path / "canary"
    canary.mkdir()
    (canary / "keep").write_text("keep")
    before = sorted(os.listdir(canary))
    with MockOpenSandbox(execd_close_delay=0.05, volumes_dir=str(tmp_path / "named")) as osb:
        t = vf.Target(osb.base_url, osb.api_key)
        try:
            claim = vf.unique()
            sid = t.sandbox([vf.pvc("data", claim, "/data")])
            rc, out = t.run(
                sid,
                "cat > /tmp/swapper.py <<'EOF'\n" + SWAPPER + "EOF\n"
                f"setsid python3 /tmp/swapper.py {canary} {RACE_SECONDS + 1} >/dev/null 2>&1 &\n"
                "for i in $(seq 100); do test -e /data/started && break; sleep 0.05; done",
            )
            assert rc == 0, out
            counts = {"prepared": 0, "refused": 0}
            other: list[str] = []
            deadline = time.monotonic() + RACE_SECONDS
            n = 0
            while time.monotonic() < deadline and n < MAX_PREPARES:
                n += 1
                vol = {
                    "name": "v",
                    "pvc": {"claim_name": claim, "create_if_not_exists": False},
                    "mount_path": "/v",
                    "sub_path": f"a{canary}/made-{n}",
                }
                try:
                    p = osb.volumes.prepare([vol])
                except MockError as e:
                    if e.status == 400 and e.body()["code"] == "VOLUME::INVALID_SUB_PATH":
                        counts["refused"] += 1
                    else:
                        other.append(f"{e.status} {e.body()}")
                    continue
                except Exception as exc:  # noqa: BLE001 - a traceback (the old 500) is the finding
                    other.append(repr(exc))
                    continue
                counts["prepared"] += 1
                osb.volumes.abandon(p)
            print(
                f"subPath race: {n} prepares, {counts['prepared']} inside the volume, "
                f"{counts['refused']} refused 400, {len(other)} other",
                other[:3],
            )
        finally:
            t.close()
    assert sorted(os.listdir(canary)) == before, "a subPath made a directory on the host"
    assert not other, other[:5]
    assert n > 100 and counts["prepared"] and counts["refused"]
