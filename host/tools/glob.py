"""Glob (read-only): files matching a pattern under a directory (default: the root).

``rg --files`` walks the tree in a child process (``host.tools.ripgrep``: its ignore,
hidden-file and symlink rules; ``includeIgnored``) and matches the pattern's bounded
alternatives (``host.tools.pathmatch``) with ripgrep's linear-time glob matcher; names
are NUL-separated, so any file name comes through. Results are workspace-relative paths
(non-UTF-8 names shown as ``host.fsnames`` says), sorted by path (directory by
directory, as ripgrep sorts), at most ``MAX_RESULTS`` shown; the rest are only counted
(the host keeps no more than those).
Symlinks are neither followed nor listed, so no result lies outside the workspace.
"""

from __future__ import annotations

import os
import threading

import trio

from host.tools import ripgrep
from host.tools.context import ToolContext, run_abandonable
from host.tools.pathmatch import alternatives, max_depth, rg_globs
from host.workspace import ToolInputError
from protocol.errors import ErrorCode
from protocol.tools import GlobArgs, ToolResult, ok_result

MAX_RESULTS = 1000
SHOW_PER_STEP = 200
"""Names shown between two checkpoints (``ripgrep.RECORDS_PER_STEP``)."""


async def run(args: GlobArgs, ctx: ToolContext) -> ToolResult:
    ws = ctx.workspace
    expanded = alternatives(args.pattern)

    def where(_: threading.Event) -> tuple[str, bytes]:
        # On a reader thread: resolving the path touches the file system (a hung mount
        # must not freeze the host's loop).
        base = ws.resolve_optional(args.path)
        if not base.is_dir():
            raise ToolInputError(ErrorCode.TOOL_FAILED, f"{args.path!r} is not a directory")
        return str(base), os.fsencode(ws.relative_os(base))

    cwd, prefix = await run_abandonable(where)
    rg_args = ["--files", "--null", "--sort", "path", *rg_globs(expanded, anchored=True)]
    depth = max_depth(expanded)
    if depth is not None:
        rg_args += ["--max-depth", str(depth)]
    if args.include_ignored:
        rg_args += ripgrep.INCLUDE_IGNORED_ARGS
    kept: list[bytes] = []  # rg sorts (--sort path): the first ones are the ones shown
    total = 0
    async with ripgrep.run_rg(rg_args, cwd=cwd, marker=ctx.marker,
                              cgroup_name=ctx.cgroup_name, sandbox=ctx.sandbox, sep=b"\0") as rg:
        while len(kept) < MAX_RESULTS and (batch := await rg.records.batch()):
            total += len(batch)
            kept += [name for name, cut in batch if not cut]
        if len(kept) >= MAX_RESULTS:
            total += await rg.records.count_rest()  # the rest are only counted
            del kept[MAX_RESULTS:]
        code = await rg.returncode()
    if code is not None and code not in (0, 1) and total == 0:
        raise ripgrep.failure(code, rg.stderr, f"invalid glob pattern {args.pattern!r}")
    shown: list[str] = []
    for start in range(0, len(kept), SHOW_PER_STEP):  # the loop is given back between
        if start:
            await trio.lowlevel.checkpoint()
        shown += [ripgrep.shown_path(prefix, name)
                  for name in kept[start:start + SHOW_PER_STEP]]
    if not shown:
        text = f"No files match {args.pattern!r}"
    else:
        text = "\n".join(shown)
        if total > len(shown):
            text += f"\n[{total - len(shown)} more files not shown; narrow the pattern]"
    return ok_result(text, details={"count": total, "truncated": total > len(shown)})

