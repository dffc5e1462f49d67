"""The wire's bounds, sans-IO: batch size, shortening what would not fit a frame, and
text that is not quite Unicode.

- A batch has at most :data:`MAX_BATCH_MEMBERS` members. A longer one is refused whole
  with one ``-32600`` naming the limit; deciding that costs no more than reading the
  first ``MAX_BATCH_MEMBERS + 1`` members (:func:`split_batch`).
- Nothing is written over the peer's frame limit. A notification that would be is
  *shortened*: its longest strings are cut, each ending in a marker saying how many
  bytes were left out (:func:`shorten`); the record it announces (a session log) keeps
  them whole.
- A lone UTF-16 surrogate escape (``"\\udcff"``, what JavaScript's ``JSON.stringify``
  writes for half an emoji) is read as U+FFFD, the replacement character
  (:func:`repair_surrogates`): the request keeps its id and is served.
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

_ESCAPES = re.compile(
    rb"\\\\"                                                   # an escaped backslash
    rb"|\\u[dD][89abAB][0-9a-fA-F]{2}\\u[dD][c-fC-F][0-9a-fA-F]{2}"  # a whole pair
    rb"|\\u[dD][89a-fA-F][0-9a-fA-F]{2}")                      # a lone half
_REPLACEMENT = rb"\ufffd"


def _repair(match: re.Match[bytes]) -> bytes:
    text = match.group()
    return text if len(text) != 6 else _REPLACEMENT


def repair_surrogates(data: bytes) -> bytes:
    """``data`` with every lone surrogate escape replaced by ``\\ufffd`` (pairs and
    escaped backslashes kept). Cheap when there is none: one search for ``\\ud``."""
    if b"\\ud" not in data and b"\\uD" not in data:
        return data
    return _ESCAPES.sub(_repair, data)


# -- shortening ---------------------------------------------------------------------------

_encoder = msgspec.json.Encoder()
MARKER = "…[{} bytes left out]"
"""Ends every shortened string; ``{}`` is how many bytes of UTF-8 were cut."""


def _strings(value: Any, out: list[int]) -> None:
    if isinstance(value, str):
        out.append(len(value))
    elif isinstance(value, dict):
        for item in value.values():
            _strings(item, out)
    elif isinstance(value, list):
        for item in value:
            _strings(item, out)


def _cap(value: Any, cap: int) -> Any:
    if isinstance(value, str):
        if len(value) <= cap:
            return value
        cut = len(value[cap:].encode("utf-8", "surrogatepass"))
        return value[:cap] + MARKER.format(cut)
    if isinstance(value, dict):
        return {key: _cap(item, cap) for key, item in value.items()}
    if isinstance(value, list):
        return [_cap(item, cap) for item in value]
    return value


def shorten(value: Any, budget: int) -> Any | None:
    """``value`` (builtins: dicts, lists, strings, numbers) with its longest strings cut so
    that its JSON fits ``budget`` bytes, or None when cutting strings is not enough. Keys
    are never cut; the strings kept are as long as the budget allows (one common cap)."""
    if len(_encoder.encode(value)) <= budget:
        return value
    lengths: list[int] = []
    _strings(value, lengths)
    if not lengths or len(_encoder.encode(_cap(value, 0))) > budget:
        return None
    fits, too_long = 0, max(lengths)  # a cap that fits and one that does not
    while too_long - fits > 1:
        cap = (fits + too_long) // 2
        if len(_encoder.encode(_cap(value, cap))) <= budget:
            fits = cap
        else:
            too_long = cap
    return _cap(value, fits)
