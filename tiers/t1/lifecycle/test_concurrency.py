"""t1: concurrency through the plugin. 20 sandboxes; one EPP process carries all their commands and file
writes at once (many requests in flight), while three more plugin processes sharing the same data
dir do the same on overlapping sandboxes. Every write reads back byte-identical, every command gets
its own output (and only its own), and nothing crosses from one sandbox to another.

The figures (sandboxes, commands, writes, bytes, wall time) are printed (pytest -s) and attached to
the test report as user properties."""

from __future__ import annotations

import base64
import hashlib
import json
import pathlib
import random
import threading
import time

from mock_opensandbox.server import MockOpenSandbox
from tiers.toolkit.epp import EppClient

SANDBOXES = 20
COMMANDS_EACH = 4  # exec.run per sandbox from the main process
STREAMS_EACH = 1  # exec.start per sandbox from the main process
WRITES_EACH = 3  # files.write per sandbox from the main process
EXTRA_PROCESSES = 3  # more plugin processes, each on every other sandbox
WAIT = 60.0  # a hang detector, not a speed assertion


def _fire(epp: EppClient, calls: list[tuple[str, dict, object]]) -> list[tuple[object, dict]]:
    """Send every call at once, then collect (tag, result) pairs."""
    pending = [(tag, epp.request(method, params)) for method, params, tag in calls]
    return [(tag, epp.wait(rid, q, timeout=WAIT)) for tag, (rid, q) in pending]


def _blob(rng: random.Random) -> bytes:
    size = rng.choice([0, 1, 7, 4096, 65_536, 65_537, rng.randint(1, 256 * 1024)])
    return rng.randbytes(size)


def test_many_sandboxes_many_requests(tmp_path, record_property):
    rng = random.Random(20261129)
    data_dir = str(tmp_path / "data")
    with MockOpenSandbox(execd_mode="latest", execd_close_delay=0.05) as mock:
        cfg = {"base_url": mock.base_url, "api_key": mock.api_key}
        main = EppClient(data_dir, cfg)
        extras: list[EppClient] = []
        try:
            started = time.monotonic()
            created = _fire(
                main,
                [
                    ("sandbox.create", {"template": "base", "timeout": 600, "metadata": {"idx": str(i)}}, i)
                    for i in range(SANDBOXES)
                ],
            )
            sids = [r["sandbox_id"] for _, r in sorted(created, key=lambda x: x[0])]
            assert len(set(sids)) == SANDBOXES
            extras = [EppClient(data_dir, cfg) for _ in range(EXTRA_PROCESSES)]
            # the target directory exists before the writes race (the mock's upload creates missing
            # parents racily: test_concurrent_uploads_create_one_parent_directory)
            _fire(main, [("files.mkdir", {"sandbox_id": sid, "path": "/data"}, sid) for sid in sids])

            # ---- everything at once: main process + extra processes, each in its own thread
            expected_files: dict[tuple[str, str], bytes] = {}
            expected_out: dict[str, str] = {}
            plans: list[tuple[EppClient, list]] = []
            main_calls: list = []
            for i, sid in enumerate(sids):
                for k in range(COMMANDS_EACH):
                    token = f"cmd-{i}-{k}-{rng.getrandbits(48):012x}"
                    expected_out[token] = f"{sid}\n{token}\n"
                    main_calls.append(
                        (
                            "exec.run",
                            {
                                "sandbox_id": sid,
                                "cmd": "sh",
                                "args": ["-c", f'echo "$SB"; echo {token}'],
                                "env": {"SB": sid},
                                "timeout": 30,
                            },
                            ("run", token),
                        )
                    )
                for k in range(STREAMS_EACH):
                    token = f"stream-{i}-{k}-{rng.getrandbits(48):012x}"
                    expected_out[token] = "".join(f"{token} {n}\n" for n in range(50))
                    main_calls.append(
                        (
                            "exec.start",
                            {
                                "sandbox_id": sid,
                                "cmd": "sh",
                                "args": ["-c", f'for n in $(seq 0 49); do echo "{token} $n"; done'],
                                "timeout": 30,
                            },
                            ("stream", token),
                        )
                    )
                for k in range(WRITES_EACH):
                    path, blob = f"/data/main-{k}.bin", _blob(rng)
                    expected_files[(sid, path)] = blob
                    main_calls.append(
                        (
                            "files.write",
                            {"sandbox_id": sid, "path": path, "content_b64": base64.b64encode(blob).decode()},
                            ("write",),
                        )
                    )
            plans.append((main, main_calls))
            for p, epp in enumerate(extras):
                calls = []
                for i, sid in enumerate(sids):
                    if (i + p) % 2:
                        continue
                    token = f"extra-{p}-{i}-{rng.getrandbits(48):012x}"
                    expected_out[token] = f"{sid}\n{token}\n"
                    calls.append(
                        (
                            "exec.run",
                            {
                                "sandbox_id": sid,
                                "cmd": "sh",
                                "args": ["-c", f'echo "$SB"; echo {token}'],
                                "env": {"SB": sid},
                                "timeout": 30,
                            },
                            ("run", token),
                        )
                    )
                    path, blob = f"/data/extra-{p}.bin", _blob(rng)
                    expected_files[(sid, path)] = blob
                    calls.append(
                        (
                            "files.write",
                            {"sandbox_id": sid, "path": path, "content_b64": base64.b64encode(blob).decode()},
                            ("write",),
                        )
                    )
                plans.append((epp, calls))

            results: dict[int, list] = {}
            errors: list = []

            def run_plan(n: int, epp: EppClient, calls: list) -> None:
                try:
                    results[n] = _fire(epp, calls)
                except Exception as exc:  # noqa: BLE001 - reported below
                    errors.append(f"process {n}: {type(exc).__name__}: {exc}")

            threads = [threading.Thread(target=run_plan, args=(n, epp, calls)) for n, (epp, calls) in enumerate(plans)]
            for t in threads:
                t.start()
            for t in threads:
                t.join(WAIT + 10)
            assert not errors, errors

            # ---- commands: each got its own output, and its sandbox's id (no cross-talk)
            commands = streams = 0
            for n, (epp, _calls) in enumerate(plans):
                for tag, res in results[n]:
                    if tag[0] == "run":
                        commands += 1
                        assert res == {"stdout": expected_out[tag[1]], "stderr": "", "exit_code": 0}, tag
                    elif tag[0] == "stream":
                        streams += 1
                        notes = list(epp.events(res["process_id"], timeout=WAIT))
                        exits = [x for x in notes if x["method"] == "exec.exit"]
                        assert len(exits) == 1 and exits[0]["params"]["exit_code"] == 0
                        assert EppClient.joined(notes) == expected_out[tag[1]], tag
                    else:
                        assert res == {}

            # ---- files: every write reads back byte-identical, through the plugin and on disk
            reads = _fire(
                main, [("files.read", {"sandbox_id": sid, "path": path}, (sid, path)) for (sid, path) in expected_files]
            )
            for (sid, path), res in reads:
                assert base64.b64decode(res["content_b64"]) == expected_files[(sid, path)], (sid, path)
            listings = _fire(main, [("files.list", {"sandbox_id": sid, "path": "/data"}, sid) for sid in sids])
            for sid, res in listings:
                mine = sorted(p for (s, p) in expected_files if s == sid)
                assert sorted(e["path"] for e in res["entries"]) == mine, sid
                root = pathlib.Path(mock.store.get(sid).runtime.root)
                for path in mine:
                    disk = (root / path.lstrip("/")).read_bytes()
                    assert hashlib.sha256(disk).digest() == hashlib.sha256(expected_files[(sid, path)]).digest()
            wall = time.monotonic() - started

            writes = len(expected_files)
            volume = sum(len(b) for b in expected_files.values())
            figures = {
                "sandboxes": SANDBOXES,
                "plugin_processes": 1 + EXTRA_PROCESSES,
                "commands": commands,
                "streamed_commands": streams,
                "writes": writes,
                "bytes_written": volume,
                "wall_s": round(wall, 2),
            }
            for k, v in figures.items():
                record_property(k, v)
            print("\nconcurrency figures: " + ", ".join(f"{k}={v}" for k, v in figures.items()))
            assert commands == SANDBOXES * COMMANDS_EACH + sum(
                1 for p in range(EXTRA_PROCESSES) for i in range(SANDBOXES) if not (i + p) % 2
            )
            # four processes shared one data dir: every cache record is whole JSON (atomic replace)
            records = [json.loads(f.read_text()) for f in (pathlib.Path(data_dir) / "sandboxes").iterdir()]
            assert sorted(r["sandbox_id"] for r in records) == sorted(sids)
            assert all(r.get("framing") == "latest" and "execd_direct" in r for r in records)
            _fire(main, [("sandbox.kill", {"sandbox_id": sid}, sid) for sid in sids])
            assert mock.sandboxes == {}
        finally:
            for epp in [main, *extras]:
                epp.close()
                assert epp.violations == []


def test_concurrent_uploads_create_one_parent_directory(tmp_path):
    with (
        MockOpenSandbox(execd_mode="latest", execd_close_delay=0.05) as mock,
        EppClient(str(tmp_path / "d"), {"base_url": mock.base_url, "api_key": mock.api_key}) as epp,
    ):
        sid = epp.call("sandbox.create", {"template": "base", "timeout": 600})["sandbox_id"]
        for n in range(8):
            _fire(
                epp,
                [
                    ("files.write", {"sandbox_id": sid, "path": f"/race-{n}/a/b/f{i}", "content_b64": "eA=="}, i)
                    for i in range(16)
                ],
            )
        epp.call("sandbox.kill", {"sandbox_id": sid})
