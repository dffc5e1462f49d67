"""Glob patterns: checked, their ``{a,b}`` alternatives bounded and expanded, and handed
to ripgrep's glob matcher (linear-time) as ``--glob`` arguments.

Pattern syntax: ``*`` (any characters but ``/``), ``?`` (one character but ``/``),
``[...]`` / ``[!...]`` classes, ``**`` as a whole segment (any number of directories,
including none) and ``{a,b}`` alternatives (nestable; an unmatched brace is literal).
Matching is against the ``/``-separated path relative to the search's base.

Alternatives are counted on the parsed pattern before anything is expanded, so a brace
bomb (``{a,b}`` twenty times: a million alternatives) is refused at once with
``INVALID_PARAMS``: at most ``MAX_ALTERNATIVES`` alternatives, ``MAX_PATTERN_CHARS``
characters and ``MAX_NESTING`` levels of braces.
"""

from __future__ import annotations

from dataclasses import dataclass

from host.workspace import ToolInputError
from protocol.errors import ErrorCode

MAX_ALTERNATIVES = 256
MAX_PATTERN_CHARS = 4096
MAX_NESTING = 16

# A parsed pattern: a sequence of literal text and groups; a group is its alternatives.
_Seq = list["str | _Group"]


@dataclass
class _Group:
    alternatives: list[_Seq]


def _matching_braces(pattern: str) -> dict[int, int]:
    """Open index -> close index of every matched brace pair."""
    pairs: dict[int, int] = {}
    opened: list[int] = []
    for i, ch in enumerate(pattern):
        if ch == "{":
            opened.append(i)
        elif ch == "}" and opened:
            pairs[opened.pop()] = i
    return pairs


def _parse(pattern: str, pairs: dict[int, int], start: int, end: int, depth: int) -> _Seq:
    """The sequence in ``pattern[start:end]`` (recursion depth: brace nesting)."""
    if depth > MAX_NESTING:
        raise ToolInputError(ErrorCode.INVALID_PARAMS,
                             f"glob pattern nests braces deeper than {MAX_NESTING}")
    seq: _Seq = []
    text: list[str] = []
    i = start
    while i < end:
        close = pairs.get(i)
        if close is None or close >= end:
            text.append(pattern[i])
            i += 1
            continue
        if text:
            seq.append("".join(text))
            text = []
        alternatives: list[_Seq] = []
        part_start = j = i + 1
        while j < close:
            inner = pairs.get(j)
            if inner is not None and inner < close:
                j = inner + 1
                continue
            if pattern[j] == ",":
                alternatives.append(_parse(pattern, pairs, part_start, j, depth + 1))
                part_start = j + 1
            j += 1
        alternatives.append(_parse(pattern, pairs, part_start, close, depth + 1))
        seq.append(_Group(alternatives))
        i = close + 1
    if text:
        seq.append("".join(text))
    return seq


def _count(seq: _Seq, cap: int) -> int:
    """How many alternatives ``seq`` expands to, saturating just above ``cap``."""
    total = 1
    for item in seq:
        if isinstance(item, _Group):
            options = 0
            for alternative in item.alternatives:
                options = min(options + _count(alternative, cap), cap + 1)
            total = min(total * options, cap + 1)
    return total


def _expand(seq: _Seq) -> list[str]:
    out = [""]
    for item in seq:
        if isinstance(item, str):
            literal = item.replace("{", "[{]").replace("}", "[}]")  # unmatched: literal
            out = [prefix + literal for prefix in out]
        else:
            options = [x for alternative in item.alternatives for x in _expand(alternative)]
            out = [prefix + option for prefix in out for option in options]
    return out


def alternatives(pattern: str) -> list[str]:
    """The pattern's brace alternatives (bounded: see the module docstring), each checked
    to stay below its base."""
    if not pattern:
        raise ToolInputError(ErrorCode.INVALID_PARAMS, "glob pattern is empty")
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolInputError(ErrorCode.INVALID_PARAMS,
                             f"glob pattern is longer than {MAX_PATTERN_CHARS} characters")
    tree = _parse(pattern, _matching_braces(pattern), 0, len(pattern), 0)
    if _count(tree, MAX_ALTERNATIVES) > MAX_ALTERNATIVES:
        raise ToolInputError(ErrorCode.INVALID_PARAMS, (
            f"glob pattern has more than {MAX_ALTERNATIVES} brace alternatives; "
            "narrow it"))
    expanded = _expand(tree)
    for alternative in [pattern, *expanded]:
        if alternative.startswith("/") or ".." in alternative.split("/"):
            raise ToolInputError(ErrorCode.PATH_OUTSIDE_WORKSPACE,
                                 f"glob pattern {pattern!r} reaches outside its directory")
    return expanded


def _segments(alternative: str) -> list[str]:
    return [s for s in alternative.split("/") if s not in ("", ".")]


def max_depth(expanded: list[str]) -> int | None:
    """How many path segments a match can have (``None``: unbounded, a ``**``)."""
    depth = 0
    for alternative in expanded:
        segments = _segments(alternative)
        if any("**" in segment for segment in segments):
            return None
        depth = max(depth, len(segments))
    return depth


def rg_globs(expanded: list[str], *, anchored: bool) -> list[str]:
    """``--glob`` arguments matching any alternative: anchored at the search's base, or
    (``anchored`` false, for a pattern without ``/``) a file's name at any depth."""
    args: list[str] = []
    for alternative in expanded:
        cleaned = "/".join(_segments(alternative)) or "*"
        args += ["--glob", f"/{cleaned}" if anchored else cleaned]
    return args


def file_filter_globs(pattern: str) -> list[str]:
    """Grep's ``glob`` filter: a pattern without ``/`` matches a file's name at any depth,
    one with ``/`` the path relative to the search's base."""
    return rg_globs(alternatives(pattern), anchored="/" in pattern)

