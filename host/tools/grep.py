"""Grep (read-only): a regular expression over a file or a tree, bounded output.

Output lines are ``path:line:text`` (workspace-relative path). A tree walk
skips symlinks, FIFOs, sockets, devices and binary files (a NUL byte in the
first block); every open is non-blocking, so a FIFO cannot hang the worker.
The worker stops early once the caller stops waiting. The output is bounded
by ``MAX_MATCHES`` lines and ``config.max_output_bytes``; the scan stops at
the bound and the result says so.
"""

from __future__ import annotations

import os
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from host.tools.context import ToolContext, run_abandonable
from host.tools.pathmatch import GlobPattern, basename_or_path_matcher, walk_files
from host.workspace import ToolInputError, Workspace
from protocol.errors import ErrorCode
from protocol.tools import GrepArgs, ToolResult, ok_result

MAX_MATCHES = 1000
MAX_SHOWN_LINE_CHARS = 500
_CHUNK = 1024 * 1024  # longest piece of a line read at once
_SNIFF = 8192
_YIELD_EVERY = 256
"""Lines between two hand-overs of the GIL (a few hundred µs of matching)."""


@dataclass
class _Matches:
    max_bytes: int
    lines: list[str] = field(default_factory=list)
    size: int = 0
    files: set[str] = field(default_factory=set)
    scanned: int = 0
    skipped: int = 0
    full: bool = False

    def add(self, rel: str, number: int, text: str) -> None:
        if len(text) > MAX_SHOWN_LINE_CHARS:
            text = text[:MAX_SHOWN_LINE_CHARS] + " [line truncated]"
        line = f"{rel}:{number}:{text}"
        size = len(line.encode()) + 1
        if len(self.lines) >= MAX_MATCHES or self.size + size > self.max_bytes:
            self.full = True
            return
        self.lines.append(line)
        self.size += size
        self.files.add(rel)


def _search_file(ws: Workspace, path: str, rel: str, regex: re.Pattern[str],
                 found: _Matches, cancelled: threading.Event) -> None:
    fd = ws.open_regular(path, rel)
    with os.fdopen(fd, "rb") as raw:
        head = raw.read(_SNIFF)
        if b"\x00" in head:
            found.skipped += 1
            return
        raw.seek(0)
        found.scanned += 1
        number = pieces = 1
        while not found.full:
            piece = raw.readline(_CHUNK)
            if not piece:
                return
            if cancelled.is_set():
                return
            pieces += 1
            if pieces % _YIELD_EVERY == 0:
                # Hand the GIL over now: the event loop (and so tools.abort) would otherwise
                # wait a switch interval for it at each of its many steps.
                time.sleep(0)
            text = piece.decode("utf-8", "replace").rstrip("\r\n")
            if regex.search(text):
                found.add(rel, number, text)
            if piece.endswith(b"\n"):
                number += 1


def _targets(ws: Workspace, target: Path, file_filter: GlobPattern | None,
             cancelled: threading.Event) -> Iterator[tuple[str, str]]:
    if not target.is_dir():
        yield str(target), ws.relative(target)
        return
    for entry in walk_files(str(target), cancelled):
        if entry.is_symlink:
            continue
        if file_filter is not None and not file_filter.matches(entry.rel):
            continue
        yield entry.path, ws.relative(entry.path)


def grep(ws: Workspace, args: GrepArgs, max_bytes: int, cancelled: threading.Event) -> ToolResult:
    try:
        regex = re.compile(args.pattern, re.IGNORECASE if args.ignore_case else 0)
    except re.error as exc:
        raise ToolInputError(ErrorCode.INVALID_PARAMS,
                             f"invalid regular expression {args.pattern!r}: {exc}") from None
    file_filter = basename_or_path_matcher(args.glob) if args.glob else None
    target = ws.resolve_optional(args.path)
    single = not target.is_dir()
    found = _Matches(max_bytes)
    for path, rel in _targets(ws, target, file_filter, cancelled):
        if cancelled.is_set() or found.full:
            break
        try:
            _search_file(ws, path, rel, regex, found, cancelled)
        except ToolInputError:
            if single:
                raise
            found.skipped += 1  # vanished, unreadable, or replaced by a non-file meanwhile
    if found.lines:
        text = "\n".join(found.lines)
        if found.full:
            text += f"\n[output truncated after {len(found.lines)} matches; narrow the search]"
    else:
        text = "No matches found"
    return ok_result(text, details={
        "matches": len(found.lines), "files": len(found.files), "truncated": found.full,
        "filesScanned": found.scanned, "filesSkipped": found.skipped,
    })


async def run(args: GrepArgs, ctx: ToolContext) -> ToolResult:
    return await run_abandonable(partial(grep, ctx.workspace, args, ctx.config.max_output_bytes))
