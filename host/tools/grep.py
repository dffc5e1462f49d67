"""Grep (read-only): a regular expression over a file or a tree, bounded output.

The search is ``rg`` in a child process (``host.tools.ripgrep``: linear-time
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

import os
import threading

from host.tools import ripgrep
from host.tools.context import ToolContext, run_abandonable
from host.tools.pathmatch import file_filter_globs
from protocol.tools import GrepArgs, ToolResult, ok_result

MAX_MATCHES = 1000
MAX_SHOWN_LINE_CHARS = 500


_BINARY = b": binary file matches ("
"""How ripgrep reports a match in a binary file it was named explicitly (instead of the
line): ``path: binary file matches (found "\\0" byte around offset N)``."""
LINE_ARGS = ("--null", "--with-filename", "--line-number", "--no-heading", "--color",
             "never", "--max-columns", str(4 * MAX_SHOWN_LINE_CHARS), "--max-columns-preview")
"""ripgrep's plain output, one record a matching line: ``path NUL number : line``. A path
cannot hold a NUL, so the split is exact whatever the name. Lines longer than four times
what is shown (in characters: ripgrep counts code points) come as their start, so a
minified file's megabyte line is not piped to the host to be cut there."""


class _Found:
    def __init__(self, max_bytes: int, prefix: bytes) -> None:
        self.max_bytes = max_bytes
        self.prefix = prefix
        self.lines: list[str] = []
        self.size = 0
        self.files: set[str] = set()
        self.full = False
        self._last: tuple[bytes, str] = (b"", "")  # a file's matches come together

    def shown_path(self, path: bytes) -> str:
        last_raw, last_shown = self._last
        if path == last_raw:
            return last_shown
        shown = ripgrep.shown_path(self.prefix, path)
        self._last = (path, shown)
        return shown

    def add(self, path: str, number: bytes | None, text: str) -> None:
        if len(text) > MAX_SHOWN_LINE_CHARS:
            text = text[:MAX_SHOWN_LINE_CHARS] + " [line truncated]"
        line = f"{path}:{number.decode() if number else '?'}:{text}"
        size = len(line.encode("utf-8", "replace")) + 1
        if len(self.lines) >= MAX_MATCHES or self.size + size > self.max_bytes:
            self.full = True
            return
        self.lines.append(line)
        self.size += size
        self.files.add(path)

    def record(self, raw: bytes, cut: bool) -> None:
        path, nul, rest = raw.partition(b"\0")
        if not nul:  # a message of ripgrep's about one file, not a line
            named, binary, detail = raw.rpartition(_BINARY)
            if binary:
                self.add(self.shown_path(named), None,
                         "[binary file matches (" + detail.decode("utf-8", "replace") + "]")
            return
        if cut:  # a path longer than a record (never, in practice): say where, not what
            self.add(self.shown_path(path), None,
                     f"[a matching line longer than {ripgrep.MAX_RECORD} bytes]")
            return
        number, _, line = rest.partition(b":")
        text = line.decode("utf-8", "replace").rstrip("\r")
        self.add(self.shown_path(path), number if number.isdigit() else None, text)


async def run(args: GrepArgs, ctx: ToolContext) -> ToolResult:
    ws = ctx.workspace
    rg_args = [*LINE_ARGS, "--sort", "path", "--regexp", args.pattern]
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
        while not found.full and (batch := await rg.records.batch()):
            for raw, cut in batch:
                found.record(raw, cut)
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

