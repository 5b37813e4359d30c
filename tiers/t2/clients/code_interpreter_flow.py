"""opensandbox-code-interpreter 1.1.1 (pinned, unchanged; in the host venv: its pins fit) on a plain image
(no Jupyter): the sandbox part works, every code call fails the way the live stack fails. Shared by
tiers/t2/clients/test_official_code_interpreter.py (mock) and tiers/t4/server/test_live_clients.py (live).
``run_flow`` returns ``[(step, outcome)]``; outcomes are compared between mock and live by the tests,
and each one is also checked here against what the live stack answered (``EXPECTED``)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

# What the live stack answered (server 1.1.1, execd v1.0.19, local/python:3-slim without Jupyter;
# 2026-12-01 07:20 UTC, tiers/t4/server/test_live_clients.py prints the same table).
EXPECTED = [
    ("create (health check)", ("error", "SandboxReadyTimeoutException", "READY_TIMEOUT", None)),
    ("ping", ("ok", True)),
    ("is_healthy", ("ok", False)),
    ("commands still work", ("ok", "plain")),
    ("create_context python", ("error", "SandboxTimeoutException", "TIMEOUT", None)),
    ("run python", ("error", "SandboxApiException", "UNEXPECTED_RESPONSE", 500)),
    ("list_contexts", ("ok", 0)),
    ("delete_context", ("error", "SandboxApiException", "CONTEXT_NOT_FOUND", 404)),
]


def _outcome(fn) -> Any:
    try:
        return ("ok", fn())
    except Exception as e:  # the SDK's typed errors: class, code, status
        err = getattr(e, "error", None)
        return ("error", type(e).__name__, getattr(err, "code", None), getattr(e, "status_code", None))


def run_flow(domain: str, api_key: str, image: str) -> list[tuple[str, Any]]:
    from code_interpreter import CodeInterpreterSync
    from opensandbox import SandboxSync
    from opensandbox.config.connection_sync import ConnectionConfigSync

    cfg = ConnectionConfigSync(api_key=api_key, domain=domain, protocol="http", request_timeout=timedelta(seconds=60))
    owner = SandboxSync.create(
        image, connection_config=cfg, timeout=timedelta(minutes=10), entrypoint=["tail", "-f", "/dev/null"]
    )
    # the code calls hang on a plain image (execd waits for a Jupyter that is not there): a short request
    # timeout for them, on a second handle to the same sandbox
    short = ConnectionConfigSync(api_key=api_key, domain=domain, protocol="http", request_timeout=timedelta(seconds=3))
    sb = SandboxSync.connect(owner.id, connection_config=short, skip_health_check=True)
    out: list[tuple[str, Any]] = []
    try:
        out.append(
            (
                "create (health check)",
                _outcome(
                    lambda: (
                        CodeInterpreterSync.create(
                            sb,
                            ready_timeout=timedelta(seconds=1),
                            health_check_polling_interval=timedelta(seconds=0.25),
                        ).id
                    )
                ),
            )
        )
        ci = CodeInterpreterSync.create(sb, skip_health_check=True)
        out.append(("ping", _outcome(ci.ping)))
        out.append(("is_healthy", _outcome(ci.is_healthy)))
        out.append(
            (
                "commands still work",
                _outcome(lambda: "".join(m.text for m in ci.commands.run("echo plain").logs.stdout).strip()),
            )
        )
        out.append(("create_context python", _outcome(lambda: ci.codes.create_context("python").id)))
        out.append(("run python", _outcome(lambda: ci.codes.run("print(1)", language="python").id)))
        out.append(("list_contexts", _outcome(lambda: len(ci.codes.list_contexts("python")))))
        out.append(("delete_context", _outcome(lambda: ci.codes.delete_context("nope"))))
    finally:
        sb.close()
        owner.kill()
        owner.close()
    return out
