"""A lean EPP/1 driver: starts plugin/provider.py the way the host does and talks NDJSON to it.

Deliberately synchronous (the caller reads stdout itself; one request at a time), so the numbers
show what the plugin costs and not what a host's event loop costs. The real host's own overhead is
measured separately by the whole-flow case.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PLUGIN = os.path.join(REPO, "plugin", "provider.py")


def plugin_argv(python: str, plugin: str = PLUGIN) -> list[str]:
    """The command the host runs: ``[runtime] command`` of the manifest next to ``plugin`` (e.g.
    ``["python3", "-S", "./provider.py"]``), with ``./`` elements made absolute in the plugin root as the
    host does, and the interpreter replaced by ``python`` (the bench measures the interpreter itself)."""
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


def host_env(data_dir: str) -> dict:
    """The scrubbed environment the host gives a plugin (epp-host-reference §1.1)."""
    keep = ("PATH", "HOME", "TMPDIR", "TEMP", "TMP", "LANG")
    env = {k: v for k, v in os.environ.items() if k in keep or k.startswith("LC_")}
    env.update({"ABX_PROVIDER_DATA_DIR": data_dir, "PYTHONDONTWRITEBYTECODE": "1"})
    return env


def init_params(data_dir: str, config: dict) -> dict:
    return {"protocol": "epp/1", "host": {"name": "bench", "version": "0"}, "provider_id": "opensandbox",
            "config": dict(config), "core": {"http_timeout": 30.0}, "locale": "en", "data_dir": data_dir}


class EppError(Exception):
    pass


class Plugin:
    def __init__(self, python: str, data_dir: str, config: dict | None = None, *, plugin: str = PLUGIN,
                 initialize: bool = True):
        os.makedirs(data_dir, mode=0o700, exist_ok=True)
        self.data_dir = data_dir
        self.argv = plugin_argv(python, plugin)
        self.proc = subprocess.Popen(self.argv, cwd=data_dir, env=host_env(data_dir),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     start_new_session=True, bufsize=1 << 16)
        self._next = 0
        self.stderr = b""
        self._err = threading.Thread(target=self._drain, daemon=True)
        self._err.start()
        if initialize:
            self.call("initialize", init_params(data_dir, config or {}))

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

    def exec(self, sandbox_id: str, cmd: str, args: list[str] | None = None, on_output=None,
             timeout: int = 300) -> int:
        """exec.start, then notifications until exec.exit (the host's commands.run path)."""
        rid = self.send("exec.start", {"sandbox_id": sandbox_id, "cmd": cmd, "args": list(args or []),
                                       "env": {}, "cwd": "", "user": "", "timeout": timeout})
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
                if not answered:        # the answer may come after the notifications; collect it
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
        if self.proc.poll() is None:
            try:
                self.send("shutdown", {})
                self.proc.stdin.close()
                self.proc.wait(timeout=5)
            except (OSError, ValueError, subprocess.TimeoutExpired):
                pass
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait(timeout=5)
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except (OSError, ValueError):
                pass
        self._err.join(2)
        try:
            self.proc.stderr.close()
        except OSError:
            pass

    def __enter__(self) -> "Plugin":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
