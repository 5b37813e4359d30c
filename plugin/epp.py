"""EPP/1, the host's side of the wire: JSON-RPC 2.0 over stdio, one JSON object per line.

A pure protocol loop: it knows nothing of OpenSandbox. ``Server.serve`` reads requests and calls
the hooks it was given (provider.py wires them):

* ``initialize(params) -> result``, answered inline (cheap, no I/O); ``shutdown`` is answered here;
* ``find(method) -> fn(request, params)`` or None (-32601); every such call runs on its own thread
  with a ``Request`` (its id and its ``$/cancel``) and returns its result, raises ``EppError``, or
  returns ``Deferred`` (answer now, stream afterwards: exec.start);
* ``map_error(exc, method) -> EppError`` for any other exception a method raised;
* ``on_exit(deadline)`` when input ends: it stops what answers in flight wait on, calls
  ``drain(deadline)`` and releases what it holds (without it the loop just drains).

``Server.send`` is the only writer of stdout. What it sends as an error, and everything logged to
stderr, passes ``errors.SECRETS``. Standard library only, Python >= 3.10. Imports here are what
every plugin start pays for.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from errors import SECRETS, EppError

TYPE_CHECKING = False  # (typing is not imported at start-up: it costs milliseconds)
if TYPE_CHECKING:
    from typing import Any, Callable

    Method = Callable[["Request", dict[str, Any]], Any]

MAX_LINE_BYTES = 8 * 1024 * 1024  # the host kills a plugin that writes a longer line
EXIT_GRACE = 2.0  # seconds answers in flight get once input ends (the host
# waits 3 s before SIGTERM)


class Request:
    """One in-flight request: its id and its cancellation ($/cancel)."""

    def __init__(self, rid: int | str | None) -> None:
        self.id = rid
        self.cancelled = threading.Event()
        self._callbacks: list[Callable[[], object]] = []
        self._lock = threading.Lock()

    def on_cancel(self, fn: Callable[[], object]) -> None:
        with self._lock:
            if not self.cancelled.is_set():
                self._callbacks.append(fn)
                return
        fn()

    def cancel(self) -> None:
        with self._lock:
            self.cancelled.set()
            callbacks, self._callbacks = self._callbacks, []
        for fn in callbacks:
            try:
                fn()
            except Exception:  # noqa: BLE001 - one failing callback must not stop the others
                pass


class Deferred:
    """A result sent now, plus work that continues afterwards (streaming after exec.start).
    ``prompt``: ``then`` writes its first line at once, waiting on nothing; the answer then leaves
    with that line, in one write (the host is woken once, not twice)."""

    def __init__(self, result: dict[str, Any], then: Callable[[], object], *, prompt: bool = False) -> None:
        self.result, self.then, self.prompt = result, then, prompt


class Base64:
    """Bytes a result carries as base64 text (files.read's ``content_b64``). Server.send encodes
    them piece by piece as it writes the line: the host reads a piece from the pipe while the next
    one is encoded, instead of waiting for all of it to be encoded first."""

    PIECE = 3 * 16384  # 48 KiB in, 64 KiB out: one default pipe buffer

    def __init__(self, data: bytes | bytearray) -> None:
        self.data = data

    def __len__(self) -> int:
        return (len(self.data) + 2) // 3 * 4

    def write_to(self, out: Any) -> None:
        from binascii import b2a_base64

        with memoryview(self.data) as view:
            for i in range(0, len(view), self.PIECE):
                out.write(b2a_base64(view[i : i + self.PIECE], newline=False))


class Workers:
    """Threads for the requests: a call runs on a thread that finished an earlier one and waits
    for the next (handing a call over costs a lock release), or on a new thread when none is idle.
    ``spare()`` starts one ahead of need. Idle threads end after IDLE seconds; all are daemons."""

    IDLE = 30.0

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: list[_Slot] = []

    def run(self, fn: Callable[..., object], *args: Any) -> None:
        with self._lock:
            slot = self._idle.pop() if self._idle else None
        if slot is None:
            slot = _Slot()
            threading.Thread(target=self._serve, args=(slot,), daemon=True, name="epp-worker").start()
        slot.job = (fn, args)
        slot.ready.release()

    def spare(self) -> None:
        """Start an idle thread now (off the critical path: after initialize was answered)."""
        slot = _Slot()
        with self._lock:
            self._idle.append(slot)
        threading.Thread(target=self._serve, args=(slot,), daemon=True, name="epp-worker").start()

    def _serve(self, slot: _Slot) -> None:
        while True:
            if not slot.ready.acquire(timeout=self.IDLE):
                with self._lock:
                    if slot in self._idle:  # nobody picked it: end
                        self._idle.remove(slot)
                        return
                slot.ready.acquire()  # picked as the wait ended: its job is coming
            job, slot.job = slot.job, None
            if job is not None:
                fn, args = job
                fn(*args)  # (Server._run answers every failure itself)
            with self._lock:
                self._idle.append(slot)


class _Slot:
    """One worker thread's mailbox: ``ready`` is released when ``job`` is set."""

    def __init__(self) -> None:
        self.ready = threading.Lock()
        self.ready.acquire()
        self.job: tuple[Callable[..., object], tuple[Any, ...]] | None = None


class Server:
    """The loop and the only writer of stdout; its hooks are described in this module's doc."""

    def __init__(
        self,
        rfile: Any,
        wfile: Any,
        *,
        initialize: Callable[[dict[str, Any]], dict[str, Any]],
        find: Callable[[str], Method | None],
        map_error: Callable[[Exception, str], EppError] | None = None,
        on_exit: Callable[[float], None] | None = None,
        name: str = "plugin",
    ) -> None:
        self.rfile, self.wfile, self.name = rfile, wfile, name  # name: the prefix of stderr lines
        self.initialize, self.find, self.map_error, self.on_exit = initialize, find, map_error, on_exit
        self._wlock = threading.Lock()
        self.requests: dict[int | str | None, Request] = {}
        self.closing = threading.Event()
        self._workers = Workers()

    # ---- the loop

    def serve(self) -> None:
        for line in iter(self._readline, b""):
            if line.isspace():  # (not strip(): that copies a multi-MB line)
                continue
            try:
                msg = json.loads(line)
            except (ValueError, RecursionError):  # RecursionError: absurdly deep nesting
                self.log_stderr("ignored a line that is not JSON")
                continue
            if isinstance(msg, dict):
                try:
                    self.dispatch(msg)
                except Exception as exc:  # noqa: BLE001 - a hook failed (initialize): answer, keep reading
                    rid = msg.get("id")
                    if isinstance(rid, (int, str)) and not isinstance(rid, bool):
                        err = exc if isinstance(exc, EppError) else self.internal_error(exc, str(msg.get("method")))
                        self.respond(rid, error=err)
            else:
                self.log_stderr("ignored a line that is not a JSON object")
        self.finish()

    def dispatch(self, msg: dict[str, Any]) -> None:
        method, rid, params = msg.get("method"), msg.get("id"), msg.get("params")
        if isinstance(rid, (bool, float, list, dict)):
            return  # not a JSON-RPC id: there is nobody to answer
        if not isinstance(method, str):
            if rid is not None and "result" not in msg and "error" not in msg:
                self.respond(rid, error=EppError(-32600, "Invalid Request: method must be a string."))
        elif params is not None and not isinstance(params, dict):
            if rid is not None:
                self.respond(rid, error=EppError(-32602, "Invalid params: params must be an object."))
        elif rid is None:  # a notification: only $/cancel means something
            target = (params or {}).get("id")
            if method == "$/cancel" and isinstance(target, (int, str)) and not isinstance(target, bool):
                req = self.requests.get(target)
                if req is not None:
                    req.cancel()
        elif method == "initialize":  # answered inline: cheap, no I/O
            self.respond(rid, self.initialize(params or {}))
            self._workers.spare()  # the next call's thread, started meanwhile
        elif method == "shutdown":
            self.closing.set()
            self.respond(rid, {})
        else:
            self.requests[rid] = req = Request(rid)
            self._workers.run(self._run, req, method, params or {})

    def _run(self, req: Request, method: str, params: dict[str, Any]) -> None:
        then: Callable[[], object] | None = None
        held = False
        try:
            fn = self.find(method)
            if fn is None:
                raise EppError(-32601, f"Method not found: {method}")
            result = fn(req, params)
            if isinstance(result, Deferred):
                then, held, result = result.then, result.prompt, result.result
            self.send({"id": req.id, "result": {} if result is None else result}, flush=not held)
        except EppError as exc:
            self.respond(req.id, error=exc)
        except Exception as exc:  # noqa: BLE001 - every failure becomes an answer
            self.respond(req.id, error=self.internal_error(exc, method))
        finally:
            self.requests.pop(req.id, None)
        if then is not None:
            try:
                then()
            except Exception as exc:  # noqa: BLE001 - the answer is out; all that is left is to log
                self.log_stderr(f"{method}: {type(exc).__name__}: {exc}")
            finally:
                if held:
                    self.flush()  # (normally done already by then()'s first line)

    def _readline(self) -> bytes:
        try:
            line: bytes = self.rfile.readline()
            return line
        except (OSError, ValueError):
            return b""

    # ---- output (the only writer of stdout)

    def send(self, msg: dict[str, Any], *, flush: bool = True) -> None:
        """Write one message; ``flush=False`` leaves it buffered for the next send() (Deferred.prompt)."""
        msg = {"jsonrpc": "2.0", **msg}
        if "error" in msg:
            msg["error"] = SECRETS.redact(msg["error"])
        res = msg.get("result")
        parts: list[bytes | Base64]
        if isinstance(res, dict) and len(res) == 1 and isinstance(res.get("content_b64"), Base64):
            # files.read: base64 is JSON-safe ASCII, so it goes into the line as it is instead of
            # json-encoding a multi-MB string (about 1.5x faster reads, measured in bench/)
            parts = [
                b'{"jsonrpc":"2.0","id":' + json.dumps(msg["id"]).encode() + b',"result":{"content_b64":"',
                res["content_b64"],
                b'"}}\n',
            ]
        else:
            try:
                line = json.dumps(msg, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
            except UnicodeEncodeError:  # lone surrogates: fall back to \u escapes
                line = json.dumps(msg, separators=(",", ":")).encode("ascii")
            parts = [line, b"\n"]  # not line + b"\n": that copies a multi-MB line
        size = sum(map(len, parts)) - 1
        if size >= MAX_LINE_BYTES:
            if "id" not in msg:
                self.log_stderr(f"dropped a {size}-byte notification (EPP line limit)")
                return
            err = EppError(
                -32000,
                f"The answer is {size} bytes, over EPP's 8 MiB line limit.",
                suggestion="Ask for less data at once (files: use offset/length).",
            )
            parts = [json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": err.to_json()}).encode(), b"\n"]
        with self._wlock:
            try:
                for part in parts:
                    if isinstance(part, Base64):
                        part.write_to(self.wfile)
                    else:
                        self.wfile.write(part)
                if flush:
                    self.wfile.flush()
            except (OSError, ValueError):
                self.closing.set()

    def flush(self) -> None:
        with self._wlock:
            try:
                self.wfile.flush()
            except (OSError, ValueError):
                self.closing.set()

    def respond(self, rid: int | str | None, result: Any = None, error: EppError | None = None) -> None:
        if error is not None:
            self.send({"id": rid, "error": error.to_json()})
        else:
            self.send({"id": rid, "result": {} if result is None else result})

    def notify(self, method: str, params: dict[str, Any]) -> None:
        self.send({"method": method, "params": params})

    def log_stderr(self, text: str) -> None:
        try:
            sys.stderr.write(SECRETS.redact(f"{self.name}: {text}\n"))
            sys.stderr.flush()
        except (OSError, ValueError):
            pass

    def internal_error(self, exc: Exception, method: str) -> EppError:
        """The answer to an exception a method raised (``map_error``, or a generic internal error)."""
        if self.map_error is not None:
            return self.map_error(exc, method)
        return EppError(-32603, f"internal error: {type(exc).__name__}: {exc}")

    # ---- end of input

    def finish(self) -> None:
        """stdin closed: ``on_exit(deadline)`` (which drains), or just drain."""
        self.closing.set()
        deadline = time.monotonic() + EXIT_GRACE
        if self.on_exit is not None:
            self.on_exit(deadline)
        else:
            self.drain(deadline)

    def drain(self, deadline: float) -> None:
        """Give requests in flight until ``deadline`` (time.monotonic()) to answer."""
        while self.requests and time.monotonic() < deadline:
            time.sleep(0.02)
