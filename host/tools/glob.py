"""Glob (read-only): files matching a pattern under a directory (default: the root).

Results are workspace-relative paths, sorted, at most ``MAX_RESULTS``. A
symlink is listed only if it resolves to a file inside the workspace, and a
symlinked directory is never descended into, so no result lies outside.
"""

from __future__ import annotations

import os
import threading
from functools import partial

from host.tools.context import ToolContext, run_abandonable
from host.tools.pathmatch import compile_glob, walk_files
from host.workspace import ToolInputError, Workspace
from protocol.errors import ErrorCode
from protocol.tools import GlobArgs, ToolResult, ok_result

MAX_RESULTS = 1000


def glob_files(ws: Workspace, args: GlobArgs, cancelled: threading.Event) -> ToolResult:
    pattern = compile_glob(args.pattern)
    base = ws.resolve_optional(args.path)
    if not base.is_dir():
        raise ToolInputError(ErrorCode.TOOL_FAILED, f"{args.path!r} is not a directory")
    found: list[str] = []
    for entry in walk_files(str(base), cancelled, max_depth=pattern.max_depth):
        if not pattern.matches(entry.rel):
            continue
        if entry.is_symlink:
            target = os.path.realpath(entry.path)
            if not ws.contains(target) or not os.path.isfile(target):
                continue
        found.append(ws.relative(entry.path))
    found.sort()
    total = len(found)
    shown = found[:MAX_RESULTS]
    if not shown:
        text = f"No files match {args.pattern!r}"
    else:
        text = "\n".join(shown)
        if total > len(shown):
            text += f"\n[{total - len(shown)} more files not shown; narrow the pattern]"
    return ok_result(text, details={"count": total, "truncated": total > len(shown)})


async def run(args: GlobArgs, ctx: ToolContext) -> ToolResult:
    return await run_abandonable(partial(glob_files, ctx.workspace, args))
