"""A small EPP/1 client for tests: JSON-RPC 2.0 over a plugin's stdio, one JSON object per line.

It starts ``plugin/provider.py`` the way the host does (scrubbed environment, cwd = the data dir,
ABX_PROVIDER_DATA_DIR, a new session) and checks every line the plugin writes: a JSON object,
at most 8 MiB (epp-host-reference §1.2). A violation is recorded in ``violations``.

    with EppClient(data_dir, {"base_url": url, "api_key": key}) as epp:
        sb = epp.call("sandbox.create", {"template": "base", "timeout": 300})
        pid, chunks, code = epp.exec_stream(sb["sandbox_id"], "sh", ["-c", "echo hi"])
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
import time
from typing import Any

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PLUGIN = os.path.join(REPO, "plugin", "launch.py")   # what the manifest runs
MAX_LINE_BYTES = 8 * 1024 * 1024


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
    def __init__(self, data_dir: str, config: dict | None = None, *, python: str | None = None,
                 core: dict | None = None, initialize: bool = True, env: dict | None = None):
        self.data_dir = data_dir
        os.makedirs(data_dir, mode=0o700, exist_ok=True)
        base_env = {k: v for k, v in os.environ.items() if k in ("PATH", "HOME", "LANG", "TMPDIR") or k.startswith("LC_")}
        base_env.update({"ABX_PROVIDER_DATA_DIR": data_dir, "PYTHONDONTWRITEBYTECODE": "1"})
        base_env.update(env or {})
        self.proc = subprocess.Popen([python or sys.executable, PLUGIN], cwd=data_dir, env=base_env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True)
        self._ids = itertools.count(1)
        self._pending: dict[int, queue.Queue] = {}
        self._streams: dict[str, queue.Queue] = {}
        self._lock = threading.Lock()
        self._wlock = threading.Lock()
        self.notifications: list[dict] = []
        self.violations: list[str] = []
        self.lines: list[bytes] = []
        self.stderr = b""
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._err_reader = threading.Thread(target=self._read_err, daemon=True)
        self._err_reader.start()
        self.init_result = None
        if initialize:
            self.init_result = self.call("initialize", {
                "protocol": "epp/1", "host": {"name": "tests", "version": "0"}, "provider_id": "opensandbox",
                "config": dict(config or {}), "core": core or {"http_timeout": 30.0}, "locale": "en",
                "data_dir": data_dir}, timeout=15)

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

    def request(self, method: str, params: dict | None = None) -> tuple[int, queue.Queue]:
        rid = next(self._ids)
        q: queue.Queue = queue.Queue()
        with self._lock:
            self._pending[rid] = q
        self.send({"id": rid, "method": method, "params": params or {}})
        return rid, q

    def wait(self, rid: int, q: queue.Queue, timeout: float = 60.0) -> Any:
        try:
            msg = q.get(timeout=timeout)
        except queue.Empty:
            raise TimeoutError(f"no answer to request {rid} within {timeout}s; stderr: "
                               f"{self.stderr[-2000:].decode(errors='replace')}") from None
        finally:
            with self._lock:
                self._pending.pop(rid, None)
        if msg is None:
            raise EOFError(f"plugin exited (rc={self.proc.poll()}); stderr: "
                           f"{self.stderr[-2000:].decode(errors='replace')}")
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

    def exec_stream(self, sandbox_id: str, cmd: str, args: list | None = None, *, timeout: float = 60,
                    wait: float | None = None, **extra) -> tuple[str, list[dict], int]:
        """exec.start, then collect every notification up to exec.exit: (pid, notifications, code)."""
        params = {"sandbox_id": sandbox_id, "cmd": cmd, "args": list(args or []), "env": {}, "cwd": "",
                  "user": "", "timeout": timeout, **extra}
        res = self.call("exec.start", params, timeout=timeout + 5)
        pid = str(res["process_id"])
        notes = list(self.events(pid, timeout=wait or timeout + 10))
        return pid, notes, int(notes[-1]["params"]["exit_code"])

    @staticmethod
    def joined(notes: list[dict], stream: str = "stdout") -> str:
        return "".join(n["params"]["data"] for n in notes
                       if n.get("method") == "exec.output" and n["params"].get("stream") == stream)

    def close(self, timeout: float = 5.0) -> int | None:
        if self.proc.poll() is None:
            try:
                self.call("shutdown", {}, timeout=2)
            except Exception:  # noqa: BLE001
                pass
            try:
                self.proc.stdin.close()
            except OSError:
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait(timeout=5)
        for stream in (self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass
        self._reader.join(2)
        self._err_reader.join(2)
        return self.proc.returncode

    def __enter__(self) -> EppClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def wait_until(predicate, timeout: float = 10.0, interval: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
