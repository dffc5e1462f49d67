"""An MCP server built with the official SDK (``mcp``'s MCPServer), for the plugin tests.

Its working directory is the session's workspace; tools that the tests need to
observe from outside leave files there.
"""

from __future__ import annotations

import base64
import os
import pathlib
import time

import anyio
import anyio.from_thread
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import BlobResourceContents, EmbeddedResource, TextResourceContents

app = MCPServer("tools")


@app.tool()
async def echo(text: str) -> str:
    """Echo the text back, with this server's pid."""
    return f"echo {text} from {os.getpid()}"


@app.tool()
async def count(steps: int, ctx: Context) -> str:
    """Count to `steps`, reporting progress at each step."""
    for i in range(steps):
        await ctx.report_progress(i + 1, steps, f"step {i + 1}")
        await anyio.sleep(0.02)
    return f"counted to {steps}"


@app.tool()
async def wait_politely(ctx: Context) -> str:
    """Wait a minute; a cancel ends it at once (and leaves a file saying so)."""
    pathlib.Path("started-politely").write_text(str(os.getpid()))
    try:
        await anyio.sleep(60)
    except anyio.get_cancelled_exc_class():
        pathlib.Path("cancelled-politely").write_text("yes")
        raise
    return "waited"


@app.tool()
async def wait_stubbornly(ctx: Context) -> str:
    """Ignore cancellation: keep working (and reporting progress) for a minute."""
    pathlib.Path("started-stubbornly").write_text(str(os.getpid()))
    with anyio.CancelScope(shield=True):
        for i in range(1200):
            await ctx.report_progress(i + 1, 1200, "still working")
            await anyio.sleep(0.05)
    return "finished anyway"


@app.tool()
def sleep_then_write(seconds: float, ctx: Context) -> str:
    """A sync tool: the SDK runs it in a worker thread, which a cancel cannot interrupt.
    Sleep, report progress, then leave a file saying it finished."""
    pathlib.Path("started-sync").write_text(str(os.getpid()))
    time.sleep(seconds)
    anyio.from_thread.run(ctx.report_progress, 1, 1, "slept")
    pathlib.Path("finished-sync").write_text("yes")
    return "slept"


@app.tool()
async def crash() -> str:
    """Exit the server process in the middle of the call."""
    await anyio.sleep(0.05)
    os._exit(3)


@app.tool()
async def resources(lines: int) -> list[EmbeddedResource]:
    """Two embedded resources: a text file of ``lines`` lines, and a small binary blob."""
    text = "".join(f"line {i} of the file\n" for i in range(lines))
    return [EmbeddedResource(type="resource", resource=TextResourceContents(
                uri="file:///project/notes.txt", mimeType="text/plain", text=text)),
            EmbeddedResource(type="resource", resource=BlobResourceContents(
                uri="file:///project/logo.png", mimeType="image/png",
                blob=base64.b64encode(b"\x89PNG" + b"\0" * 96).decode()))]


@app.tool()
async def fail(reason: str) -> str:
    """Fail with a tool error (isError)."""
    raise ValueError(reason)


if __name__ == "__main__":
    app.run()
