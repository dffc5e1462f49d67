"""What a session picker shows of a session (``session.list``): a title (the
first prompt's first line, shortened), the last activity (its log's last write), the
number of top-level turns, and whether a turn is running or a stop is waiting."""

from __future__ import annotations

import os
import pathlib
from collections.abc import Iterable
from typing import Any

from protocol import ids
from protocol.messages.events import DurableEvent, TurnStart, UserMessageEvent

TITLE_MAX = 80


def title_of(text: str) -> str | None:
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    if not line:
        return None
    return line if len(line) <= TITLE_MAX else line[:TITLE_MAX - 1].rstrip() + "…"


def picker_fields(events: Iterable[DurableEvent], log_path: pathlib.Path | None, *,
                  running: bool = False, stopping: bool = False) -> dict[str, Any]:
    """``SessionInfo``'s picker fields from a session's durable events."""
    title = None
    turns = 0
    for event in events:
        if isinstance(event, TurnStart) and ids.top_turn_number(event.turn_id) is not None:
            turns += 1
        elif (title is None and isinstance(event, UserMessageEvent)
              and ids.top_turn_number(event.turn_id) is not None):
            title = title_of(event.text)
    try:
        last = os.stat(log_path).st_mtime if log_path is not None else None
    except OSError:
        last = None
    return {"title": title, "last_activity": last, "turns": turns, "running": running,
            "stopping": stopping}
