"""A very small Chrome DevTools Protocol client for the dashboard test: starts Debian's headless
chromium (no browser download), attaches to its page over the DevTools WebSocket (frames from
mock_opensandbox.wire.websocket) and evaluates JavaScript / takes screenshots. Test-only; stdlib only."""

from __future__ import annotations

import base64
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from typing import Any

from mock_opensandbox.wire.websocket import OP_CLOSE, OP_TEXT, FrameReader, encode_frame

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def find_browser() -> str | None:
    from mock_opensandbox.runtime import optional

    if optional.off("chromium"):  # OSB_MOCK_NO=chromium: as without one
        return None
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


def _scratch_dirs() -> set:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "org.chromium.Chromium.*")))


class CDPError(RuntimeError):
    pass


class Browser:
    """``with Browser(profile_dir) as b: b.navigate(url); b.eval("1+1")``. The browser runs in its own
    process group and is killed (and waited for) on exit."""

    def __init__(self, profile: str, width: int = 1440, height: int = 820):
        exe = find_browser()
        if exe is None:
            raise CDPError("no chromium")
        self.profile = profile
        self._scratch_before = _scratch_dirs()
        self.proc = subprocess.Popen(
            [
                exe,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--no-first-run",
                "--no-default-browser-check",
                "--disable-extensions",
                "--disable-background-networking",
                "--disable-sync",
                "--mute-audio",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "--hide-scrollbars",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.sock: socket.socket | None = None
        self._id = 0
        self.events: list[dict[str, Any]] = []
        try:
            self._attach()
        except BaseException:
            self.close()
            raise

    def _attach(self) -> None:
        port_file = os.path.join(self.profile, "DevToolsActivePort")
        deadline = time.monotonic() + 30
        while not (os.path.exists(port_file) and open(port_file).read().strip()):
            if self.proc.poll() is not None:
                raise CDPError(f"chromium exited with {self.proc.returncode}")
            if time.monotonic() > deadline:
                raise CDPError("chromium did not open its DevTools port")
            time.sleep(0.05)
        port = int(open(port_file).read().split()[0])
        while True:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
                pages = [t for t in json.load(r) if t.get("type") == "page"]
            if pages:
                break
            if time.monotonic() > deadline:
                raise CDPError("chromium has no page target")
            time.sleep(0.05)
        ws_url = pages[0]["webSocketDebuggerUrl"]
        hostport, _, path = ws_url.split("://", 1)[1].partition("/")
        host, _, p = hostport.rpartition(":")
        self.sock = socket.create_connection((host, int(p)), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall(
            (
                f"GET /{path} HTTP/1.1\r\nHost: {hostport}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ).encode()
        )
        self.rfile = self.sock.makefile("rb")
        status = self.rfile.readline()
        if b" 101 " not in status:
            raise CDPError(f"DevTools handshake failed: {status!r}")
        while self.rfile.readline() not in (b"\r\n", b""):
            pass
        self.reader = FrameReader(self.rfile.read, require_mask=False)

    # -- protocol ----------------------------------------------------------------------------------
    def send(self, method: str, params: dict[str, Any] | None = None, timeout: float = 30.0) -> dict[str, Any]:
        assert self.sock is not None
        self._id += 1
        mid = self._id
        self.sock.sendall(
            encode_frame(
                OP_TEXT, json.dumps({"id": mid, "method": method, "params": params or {}}).encode(), mask=os.urandom(4)
            )
        )
        self.sock.settimeout(timeout)
        while True:
            frame = self.reader.read_frame()
            if frame.opcode == OP_CLOSE:
                raise CDPError("DevTools closed the connection")
            if frame.opcode != OP_TEXT:
                continue
            msg = json.loads(frame.payload)
            if msg.get("id") == mid:
                if "error" in msg:
                    raise CDPError(f"{method}: {msg['error']}")
                return msg.get("result", {})
            self.events.append(msg)

    def navigate(self, url: str) -> None:
        self.send("Page.enable")
        self.send("Page.navigate", {"url": url})

    def eval(self, expression: str) -> Any:
        res = self.send("Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True})
        if res.get("exceptionDetails"):
            raise CDPError(f"JS error: {res['exceptionDetails'].get('text')} in {expression[:80]}")
        return res.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 20.0) -> Any:
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                last = self.eval(expression)
            except CDPError:
                last = None
            if last:
                return last
            time.sleep(0.1)
        raise AssertionError(f"not true within {timeout} s: {expression} (last: {last!r})")

    def screenshot(self) -> bytes:
        return base64.b64decode(self.send("Page.captureScreenshot", {"format": "png"})["data"])

    # -- cleanup -----------------------------------------------------------------------------------
    def close(self) -> None:
        if self.sock is not None:
            try:
                self.sock.close()
            except OSError:
                pass
            self.sock = None
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # pragma: no cover
            pass
        # chromium's scratch dirs in the system temp dir (org.chromium.Chromium.*) outlive a killed browser
        for d in _scratch_dirs() - self._scratch_before:
            shutil.rmtree(d, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
