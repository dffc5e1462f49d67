"""Write (mutating): create or replace a file atomically, creating missing folders.

Once started it is not cancelled (the call manager shields it); the result's
details say what was done: ``{"path", "bytesWritten", "created"}``.
"""

from __future__ import annotations

from functools import partial

import trio

from host.tools.atomic import atomic_write
from host.tools.context import ToolContext
from host.workspace import Workspace
from protocol.tools import ToolResult, WriteArgs, ok_result


def write_file(ws: Workspace, args: WriteArgs) -> ToolResult:
    path = ws.resolve(args.path)  # again, right before the side effect
    written = atomic_write(ws, path, args.path, args.content.encode("utf-8"),
                           create_parents=True)
    shown = ws.relative(path)
    verb = "Created" if written.created else "Wrote"
    return ok_result(f"{verb} {shown} ({written.bytes_written} bytes)", details={
        "path": shown, "bytesWritten": written.bytes_written, "created": written.created,
    })


async def run(args: WriteArgs, ctx: ToolContext) -> ToolResult:
    # Not abandonable: a started write finishes (atomically) even if we are cancelled.
    return await trio.to_thread.run_sync(partial(write_file, ctx.workspace, args))
