"""A turn run to its recorded end: whatever happens inside it, its ``turn/end`` is written.

This is the one place a turn's unexpected failure (a bug, a model answer the scheduler
refuses, a failing disk) is mapped (``run_to_end``): the turn ends ``error``, and every call
it recorded without a result gets one saying its outcome is unknown. An end the log could
not take is owed (``owed.py``); a turn whose ``turn/start`` the log never took records
nothing. ``TurnSlot`` is the agent's running turn, holding its end once it is durable.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

from protocol.messages.events import TurnEnd, TurnOutcome
from runtime.agent.compaction import usage_sum
from runtime.agent.inbox import PendingPrompt
from runtime.agent.journal import Journal
from runtime.agent.owed import OwedEnds, balance
from runtime.agent.registry import AbortSignal
from runtime.agent.turn import Turn, TurnEnding

log = logging.getLogger(__name__)


@dataclass
class TurnSlot:
    """The agent's running turn: its prompt, and its end once durable."""

    turn_id: str
    prompt: PendingPrompt
    end: TurnEnd | None = None
    """The turn's ``turn/end`` once it is durable (None: not yet, or it could not be)."""
    started_at: float = field(default_factory=time.monotonic)
    stop_requested_at: float | None = None


async def run_to_end(turn: Turn, signal: AbortSignal, journal: Journal, owed: OwedEnds
                     ) -> tuple[TurnEnding, TurnEnd | None]:
    """Run a turn and record its turn/end, whatever happens inside it; the ending and
    the turn/end if it is durable (None if the log failed to append or fsync it, or
    never took the turn's turn/start: then no end is written).

    This is the one place a turn's unexpected failure (a bug, a model answer the
    scheduler refuses, a failing disk) is mapped: the turn ends ``error``, and every
    call it recorded without a result gets one saying its outcome is unknown.
    """
    try:
        ending = await turn.run(signal)
    except Exception as exc:  # the turn's one mapping of unexpected failures
        log.exception("session %s turn %s failed", owed.session_id, turn.turn_id)
        ending = TurnEnding(TurnOutcome("error", error=describe_failure(exc)), "error")
    if turn.turn_id not in journal.by_turn:  # its turn/start never reached the log
        return ending, None
    try:
        await owed.record()  # a subagent's owed end before its parent's
        balance(journal, turn.turn_id)
        usage = usage_sum(journal.by_turn.get(turn.turn_id, ()))
        end = await journal.append_durably(lambda seq: TurnEnd(
            seq, turn.turn_id, ending.outcome, ending.stop_reason, usage))
    except OSError as exc:
        log.exception("session %s: the log could not record the end of %s",
                      owed.session_id, turn.turn_id)
        owed.owe(turn.turn_id, exc)
        return ending, None
    assert isinstance(end, TurnEnd)
    return ending, end


def describe_failure(exc: Exception) -> str:
    """A turn's unexpected failure as its turn/end says it (a group of one is its member)."""
    while isinstance(exc, ExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    if isinstance(exc, OSError) and exc.strerror:  # the session log, mostly: a full disk
        return f"internal error: {type(exc).__name__}: {exc.strerror}"
    return f"internal error: {type(exc).__name__}: {exc}"
