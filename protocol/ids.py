"""The ids the runtime makes and parses: sessions, turns, child turns, calls, host calls.

- A **session id** is ``s-<12 hex digits>``.
- A **turn id** is ``t<n>`` for a top-level turn (``n`` counts the session's turns) and
  ``<parent turn id>~<Task call id>`` for a subagent's (child) turn.
- A **call id** is the provider's, verbatim: any string, dots and tildes included.
- A **host call id** names a call on the runtime-host link: ``<turn id>.<call id>``, so
  a late abort or tombstone can never meet a later turn's call; a call outside any turn
  (``debug.runTool``'s ``dbg-<n>``) is named by its call id alone.

Unambiguous for any call id: the call id inside a child turn id is percent-encoded
(``%``, ``.`` and ``~`` only, so an ordinary call id reads unchanged), hence a turn id
never contains a dot and has a ``~`` only between its segments. A host call id is then
split at its first dot, and a child turn id at its ``~``s. Only this module formats or
parses these ids.
"""

from __future__ import annotations

CHILD_SEPARATOR = "~"
HOST_CALL_SEPARATOR = "."
_ESCAPES = {"%": "%25", ".": "%2E", "~": "%7E"}


def session_id(hex_digits: str) -> str:
    return f"s-{hex_digits}"


def top_turn_id(n: int) -> str:
    """The session's ``n``-th top-level turn."""
    return f"t{n}"


def top_turn_number(turn_id: str) -> int | None:
    """``n`` of a top-level turn id ``t<n>``; None for any other id."""
    digits = turn_id[1:]
    return int(digits) if turn_id.startswith("t") and digits.isdigit() else None


def debug_call_id(n: int) -> str:
    """The ``n``-th call of ``debug.runTool``: outside any turn."""
    return f"dbg-{n}"


def _escape(call_id: str) -> str:
    return "".join(_ESCAPES.get(c, c) for c in call_id)


def _unescape(segment: str) -> str:
    for char, escaped in _ESCAPES.items():
        if char != "%":
            segment = segment.replace(escaped, char)
    return segment.replace("%25", "%")


def child_turn_id(parent_turn_id: str, task_call_id: str) -> str:
    """The turn a ``Task`` call (``task_call_id``) of ``parent_turn_id`` runs."""
    return f"{parent_turn_id}{CHILD_SEPARATOR}{_escape(task_call_id)}"


def is_child_turn(turn_id: str) -> bool:
    return CHILD_SEPARATOR in turn_id


def root_turn_id(turn_id: str) -> str:
    """The top-level turn a turn belongs to (itself if it is top-level)."""
    return turn_id.split(CHILD_SEPARATOR, 1)[0]


def parent_turn_id(turn_id: str) -> str | None:
    """The turn whose ``Task`` call runs this child turn; None for a top-level turn."""
    parent, sep, _ = turn_id.rpartition(CHILD_SEPARATOR)
    return parent if sep else None


def task_call_id(turn_id: str) -> str | None:
    """The ``Task`` call id that runs this child turn; None for a top-level turn."""
    _, sep, segment = turn_id.rpartition(CHILD_SEPARATOR)
    return _unescape(segment) if sep else None


def is_within(turn_id: str, ancestor_turn_id: str) -> bool:
    """True for ``ancestor_turn_id`` itself and every child turn under it."""
    return turn_id == ancestor_turn_id or turn_id.startswith(ancestor_turn_id + CHILD_SEPARATOR)


def host_call_id(turn_id: str, call_id: str) -> str:
    """The host's name for a call of a turn."""
    return f"{turn_id}{HOST_CALL_SEPARATOR}{call_id}"


def split_host_call_id(host_call_id: str) -> tuple[str | None, str]:
    """``(turn id, call id)`` of a host call id; ``(None, id)`` for a call outside any turn
    (no dot: a turn's host call id always has one, as turn ids never do)."""
    turn_id, sep, call_id = host_call_id.partition(HOST_CALL_SEPARATOR)
    return (turn_id, call_id) if sep else (None, host_call_id)
