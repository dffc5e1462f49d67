"""The wire's bounds, sans-IO: batch size, shortening what would not fit a frame, and
text that is not quite Unicode.

- A batch has at most :data:`MAX_BATCH_MEMBERS` members. A longer one is refused whole
  with one ``-32600`` naming the limit; deciding that costs no more than reading the
  first ``MAX_BATCH_MEMBERS + 1`` members (:func:`split_batch`).
- Nothing is written over the peer's frame limit. A notification that would be is
  *shortened*: its bulky strings (a KiB or more; never an id or a tag) are cut, each
  ending in a marker saying how many bytes were left out (:func:`shorten`); the record
  it announces (a session log) keeps them whole.
- A lone UTF-16 surrogate escape (``"\\udcff"``, what JavaScript's ``JSON.stringify``
  writes for half an emoji) is read as U+FFFD, the replacement character
  (:func:`repair_surrogates`, only for a frame msgspec refused for one): the request
  keeps its id (an id holding one is read with U+FFFD too) and is served.
"""

from __future__ import annotations

import re
from typing import Any

import msgspec

MAX_BATCH_MEMBERS = 256
"""The most members a batch may have; a longer one gets one ``-32600``."""

_Members = msgspec.defstruct(
    "_Members",
    [(f"m{i}", msgspec.Raw | msgspec.UnsetType, msgspec.UNSET)
     for i in range(MAX_BATCH_MEMBERS)],
    array_like=True, forbid_unknown_fields=True)
# An array-like Struct with every field optional reads a JSON array of up to N members
# and refuses the (N+1)th as soon as it meets it: a 3-million-member batch costs nothing.
_members_decoder = msgspec.json.Decoder(_Members)


class BatchTooLarge(ValueError):
    """A batch with more than :data:`MAX_BATCH_MEMBERS` members."""


def split_batch(data: bytes) -> list[msgspec.Raw]:
    """The members of a JSON array; raise :class:`BatchTooLarge` past the limit (before
    reading the rest), ``msgspec.DecodeError`` for what is not JSON."""
    try:
        members = _members_decoder.decode(data)
    except msgspec.ValidationError as exc:
        if "at most length" in str(exc):
            raise BatchTooLarge(f"a batch may have at most {MAX_BATCH_MEMBERS} members"
                                ) from None
        raise
    out = []
    for name in members.__struct_fields__:
        raw = getattr(members, name)
        if raw is msgspec.UNSET:
            break
        out.append(raw)
    return out


# -- lone surrogates ----------------------------------------------------------------------

_HIGH = rb"\\u[dD][89abAB][0-9a-fA-F]{2}"
_LOW = rb"\\u[dD][c-fC-F][0-9a-fA-F]{2}"
# What a backslash starts that matters here, each matched as a whole run (so a 4 MiB run
# of escaped backslashes or of pairs is one match, one call): escaped backslashes with the
# plain text between them, pairs, or a lone half. Other escapes (\n, \u0041) are skipped
# by the scan, which only stops at a backslash (a literal prefix: fast).
_ESCAPES = re.compile(rb"\\(?:\\[^\\]*+(?:\\\\[^\\]*+)*+"
                      rb"|u[dD][89abAB][0-9a-fA-F]{2}" + _LOW + rb"(?:" + _HIGH + _LOW + rb")*+"
                      rb"|u[dD][89a-fA-F][0-9a-fA-F]{2})")
_REPLACEMENT = rb"\ufffd"
_BACKSLASH = ord("\\")


def _repair(match: re.Match[bytes]) -> bytes:
    text = match.group()
    lone = len(text) == 6 and text[1] != _BACKSLASH
    return _REPLACEMENT if lone else text


def repair_surrogates(data: bytes) -> bytes:
    """``data`` with every lone surrogate escape replaced by ``\\ufffd`` (pairs and
    escaped backslashes kept). For a frame msgspec refused: one scan, one call per run."""
    return _ESCAPES.sub(_repair, data)


def has_surrogate_escape(data: bytes) -> bool:
    """Whether ``data`` may hold a surrogate escape (two byte searches)."""
    return b"\\ud" in data or b"\\uD" in data


# -- shortening ---------------------------------------------------------------------------

_encoder = msgspec.json.Encoder()
MARKER = "…[{} bytes left out]"
"""Ends every shortened string; ``{}`` is how many bytes of UTF-8 were cut."""


BULKY = 1024
"""Strings shorter than this (in characters) are never cut: only bulky ones are."""
_TAGS = frozenset({"id", "type", "kind", "method", "jsonrpc", "tool", "toolClass", "status",
                   "role"})


def _kept_whole(key: str) -> bool:
    """An id or a tag: what a reader matches on, never cut, however long."""
    return key in _TAGS or key.endswith("Id")


_SAMPLE = 4096


def _bytes_per_char(text: str) -> float:
    """About how many bytes of JSON each character of ``text`` takes: measured on three
    samples, not the whole (the check after cutting corrects a bad guess)."""
    if len(text) <= 3 * _SAMPLE:
        return (len(_encoder.encode(text)) - 2) / len(text)
    middle = len(text) // 2
    sample = text[:_SAMPLE] + text[middle:middle + _SAMPLE] + text[-_SAMPLE:]
    return (len(_encoder.encode(sample)) - 2) / len(sample)


def _bulky(value: Any, out: list[tuple[int, float]]) -> None:
    """Each cuttable string's length and UTF-8/JSON bytes per character."""
    if isinstance(value, str):
        if len(value) >= BULKY:
            out.append((len(value), _bytes_per_char(value)))
    elif isinstance(value, dict):
        for key, item in value.items():
            if not (isinstance(item, str) and _kept_whole(key)):
                _bulky(item, out)
    elif isinstance(value, list | tuple):  # msgspec.to_builtins keeps a Struct's tuples
        for item in value:
            if type(item) is not str or len(item) >= BULKY:  # short strings: skip fast
                _bulky(item, out)


def _cap(value: Any, cap: int) -> Any:
    if isinstance(value, str):
        if len(value) < BULKY or len(value) <= cap:
            return value
        cut = len(value[cap:].encode("utf-8", "surrogatepass"))
        return value[:cap] + MARKER.format(cut)
    if isinstance(value, dict):
        return {key: item if isinstance(item, str) and _kept_whole(key) else _cap(item, cap)
                for key, item in value.items()}
    if isinstance(value, list | tuple):  # a tuple (an assistant message's blocks) too
        return [item if type(item) is str and len(item) <= cap else _cap(item, cap)
                for item in value]
    return value


_MARKER_BYTES = len(MARKER.format(10**12).encode())  # at most, for any cut


def _saved(bulky: list[tuple[int, float]], cap: int) -> float:
    """About how many bytes cutting every bulky string to ``cap`` characters saves."""
    return sum((length - cap) * per_char - _MARKER_BYTES
               for length, per_char in bulky if length > cap)


def _cap_for(bulky: list[tuple[int, float]], excess: float) -> int | None:
    """The longest cap whose estimated saving covers ``excess`` (None: none does)."""
    if _saved(bulky, 0) < excess:
        return None
    fits, too_long = 0, max(length for length, _ in bulky)  # saves enough / not enough
    while too_long - fits > 1:
        cap = (fits + too_long) // 2
        if _saved(bulky, cap) >= excess:
            fits = cap
        else:
            too_long = cap
    return fits


def shorten(value: Any, budget: int, size: int | None = None) -> Any | None:
    """``value`` (builtins: dicts, lists or tuples, strings, numbers) with its bulky strings
    cut so that its JSON fits ``budget`` bytes, or None when cutting them is not enough.

    Keys, strings under :data:`BULKY` characters and ids and tags (``type``, ``kind``,
    ``sessionId``, ``callId``, …) are never cut; the bulky strings kept are as long as the
    budget allows (one common cap). The cap is found from each string's length (one
    encoding of the value, unless its ``size`` is given, and of samples of each bulky
    string), then checked with one more encoding; a few more only where the estimate
    was short.
    """
    if size is None:
        size = len(_encoder.encode(value))
    if size <= budget:
        return value
    bulky: list[tuple[int, float]] = []
    _bulky(value, bulky)
    if not bulky:
        return None
    excess: float = size - budget
    for _ in range(8):
        cap = _cap_for(bulky, excess)
        if cap is None:
            break
        short = _cap(value, cap)
        over = len(_encoder.encode(short)) - budget
        if over <= 0:
            return short
        excess += over + 64  # escapes were denser in what was kept than on average
    short = _cap(value, 0)
    return short if len(_encoder.encode(short)) <= budget else None
