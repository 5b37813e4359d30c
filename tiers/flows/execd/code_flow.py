"""The official code-interpreter SDK's flow (opensandbox-code-interpreter, unchanged), step by step, for
any server: the mock (tiers/t1/execd/test_code_interpreter_mock.py) or a live stack with a code-interpreter
image (tiers/t4/execd/test_live_code_interpreter.py). ``run_code_flow`` (sync classes) and
``run_code_flow_async`` (async classes, the same steps) return {step: "ok" | "FAIL: <why>"}; every step
runs even after a failure so the table compares step by step. The sandbox is created with the image's
entrypoint, as OpenSandbox's own e2e does (tests/python/tests/test_code_interpreter_e2e_sync.py at 3bb6fad):
the SDK's default entrypoint would not start the image's Jupyter."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta
from typing import Any, Callable

from code_interpreter.sync import CodeInterpreterSync
from opensandbox.config.connection_sync import ConnectionConfigSync
from opensandbox.sync import SandboxSync

__all__ = ["ENTRYPOINT", "STEPS", "run_code_flow", "run_code_flow_async"]

ENTRYPOINT = ["/opt/code-interpreter/code-interpreter.sh"]  # the image's (e2e: entrypoint=...)
# A run whose kernel reply never comes streams heartbeats forever, on execd as on the mock (finalizeExecution polls
# until an execution count or an error: components/execd/pkg/jupyter/execute/execute.go at 3bb6fad); seen once on
# the mock under load (an idle of another parent, then nothing). The step fails after this long instead of hanging.
RUN_DEADLINE_S = 120.0


def _bounded(fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
    """fn(*args, **kw), or AssertionError when it has not returned after RUN_DEADLINE_S (the call goes on in a
    daemon thread until its connection ends: the fixture's teardown)."""
    box: dict[str, Any] = {}

    def call() -> None:
        try:
            box["value"] = fn(*args, **kw)
        except BaseException as exc:  # noqa: BLE001 - handed back to the step
            box["error"] = exc

    t = threading.Thread(target=call, name="code-flow-run", daemon=True)
    t.start()
    t.join(RUN_DEADLINE_S)
    if t.is_alive():
        raise AssertionError("the run did not end in %.0f s: the kernel's reply never came" % RUN_DEADLINE_S)
    if "error" in box:
        raise box["error"]
    return box["value"]


def _text(ex: Any) -> str:
    return "".join(m.text for m in ex.logs.stdout)


def _err(ex: Any) -> str:
    return "".join(m.text for m in ex.logs.stderr)


def _steps(ci: Any) -> list[tuple[str, Callable[[], Any]]]:
    codes = ci.codes
    st: dict[str, Any] = {}

    def check(cond: bool, why: Any) -> None:
        if not cond:
            raise AssertionError(repr(why))

    def run(code: str, want: Callable[[Any], bool] | None = None, **kw: Any) -> Any:
        """A run whose output a step checks (the code is idempotent). The real execd ends the stream once the
        kernel's reply is in, which can be before the output, the result or the error it carries (QUIRKS.md,
        "/code with Jupyter"; seen live in "context keeps state" and "exception name"): one retry when the run
        lacks what the step looks for (``want``; default: anything at all). The real execd keeps a context locked
        until a run's stream has closed (after output the SDK may not have waited for): a run meanwhile is
        RUNTIME_ERROR "session is busy", tried again every 0.5 s."""
        got = want or (lambda ex: ex.error is not None or ex.result or ex.logs.stdout or ex.logs.stderr)
        # the async classes' run is bounded on their loop (_Blocking); the sync ones' in a thread
        once = codes.run if isinstance(codes, _Blocking) else (lambda c, **k: _bounded(codes.run, c, **k))
        ex, retried = once(code, **kw), False
        for _ in range(10):
            busy = ex.error is not None and "busy" in (ex.error.value or "")
            if not busy and (retried or got(ex)):
                break
            retried = retried or not busy
            time.sleep(0.5)
            ex = once(code, **kw)
        return ex

    def print_stdout() -> None:
        ex = run("print('hello')")
        check(_text(ex) == "hello\n" and ex.error is None, (_text(ex), ex.error))

    def expression() -> None:
        ex = run("6 * 7", want=lambda ex: bool(ex.result))
        check([r.text for r in ex.result] == ["42"] and (ex.execution_count or 0) > 0, (ex.result, ex.execution_count))

    def state_set() -> None:
        check(run("kept = 41").error is None, "error")

    def state_kept() -> None:
        ex = run("kept + 1", want=lambda ex: bool(ex.result))
        check([r.text for r in ex.result] == ["42"], ex.result)

    def stderr() -> None:
        ex = run("import sys; sys.stderr.write('oops\\n')")
        check("oops" in _err(ex), (_text(ex), _err(ex)))

    def exception() -> None:
        ex = run("1/0", want=lambda ex: ex.error is not None)
        check(
            ex.error is not None and ex.error.name == "ZeroDivisionError" and "division by zero" in ex.error.value,
            ex.error,
        )

    def syntax_error() -> None:
        ex = run("def (:", want=lambda ex: ex.error is not None)
        check(ex.error is not None and ex.error.name == "SyntaxError", ex.error)

    def cwd() -> None:
        ex = run("import os; print(os.getcwd())")
        check(_text(ex) == "/workspace\n", _text(ex))

    def create_context() -> None:
        st["py"] = codes.create_context("python")
        check(bool(st["py"].id) and st["py"].language == "python", st["py"])

    def context_run() -> None:
        ex = run("ctx_var = 'in ctx'; print(ctx_var)", context=st["py"])
        check(_text(ex) == "in ctx\n", _text(ex))

    def context_state() -> None:
        ex = run("ctx_var", want=lambda ex: bool(ex.result), context=st["py"])
        check([r.text for r in ex.result] == ["'in ctx'"], ex.result)

    def context_isolated() -> None:
        ex = run("ctx_var", want=lambda ex: ex.error is not None)
        check(ex.error is not None and ex.error.name == "NameError", ex.error)

    def bash_context() -> None:
        st["sh"] = codes.create_context("bash")
        check(st["sh"].language == "bash", st["sh"])

    def bash_run() -> None:
        ex = run("echo $((20 + 22))", context=st["sh"])
        check(_text(ex).strip() == "42", _text(ex))

    def bash_state() -> None:
        run("export FLOW_VAR=kept", context=st["sh"])
        ex = run("echo $FLOW_VAR", context=st["sh"])
        check(_text(ex).strip() == "kept", _text(ex))

    def list_python() -> None:
        ids = {c.id for c in codes.list_contexts("python")}
        check(st["py"].id in ids and len(ids) >= 2, ids)  # the default context and the explicit one

    def get_context() -> None:
        c = codes.get_context(st["py"].id)
        check(c.id == st["py"].id and c.language == "python", c)

    def delete_context() -> None:
        codes.delete_context(st["py"].id)
        check(st["py"].id not in {c.id for c in codes.list_contexts("python")}, "still listed")

    def get_deleted() -> None:
        try:
            codes.get_context(st["py"].id)
        except Exception as exc:  # noqa: BLE001 - the SDK's typed error for a 404
            check("not found" in str(exc), exc)
            return
        raise AssertionError("no error")

    def delete_all() -> None:
        codes.delete_contexts("python")
        check(codes.list_contexts("python") == [], codes.list_contexts("python"))

    def bash_survives() -> None:
        check([c.id for c in codes.list_contexts("bash")] == [st["sh"].id], codes.list_contexts("bash"))

    def default_again() -> None:  # a new default context after delete-all
        ex = run("print('again')")
        check(_text(ex) == "again\n", _text(ex))

    def run_in_deleted() -> None:
        ex = None
        try:
            ex = codes.run("1", context=st["py"])
        except Exception as exc:  # noqa: BLE001 - the SDK raises for the 500
            check("context not found" in str(exc), exc)
            return
        check(ex is not None and ex.error is not None, ex)

    return [
        ("print stdout", print_stdout),
        ("expression result + execution_count", expression),
        ("state set", state_set),
        ("state kept", state_kept),
        ("stderr", stderr),
        ("exception name", exception),
        ("syntax error name", syntax_error),
        ("cwd /workspace", cwd),
        ("create python context", create_context),
        ("run in context", context_run),
        ("context keeps state", context_state),
        ("contexts are isolated", context_isolated),
        ("create bash context", bash_context),
        ("bash run", bash_run),
        ("bash keeps state", bash_state),
        ("list python contexts", list_python),
        ("get context", get_context),
        ("delete context", delete_context),
        ("get deleted context", get_deleted),
        ("run in deleted context", run_in_deleted),
        ("delete all python", delete_all),
        ("bash context survives", bash_survives),
        ("new default context", default_again),
    ]


STEPS = 2 + 23  # sandbox create + interpreter ready, then _steps


def _table(ci: Any, out: dict[str, str]) -> None:
    for name, step in _steps(ci):
        try:
            step()
            out[name] = "ok"
        except Exception as exc:  # noqa: BLE001 - every step runs; the table records why
            out[name] = "FAIL: %s" % str(exc)[:200]


def run_code_flow(
    base_url: str, api_key: str, image: str, *, ready_timeout: float = 60, entrypoint: list[str] | None = ENTRYPOINT
) -> dict[str, str]:
    domain = base_url.split("://", 1)[-1].rstrip("/")
    cfg = ConnectionConfigSync(api_key=api_key, domain=domain, protocol="http", request_timeout=timedelta(seconds=60))
    out: dict[str, str] = {}
    sb = SandboxSync.create(image, connection_config=cfg, timeout=timedelta(minutes=10), entrypoint=entrypoint)
    out["sandbox create"] = "ok"
    try:
        try:
            ci = CodeInterpreterSync.create(sb, ready_timeout=timedelta(seconds=ready_timeout))
            out["interpreter ready"] = "ok"
        except Exception as exc:  # noqa: BLE001 - the table records why
            out["interpreter ready"] = "FAIL: %s" % exc
            return out
        _table(ci, out)
    finally:
        try:
            sb.kill()
        except Exception as exc:  # noqa: BLE001 - a sandbox gone before the end (expired) still shows its table
            out["sandbox kill"] = "FAIL: %s" % exc
    return out


class _Blocking:
    """The async service's methods run to completion on one loop, so the sync steps drive the async classes."""

    def __init__(self, loop: asyncio.AbstractEventLoop, target: Any):
        self._loop, self._target = loop, target

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._target, name)
        if name == "codes":
            return _Blocking(self._loop, attr)
        if not callable(attr):
            return attr
        if name == "run":  # a run is bounded (RUN_DEADLINE_S): the cancelled stream closes its connection
            return lambda *a, **kw: self._loop.run_until_complete(asyncio.wait_for(attr(*a, **kw), RUN_DEADLINE_S))
        return lambda *a, **kw: self._loop.run_until_complete(attr(*a, **kw))


def run_code_flow_async(
    base_url: str, api_key: str, image: str, *, ready_timeout: float = 60, entrypoint: list[str] | None = ENTRYPOINT
) -> dict[str, str]:
    """The same steps through code_interpreter.CodeInterpreter and opensandbox.Sandbox (asyncio)."""
    from code_interpreter import CodeInterpreter
    from opensandbox import Sandbox
    from opensandbox.config import ConnectionConfig

    domain = base_url.split("://", 1)[-1].rstrip("/")
    loop = asyncio.new_event_loop()
    out: dict[str, str] = {}
    try:
        cfg = ConnectionConfig(api_key=api_key, domain=domain, protocol="http", request_timeout=timedelta(seconds=60))
        sb = loop.run_until_complete(
            Sandbox.create(image, connection_config=cfg, timeout=timedelta(minutes=10), entrypoint=entrypoint)
        )
        out["sandbox create"] = "ok"
        try:
            try:
                ci = loop.run_until_complete(CodeInterpreter.create(sb, ready_timeout=timedelta(seconds=ready_timeout)))
                out["interpreter ready"] = "ok"
            except Exception as exc:  # noqa: BLE001 - the table records why
                out["interpreter ready"] = "FAIL: %s" % exc
                return out
            _table(_Blocking(loop, ci), out)
        finally:
            loop.run_until_complete(sb.kill())
            loop.run_until_complete(sb.close())
    finally:
        loop.close()
    return out
