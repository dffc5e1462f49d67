"""Glob patterns as regular expressions, and a confined, stoppable tree walk.

Pattern syntax: ``*`` (any characters but ``/``), ``?`` (one character but
``/``), ``[...]`` / ``[!...]`` classes, ``**`` as a whole segment (any number of
directories, including none) and ``{a,b}`` alternatives (nestable). Matching is
against the ``/``-separated path relative to the walk's base.
"""

from __future__ import annotations

import os
import re
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass

from host.workspace import ToolInputError
from protocol.errors import ErrorCode

SKIPPED_DIRS = frozenset({".git"})
"""Directory names a walk never descends into."""


def _expand_braces(pattern: str) -> list[str]:
    depth = 0
    start = -1
    for i, ch in enumerate(pattern):
        if ch == "{":
            if depth == 0:
                start = i
            depth += 1
        elif ch == "}" and depth > 0:
            depth -= 1
            if depth == 0:
                body = pattern[start + 1:i]
                parts, level, last = [], 0, 0
                for j, c in enumerate(body):
                    if c == "{":
                        level += 1
                    elif c == "}":
                        level -= 1
                    elif c == "," and level == 0:
                        parts.append(body[last:j])
                        last = j + 1
                parts.append(body[last:])
                head, tail = pattern[:start], pattern[i + 1:]
                return [x for part in parts for x in _expand_braces(head + part + tail)]
    return [pattern]


def _translate_segment(segment: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(segment):
        ch = segment[i]
        if ch == "*":
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            j = i + 1
            negate = segment[j:j + 1] in ("!", "^")
            j += negate
            j += segment[j:j + 1] == "]"
            end = segment.find("]", j)
            if end == -1:
                out.append(re.escape(ch))
            else:
                body = segment[i + 1 + negate:end]
                escaped = "".join("\\" + c if c in "\\[]&~|^" else c for c in body)
                out.append("[" + ("^" if negate else "") + escaped + "]")
                i = end
        else:
            out.append(re.escape(ch))
        i += 1
    return "".join(out)


def _translate(pattern: str) -> str:
    segments = [s for s in pattern.split("/") if s not in ("", ".")]
    out = ""
    for index, segment in enumerate(segments):
        last = index == len(segments) - 1
        if segment == "**":
            out += ".*" if last else "(?:[^/]+/)*"
        else:
            out += _translate_segment(segment) + ("" if last else "/")
    return out


@dataclass(frozen=True)
class GlobPattern:
    pattern: str
    regex: re.Pattern[str]
    max_depth: int | None
    """How many path segments a match can have (``None``: unbounded, ``**``)."""

    def matches(self, rel_path: str) -> bool:
        return self.regex.fullmatch(rel_path) is not None


def compile_glob(pattern: str) -> GlobPattern:
    """A pattern relative to a base; absolute patterns and ``..`` are refused."""
    if not pattern:
        raise ToolInputError(ErrorCode.INVALID_PARAMS, "glob pattern is empty")
    if pattern.startswith("/") or ".." in pattern.split("/"):
        raise ToolInputError(ErrorCode.PATH_OUTSIDE_WORKSPACE,
                             f"glob pattern {pattern!r} reaches outside its directory")
    alternatives = _expand_braces(pattern)
    if len(alternatives) > 256:
        raise ToolInputError(ErrorCode.INVALID_PARAMS, "glob pattern has too many alternatives")
    split = [[s for s in alt.split("/") if s not in ("", ".")] for alt in alternatives]
    globstar = any("**" in segment for segments in split for segment in segments)
    try:
        regex = re.compile("|".join(f"(?:{_translate(alt)})" for alt in alternatives), re.DOTALL)
    except re.error as exc:
        raise ToolInputError(ErrorCode.INVALID_PARAMS,
                             f"invalid glob pattern {pattern!r}: {exc}") from None
    return GlobPattern(pattern, regex,
                       None if globstar else max(len(segments) for segments in split))


def basename_or_path_matcher(pattern: str) -> GlobPattern:
    """A file filter: a pattern without ``/`` matches a file's name at any depth."""
    if "/" not in pattern:
        return compile_glob("**/" + pattern)
    return compile_glob(pattern)


@dataclass(frozen=True)
class WalkEntry:
    path: str
    """Absolute path (under the base, no symlinked directory in between)."""
    rel: str
    """``/``-separated path relative to the base."""
    is_symlink: bool


def walk_files(base: str, cancelled: threading.Event, *,
               max_depth: int | None = None) -> Iterator[WalkEntry]:
    """Regular files and symlinks under ``base``, sorted, never following a symlinked dir.

    FIFOs, sockets and devices are never yielded. Stops early once
    ``cancelled`` is set. Unreadable directories are skipped.
    """
    stack: list[tuple[str, str, int]] = [(base, "", 0)]
    while stack and not cancelled.is_set():
        directory, rel_dir, depth = stack.pop()
        try:
            with os.scandir(directory) as it:
                entries = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        subdirs: list[tuple[str, str, int]] = []
        for entry in entries:
            if cancelled.is_set():
                return
            rel = f"{rel_dir}{entry.name}"
            try:
                mode = entry.stat(follow_symlinks=False).st_mode
            except OSError:
                continue
            if stat.S_ISDIR(mode):
                if entry.name not in SKIPPED_DIRS and (max_depth is None or depth + 1 < max_depth):
                    subdirs.append((entry.path, rel + "/", depth + 1))
            elif stat.S_ISREG(mode) or stat.S_ISLNK(mode):
                yield WalkEntry(entry.path, rel, stat.S_ISLNK(mode))
        stack.extend(reversed(subdirs))
