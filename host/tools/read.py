"""Read (read-only): a UTF-8 text file, line-numbered like ``cat -n``, size-bounded.

``offset`` is the number of lines to skip (0-based), ``limit`` the number of
lines to return (default ``DEFAULT_LIMIT``). Binary files (a NUL byte in the
first block) and non-UTF-8 text are refused with a clear message.
"""

from __future__ import annotations

import io
import os
import threading
from functools import partial

from host.tools.context import ToolContext, run_abandonable
from host.workspace import ToolInputError, Workspace
from protocol.errors import ErrorCode
from protocol.tools import ReadArgs, ToolResult, ok_result

DEFAULT_LIMIT = 2000
MAX_LINE_CHARS = 2000
_SNIFF_BYTES = 8192


def _take_line(text: io.TextIOWrapper) -> tuple[str, bool] | None:
    """One line without its newline, cut at ``MAX_LINE_CHARS``; ``None`` at EOF."""
    line = text.readline(MAX_LINE_CHARS)
    if not line:
        return None
    cut = False
    if not line.endswith("\n") and len(line) >= MAX_LINE_CHARS:
        while rest := text.readline(64 * 1024):  # skip the rest of a long line
            cut = cut or bool(rest.rstrip("\r\n"))
            if rest.endswith("\n"):
                break
    return line.rstrip("\r\n"), cut


def read_text(ws: Workspace, args: ReadArgs, max_bytes: int,
              cancelled: threading.Event) -> ToolResult:
    path = ws.resolve(args.path, must_exist=True)
    fd = ws.open_regular(path, args.path)
    with os.fdopen(fd, "rb") as raw:
        if b"\x00" in raw.read(_SNIFF_BYTES):
            raise ToolInputError(ErrorCode.TOOL_FAILED,
                                 f"{args.path!r} is a binary file, not text")
        raw.seek(0)
        text = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", newline="")
        limit = args.limit if args.limit is not None else DEFAULT_LIMIT
        out: list[str] = []
        size = 0
        number = 0
        truncated = more = False
        try:
            while not cancelled.is_set():
                taken = _take_line(text)
                if taken is None:
                    break
                number += 1
                if number <= args.offset:
                    continue
                if len(out) >= limit:
                    more = True
                    break
                line, cut = taken
                rendered = f"{number:>6}\t{line}{' [line truncated]' if cut else ''}\n"
                size += len(rendered.encode())
                if size > max_bytes:
                    truncated = more = True
                    break
                out.append(rendered)
        except UnicodeDecodeError:
            raise ToolInputError(
                ErrorCode.TOOL_FAILED,
                f"{args.path!r} is not UTF-8 text (invalid bytes near line {number + 1})",
            ) from None
    shown = ws.relative(path)
    if not out:
        body = ("(empty file)" if number == 0
                else f"(no lines after offset {args.offset}; the file has {number} lines)")
    else:
        body = "".join(out)
        if truncated:
            body += (f"[output truncated at {max_bytes} bytes; continue with "
                     f"offset={args.offset + len(out)}]\n")
        elif more:
            body += f"[more lines follow; continue with offset={args.offset + len(out)}]\n"
    return ok_result(body, details={
        "path": shown, "startLine": args.offset + 1, "lines": len(out),
        "truncated": truncated, "more": more,
    })


async def run(args: ReadArgs, ctx: ToolContext) -> ToolResult:
    return await run_abandonable(partial(read_text, ctx.workspace, args,
                                         ctx.config.read_max_bytes))
