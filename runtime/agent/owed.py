"""The turn ends a session's log still owes: each recorded, oldest first, once it can.

An end the log took but could not fsync stays (it is true); one the log could not take is
owed: recorded (kind ``error``, saying the log failed) before anything else of the
session, once the log takes records again. A turn whose ``turn/start`` the log never took
has nothing to close. Before any end is recorded, the turn's calls without a result are
balanced (``balance``): each gets one saying its outcome is unknown.
"""

from __future__ import annotations

import logging

from protocol.errors import ErrorCode
from protocol.messages.events import ToolCallEvent, ToolResultEvent, TurnEnd, TurnOutcome
from protocol.tools import error_result
from runtime.agent.journal import Journal

log = logging.getLogger(__name__)


def recorded_end(journal: Journal, turn_id: str) -> TurnEnd | None:
    """The turn's turn/end in the log (durable or not), if it has one."""
    return next((e for e in journal.by_turn.get(turn_id, ())
                 if isinstance(e, TurnEnd)), None)


def balance(journal: Journal, turn_id: str) -> None:
    """Give each call of the turn recorded without a result one: its outcome is unknown."""
    answered = {e.call_id for e in journal.by_turn.get(turn_id, [])
                if isinstance(e, ToolResultEvent)}
    for call in [e for e in journal.by_turn.get(turn_id, [])
                 if isinstance(e, ToolCallEvent) and e.call_id not in answered]:
        result = error_result(ErrorCode.INTERNAL, "the runtime failed during this call; "
                              "its outcome is unknown", body_invoked=True)
        journal.append(lambda seq, c=call, r=result: ToolResultEvent(  # type: ignore[misc]
            seq, c.turn_id, c.step, c.call_id, True, r.code, r.content, r.details))


class OwedEnds:
    """The (turn id, why) of turns whose turn/end the log could not take, oldest first."""

    def __init__(self, session_id: str, journal: Journal) -> None:
        self.session_id = session_id
        self.journal = journal
        self._owed: list[tuple[str, str]] = []

    def __len__(self) -> int:
        return len(self._owed)

    def why(self, turn_id: str) -> str | None:
        """Why the turn's end is owed (None: it is not)."""
        return dict(self._owed).get(turn_id)

    def owe(self, turn_id: str, exc: OSError) -> None:
        """Remember a turn whose end the log could not take, if its turn/start is there
        (a turn the log never took has nothing to close) and its end is not (one the log
        took but could not fsync is kept: it is true)."""
        if turn_id in self.journal.by_turn and recorded_end(self.journal, turn_id) is None \
                and turn_id not in {t for t, _ in self._owed}:
            self._owed.append((turn_id, "the session log could not record this turn's end "
                                        f"({exc.strerror or exc}); recorded once it could"))

    async def record(self) -> None:
        """Record the owed ends, oldest first (``OSError`` if the log still fails): each
        turn ends ``error``, as its prompt was answered, its unanswered calls balanced."""
        while self._owed:
            turn_id, why = self._owed[0]
            if recorded_end(self.journal, turn_id) is None:
                balance(self.journal, turn_id)
                await self.journal.append_durably(
                    lambda seq, t=turn_id, w=why: TurnEnd(  # type: ignore[misc]
                        seq, t, TurnOutcome("error", error=w), "error"))
                log.info("session %s: recorded the owed end of turn %s", self.session_id,
                         turn_id)
            self._owed.pop(0)
