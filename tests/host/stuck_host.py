"""A real host with two extra tools whose bodies block a worker thread forever:
``Stuck`` (mutating, as a write stuck in the kernel would) and ``StuckRead``
(read-only: a blocking open of the FIFO ``path`` of its workspace, which nobody ever
writes, on a reader thread like ``Read``'s, as a read of a hung file system would):
``python tests/host/stuck_host.py``."""

from __future__ import annotations

import sys
import threading

import msgspec
import trio

from host.main import main
from host.tools import TOOLS, ToolContext, ToolSpec
from host.tools.context import run_abandonable
from protocol.toolclass import ToolClass
from protocol.tools import ToolResult, ok_result


class StuckArgs(msgspec.Struct, frozen=True):
    pass


async def stuck(args: StuckArgs, ctx: ToolContext) -> ToolResult:
    ctx.emit_output("stdout", "stuck\n")
    # Not abandonable, like Write's worker: nothing but the process's exit ends it.
    await trio.to_thread.run_sync(threading.Event().wait)
    return ok_result("unreachable")


class StuckReadArgs(msgspec.Struct, frozen=True):
    path: str


async def stuck_read(args: StuckReadArgs, ctx: ToolContext) -> ToolResult:
    fifo = ctx.workspace.resolve(args.path, must_exist=True)

    def blocking_open(cancelled: threading.Event) -> ToolResult:
        with open(fifo, "rb") as f:  # blocks until a writer comes: none ever does
            return ok_result(f.read().decode())

    return await run_abandonable(blocking_open)


if __name__ == "__main__":
    TOOLS["Stuck"] = ToolSpec("Stuck", StuckArgs, ToolClass.MUTATING, stuck)
    TOOLS["StuckRead"] = ToolSpec("StuckRead", StuckReadArgs, ToolClass.READ_ONLY, stuck_read)
    sys.exit(main())
