"""Recording scenario 27: the execd ``/code`` routes on a code-interpreter sandbox (local-up's
``local/code-interpreter:py-bash``, or $OPENSANDBOX_CODE_INTERPRETER_IMAGE), created with the image's
entrypoint as OpenSandbox's own e2e does (tests/python/tests/test_code_interpreter_e2e_sync.py at 3bb6fad).
Runs on one context are 0.3 s apart: the real execd holds a context's lock until its response stream has
ended, so a run sent at once can meet "session is busy" (components/execd/pkg/runtime/jupyter.go TryLock)."""

from __future__ import annotations

import os

from record.client import Session, created_id, execd_from
from record.scenarios_common import Ctx, Scenario, _create

CODE_IMAGE = os.environ.get("OPENSANDBOX_CODE_INTERPRETER_IMAGE") or "local/code-interpreter:py-bash"
ENTRYPOINT = ["/opt/code-interpreter/code-interpreter.sh"]
SSE = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}


def s27(s: Session, ctx: Ctx) -> None:
    body = ctx.default_create(timeout=600, image={"uri": CODE_IMAGE}, entrypoint=ENTRYPOINT)
    sid = created_id(_create(s, ctx, body))
    ex = execd_from(s, s.lc("GET", f"/v1/sandboxes/{sid}/endpoints/44772"))
    s.wait_ready(ex)  # unrecorded, as in 20

    def run(code: str, context: dict) -> None:
        ex.request("POST", "/code", json={"code": code, "context": context}, headers=SSE)
        s.sleep(0.3)

    r = ex.request("POST", "/code/context", json={"language": "python"})
    py = {"id": r.json()["id"], "language": "python"}
    run("print('hi')", py)
    run("kept = 41", py)
    run("kept + 1", py)
    run("import sys; sys.stderr.write('oops\\n')", py)
    run("1/0", py)
    run("def (:", py)
    run("from IPython.display import display, HTML; display(HTML('<b>x</b>'))", py)
    ex.get("/code/contexts?language=python")
    ex.get(f"/code/contexts/{py['id']}")
    run("echo from-bash; X=7", {"language": "bash"})
    run("echo $X", {"language": "bash"})
    run("1", {"id": "not-a-context", "language": "python"})
    ex.request("POST", "/code", json={"context": {"language": "python"}}, headers=SSE)
    ex.request("DELETE", f"/code/contexts/{py['id']}")
    ex.get(f"/code/contexts/{py['id']}")
    ex.request("DELETE", f"/code/contexts/{py['id']}")
    ex.request("DELETE", "/code/contexts?language=python")
    ex.get("/code/contexts?language=python")
    s.lc("DELETE", f"/v1/sandboxes/{sid}")


SCENARIOS = [
    Scenario(
        "27_code_interpreter",
        "execd /code on a code-interpreter sandbox: context create, runs with stdout, "
        "results, stderr, errors, display data, state, a bash default context, unknown context, empty code, "
        "context get/list/delete/delete-all",
        s27,
    ),
]
