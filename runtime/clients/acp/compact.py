"""``/compact`` over ACP: a prompt of exactly that text compacts the session's history
(the native ``session.compact``) instead of starting a turn; ``session/cancel`` stops it
like a turn. Advertised to the editor with ``available_commands_update`` (``COMMANDS``)
once a session is opened (``session/new``, ``session/load``)."""

from __future__ import annotations

from protocol.messages.client import SessionCompactResult
from runtime.clients.acp.messages import AvailableCommand, AvailableCommandsUpdate

COMMAND = "/compact"
COMMANDS = AvailableCommandsUpdate((AvailableCommand(
    COMMAND.removeprefix("/"),
    "Compact the session's history: summarise the older turns, keep the latest"),))
"""The session's slash commands, as ACP advertises them (names without the slash)."""


def is_compact(text: str) -> bool:
    return text.strip() == COMMAND


def outcome_text(result: SessionCompactResult) -> str:
    """What the editor is told of the compaction, as the agent's message."""
    if result.outcome == "compacted":
        return (f"Compacted the history: {len(result.replaced)} turn(s) summarised, "
                f"~{result.tokens_before:,} → ~{result.tokens_after:,} tokens.")
    if result.outcome == "nothing":
        return "Nothing to compact yet: the most recent turn is always kept."
    if result.outcome == "aborted":
        return "Compaction stopped; the history is unchanged."
    if result.outcome == "busy":
        return "A turn is running: compact when it has ended."
    return f"{result.error or 'Compaction failed'}; the history is unchanged."
