"""Run the named scenarios against a server and write (or check) fixtures.

Modes (like VCR's record modes):
  all    re-record every selected scenario, overwriting its fixture
  new    record only the scenarios that have no fixture yet
  --check  record into a temporary directory and report drift against the fixtures in --out
           (status, content types, key sets/types, SSE framing and event types...); exit 1 on drift
"""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from datetime import datetime, timezone
from typing import Any, Iterable, TextIO
from urllib.parse import urlsplit

import httpx

from record import fixture
from record.client import RecorderError, Session
from record.compare import Bindings, Check, Comparer, materialize
from record.scenarios import SCENARIOS, Ctx, Scenario
from record.scrub import find_secret_leaks, scrub_exchanges


def select(names: Iterable[str] | None) -> list[Scenario]:
    if not names:
        return list(SCENARIOS)
    by = {s.name: s for s in SCENARIOS}
    out = []
    for n in names:
        matches = [s for s in SCENARIOS if s.name == n or s.name.startswith(n + "_") or s.name.split("_", 1)[0] == n]
        if not matches:
            raise RecorderError(f"unknown scenario {n!r} (python -m record --list shows them)")
        out.extend(m for m in matches if m not in out)
    return [s for s in SCENARIOS if s in out and s.name in by]


def server_version(session: Session) -> str:
    try:
        r = session.lc("GET", "/version", record=False)
        return str(r.json().get("version", "unknown")) if r.status == 200 else "unknown"
    except (RecorderError, ValueError, AttributeError):
        return "unknown"


def record_one(session: Session, sc: Scenario, *, image: str, busybox_image: str, missing_image: str,
               meta: dict[str, Any]) -> dict[str, Any]:
    session.start_scenario()
    ctx = Ctx(image=image, busybox_image=busybox_image, missing_image=missing_image)
    secrets = [session.api_key]
    try:
        if sc.needs_sandbox:
            sid = session.create_sandbox(ctx.default_create(), record=False)
            ctx.created.append(sid)
            ctx.sandbox_id = sid
            ctx.execd = session.execd_endpoint(sid)
            secrets.extend(v for v in ctx.execd.headers.values())
            session.wait_ready(ctx.execd)
        sc.run(session, ctx)
    finally:
        for sid in ctx.created:
            session.delete_sandbox(sid)
    hosts = {urlsplit(session.base_url).hostname or ""}
    exchanges = scrub_exchanges(session.exchanges, secrets=secrets, hosts=hosts)
    replay = {"replayable": not sc.replay_skip}
    if sc.replay_skip:
        replay["reason"] = sc.replay_skip
    if sc.needs_sandbox:
        replay["setup"] = "sandbox"
    fx = fixture.make(sc.name, sc.description, dict(meta), replay, exchanges)
    leaks = find_secret_leaks(fixture.dumps(fx), secrets)
    if leaks:
        raise RecorderError(f"{sc.name}: a secret survived scrubbing; nothing written")
    return fx


def drift(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """Differences between a committed fixture and a fresh recording of the same scenario."""
    out: list[str] = []
    oe, ne = old["exchanges"], new["exchanges"]
    if len(oe) != len(ne):
        out.append(f"exchange count: {len(oe)} recorded, {len(ne)} now")
    bindings = Bindings()
    cmp = Comparer(bindings)
    for i, (o, n) in enumerate(zip(oe, ne)):
        if (o["request"]["method"], o["request"]["path"]) != (n["request"]["method"], n["request"]["path"]):
            out.append(f"#{i} request: {o['request']['method']} {o['request']['path']} -> "
                       f"{n['request']['method']} {n['request']['path']}")
            continue
        resp = n["response"]
        body = materialize(resp.get("body"), bindings) or ""
        headers = [(k, materialize(v, bindings) or "") for k, v in (resp.get("headers") or {}).items()]
        if resp.get("body_b64") is not None:
            import base64
            data = base64.b64decode(resp["body_b64"])
        else:
            data = body.encode("utf-8")
        checks: list[Check] = cmp.compare(i, o["response"], resp["status"], headers, data)
        out.extend(c.text() for c in checks if not c.ok)
    return out


def run(args: Any, out: TextIO = sys.stdout) -> int:
    scenarios = select(args.scenario)
    if args.list:
        for s in SCENARIOS:
            print(f"{s.name:<42} {s.description}", file=out)
        return 0
    api_key = args.api_key or os.environ.get("OPENSANDBOX_API_KEY", "")
    if not args.base_url:
        raise RecorderError("--base-url is required (or OPENSANDBOX_BASE_URL)")
    session = Session(args.base_url, api_key, timeout=args.timeout)
    try:
        meta = {
            "where": urlsplit(session.base_url).netloc,
            "when": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
            "server_version": server_version(session),
            "execd_version": args.execd_version or "unknown",
            "execd_commit": args.execd_commit or "unknown",
            "source": "python -m record",
            "tool": "python -m record --mode " + ("check" if args.check else args.mode),
        }
        if args.check:
            return _check(session, scenarios, args, meta, out)
        os.makedirs(args.out, exist_ok=True)
        n = 0
        for sc in scenarios:
            dest = os.path.join(args.out, sc.name + ".json")
            if args.mode == "new" and os.path.exists(dest):
                print(f"{sc.name}: fixture exists, kept (--mode new)", file=out)
                continue
            fx = record_one(session, sc, image=args.image, busybox_image=args.busybox_image,
                            missing_image=args.missing_image, meta=meta)
            fixture.write(dest, fx)
            n += 1
            print(f"{sc.name}: {len(fx['exchanges'])} exchanges -> {dest}", file=out)
        print(f"recorded {n} scenario(s)", file=out)
        return 0
    finally:
        session.close()


def _check(session: Session, scenarios: list[Scenario], args: Any, meta: dict[str, Any], out: TextIO) -> int:
    tmp = tempfile.mkdtemp(prefix="record-check-")
    drifted = 0
    print(f"drift check: server {meta['server_version']} at {meta['where']} vs the fixtures in {args.out}", file=out)
    try:
        for sc in scenarios:
            path = os.path.join(args.out, sc.name + ".json")
            if not os.path.exists(path):
                print(f"{sc.name}: no fixture in {args.out} (record it with --mode new)", file=out)
                continue
            old = fixture.load(path)
            if old["recorded"].get("server_version") != meta["server_version"]:
                print(f"{sc.name}: note: fixture recorded against server {old['recorded'].get('server_version')}",
                      file=out)
            new = record_one(session, sc, image=args.image, busybox_image=args.busybox_image,
                             missing_image=args.missing_image, meta=meta)
            fixture.write(os.path.join(tmp, sc.name + ".json"), new)
            diffs = drift(old, new)
            if diffs:
                drifted += 1
                print(f"{sc.name}: DRIFT ({len(diffs)})", file=out)
                for d in diffs:
                    print(f"    {d}", file=out)
            else:
                print(f"{sc.name}: no drift", file=out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{drifted} scenario(s) drifted", file=out)
    return 1 if drifted else 0


__all__ = ["run", "record_one", "drift", "select", "httpx"]
