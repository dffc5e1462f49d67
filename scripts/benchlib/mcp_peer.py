"""The peer: the official MCP Python SDK over stdio, run as its own asyncio process.

``python mcp_peer.py server`` is the MCP server (the SDK's ``MCPServer``, FastMCP's
successor in mcp 2) with one tool, ``read``, that reads a file relative to its
working directory, the trivial tool both sides have. ``python mcp_peer.py client
SPEC`` is the client (``stdio_client`` + ``ClientSession``): it spawns the server,
times the spawn and handshake, sequential calls and calls with many in flight, and
prints the samples as one JSON object. The client runs in its own process and event
loop (asyncio), never mixed with the bench's trio.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import sys
import time
from typing import Any


def serve() -> None:
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("bench-peer")

    @server.tool()
    def read(path: str) -> str:
        """Read a small text file."""
        return pathlib.Path(path).read_text()

    server.run("stdio")


async def _session(spec: dict[str, Any]) -> dict[str, Any]:
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=sys.executable, args=[__file__, "server"],
                                   cwd=spec["workspace"])
    out: dict[str, Any] = {"startupMs": [], "rttMs": [], "throughput": []}
    args = {"path": spec["file"]}
    for i in range(spec["startups"] + 1):
        start = time.perf_counter()
        async with stdio_client(params) as (read, write), ClientSession(read, write) as s:
            await s.initialize()
            ready = time.perf_counter()
            if i == 0:  # the process also measures calls, once warm
                result = await s.call_tool("read", args)
                if result.is_error:
                    raise RuntimeError(f"the MCP read failed: {result}")
                out["content"] = result.content[0].text  # type: ignore[union-attr]
                for j in range(spec["warmup"] + spec["calls"]):
                    t = time.perf_counter()
                    await s.call_tool("read", args)
                    if j >= spec["warmup"]:
                        out["rttMs"].append((time.perf_counter() - t) * 1000)
                for _ in range(spec["rounds"]):
                    out["throughput"].append(await _flood(s, args, spec))
            else:
                out["startupMs"].append((ready - start) * 1000)
    return out


async def _flood(session: Any, args: dict[str, str], spec: dict[str, Any]) -> float:
    """Calls per second with ``inFlight`` calls outstanding at any time."""
    total = spec["floodCalls"]
    sent = 0

    async def worker() -> None:
        nonlocal sent
        while sent < total:
            sent += 1
            await session.call_tool("read", args)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(spec["inFlight"])))
    return float(total / (time.perf_counter() - start))


def main() -> int:
    if sys.argv[1:] == ["server"]:
        serve()
        return 0
    spec = json.loads(sys.argv[2])
    print(json.dumps(asyncio.run(_session(spec))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
