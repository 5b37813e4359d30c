"""OpenSandbox's own MCP server (``opensandbox-mcp`` 1.1.1) driven by an in-process MCP client (``mcp.Client``):
every one of its 19 tools with good input and with bad input, in one flow, against whatever server the
connection names. Runs inside .venv-agents (requirements-agents.txt), started by ``tiers.flows.clients.agent_suites.mcp_outcomes``:

    python tiers/flows/clients/mcp_flow.py DOMAIN API_KEY IMAGE      ->  one JSON object {step: outcome} on stdout

An outcome keeps what a client of the tool acts on: ``ok`` or ``error`` (the tool result's ``isError``), and for
some steps a value (a command's stdout and exit code, a file's content, a search's names), never an id, a time or
an address. The same flow on the mock and on live must give the same object (tiers/flows/clients/agent_suites_live.json).
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from typing import Any

from mcp import Client
from opensandbox.config import ConnectionConfig
from opensandbox_mcp.server import create_server

D = "/tmp/mcp-flow"


VOLATILE = (
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?"), "<time>"),
    (re.compile(r"\b(127\.0\.0\.1|localhost):\d+"), "<host:port>"),
    (re.compile(r"\b[0-9a-f]{32}\b"), "<hex32>"),
)
NUMBERS = {"execution_time", "timestamp", "execution_count", "cpu_count", "cpu_used_percentage", "memory_total_in_mib"}
NUMBERS |= {"memory_used_in_mib", "memory_used", "memory_total", "cpu_used", "size", "modified_at", "created_at"}
NUMBERS |= {"execution_time_in_millis"}


def shape(value: Any, key: str = "") -> Any:
    """The value without what differs between any two sandboxes or servers (ids, times, ports, measurements)."""
    if isinstance(value, dict):
        return {k: shape(v, k) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [shape(v) for v in value]
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return type(value).__name__ if key in NUMBERS else value
    text = str(value)
    for pattern, repl in VOLATILE:
        text = pattern.sub(repl, text)
    return text


def _payload(result: Any) -> Any:
    structured = getattr(result, "structured_content", None)
    if structured is not None:
        if isinstance(structured, dict) and list(structured) == ["result"]:  # a non-object return value, wrapped
            return structured["result"]
        return structured
    texts = [getattr(c, "text", "") for c in getattr(result, "content", []) or []]
    try:
        return json.loads("".join(texts))
    except ValueError:
        return "".join(texts)


async def flow(domain: str, api_key: str, image: str) -> dict[str, Any]:
    server = create_server(ConnectionConfig(domain=domain, api_key=api_key, protocol="http"))
    out: dict[str, Any] = {}
    async with Client(server) as client:

        async def call(step: str, tool: str, keep: Any = None, **args: Any) -> Any:
            result = await client.call_tool(tool, args)
            data = _payload(result)
            out[step] = ["error" if result.is_error else "ok", shape(keep(data) if keep is not None else data)]
            return data

        info = await call("create", "sandbox_create", image=image, timeout_seconds=600, ready_timeout_seconds=60)
        sid = info.get("sandbox_id") if isinstance(info, dict) else None
        await call("create: no image", "sandbox_create", image="", ready_timeout_seconds=5)
        if not sid:
            return out
        bad = "00000000-0000-0000-0000-000000000000"
        try:
            await call("info", "sandbox_get_info", keep=lambda d: d.get("status", {}).get("state"), sandbox_id=sid)
            await call("info: unknown id", "sandbox_get_info", sandbox_id=bad)
            await call("list", "sandbox_list", keep=lambda d: sid in json.dumps(d), filter={"states": ["Running"]})
            await call("list: bad state", "sandbox_list", filter={"states": 7})
            await call("connect", "sandbox_connect", sandbox_id=sid)
            await call("connect: unknown id", "sandbox_connect", sandbox_id=bad, connect_timeout_seconds=5)
            await call("health", "sandbox_healthcheck", keep=lambda d: d, sandbox_id=sid)
            await call(
                "metrics", "sandbox_get_metrics", keep=lambda d: sorted(d) if isinstance(d, dict) else d, sandbox_id=sid
            )
            await call("metrics: unknown id", "sandbox_get_metrics", sandbox_id=bad, connect_if_missing=False)
            await call("renew", "sandbox_renew", sandbox_id=sid, timeout_seconds=900)
            await call("renew: negative", "sandbox_renew", sandbox_id=sid, timeout_seconds=-5)
            await call("run", "command_run", sandbox_id=sid, command="echo hi")
            await call("run: exit 3", "command_run", sandbox_id=sid, command="exit 3")
            await call("run: bad cwd", "command_run", sandbox_id=sid, command="pwd", working_directory="/nope/nope")
            await call("interrupt: unknown id", "command_interrupt", sandbox_id=sid, execution_id="nope")
            await call("mkdir", "file_create_directories", sandbox_id=sid, entries=[{"path": D + "/d1", "mode": 755}])
            await call(
                "mkdir: under a file", "file_create_directories", sandbox_id=sid, entries=[{"path": "/etc/hostname/x"}]
            )
            await call("write", "file_write", sandbox_id=sid, path=D + "/a.txt", content="hello world\n")
            await call("write: read-only /proc", "file_write", sandbox_id=sid, path="/proc/nope", content="x")
            await call("read", "file_read", keep=lambda d: d, sandbox_id=sid, path=D + "/a.txt")
            await call("read: missing", "file_read", sandbox_id=sid, path=D + "/missing.txt")
            await call("read: a directory", "file_read", sandbox_id=sid, path=D)
            await call(
                "read: range",
                "file_read",
                keep=lambda d: d,
                sandbox_id=sid,
                path=D + "/a.txt",
                range_header="bytes=0-4",
            )
            await call(
                "search",
                "file_search",
                keep=lambda d: (
                    sorted(str(e.get("path", e)).rsplit("/", 1)[-1] for e in d) if isinstance(d, list) else d
                ),
                sandbox_id=sid,
                path=D,
                pattern="*.txt",
            )
            await call("search: missing dir", "file_search", sandbox_id=sid, path="/nope", pattern="*")
            await call(
                "replace",
                "file_replace_contents",
                sandbox_id=sid,
                entries=[{"path": D + "/a.txt", "old_content": "world", "new_content": "mcp"}],
            )
            await call("read after replace", "file_read", keep=lambda d: d, sandbox_id=sid, path=D + "/a.txt")
            await call(
                "replace: missing file",
                "file_replace_contents",
                sandbox_id=sid,
                entries=[{"path": D + "/x", "old_content": "a", "new_content": "b"}],
            )
            await call(
                "move", "file_move", sandbox_id=sid, entries=[{"source": D + "/a.txt", "destination": D + "/d1/b.txt"}]
            )
            await call(
                "move: missing source",
                "file_move",
                sandbox_id=sid,
                entries=[{"source": D + "/zzz", "destination": D + "/y"}],
            )
            await call("delete", "file_delete", sandbox_id=sid, paths=[D + "/d1/b.txt"])
            await call("delete: a directory", "file_delete", sandbox_id=sid, paths=[D + "/d1"])
            await call("rmdir", "file_delete_directories", sandbox_id=sid, paths=[D])
            await call(
                "endpoint",
                "sandbox_get_endpoint",
                keep=lambda d: sorted(d) if isinstance(d, dict) else d,
                sandbox_id=sid,
                port=8080,
            )
            await call("endpoint: port 0", "sandbox_get_endpoint", sandbox_id=sid, port=0)
        finally:
            await call("kill", "sandbox_kill", sandbox_id=sid)
        await call("kill: again", "sandbox_kill", sandbox_id=sid)
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(flow(*sys.argv[1:4])), sort_keys=True))
