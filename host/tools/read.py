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


def _take_line(text: io.TextIOBase) -> tuple[str, bool] | None:
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


SMALL_FILE = 64 * 1024
"""A file up to this size is read in one go and decoded at once (most files a model
reads); a larger one is decoded as it is read, so a huge file costs what is shown."""
INLINE_MAX = 16 * 1024
"""A file up to this size, reached without leaving the root's local file system, is
read on the event loop (``run_inline``): its read, decoding and rendering take tens of µs, a
reader thread's hop hundreds. A larger one is read on a thread, where a stop need not
wait for its rendering."""


def read_text(ws: Workspace, args: ReadArgs, max_bytes: int,
              cancelled: threading.Event) -> ToolResult:
    path = ws.resolve(args.path, must_exist=True)
    fd = ws.open_regular(path, args.path)
    with os.fdopen(fd, "rb") as raw:
        data = raw.read(SMALL_FILE + 1) if os.fstat(fd).st_size <= SMALL_FILE else None
        if data is not None and len(data) <= SMALL_FILE:
            stream = _decoded(data, args.path)
        else:  # large, or grown since its size was read
            raw.seek(0)
            _refuse_binary(raw.read(_SNIFF_BYTES), args.path)
            raw.seek(0)
            stream = io.TextIOWrapper(raw, encoding="utf-8", errors="strict", newline="")
        return _render(stream, args, max_bytes, cancelled, ws.relative(path))


def read_small(data: bytes, args: ReadArgs, max_bytes: int, shown: str) -> ToolResult:
    """The Read of a small file's whole content ``data`` (read on the loop)."""
    return _render(_decoded(data, args.path), args, max_bytes, _NEVER_CANCELLED, shown)


_NEVER_CANCELLED = threading.Event()


def _decoded(data: bytes, shown: str) -> io.TextIOBase:
    _refuse_binary(data, shown)
    try:
        return io.StringIO(data.decode("utf-8"), newline="")
    except UnicodeDecodeError as exc:
        raise _not_utf8(shown, data[:exc.start].count(b"\n")) from None


def _render(stream: io.TextIOBase, args: ReadArgs, max_bytes: int,
            cancelled: threading.Event, shown: str) -> ToolResult:
    lines = _Lines(args, max_bytes)
    try:
        lines.take(stream, cancelled)
    except UnicodeDecodeError:
        raise _not_utf8(args.path, lines.number) from None
    return lines.result(shown)


def _refuse_binary(head: bytes, shown: str) -> None:
    if b"\x00" in head[:_SNIFF_BYTES]:
        raise ToolInputError(ErrorCode.TOOL_FAILED, f"{shown!r} is a binary file, not text")


def _not_utf8(shown: str, lines_before: int) -> ToolInputError:
    return ToolInputError(ErrorCode.TOOL_FAILED,
                          f"{shown!r} is not UTF-8 text (invalid bytes near line "
                          f"{lines_before + 1})")


class _Lines:
    """The lines a Read shows, rendered ``cat -n`` style within its bounds."""

    def __init__(self, args: ReadArgs, max_bytes: int) -> None:
        self.args = args
        self.max_bytes = max_bytes
        self.limit = args.limit if args.limit is not None else DEFAULT_LIMIT
        self.out: list[str] = []
        self.size = 0
        self.number = 0
        self.truncated = self.more = False

    def take(self, text: io.TextIOBase, cancelled: threading.Event) -> None:
        out = self.out
        while not cancelled.is_set():
            taken = _take_line(text)
            if taken is None:
                return
            self.number += 1
            if self.number <= self.args.offset:
                continue
            if len(out) >= self.limit:
                self.more = True
                return
            line, cut = taken
            rendered = f"{self.number:>6}\t{line}{' [line truncated]' if cut else ''}\n"
            self.size += len(rendered.encode())
            if self.size > self.max_bytes:
                self.truncated = self.more = True
                return
            out.append(rendered)

    def result(self, shown: str) -> ToolResult:
        args, out = self.args, self.out
        if not out:
            body = ("(empty file)" if self.number == 0
                    else f"(no lines after offset {args.offset}; the file has {self.number} "
                    "lines)")
        else:
            body = "".join(out)
            if self.truncated:
                body += (f"[output truncated at {self.max_bytes} bytes; continue with "
                         f"offset={args.offset + len(out)}]\n")
            elif self.more:
                body += f"[more lines follow; continue with offset={args.offset + len(out)}]\n"
        return ok_result(body, details={
            "path": shown, "startLine": args.offset + 1, "lines": len(out),
            "truncated": self.truncated, "more": self.more,
        })


def run_inline(args: ReadArgs, ctx: ToolContext) -> ToolResult | None:
    """A small file on the root's own local file system, read on the loop: it cannot block
    without bound, and a thread hop would cost most of the call (``host.localopen``).
    ``None`` for anything else."""
    small = ctx.workspace.read_local_small(args.path, INLINE_MAX)
    if small is None:
        return None
    return read_small(small[0], args, ctx.config.read_max_bytes, small[1])


async def run(args: ReadArgs, ctx: ToolContext) -> ToolResult:
    """On the loop if it can be (``run_inline``), else on an abandonable reader thread."""
    answer = run_inline(args, ctx)
    if answer is not None:
        return answer
    return await run_abandonable(partial(read_text, ctx.workspace, args,
                                         ctx.config.read_max_bytes))
