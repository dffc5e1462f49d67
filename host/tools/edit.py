"""Edit (mutating): replace an exact string in a UTF-8 text file, atomically.

``old_string`` must occur exactly once, or any number of times with
``replace_all``; otherwise, or when ``old_string`` is empty or equals
``new_string``, the edit fails with ``TOOL_FAILED`` and a message that says
why, and nothing is written. The file is written only if it is unchanged
since it was read. Details: ``{"path", "replacements", "bytesWritten"}``.
"""

from __future__ import annotations

import os
from functools import partial

import trio

from host.tools.atomic import atomic_write, identity
from host.tools.context import ToolContext
from host.workspace import ToolInputError, Workspace
from protocol.errors import ErrorCode
from protocol.tools import EditArgs, ToolResult, ok_result

MAX_EDIT_BYTES = 16 * 1024 * 1024


def _failed(message: str) -> ToolInputError:
    return ToolInputError(ErrorCode.TOOL_FAILED, message)


def edit_file(ws: Workspace, args: EditArgs) -> ToolResult:
    if not args.old_string:
        raise _failed("old_string is empty; use Write to create or overwrite a file")
    if args.old_string == args.new_string:
        raise _failed("old_string and new_string are identical; nothing to change")
    path = ws.resolve(args.path, must_exist=True)
    fd = ws.open_regular(path, args.path)
    with os.fdopen(fd, "rb") as raw:
        st = os.fstat(raw.fileno())
        if st.st_size > MAX_EDIT_BYTES:
            raise _failed(f"{args.path!r} is too large to edit ({st.st_size} bytes)")
        data = raw.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _failed(f"{args.path!r} is not UTF-8 text") from None
    count = text.count(args.old_string)
    if count == 0:
        raise _failed(f"old_string was not found in {args.path!r}")
    if count > 1 and not args.replace_all:
        raise _failed(f"old_string occurs {count} times in {args.path!r}; include more "
                      "context to make it unique, or set replace_all")
    new_text = text.replace(args.old_string, args.new_string)
    path = ws.resolve(args.path, must_exist=True)  # again, right before the side effect
    written = atomic_write(ws, path, args.path, new_text.encode("utf-8"),
                           create_parents=False, expect=identity(st))
    shown = ws.relative(path)
    noun = "occurrence" if count == 1 else "occurrences"
    return ok_result(f"Replaced {count} {noun} in {shown}", details={
        "path": shown, "replacements": count, "bytesWritten": written.bytes_written,
    })


async def run(args: EditArgs, ctx: ToolContext) -> ToolResult:
    # Not abandonable: a started edit finishes (atomically) even if we are cancelled.
    return await trio.to_thread.run_sync(partial(edit_file, ctx.workspace, args))
