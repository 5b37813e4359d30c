"""The real host's contract kit (agent-sandbox-client 0.4.0a6), run against any server: the mock (t2),
the mock with execd processes (t3) or a live server (t4). The host runs in a subprocess with HOME set to
a temporary home holding the installed plugin (demo.install_plugin)."""

from __future__ import annotations

import os
import re

import demo  # host_env / host / install_plugin helpers (the repository root is on sys.path: pyproject's pythonpath)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

CONTRACT_TESTS = {
    "test_declared_features_are_known",
    "test_describe_never_exposes_secret_defaults",
    "test_lifecycle",
    "test_kill_is_idempotent",
    "test_set_timeout",
    "test_pause_resume",
    "test_exec_run",
    "test_exec_exit_code_stderr_and_env",
    "test_exec_stream_order_and_single_exit",
    "test_exec_timeout_is_enforced",
    "test_process_list",
    "test_files_roundtrip",
    "test_files_binary_and_unicode",
    "test_files_directory_operations",
    "test_missing_file_is_a_typed_not_found",
    "test_ports_url",
    "test_undeclared_feature_fails_with_e8004",
    "test_secret_options_are_redacted_from_errors",
}


def run_kit(home: str, base_url: str, api_key: str | None, *options: str):
    """Run the kit; returns (returncode, output, names of passed tests, the final summary line)."""
    args = ["test", "--option", f"base_url={base_url}"]
    if api_key:
        args += ["--option", f"api_key={api_key}"]
    for opt in options:
        args += ["--option", opt]
    run = demo.host(home, *args, "opensandbox", "--", "-rA", "-q", "-p", "no:randomly", check=False)
    out = run.stdout + run.stderr
    passed = set(re.findall(r"^PASSED \S+::(test_\w+)", out, re.M))
    summaries = [ln for ln in out.splitlines() if re.search(r"\d+ passed", ln)]
    return run.returncode, out, passed, (summaries[-1] if summaries else "")


def assert_18_of_18(home: str, base_url: str, api_key: str | None, *options: str) -> None:
    code, out, passed, summary = run_kit(home, base_url, api_key, *options)
    assert code == 0, out[-4000:]
    assert passed == CONTRACT_TESTS, out[-4000:]
    assert re.search(r"\b18 passed\b", summary) and not re.search(r"failed|skipped|error|xfail", summary), summary
