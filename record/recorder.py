"""Run the named scenarios against a server and write (or check) fixtures.

Modes (like VCR's record modes):
  all    re-record every selected scenario, overwriting its fixture
  new    record only the scenarios that have no fixture yet
  --check  record into a temporary directory and report drift against the fixtures in --out
           (status, content types, key sets/types, SSE framing and event types...); exit 1 on drift.
           Host-specific values are blanked by each scenario's ``drift_noise``; a difference that a ``replay``
           rule of tiers/t2/ALLOWED_DIFFERENCES matches, when its reason begins with "(race)" or "(host)" (about
           the live server, not the mock), is reported as explained, with the reason, and is not drift. On drift the fresh recordings are kept and the report says where.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
from datetime import datetime, timezone
from typing import Any, Iterable, TextIO
from urllib.parse import urlsplit

import httpx

from mock_opensandbox.workbench import fixturefile as fixture
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


VERSION_RE = re.compile(r"^\s*Version\s*:\s*(\S+)", re.M)
COMMIT_RE = re.compile(r"^\s*Git Commit\s*:\s*([0-9a-f]{7,40})", re.M)


def execd_version(session: Session, image: str) -> tuple[str, str]:
    """(version, commit) of the execd the server puts into sandboxes, read inside a throw-away sandbox from the
    banner ``/opt/opensandbox/execd`` prints before it parses its flags; ("unknown", "unknown") if that fails."""
    ctx = Ctx(image=image, busybox_image="", missing_image="")
    try:
        sid = session.create_sandbox(ctx.default_create(timeout=600), record=False)
    except RecorderError:
        return "unknown", "unknown"
    try:
        ex = session.execd_endpoint(sid)
        session.wait_ready(ex)
        r = ex.command({"command": "/opt/opensandbox/execd -h 2>&1 | head -n 12"}, record=False)
        text = "\n".join(str(e.get("text", "")) for e in r.sse_events() if e.get("type") == "stdout")
        v, c = VERSION_RE.search(text), COMMIT_RE.search(text)
        return (v.group(1) if v else "unknown"), (c.group(1) if c else "unknown")
    except RecorderError:
        return "unknown", "unknown"
    finally:
        session.delete_sandbox(sid)


def record_one(
    session: Session, sc: Scenario, *, image: str, busybox_image: str, missing_image: str, meta: dict[str, Any]
) -> dict[str, Any]:
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
        secrets.extend(ctx.secrets)
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


def record_or_fail(
    session: Session,
    sc: Scenario,
    *,
    image: str,
    busybox_image: str,
    missing_image: str,
    meta: dict[str, Any],
    err: TextIO,
) -> dict[str, Any] | None:
    """record_one, or None after printing one line: the scenario, the request, what happened and the fix."""
    try:
        return record_one(session, sc, image=image, busybox_image=busybox_image, missing_image=missing_image, meta=meta)
    except RecorderError as exc:
        fix = exc.fix
        text = str(exc)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError, AssertionError) as exc:
        # a response without the field the scenario needs next: name the request that gave it
        fix = (
            "the server answered something the scenario did not expect; rerun with --scenario "
            + sc.name.split("_", 1)[0]
            + " and compare with fixtures/"
            + sc.name
            + ".json"
        )
        text = f"{session.last_request or 'before any request'}: unexpected answer ({type(exc).__name__}: {exc})"
    line = f"error: {sc.name}: {text}"
    if fix:
        line += f"; fix: {fix}"
    print(line.replace("\n", " "), file=err)
    return None


def check_reachable(session: Session) -> None:
    """One line instead of one failure per scenario when the server is not there at all."""
    session.lc("GET", "/health", auth=False, record=False)  # any HTTP answer will do: the scenarios judge it


def _denoise(fx: dict[str, Any], noise: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    if not noise:
        return fx
    fx = json.loads(json.dumps(fx))
    for ex in fx["exchanges"]:
        body = ex["response"].get("body")
        if isinstance(body, str):
            for pattern, repl in noise:
                body = re.sub(pattern, repl, body)
            ex["response"]["body"] = body
    return fx


def drift(old: dict[str, Any], new: dict[str, Any], noise: tuple[tuple[str, str], ...] = ()) -> list[str]:
    """Differences between a committed fixture and a fresh recording of the same scenario (``noise``: regex
    substitutions applied to both first, for values that differ between any two sandboxes)."""
    return [d if isinstance(d, str) else d.text() for d in drift_checks(old, new, noise)]


def drift_checks(old: dict[str, Any], new: dict[str, Any], noise: tuple[tuple[str, str], ...] = ()) -> list[Any]:
    """``drift`` as failed ``Check``s (index, aspect, detail: what an ALLOWED_DIFFERENCES ``replay`` rule matches),
    and plain text for what no rule may explain (the exchange count, a request that changed)."""
    old, new = _denoise(old, noise), _denoise(new, noise)
    out: list[Any] = []
    oe, ne = old["exchanges"], new["exchanges"]
    if len(oe) != len(ne):
        out.append(f"exchange count: {len(oe)} recorded, {len(ne)} now")
    bindings = Bindings()
    cmp = Comparer(bindings)
    for i, (o, n) in enumerate(zip(oe, ne, strict=False)):
        if (o["request"]["method"], o["request"]["path"]) != (n["request"]["method"], n["request"]["path"]):
            out.append(
                f"#{i} request: {o['request']['method']} {o['request']['path']} -> "
                f"{n['request']['method']} {n['request']['path']}"
            )
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
        out.extend(c for c in checks if not c.ok)
    return out


# the replay rules that are about the live server itself (a race recorded live, a value of the host), not about what
# the mock lacks: only these explain drift between two recordings of a live server
LIVE_RULES = ("(race)", "(host)")


def explain(scenario: str, diffs: list[Any], allow: list[Any]) -> tuple[list[str], list[str]]:
    """(unexplained, explained) lines: a ``Check`` that a ``replay`` rule of ALLOWED_DIFFERENCES matches (host-specific
    values, races recorded live: the rules the fixture replay uses) is explained, with the rule's reason."""
    unexplained: list[str] = []
    explained: list[str] = []
    for d in diffs:
        if isinstance(d, str):
            unexplained.append(d)
            continue
        entry = next((a for a in allow if a.matches(scenario, d.index, f"{d.aspect}: {d.detail}")), None)
        if entry is None:
            unexplained.append(d.text())
        else:
            explained.append(f"{d.text()}\n        -> {entry.reason}")
    return unexplained, explained


def run(args: Any, out: TextIO | None = None, err: TextIO | None = None) -> int:
    out = sys.stdout if out is None else out
    scenarios = select(args.scenario)
    if args.list:
        for s in SCENARIOS:
            print(f"{s.name:<42} {s.description}", file=out)
        return 0
    api_key = args.api_key or os.environ.get("OPENSANDBOX_API_KEY", "")
    if not args.base_url:
        raise RecorderError("--base-url is required (or OPENSANDBOX_BASE_URL)")
    err = sys.stderr if err is None else err
    session = Session(
        args.base_url, api_key, timeout=args.timeout, ready_timeout=getattr(args, "ready_timeout", None) or 60.0
    )
    try:
        check_reachable(session)
        version, commit = args.execd_version, args.execd_commit
        if not version and not args.check:  # ask the execd itself (one throw-away sandbox); --check
            # compares exchanges only and never writes a header, so it does not need the version
            version, commit_found = execd_version(session, args.image)
            commit = commit or commit_found
        meta = {
            "where": urlsplit(session.base_url).netloc,
            "when": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
            "server_version": server_version(session),
            "runtime": getattr(args, "runtime", None) or "unknown",
            "execd_version": version or "unknown",
            "execd_commit": commit or "unknown",
            "source": "python -m record",
            "tool": "python -m record --mode " + ("check" if args.check else args.mode),
        }
        if args.check:
            return _check(session, scenarios, args, meta, out, err)
        os.makedirs(args.out, exist_ok=True)
        n = failed = 0
        for sc in scenarios:
            dest = os.path.join(args.out, sc.name + ".json")
            if args.mode == "new" and os.path.exists(dest):
                print(f"{sc.name}: fixture exists, kept (--mode new)", file=out)
                continue
            fx = record_or_fail(
                session,
                sc,
                image=args.image,
                busybox_image=args.busybox_image,
                missing_image=args.missing_image,
                meta=meta,
                err=err,
            )
            if fx is None:
                failed += 1
                print(f"{sc.name}: FAILED, fixture kept as it was", file=out)
                continue
            fixture.write(dest, fx)
            n += 1
            print(f"{sc.name}: {len(fx['exchanges'])} exchanges -> {dest}", file=out)
        print(f"recorded {n} scenario(s)" + (f", {failed} failed" if failed else ""), file=out)
        return 2 if failed else 0
    finally:
        session.close()


def _check(
    session: Session, scenarios: list[Scenario], args: Any, meta: dict[str, Any], out: TextIO, err: TextIO
) -> int:
    from record.compare_dir import DEFAULT_ALLOW, load_allow

    allow = (
        [a for a in load_allow([DEFAULT_ALLOW]) if a.reason.startswith(LIVE_RULES)]
        if os.path.isfile(DEFAULT_ALLOW)
        else []
    )
    tmp = tempfile.mkdtemp(prefix="record-check-", dir=getattr(args, "keep_dir", None))
    drifted = failed = 0
    print(f"drift check: server {meta['server_version']} at {meta['where']} vs the fixtures in {args.out}", file=out)
    try:
        for sc in scenarios:
            path = os.path.join(args.out, sc.name + ".json")
            if not os.path.exists(path):
                print(f"{sc.name}: no fixture in {args.out} (record it with --mode new)", file=out)
                continue
            old = fixture.load(path)
            if old["recorded"].get("server_version") != meta["server_version"]:
                print(
                    f"{sc.name}: note: fixture recorded against server {old['recorded'].get('server_version')}",
                    file=out,
                )
            new = record_or_fail(
                session,
                sc,
                image=args.image,
                busybox_image=args.busybox_image,
                missing_image=args.missing_image,
                meta=meta,
                err=err,
            )
            if new is None:
                failed += 1
                print(f"{sc.name}: FAILED (not compared)", file=out)
                continue
            fixture.write(os.path.join(tmp, sc.name + ".json"), new)
            diffs, explained = explain(sc.name, drift_checks(old, new, sc.drift_noise), allow)
            if diffs:
                drifted += 1
                print(f"{sc.name}: DRIFT ({len(diffs)})", file=out)
                for d in diffs:
                    print(f"    {d}", file=out)
            else:
                print(f"{sc.name}: no drift" + (f" ({len(explained)} explained)" if explained else ""), file=out)
            for d in explained:
                print(f"    explained {d}", file=out)
    finally:
        if not drifted:
            shutil.rmtree(tmp, ignore_errors=True)
    print(f"{drifted} scenario(s) drifted" + (f", {failed} failed" if failed else ""), file=out)
    if drifted:
        print(f"the fresh recordings are kept in {tmp} (fixtures/ format) to compare by hand", file=out)
    return 2 if failed else (1 if drifted else 0)


__all__ = ["run", "record_one", "drift", "drift_checks", "explain", "select", "httpx"]
