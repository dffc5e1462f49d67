"""A real host with one extra mutating tool, ``Stuck``, whose body blocks a worker thread
forever (as a write stuck in the kernel would): ``python tests/host/stuck_host.py``."""

from __future__ import annotations

import sys
import threading

import msgspec
import trio

from host.main import main
from host.tools import TOOLS, ToolContext, ToolSpec
from protocol.toolclass import ToolClass
from protocol.tools import ToolResult, ok_result


class StuckArgs(msgspec.Struct, frozen=True):
    pass


async def stuck(args: StuckArgs, ctx: ToolContext) -> ToolResult:
    ctx.emit_output("stdout", "stuck\n")
    # Not abandonable, like Write's worker: nothing but the process's exit ends it.
    await trio.to_thread.run_sync(threading.Event().wait)
    return ok_result("unreachable")


if __name__ == "__main__":
    TOOLS["Stuck"] = ToolSpec("Stuck", StuckArgs, ToolClass.MUTATING, stuck)
    sys.exit(main())
