"""OpenSandbox's own e2e suites (Python and JavaScript), unchanged, against a live stack or a mock.

    python -m tiers.flows.clients.upstream_e2e --target live [--files test_code_interpreter_e2e*.py] [--json OUT]
    python -m tiers.flows.clients.upstream_e2e --target mock --jupyter-env DIR | --image-dir DIR [--execd-bin BIN]
    python -m tiers.flows.clients.upstream_e2e --suite js --target live|mock [--files test_sandbox_e2e.test.ts ...]

The tests and the SDKs they import come from the upstream mirror at 3bb6fad (``tests/python`` with
``sdks/sandbox/python`` and ``sdks/code-interpreter/python``, as its pyproject's uv sources name them),
``git archive``d into a work dir with their own venv (pytest-asyncio, pytest-timeout, pytest-order: the
suite's pyproject). The suite reads OPENSANDBOX_TEST_DOMAIN / OPENSANDBOX_TEST_API_KEY /
OPENSANDBOX_SANDBOX_DEFAULT_IMAGE (tests/python/tests/base_e2e_test.py). Prints one line per test and the
counts per language (from the test's name: python, java, go, typescript, multi for mixed ones).

The JavaScript suite (``tests/javascript`` with ``sdks/`` and ``specs/``, which the SDK's build generates its
client from) runs as upstream's scripts/javascript-e2e.sh runs it: pnpm 9.15.0 (installed into the work dir with
npm), the SDKs built by their workspace's ``build:js``, then ``vitest run`` with its junit reporter. It needs node
>= 20 and npm."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from typing import Any, Callable

COMMIT = "3bb6fad"
MIRROR = os.environ.get("OSB_UPSTREAM_MIRROR", "/work/.mirror/opensandbox-group+OpenSandbox/repo")
WORK = os.environ.get("OSB_E2E_WORK") or os.path.join(
    os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "opensandbox-provider", "upstream-e2e-" + COMMIT
)
PATHS = ("tests/python", "sdks/sandbox/python", "sdks/code-interpreter/python")
DEPS = ("pytest==9.0.3", "pytest-asyncio", "pytest-timeout", "pytest-order", "pydantic", "redis>=5.0,<6.0")
HOST_VOLUME_DIR = "/tmp/opensandbox-e2e"  # the suite binds /tmp/opensandbox-e2e/logs (execd-log volume)
LANGS = ("java", "python", "go", "typescript", "javascript", "bash")
DURATIONS: dict[str, float] = {}  # test id -> seconds, from the junit reports of run()


def prepare(work: str = WORK, mirror: str = MIRROR) -> str:
    """The work dir with the suite and its venv (made once). Returns the venv's python."""
    py = os.path.join(work, "venv", "bin", "python")
    if os.path.exists(os.path.join(work, ".ready")):
        return py
    os.makedirs(work, exist_ok=True)
    arch = subprocess.run(["git", "-C", mirror, "archive", COMMIT, *PATHS], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-C", work, "-xf", "-"], input=arch, check=True)
    subprocess.run([sys.executable, "-m", "venv", os.path.join(work, "venv")], check=True)
    subprocess.run(
        [
            py,
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            os.path.join(work, PATHS[1]),
            os.path.join(work, PATHS[2]),
            *DEPS,
        ],
        check=True,
    )
    open(os.path.join(work, ".ready"), "w").close()
    return py


def language(name: str) -> str:
    name = name.replace(" ", "_")  # the JS suite's names are sentences: "02 java code execution"
    if "multi_language" in name or "concurrent" in name:
        return "multi"
    return next((lang for lang in LANGS if "_%s_" % lang in name), "python")  # creation, interrupt, contexts


def _collect(py: str, files: list[str], cwd: str, env: dict[str, str]) -> list[str]:
    out = subprocess.run(
        [py, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-qq", *["tests/" + f for f in files]],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    return [line for line in out.stdout.splitlines() if "::" in line]


def _junit(
    cmd_of: Callable[[str], list[str]], cwd: str, env: dict[str, str], timeout: float
) -> list[tuple[str, str, str, float]] | None:
    """Run ``cmd_of(junit path)`` (its output in a throw-away log under E2E_QUIET); (classname, name, verdict,
    seconds) of each testcase of its junit report, verdict passed | failed | error | skipped; None: it timed out."""
    with tempfile.TemporaryDirectory() as tmp:
        xml = os.path.join(tmp, "junit.xml")
        log = open(os.path.join(tmp, "log"), "w") if os.environ.get("E2E_QUIET") else None
        try:
            subprocess.run(cmd_of(xml), cwd=cwd, env=env, stdout=log, stderr=log, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None
        finally:
            if log is not None:
                log.close()
        out = []
        for case in ET.parse(xml).getroot().iter("testcase"):
            kinds = [c.tag for c in case]
            verdict = next((k for k in ("error", "failure", "skipped") if k in kinds), "passed")
            verdict = {"failure": "failed"}.get(verdict, verdict)
            out.append((case.get("classname", ""), case.get("name", ""), verdict, float(case.get("time") or 0.0)))
        return out


def suite_env(domain: str, api_key: str, image: str) -> dict[str, str]:
    """What both suites read (tests/python/tests/base_e2e_test.py, tests/javascript/tests/base_e2e.ts)."""
    return dict(
        os.environ,
        OPENSANDBOX_TEST_DOMAIN=domain,
        OPENSANDBOX_TEST_API_KEY=api_key,
        OPENSANDBOX_SANDBOX_DEFAULT_IMAGE=image,
        OPENSANDBOX_TEST_PROTOCOL="http",
    )


def _one(py: str, ids: list[str], cwd: str, env: dict[str, str], timeout: float) -> dict[str, str]:
    args = [py, "-m", "pytest", "-p", "no:cacheprovider", "-o", "log_cli=false"]
    cases = _junit(lambda xml: [*args, "--junitxml", xml, *ids], cwd, env, timeout)
    if cases is None:
        return {i.split("::", 1)[1]: "timeout" for i in ids}
    out: dict[str, str] = {}
    for classname, name, verdict, seconds in cases:
        tid = "%s::%s" % (classname.rsplit(".", 1)[-1], name)
        out[tid], DURATIONS[tid] = verdict, seconds
    return out


def run(
    py: str,
    domain: str,
    api_key: str,
    image: str,
    files: list[str],
    work: str = WORK,
    timeout: float = 3000,
    jobs: int = 1,
) -> dict[str, str]:
    """{test id: passed | failed | error | skipped | timeout}, from the suite's own junit reports. jobs > 1:
    each test in its own pytest process, that many at a time (a test of a language the image lacks waits
    for the SDK's 3-minute request timeout on the real execd)."""
    env = suite_env(domain, api_key, image)
    cwd = os.path.join(work, PATHS[0])
    ids = _collect(py, files, cwd, env)
    out: dict[str, str] = {}
    for i in ids:  # never run: they fetch addresses off this machine
        if i.rsplit("::", 1)[-1] in OFF_MACHINE:
            out["%s::%s" % (i.split("::")[-2], i.rsplit("::", 1)[-1])] = "deselected"
    ids = [i for i in ids if i.rsplit("::", 1)[-1] not in OFF_MACHINE]
    if jobs <= 1:
        out.update(_one(py, ids, cwd, env, timeout))
        return out
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(jobs) as pool:
        for part in pool.map(lambda i: _one(py, [i], cwd, env, timeout), ids):
            out.update(part)
    return out


JS_PATHS = (
    "tests/javascript",
    "specs",
    "sdks/package.json",
    "sdks/pnpm-lock.yaml",
    "sdks/pnpm-workspace.yaml",
    "sdks/tsconfig.base.json",
    "sdks/eslint.base.mjs",
    "sdks/sandbox/javascript",
    "sdks/code-interpreter/javascript",
)
JS_FILES = (  # every test file of tests/javascript/tests at 3bb6fad
    "test_sandbox_e2e.test.ts",
    "test_sandbox_manager_e2e.test.ts",
    "test_wait_until_ready_diagnostics.test.ts",
    "test_credential_vault_e2e.test.ts",
    "test_code_interpreter_e2e.test.ts",
)
# the JS suite's network-policy tests curl www.github.com and pypi.org from inside a sandbox (see OFF_MACHINE)
JS_OFF_MACHINE = ("01a sandbox create with networkPolicy", "01aa sandbox create with networkPolicy via server proxy")


def prepare_js(work: str = WORK + "-js", mirror: str = MIRROR) -> str:
    """The work dir with the JS suite, its pnpm and the SDKs built (made once). Returns the suite's dir."""
    suite = os.path.join(work, JS_PATHS[0])
    if os.path.exists(os.path.join(work, ".ready")):
        return suite
    os.makedirs(work, exist_ok=True)
    arch = subprocess.run(["git", "-C", mirror, "archive", COMMIT, *JS_PATHS], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-C", work, "-xf", "-"], input=arch, check=True)
    tools = os.path.join(work, "tools")
    subprocess.run(["npm", "install", "-q", "--no-fund", "--no-audit", "--prefix", tools, "pnpm@9.15.0"], check=True)
    bin_dir = os.path.join(tools, "node_modules", ".bin")
    env = dict(os.environ, PATH=bin_dir + os.pathsep + os.environ.get("PATH", ""))  # the scripts call pnpm
    sdks = os.path.join(work, "sdks")
    for step in (["-C", sdks, "install", "--frozen-lockfile"], ["-C", sdks, "run", "build:js"]):
        subprocess.run(["pnpm", *step], check=True, env=env)
    subprocess.run(["pnpm", "-C", suite, "install", "--frozen-lockfile"], check=True, env=env)
    open(os.path.join(work, ".ready"), "w").close()
    return suite


def js_name_filter() -> str:
    """vitest's ``-t`` pattern (a JS regex) that every test name but the off-machine ones match. vitest matches
    it against the full name; these files have no describe blocks, so that is the test's own name."""
    return "^(?!(%s))" % "|".join(re.escape(n) + "$" for n in JS_OFF_MACHINE)


def run_js(
    suite: str, domain: str, api_key: str, image: str, files: list[str], timeout: float, jobs: int
) -> dict[str, str]:
    """{file::test name: verdict} from vitest's junit report; the off-machine tests are filtered out by name
    (``-t``) and reported "deselected"."""
    env = suite_env(domain, api_key, image)
    vitest = [os.path.join(suite, "node_modules", ".bin", "vitest"), "run", "--reporter=junit"]
    rest = ["--maxWorkers=%d" % max(jobs, 1), "-t", js_name_filter(), *["tests/" + f for f in files]]
    cases = _junit(lambda xml: [*vitest, "--outputFile=" + xml, *rest], suite, env, timeout)
    if cases is None:
        return {f: "timeout" for f in files}
    out: dict[str, str] = {}
    for classname, name, verdict, seconds in cases:
        tid = "%s::%s" % (os.path.basename(classname), name)
        out[tid], DURATIONS[tid] = ("deselected" if name in JS_OFF_MACHINE else verdict), seconds
    return out


def counts(results: dict[str, str]) -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = {}
    for test, verdict in results.items():
        row = table.setdefault(language(test), {})
        row[verdict] = row.get(verdict, 0) + 1
    return table


# the network-policy tests run `curl -I https://www.github.com` and `https://pypi.org` inside a sandbox: no test
# here sends to an address off this machine, so they are deselected (reported "deselected" on both sides)
OFF_MACHINE = frozenset(
    (
        "test_01a_network_policy_create",
        "test_01aa_network_policy_get_and_patch",
        "test_01ab_network_policy_get_and_patch_with_server_proxy",
        "test_01ac_network_policy_delete",
    )
)
PVC_CLAIM = "opensandbox-e2e-pvc-test"  # tests/python/tests/base_e2e_test.py DEFAULT_PVC_NAME
# what scripts/python-e2e.sh at 3bb6fad puts in place before the suite: the host-volume marker and the named
# volume's files (relative path, content)
HOST_MARKER = ("host-volume-test/marker.txt", "opensandbox-e2e-marker\n")
PVC_FILES = (("marker.txt", "pvc-marker-data\n"), ("datasets/train/marker.txt", "pvc-subpath-marker\n"))


def host_fixture() -> None:
    """The host directory the volume tests bind (under HOST_VOLUME_DIR) with its marker, world-readable."""
    rel, text = HOST_MARKER
    path = os.path.join(HOST_VOLUME_DIR, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    os.makedirs(os.path.join(HOST_VOLUME_DIR, "logs"), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)
    for top, dirs, files in os.walk(HOST_VOLUME_DIR):
        for name in dirs + files:
            os.chmod(os.path.join(top, name), 0o755)
    os.chmod(HOST_VOLUME_DIR, 0o755)


def pvc_fixture_live(image: str) -> None:
    """The named volume, made again and seeded by a throw-away container of ``image`` (the script uses alpine;
    local-up's busybox image has what it takes: sh, mkdir, echo)."""
    subprocess.run(["docker", "volume", "rm", PVC_CLAIM], capture_output=True)
    subprocess.run(["docker", "volume", "create", PVC_CLAIM], check=True, capture_output=True)
    script = " && ".join(
        "mkdir -p /data/%s && printf %%s '%s' > /data/%s" % (os.path.dirname(rel) or ".", text, rel)
        for rel, text in PVC_FILES
    )
    subprocess.run(["docker", "run", "--rm", "-v", PVC_CLAIM + ":/data", image, "sh", "-c", script], check=True)


def pvc_fixture_mock(osb: Any) -> None:
    """The same files in the mock's named volume (a directory of its volume store, made as Docker makes one)."""
    top = os.path.join(osb.volumes.dir, PVC_CLAIM)
    for rel, text in PVC_FILES:
        os.makedirs(os.path.dirname(os.path.join(top, rel)), exist_ok=True)
        with open(os.path.join(top, rel), "w") as f:
            f.write(text)


def redis_server() -> tuple[Any, str] | None:
    """(process, redis://127.0.0.1:PORT/0) of a throw-away redis-server for the Redis-backed pool tests (the
    workflow runs redis:7-alpine for them), or None without redis-server on PATH (those tests skip)."""
    import shutil

    from mock_opensandbox.runtime.holder import _die_with_parent  # SIGKILL when the runner dies, however it dies
    from mock_opensandbox.wire.relay import free_port
    from tiers.toolkit.waits import port_closed, wait_until

    exe = shutil.which("redis-server")
    if exe is None:
        print("redis-server not installed: the Redis-backed pool tests skip (apt-get install redis-server)")
        return None
    port = free_port()
    args = [
        exe,
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--save",
        "",
        "--appendonly",
        "no",
        "--dir",
        tempfile.gettempdir(),
    ]
    proc = subprocess.Popen(
        args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, preexec_fn=_die_with_parent(os.getpid())
    )
    if wait_until(lambda: not port_closed(port, 0.5), 10):
        return proc, "redis://127.0.0.1:%d/0" % port
    proc.kill()
    proc.wait()
    raise RuntimeError("redis-server did not listen on 127.0.0.1:%d" % port)


def _mock(args: argparse.Namespace) -> Any:
    from mock_opensandbox.server import MockOpenSandbox

    # the command line's timing: faithful = its defaults (execd start delay 0.2 s, stream close 1 s), fast =
    # --timing fast (docs/MOCK.md, Timing)
    kw: dict[str, Any] = {"allowed_host_paths": [HOST_VOLUME_DIR], "timing": args.timing}
    if args.like_live:  # the live stack's own settings (local-up.sh env), so both sides refuse the same creates
        kw["allowed_host_paths"] = [p for p in os.environ.get("OPENSANDBOX_ALLOWED_HOST_PATHS", "").split(":") if p]
        kw["egress_mode"] = os.environ.get("OSB_EGRESS_MODE") or None
    if args.timing == "faithful":
        kw.update(execd_start_delay=0.2, execd_close_delay=1.0)
    if args.jupyter_env:
        kw["jupyter_env"] = args.jupyter_env
    if args.image_dir:
        kw.update(image_dir=args.image_dir, image_cache=os.path.join(args.image_dir, "cache"))
    if args.execd_bin:
        kw["execd_bin"] = args.execd_bin
    return MockOpenSandbox(**kw).start()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tiers.flows.clients.upstream_e2e")
    p.add_argument("--target", choices=("live", "mock"), required=True)
    p.add_argument("--suite", choices=("python", "js"), default="python", help="tests/python or tests/javascript")
    p.add_argument("--files", nargs="+", help="test files (default: the code interpreter's; for js, all five)")
    p.add_argument(
        "--image", default=os.environ.get("OPENSANDBOX_CODE_INTERPRETER_IMAGE", "local/code-interpreter:py-bash")
    )
    p.add_argument("--jupyter-env")
    p.add_argument("--image-dir")
    p.add_argument("--execd-bin")
    p.add_argument("--timing", choices=("faithful", "fast"), default="faithful", help="the mock's timing")
    p.add_argument(
        "--like-live",
        action="store_true",
        help='the mock with the live stack\'s allowed host paths and egress mode (eval "$(./local-up.sh env)")',
    )
    p.add_argument("--json")
    p.add_argument("--jobs", type=int, default=1, help="tests run in parallel, one pytest process each")
    p.add_argument("--timeout", type=float, default=3000, help="seconds for one pytest process")
    args = p.parse_args(argv)
    if args.suite == "js":
        suite = prepare_js()
        files = args.files or list(JS_FILES)
    else:
        py = prepare()
        files = args.files or ["test_code_interpreter_e2e.py", "test_code_interpreter_e2e_sync.py"]
    osb = None
    host_fixture()
    if args.target == "live":
        base, key = os.environ["OPENSANDBOX_BASE_URL"], os.environ["OPENSANDBOX_API_KEY"]
        pvc_fixture_live(os.environ.get("OPENSANDBOX_BUSYBOX_IMAGE", "local/busybox:latest"))
    else:
        osb = _mock(args)
        base, key = osb.base_url, osb.api_key or ""
        pvc_fixture_mock(osb)
    domain = re.sub(r"/v1/?$", "", base.split("://", 1)[-1]).rstrip("/")
    redis = redis_server()
    if redis is not None:
        os.environ["OPENSANDBOX_TEST_REDIS_URL"] = redis[1]
    started = time.monotonic()
    try:
        if args.suite == "js":
            results = run_js(suite, domain, key, args.image, files, args.timeout, args.jobs)
        else:
            results = run(py, domain, key, args.image, files, timeout=args.timeout, jobs=args.jobs)
        wall = time.monotonic() - started
    finally:
        if osb is not None:
            osb.stop()
        if redis is not None:
            redis[0].terminate()
            redis[0].wait()
        if args.target == "live":
            subprocess.run(["docker", "volume", "rm", PVC_CLAIM], capture_output=True)  # leaves nothing behind
    for test, verdict in sorted(results.items()):
        print("%-8s %7.2fs %s" % (verdict, DURATIONS.get(test, 0.0), test))
    print("wall %.1f s, sum of test durations %.1f s" % (wall, sum(DURATIONS.get(t, 0.0) for t in results)))
    table = counts(results)
    for lang, row in sorted(table.items()):
        print("%-10s %s" % (lang, " ".join("%s=%d" % kv for kv in sorted(row.items()))))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "target": args.target,
                    "suite": args.suite,
                    "timing": args.timing if args.target == "mock" else None,
                    "results": results,
                    "counts": table,
                    "durations": {t: DURATIONS.get(t, 0.0) for t in results},
                    "wall_s": wall,
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
