"""A/B aid, not part of the benchmark: builds a *candidate* copy of the plugin with the changes proposed
from the measurements, so that `python -m bench --compare DEST` measures them against the current plugin
in the same interleaved jobs.

    .venv/bin/python bench/candidate_patch.py plugin /tmp/plugin-candidate
    .venv/bin/python -m bench --compare /tmp/plugin-candidate --cases cold,exec,files,flow

The changes (written against plugin/ at commit 8ea767e; an assertion fails loudly once the plugin moved on):
  1. provider.py becomes a launcher; the provider body moves to _provider.py, so its bytecode (and
     _osb_http's) can be cached with sys.pycache_prefix under ABX_PROVIDER_DATA_DIR, never in the hashed
     plugin root (the host sets PYTHONDONTWRITEBYTECODE and re-hashes the tree at every start).
  2. files.read answers base64 bytes that Server.send splices into the line (no json.dumps of a multi-MB
     string, no bytes->str copy).
  3. Server.send computes the secret list only for error answers.
  4. execd framing (v1.1.0 / latest) remembered per server, so a new sandbox's first command does not
     first POST argv, get a 400 and re-POST the shell string.
"""
import os
import shutil
import sys

src, dest = sys.argv[1], sys.argv[2]
shutil.rmtree(dest, ignore_errors=True)
shutil.copytree(src, dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
os.rename(os.path.join(dest, "provider.py"), os.path.join(dest, "_provider.py"))
open(os.path.join(dest, "provider.py"), "w").write('''#!/usr/bin/env python3
"""EPP/1 entry point (launcher). The provider lives in _provider.py so that its bytecode can be cached
under ABX_PROVIDER_DATA_DIR (sys.pycache_prefix), never in the hashed plugin root."""
import os
import sys

_data = os.environ.get("ABX_PROVIDER_DATA_DIR")
if _data:
    sys.pycache_prefix = os.path.join(_data, ".pycache")
    sys.dont_write_bytecode = False
else:
    sys.dont_write_bytecode = True
import _provider  # noqa: E402

if __name__ == "__main__":
    sys.exit(_provider.main())
''')
def patch(path, pairs):
    s = open(path).read()
    for old, new in pairs:
        assert s.count(old) == 1, (path, old[:80], s.count(old))
        s = s.replace(old, new)
    open(path, "w").write(s)
patch(os.path.join(dest, "_provider.py"), [
    ("sys.dont_write_bytecode = True          # never write __pycache__ into the (hashed) plugin root\n", ""),
    ('''        msg = {"jsonrpc": "2.0", **msg}
        secrets = self.secrets()
        if "error" in msg:
            msg["error"] = redact(msg["error"], secrets)''', '''        msg = {"jsonrpc": "2.0", **msg}
        if "error" in msg:
            msg["error"] = redact(msg["error"], self.secrets())
        res = msg.get("result")
        if isinstance(res, dict) and len(res) == 1 and isinstance(res.get("content_b64"), bytes):
            # base64 is JSON-safe ASCII: splice it into the line instead of json-encoding a huge str
            line = b"".join([b'{"jsonrpc":"2.0","id":', json.dumps(msg["id"]).encode(),
                             b',"result":{"content_b64":"', res["content_b64"], b'"}}'])
            if len(line) >= MAX_LINE_BYTES:
                err = EppError(-32000, f"The answer is {len(line)} bytes, over EPP's 8 MiB line limit.")
                line = json.dumps({"jsonrpc": "2.0", "id": msg["id"], "error": err.to_json()}).encode()
            with self._wlock:
                try:
                    self.wfile.write(line + b"\\n")
                    self.wfile.flush()
                except (OSError, ValueError):
                    self.closing.set()
            return'''),
    ('''    return {"content_b64": osb.b64(data)}''', '''    import base64
    return {"content_b64": base64.b64encode(data)}      # bytes: Server.send splices them into the line'''),
])
patch(os.path.join(dest, "_osb_http.py"), [
    ('''    def mode(self) -> str | None:
        mode = self.osb.cache.get(self.sandbox_id).get("framing")
        return mode if mode in (LEGACY, LATEST) else None

    def set_mode(self, mode: str) -> None:
        if self.mode != mode:
            self.osb.cache.update(self.sandbox_id, framing=mode)''', '''    def mode(self) -> str | None:
        mode = self.osb.cache.get(self.sandbox_id).get("framing")
        if mode not in (LEGACY, LATEST):
            # a new sandbox: assume what this server's sandboxes had so far (a 400 still corrects it)
            mode = self.osb.cache.get("*server*").get("framing")
        return mode if mode in (LEGACY, LATEST) else None

    def set_mode(self, mode: str) -> None:
        if self.osb.cache.get(self.sandbox_id).get("framing") != mode:
            self.osb.cache.update(self.sandbox_id, framing=mode)
        if self.osb.cache.get("*server*").get("framing") != mode:
            self.osb.cache.update("*server*", framing=mode)'''),
])
print("candidate in", dest)
