"""The chat's lines for a turn's token usage and for the session's maintenance (a
history compaction): pure, events in, lines out (like :mod:`runtime.clients.chat.view`)."""

from __future__ import annotations

from rich.text import Text

from protocol.messages.events import (
    HistoryCompacted,
    MaintenanceEnd,
    MaintenanceStart,
    ModelUsageEvent,
    TurnEnd,
)
from runtime.clients.eventrender import usage_text

Lines = list[Text]


def turn_usage_lines(event: TurnEnd) -> Lines:
    """A turn's tokens, under its end (nothing for a turn that asked no model)."""
    if event.usage is None:
        return []
    return [Text(f"  tokens: {usage_text(event.usage)}", style="dim")]


def maintenance_lines(event: ModelUsageEvent | MaintenanceStart | MaintenanceEnd
                      | HistoryCompacted) -> Lines:
    if isinstance(event, MaintenanceStart):
        why = ("the history outgrew its share of the context window" if event.trigger == "auto"
               else "as asked")
        return [Text(f"⋯ compacting the history ({why})", style="cyan")]
    if isinstance(event, HistoryCompacted):
        return [Text(f"✓ history compacted: {len(event.replaced)} turn(s) summarised, "
                     f"~{event.tokens_before:,} → ~{event.tokens_after:,} tokens",
                     style="green")]
    if isinstance(event, MaintenanceEnd):
        if event.end.kind == "aborted":
            return [Text("■ compaction stopped; the history is unchanged", style="yellow")]
        if event.end.kind == "error":
            return [Text(f"✗ {event.end.error}; the history is unchanged", style="red")]
        if not event.compacted:
            return [Text("nothing to compact yet (the most recent turn is always kept)",
                         style="dim")]
    return []
