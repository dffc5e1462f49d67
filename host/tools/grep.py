"""Grep (read-only): a regular expression over a file or a tree, bounded output.

The search is ``rg --json`` in a child process (``host.tools.ripgrep``: linear-time
Rust regex syntax, its ignore, hidden-file, binary and symlink rules; ``includeIgnored``);
the host only reads its output, a bounded number of records, and kills it once the
output is full or the call is stopped. Output lines are ``path:line:text``
(workspace-relative path, non-UTF-8 names shown as ``host.fsnames`` says; a line that is
not UTF-8 is shown with replacement characters), sorted by path. ``glob`` filters files:
without ``/`` it matches a file's name at any depth, with ``/`` its path relative to
``path``. The output is bounded by ``MAX_MATCHES`` lines and ``config.max_output_bytes``;
the result says when it was cut.
"""

from __future__ import annotations

import base64
import os
import re
import threading

import msgspec

from host.tools import ripgrep
from host.tools.context import ToolContext, run_abandonable
from host.tools.pathmatch import file_filter_globs
from protocol.tools import GrepArgs, ToolResult, ok_result

MAX_MATCHES = 1000
MAX_SHOWN_LINE_CHARS = 500


class _Text(msgspec.Struct, frozen=True, rename={"raw": "bytes"}):
    """ripgrep's spelling of data that may not be UTF-8: text, or base64 bytes."""

    text: str | None = None
    raw: str | None = None

    def as_bytes(self) -> bytes:
        if self.text is not None:
            return self.text.encode("utf-8", "surrogatepass")
        return base64.b64decode(self.raw or "")


class _MatchData(msgspec.Struct, frozen=True):
    path: _Text
    lines: _Text
    line_number: int | None = None


class _Match(msgspec.Struct, frozen=True):
    data: _MatchData


_matches = msgspec.json.Decoder(_Match)
_MATCH = b'{"type":"match"'
"""How ripgrep begins a match record (it writes ``type`` first, without spaces): the other
records (begin, end, context, summary) are skipped without being decoded."""
_CUT_PATH = re.compile(rb'"path":\{"(text|bytes)":"((?:[^"\\]|\\.)*)"')


class _Found:
    def __init__(self, max_bytes: int, prefix: bytes) -> None:
        self.max_bytes = max_bytes
        self.prefix = prefix
        self.lines: list[str] = []
        self.size = 0
        self.files: set[str] = set()
        self.full = False

    def shown_path(self, path: bytes) -> str:
        return ripgrep.shown_path(self.prefix, path)

    def add(self, path: str, number: int | None, text: str) -> None:
        if len(text) > MAX_SHOWN_LINE_CHARS:
            text = text[:MAX_SHOWN_LINE_CHARS] + " [line truncated]"
        line = f"{path}:{number if number is not None else '?'}:{text}"
        size = len(line.encode("utf-8", "replace")) + 1
        if len(self.lines) >= MAX_MATCHES or self.size + size > self.max_bytes:
            self.full = True
            return
        self.lines.append(line)
        self.size += size
        self.files.add(path)

    def record(self, raw: bytes, cut: bool) -> None:
        if cut:  # a match on a line too long to read whole: say where, not what
            head = _CUT_PATH.search(raw)
            if head is not None:
                value: str = msgspec.json.decode(b'"' + head[2] + b'"')
                path = _Text(text=value) if head[1] == b"text" else _Text(raw=value)
                self.add(self.shown_path(path.as_bytes()), None,
                         f"[a matching line longer than {ripgrep.MAX_RECORD} bytes]")
            return
        if not raw.startswith(_MATCH):
            return
        match = _matches.decode(raw).data
        text = match.lines.as_bytes().decode("utf-8", "replace").rstrip("\r\n")
        self.add(self.shown_path(match.path.as_bytes()), match.line_number, text)


async def run(args: GrepArgs, ctx: ToolContext) -> ToolResult:
    ws = ctx.workspace
    rg_args = ["--json", "--sort", "path", "--regexp", args.pattern]
    if args.ignore_case:
        rg_args.append("--ignore-case")
    if args.include_ignored:
        rg_args += ripgrep.INCLUDE_IGNORED_ARGS

    def where(_: threading.Event) -> tuple[str, bytes, list[str]]:
        # On a reader thread: resolving and checking the path touch the file system (a
        # hung mount must not freeze the host's loop).
        target = ws.resolve_optional(args.path)
        if target.is_dir():
            return (str(target), os.fsencode(ws.relative_os(target)),
                    file_filter_globs(args.glob) if args.glob else [])
        ws.open_regular_check(target, args.path or ".")  # a FIFO would block rg's read
        return str(ws.root), b".", ["--", ws.relative_os(target)]

    cwd, prefix, more = await run_abandonable(where)
    rg_args += more
    found = _Found(ctx.config.max_output_bytes, prefix)
    async with ripgrep.run_rg(rg_args, cwd=cwd, marker=ctx.marker,
                              cgroup_name=ctx.cgroup_name) as rg:
        while not found.full and (record := await rg.records.next()) is not None:
            found.record(*record)
        code = None if found.full else await rg.returncode()
    if code == 2 and not found.lines and rg.stderr:
        raise ripgrep.input_error(rg.stderr, f"invalid regular expression {args.pattern!r}")
    if found.lines:
        text = "\n".join(found.lines)
        if found.full:
            text += f"\n[output truncated after {len(found.lines)} matches; narrow the search]"
    else:
        text = "No matches found"
    return ok_result(text, details={
        "matches": len(found.lines), "files": len(found.files), "truncated": found.full,
    })

