"""EPP/1 clients: JSON-RPC 2.0 over a plugin's stdio, one JSON object per line. Both start the plugin
the way the host does (the manifest's [runtime] command, a scrubbed environment, cwd = the data
dir, ABX_PROVIDER_DATA_DIR, PYTHONDONTWRITEBYTECODE, a new session: epp-host-reference §1.1).

* ``EppClient``, for tests: a reader thread routes answers and notifications, and checks every
  line the plugin writes (a JSON object, at most 8 MiB: §1.2); a violation lands in ``violations``.

      with EppClient(data_dir, {"base_url": url, "api_key": key}) as epp:
          sb = epp.call("sandbox.create", {"template": "base", "timeout": 300})
          pid, notes, code = epp.exec_stream(sb["sandbox_id"], "sh", ["-c", "echo hi"])

* ``Plugin``, for bench/: deliberately synchronous (the caller reads stdout itself, one request at
  a time), so the numbers show what the plugin costs and not what an event loop costs.
"""

from __future__ import annotations

import itertools
import json
import os
import queue
import signal
import subprocess
import sys
import threading
from typing import Any

from tiers.toolkit.plugin import LAUNCH
from tiers.toolkit.procs import close_and_wait
from tiers.toolkit.waits import wait_until  # noqa: F401 - re-exported: tests import it from here

PLUGIN = LAUNCH  # what the manifest runs
MAX_LINE_BYTES = 8 * 1024 * 1024


def plugin_argv(python: str, plugin: str = PLUGIN) -> list[str]:
    """The command the host runs: ``[runtime] command`` of the manifest next to ``plugin``
    (``["python3", "-S", "./launch.py"]``), ``./`` parts made absolute in the plugin root as the host
    does, and the interpreter replaced by ``python``. ``plugin`` is any file of the plugin root."""
    root = os.path.dirname(os.path.abspath(plugin))
    command = ["python3", "./" + os.path.basename(plugin)]
    try:
        import tomllib

        with open(os.path.join(root, "abx-provider.toml"), "rb") as fh:
            cmd = tomllib.load(fh).get("runtime", {}).get("command")
        if isinstance(cmd, list) and cmd and all(isinstance(c, str) for c in cmd):
            command = cmd
    except (ImportError, OSError, ValueError):
        pass
    argv = []
    for i, part in enumerate(command):
        if i == 0 and os.path.basename(part).startswith("python"):
            argv.append(python)
        elif part.startswith("./"):
            argv.append(os.path.join(root, part[2:]))
        else:
            argv.append(part)
    return argv


def interpreter_flags(plugin: str = PLUGIN) -> list[str]:
    """The interpreter options of the manifest command (e.g. ["-S"])."""
    flags = []
    for part in plugin_argv("python", plugin)[1:]:
        if not part.startswith("-"):
            break
        flags.append(part)
    return flags


def host_env(data_dir: str, extra: dict | None = None) -> dict:
    """The scrubbed environment the host gives a plugin (epp-host-reference §1.1)."""
    keep = ("PATH", "HOME", "TMPDIR", "TEMP", "TMP", "LANG")
    env = {k: v for k, v in os.environ.items() if k in keep or k.startswith("LC_")}
    env.update({"ABX_PROVIDER_DATA_DIR": data_dir, "PYTHONDONTWRITEBYTECODE": "1"})
    env.update(extra or {})
    return env


def init_params(data_dir: str, config: dict | None = None, core: dict | None = None, host: str = "tests") -> dict:
    return {
        "protocol": "epp/1",
        "host": {"name": host, "version": "0"},
        "provider_id": "opensandbox",
        "config": dict(config or {}),
        "core": core or {"http_timeout": 30.0},
        "locale": "en",
        "data_dir": data_dir,
    }


def spawn(python: str, data_dir: str, *, plugin: str = PLUGIN, env: dict | None = None) -> subprocess.Popen:
    os.makedirs(data_dir, mode=0o700, exist_ok=True)
    return subprocess.Popen(
        plugin_argv(python, plugin),
        cwd=data_dir,
        env=host_env(data_dir, env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
        bufsize=1 << 16,
    )


def stop(proc: subprocess.Popen, shutdown, timeout: float = 5.0) -> int | None:
    """Ask nicely (``shutdown()`` sends the request), close stdin, wait; then kill the session."""
    if proc.poll() is None:
        try:
            shutdown()
        except Exception:  # noqa: BLE001 - a plugin that cannot take the request is killed below
            pass
        close_and_wait(proc, timeout, kill=lambda: os.killpg(proc.pid, signal.SIGKILL))  # the plugin's whole session
    for stream in (proc.stdin, proc.stdout):
        try:
            stream.close()
        except (OSError, ValueError):
            pass
    return proc.returncode


class RpcError(Exception):
    def __init__(self, error: dict):
        self.code = error.get("code")
        self.message = str(error.get("message", ""))
        self.data = error.get("data") if isinstance(error.get("data"), dict) else {}
        super().__init__(f"[{self.code}] {self.message}")

    @property
    def sdk_code(self) -> str | None:
        return self.data.get("sdk_code")


class EppClient:
    def __init__(
        self,
        data_dir: str,
        config: dict | None = None,
        *,
        python: str | None = None,
        core: dict | None = None,
        initialize: bool = True,
        env: dict | None = None,
        plugin: str = PLUGIN,
    ):
        self.data_dir = data_dir
        self.proc = spawn(python or sys.executable, data_dir, plugin=plugin, env=env)
        self._ids = itertools.count(1)
        self._pending: dict[int, queue.Queue] = {}
        self._streams: dict[str, queue.Queue] = {}
        self._lock = threading.Lock()
        self._wlock = threading.Lock()
        self.notifications: list[dict] = []
        self.violations: list[str] = []
        self.lines: list[bytes] = []
        self.stderr = b""  # its last 64 KiB
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._err_reader = threading.Thread(target=self._read_err, daemon=True)
        self._err_reader.start()
        self.init_result = None
        if initialize:
            self.init_result = self.call("initialize", init_params(data_dir, config, core), timeout=15)

    # ---- plumbing

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            if len(line) > MAX_LINE_BYTES:
                self.violations.append(f"line of {len(line)} bytes")
                continue
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                self.violations.append(f"not JSON: {line[:200]!r}")
                continue
            if not isinstance(msg, dict):
                self.violations.append(f"not an object: {line[:200]!r}")
                continue
            if "id" in msg and ("result" in msg or "error" in msg):
                with self._lock:
                    q = self._pending.get(msg["id"])
                if q is not None:
                    q.put(msg)
                continue
            self.notifications.append(msg)
            params = msg.get("params") if isinstance(msg.get("params"), dict) else {}
            if "process_id" in params:
                self._stream(str(params["process_id"])).put(msg)
        with self._lock:
            for q in self._pending.values():
                q.put(None)
            for q in self._streams.values():
                q.put(None)

    def _read_err(self) -> None:
        for chunk in iter(lambda: self.proc.stderr.read1(65536), b""):
            self.stderr = (self.stderr + chunk)[-65536:]

    def _stream(self, pid: str) -> queue.Queue:
        with self._lock:
            return self._streams.setdefault(pid, queue.Queue())

    def send(self, msg: dict) -> None:
        data = (json.dumps({"jsonrpc": "2.0", **msg}) + "\n").encode()
        with self._wlock:
            self.proc.stdin.write(data)
            self.proc.stdin.flush()

    # ---- API

    def expect(self, rid) -> queue.Queue:
        """The queue the answer to ``rid`` will arrive on (register before sending)."""
        q: queue.Queue = queue.Queue()
        with self._lock:
            self._pending[rid] = q
        return q

    def request(self, method: str, params: dict | None = None) -> tuple[int, queue.Queue]:
        rid = next(self._ids)
        q = self.expect(rid)
        self.send({"id": rid, "method": method, "params": params or {}})
        return rid, q

    def answer(self, rid, q: queue.Queue, timeout: float = 60.0) -> dict:
        """The whole answer message to ``rid`` (result or error)."""
        try:
            msg = q.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(
                f"no answer to request {rid!r} within {timeout}s; stderr: "
                f"{self.stderr[-2000:].decode(errors='replace')}"
            ) from None
        finally:
            with self._lock:
                self._pending.pop(rid, None)
        if msg is None:
            raise EOFError(
                f"plugin exited (rc={self.proc.poll()}); stderr: {self.stderr[-2000:].decode(errors='replace')}"
            )
        return msg

    def wait(self, rid: int, q: queue.Queue, timeout: float = 60.0) -> Any:
        msg = self.answer(rid, q, timeout)
        if "error" in msg:
            raise RpcError(msg["error"])
        return msg["result"]

    def call(self, method: str, params: dict | None = None, timeout: float = 60.0) -> Any:
        rid, q = self.request(method, params)
        return self.wait(rid, q, timeout)

    def cancel(self, rid: int) -> None:
        self.send({"method": "$/cancel", "params": {"id": rid}})

    def events(self, pid, timeout: float = 60.0):
        """Notifications of one process until (and including) its exec.exit."""
        q = self._stream(str(pid))
        while True:
            try:
                msg = q.get(timeout=timeout)
            except queue.Empty:
                raise TimeoutError(f"no notification for {pid} within {timeout}s") from None
            if msg is None:
                raise EOFError("plugin exited while streaming")
            yield msg
            if msg.get("method") == "exec.exit":
                return

    def exec_stream(
        self,
        sandbox_id: str,
        cmd: str,
        args: list | None = None,
        *,
        timeout: float = 60,
        wait: float | None = None,
        **extra,
    ) -> tuple[str, list[dict], int]:
        """exec.start, then collect every notification up to exec.exit: (pid, notifications, code)."""
        params = {
            "sandbox_id": sandbox_id,
            "cmd": cmd,
            "args": list(args or []),
            "env": {},
            "cwd": "",
            "user": "",
            "timeout": timeout,
            **extra,
        }
        res = self.call("exec.start", params, timeout=timeout + 5)
        pid = str(res["process_id"])
        notes = list(self.events(pid, timeout=wait or timeout + 10))
        return pid, notes, int(notes[-1]["params"]["exit_code"])

    @staticmethod
    def joined(notes: list[dict], stream: str = "stdout") -> str:
        return "".join(
            n["params"]["data"]
            for n in notes
            if n.get("method") == "exec.output" and n["params"].get("stream") == stream
        )

    def close(self, timeout: float = 5.0) -> int | None:
        code = stop(self.proc, lambda: self.call("shutdown", {}, timeout=2), timeout)
        try:
            self.proc.stderr.close()
        except OSError:
            pass
        self._reader.join(2)
        self._err_reader.join(2)
        return code

    def __enter__(self) -> EppClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class EppError(Exception):
    """An error answer (or the plugin's exit), for the bench driver."""


class Plugin:
    """The bench's lean synchronous driver (no reader thread)."""

    def __init__(
        self, python: str, data_dir: str, config: dict | None = None, *, plugin: str = PLUGIN, initialize: bool = True
    ):
        self.data_dir = data_dir
        self.argv = plugin_argv(python, plugin)
        self.proc = spawn(python, data_dir, plugin=plugin)
        self._next = 0
        self.stderr = b""
        self._err = threading.Thread(target=self._drain, daemon=True)
        self._err.start()
        if initialize:
            self.call("initialize", init_params(data_dir, config, host="bench"))

    def _drain(self) -> None:
        for chunk in iter(lambda: self.proc.stderr.read1(65536), b""):
            self.stderr = (self.stderr + chunk)[-65536:]

    def send(self, method: str, params: dict) -> int:
        self._next += 1
        line = json.dumps({"jsonrpc": "2.0", "id": self._next, "method": method, "params": params})
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()
        return self._next

    def read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise EppError(f"plugin exited (rc={self.proc.poll()}): {self.stderr[-1500:].decode(errors='replace')}")
        return json.loads(line)

    def call(self, method: str, params: dict):
        rid = self.send(method, params)
        while True:
            msg = self.read()
            if msg.get("id") == rid and ("result" in msg or "error" in msg):
                if "error" in msg:
                    raise EppError(f"{method}: {msg['error']}")
                return msg["result"]

    def exec(self, sandbox_id: str, cmd: str, args: list[str] | None = None, on_output=None, timeout: int = 300) -> int:
        """exec.start, then notifications until exec.exit (the host's commands.run path)."""
        rid = self.send(
            "exec.start",
            {
                "sandbox_id": sandbox_id,
                "cmd": cmd,
                "args": list(args or []),
                "env": {},
                "cwd": "",
                "user": "",
                "timeout": timeout,
            },
        )
        answered = False
        while True:
            msg = self.read()
            method = msg.get("method")
            if method == "exec.output":
                if on_output is not None:
                    p = msg["params"]
                    on_output(p.get("stream"), p.get("data", ""))
            elif method == "exec.exit":
                code = int(msg["params"]["exit_code"])
                if not answered:  # the answer may come after the notifications; collect it
                    self._until(rid)
                return code
            elif msg.get("id") == rid:
                if "error" in msg:
                    raise EppError(f"exec.start: {msg['error']}")
                answered = True

    def _until(self, rid: int) -> None:
        while True:
            msg = self.read()
            if msg.get("id") == rid:
                if "error" in msg:
                    raise EppError(str(msg["error"]))
                return

    def close(self) -> None:
        stop(self.proc, lambda: self.send("shutdown", {}))
        self._err.join(2)
        try:
            self.proc.stderr.close()
        except OSError:
            pass

    def __enter__(self) -> Plugin:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
