"""langchain-tests' SandboxIntegrationTests through the published OpenSandbox backends, unchanged, against a live
stack or the mock.

    python -m tiers.flows.clients.agent_suites --target live [--json OUT]          (after eval "$(./local-up.sh env)")
    python -m tiers.flows.clients.agent_suites --target mock [--jupyter-env DIR] [--json OUT]

Each backend's own ``tests/integration_tests/test_sandbox.py``, from its sdist at the version pinned in
requirements-agents.txt (downloaded once into the cache, never into the repository), runs unchanged in
.venv-agents (Python >= 3.12), with tiers/flows/clients/agent_suites_conftest.py beside it as its conftest.py: it gives
deepagents' ``OpenSandboxBackend.create()`` the server and key, and renames the public images the fixtures name
to the stack's local ones (AGENT_SUITES_IMAGES; the live stack has no registry). Prints one line per test;
``results()`` returns {test id: passed | failed | error | skipped | timeout}.

* ``langchain-sandbox-opensandbox`` 0.1.2: ``SandboxSync.create("python:3.12")`` wrapped in its backend.
* ``deepagents-opensandbox-backend`` 0.1.0: ``opensandbox/code-interpreter:v1.1.0`` with the image's entrypoint
  (its Jupyter starts; on the mock a Jupyter env plays that part: ``--jupyter-env``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from typing import Any

from tiers.flows.clients.upstream_e2e import DURATIONS, _one
from tiers.t2.clients import Unavailable, newer_python, python_env

REQUIREMENTS = "requirements-agents.txt"
SUITES = {  # sdist -> its conformance test file
    "langchain-sandbox-opensandbox": "tests/integration_tests/test_sandbox.py",
    "deepagents-opensandbox-backend": "tests/integration_tests/test_sandbox.py",
}
HERE = os.path.dirname(os.path.abspath(__file__))
WORK = os.environ.get("OSB_AGENT_SUITES_WORK") or os.path.join(
    os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "opensandbox-provider", "agent-suites"
)
PUBLIC_IMAGES = ("python:3.12", "opensandbox/code-interpreter:v1.1.0")
MCP_IMAGE = "local/python:3-slim"  # the flow's sandbox: local-up's base image (any name is the host tools on the mock)
LIVE_OUTCOMES = os.path.join(HERE, "agent_suites_live.json")  # recorded with --target live (its "recorded" says how)


def differences(got: dict[str, Any], part: str = "results") -> list[str]:
    """Each entry of ``part`` ("results": the suites' tests; "mcp": tiers/flows/clients/mcp_flow.py's steps) whose outcome is not
    the live stack's (tiers/flows/clients/agent_suites_live.json), as "name: live -> here"."""
    with open(LIVE_OUTCOMES, encoding="utf-8") as fh:
        live = json.load(fh).get(part, {})
    return [
        "%s: %s -> %s" % (k, live.get(k, "absent"), got.get(k, "absent"))
        for k in sorted(set(live) | set(got))
        if live.get(k) != got.get(k)
    ]


def pins() -> dict[str, str]:
    with open(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(HERE))), REQUIREMENTS)) as fh:
        return dict(m.groups() for m in re.finditer(r"^([A-Za-z0-9_.-]+)==(\S+)$", fh.read(), re.M))


def prepare(work: str = WORK) -> tuple[str, list[tuple[str, str]]]:
    """(the venv's python, [(sdist, its test file)]): .venv-agents, and each suite's test file with the conftest beside it.
    Raises Unavailable (one line) without a Python >= 3.12 or the packages."""
    py = python_env("agents", REQUIREMENTS, python=newer_python(REQUIREMENTS))
    versions = pins()
    os.makedirs(work, exist_ok=True)
    files: list[tuple[str, str]] = []
    for dist, inner in SUITES.items():
        version = versions[dist]
        name = "test_%s_%s.py" % (dist.replace("-", "_"), version.replace(".", "_"))
        dest = os.path.join(work, name)
        if not os.path.exists(dest):
            sdists = os.path.join(work, "sdist")
            r = subprocess.run(
                [py, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:", "-d", sdists]
                + ["%s==%s" % (dist, version)],
                capture_output=True,
                text=True,
                timeout=300,
            )
            if r.returncode != 0:
                raise Unavailable("could not download the %s %s sdist: %s" % (dist, version, (r.stderr or "")[-200:]))
            archive = os.path.join(sdists, "%s-%s.tar.gz" % (dist.replace("-", "_"), version))
            with tarfile.open(archive) as tar:
                member = tar.getmember("%s-%s/%s" % (dist.replace("-", "_"), version, inner))
                src = tar.extractfile(member)
                assert src is not None
                with open(dest + ".part", "wb") as out:
                    shutil.copyfileobj(src, out)
            os.replace(dest + ".part", dest)
        files.append((dist, name))
    shutil.copyfile(os.path.join(HERE, "agent_suites_conftest.py"), os.path.join(work, "conftest.py"))
    return py, files


def results(
    domain: str, api_key: str, images: dict[str, str], work: str = WORK, timeout: float = 1800
) -> dict[str, str]:
    py, files = prepare(work)
    env = dict(
        os.environ,
        OPENSANDBOX_DOMAIN=domain,
        OPENSANDBOX_API_KEY=api_key,
        OPENSANDBOX_PROTOCOL="http",
        AGENT_SUITES_IMAGES=",".join("%s=%s" % kv for kv in images.items()),
    )
    out: dict[str, str] = {}
    for dist, name in files:
        for test, verdict in _one(py, [name], work, env, timeout).items():
            out["%s::%s" % (dist, test.split("::", 1)[-1])] = verdict
    return out


def mcp_outcomes(domain: str, api_key: str, image: str, timeout: float = 600) -> dict[str, Any]:
    """tiers/flows/clients/mcp_flow.py in .venv-agents: {step: [ok | error, what the client acts on]} for every opensandbox-mcp tool."""
    py, _ = prepare()
    r = subprocess.run(
        [py, os.path.join(HERE, "mcp_flow.py"), domain, api_key, image],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if r.returncode != 0:
        raise AssertionError("mcp flow failed: %s" % (r.stderr or r.stdout)[-2000:])
    return json.loads(r.stdout)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tiers.flows.clients.agent_suites")
    p.add_argument("--target", choices=("live", "mock"), required=True)
    p.add_argument("--jupyter-env", help="the mock: a Jupyter env for the code-interpreter image (deepagents)")
    p.add_argument("--json")
    args = p.parse_args(argv)
    osb: Any = None
    images: dict[str, str] = {}
    if args.target == "live":
        base, key = os.environ["OPENSANDBOX_BASE_URL"], os.environ["OPENSANDBOX_API_KEY"]
        local = (os.environ.get("OPENSANDBOX_IMAGE"), os.environ.get("OPENSANDBOX_CODE_INTERPRETER_IMAGE"))
        images = {pub: loc for pub, loc in zip(PUBLIC_IMAGES, local, strict=True) if loc}
    else:
        from mock_opensandbox.server import MockOpenSandbox

        osb = MockOpenSandbox(timing="fast", jupyter_env=args.jupyter_env).start()
        base, key = osb.base_url, osb.api_key or ""
    domain = re.sub(r"/v1/?$", "", base.split("://", 1)[-1]).rstrip("/")
    started = time.monotonic()
    try:
        got = results(domain, key, images)
        mcp = mcp_outcomes(domain, key, images.get(PUBLIC_IMAGES[0], MCP_IMAGE))
    except Unavailable as exc:
        print("agent suites: %s" % exc)
        return 2
    finally:
        if osb is not None:
            osb.stop()
    wall = time.monotonic() - started
    for test, verdict in sorted(got.items()):
        print("%-8s %7.2fs %s" % (verdict, DURATIONS.get(test.split("::", 1)[-1], 0.0), test))
    counts: dict[str, int] = {}
    for verdict in got.values():
        counts[verdict] = counts.get(verdict, 0) + 1
    print("wall %.1f s: %s" % (wall, " ".join("%s=%d" % kv for kv in sorted(counts.items()))))
    for step, outcome in sorted(mcp.items()):
        print("mcp      %s: %s" % (step, json.dumps(outcome)[:160]))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"target": args.target, "results": got, "mcp": mcp, "wall_s": wall}, fh, indent=1, sort_keys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
