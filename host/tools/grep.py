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
_STOPPED_BINARY = b": WARNING: stopped searching binary file"
"""ripgrep's note on a file found binary (a NUL) after its first matches, met while
walking: its lines before are already shown."""
_PREVIEW_END = " [... omitted end of long line]"
"""What ripgrep's ``--max-columns-preview`` appends to a line it cut."""
PREVIEW_COLUMNS = 4 * MAX_SHOWN_LINE_CHARS
LINE_ARGS = ("--null", "--with-filename", "--line-number", "--no-heading", "--color",
             "never", "--max-columns", str(PREVIEW_COLUMNS), "--max-columns-preview")
"""ripgrep's plain output, one record a matching line: ``path NUL number : line``. A path
cannot hold a NUL, so the path ends exactly there; it may hold a newline, which splits
it across records (``_Found.record`` joins them). A line over ``PREVIEW_COLUMNS``
bytes comes as its first ``PREVIEW_COLUMNS`` graphemes (ripgrep's preview), so a
minified file's megabyte line is not piped to the host to be cut there (a line of
many combining marks per grapheme can still pass ``ripgrep.MAX_RECORD``: cut too)."""
MAX_NAME_BYTES = 65536
"""Longest path kept while its newline-split parts are joined (``PATH_MAX`` is 4096)."""


class _Found:
    def __init__(self, max_bytes: int, prefix: bytes) -> None:
        self.max_bytes = max_bytes
        self.prefix = prefix
        self.lines: list[str] = []
        self.size = 0
        self.files: set[str] = set()
        self.full = False
        self._last: tuple[bytes, str] = (b"", "")  # a file's matches come together
        self._name_start = b""  # a name's part before its newline, from the last record

    def shown_path(self, path: bytes) -> str:
        last_raw, last_shown = self._last
        if path == last_raw:
            return last_shown
        shown = ripgrep.shown_path(self.prefix, path)
        self._last = (path, shown)
        return shown

    def add(self, path: str, number: bytes | None, text: str, cut: bool = False) -> None:
        if cut or len(text) > MAX_SHOWN_LINE_CHARS:
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
        if self._name_start:
            raw, self._name_start = self._name_start + raw, b""
        path, nul, rest = raw.partition(b"\0")
        if not nul:
            self._message(raw)
            return
        number, _, line = rest.partition(b":")
        text = line.decode("utf-8", "replace").rstrip("\r")
        # A previewed line is over PREVIEW_COLUMNS characters, so ``add`` cuts it anyway
        # (a line of 500 four-byte characters is previewed whole: not cut).
        text = text.removesuffix(_PREVIEW_END)
        self.add(self.shown_path(path), number if number.isdigit() else None, text, cut)

    def _message(self, raw: bytes) -> None:
        """A record without a NUL: ripgrep's word on one file, or the start of a name that
        holds a newline (joined to the next record)."""
        named, binary, detail = raw.rpartition(_BINARY)
        if binary:
            shown = self.shown_path(named)
            if shown not in self.files:  # its matching lines, if any, are already shown
                self.add(shown, None,
                         "[binary file matches (" + detail.decode("utf-8", "replace") + "]")
        elif _STOPPED_BINARY not in raw and len(raw) < MAX_NAME_BYTES:
            self._name_start = raw + b"\n"


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
                              cgroup_name=ctx.cgroup_name, sandbox=ctx.sandbox) as rg:
        while not found.full and (batch := await rg.records.batch()):
            for raw, cut in batch:
                found.record(raw, cut)
        code = None if found.full else await rg.returncode()
    if code is not None and code not in (0, 1) and not found.lines:
        raise ripgrep.failure(code, rg.stderr, f"invalid regular expression {args.pattern!r}")
    if found.lines:
        text = "\n".join(found.lines)
        if found.full:
            text += f"\n[output truncated after {len(found.lines)} matches; narrow the search]"
    else:
        text = "No matches found"
    return ok_result(text, details={
        "matches": len(found.lines), "files": len(found.files), "truncated": found.full,
    })

