"""The transcript rulebook: what a session log must hold, and how a crash's log is closed.

Sans-IO: it reads events (a log's, or the ones a client saw) and says what holds open
and what breaks the rules; it never reads a file or a clock. The rules of a log at rest:

- **calls**: every ``tool/call`` has exactly one ``tool/result`` in the same turn and
  step, and every result answers a call;
- **turns**: every turn has exactly one ``turn/start`` and one ``turn/end``;
- **after the end**: nothing of a turn follows its ``turn/end``;
- **seqs**: the events' seqs count 0, 1, 2, … with no gap.

A log a crash cut off breaks them in one way only: turns (a subagent's inside its
parent's) and a compaction left open, their last calls unanswered. What closes them is
:meth:`Transcript.repair`, byte for byte what the daemon appends when it loads such a
log: a ``maintenance/end`` ``interrupted`` for the open compaction, then, innermost turn
first, an ``ABORTED`` result marked ``recovered`` for each unanswered call and a
``turn/end`` ``interrupted``. The daemon's load, the tests, the load test and the crash
test all ask this module.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import msgspec

from protocol.messages.events import (
    AnnouncedEvent,
    DurableEvent,
    HistoryCompacted,
    MaintenanceEnd,
    MaintenanceStart,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnOutcome,
    TurnStart,
)
from protocol.tools import aborted_result

INTERRUPTED = "the runtime stopped before this turn's end was recorded"
"""The error of the ``turn/end`` the repair gives a turn a crash left open."""
RECOVERED = "the runtime stopped mid-call"
"""``details.recovered`` of the result the repair gives a call a crash left unanswered."""

CallKey = tuple[str, int, str]
"""A call's place: turn id, step, call id."""


class Transcript:
    """One pass over a session's events: what is open, what is unanswered, what is wrong.

    ``events`` may be a whole log or the events a client saw (announced-only events, such
    as ``tool/progress``, count for nothing but their seq)."""

    def __init__(self, events: Iterable[DurableEvent | AnnouncedEvent]) -> None:
        self.events: tuple[DurableEvent | AnnouncedEvent, ...] = tuple(events)
        self._starts: Counter[str] = Counter()
        self._ends: Counter[str] = Counter()
        self._calls: Counter[CallKey] = Counter()
        self._results: Counter[CallKey] = Counter()
        self._open: dict[str, TurnStart] = {}  # in start order
        self._unanswered: dict[str, dict[str, ToolCallEvent]] = {}  # by turn, by call id
        self._after_end: list[str] = []
        self._maintenance: tuple[str, bool] | None = None
        for event in self.events:
            self._take(event)

    def _take(self, event: DurableEvent | AnnouncedEvent) -> None:
        if self._ends[event.turn_id] and not isinstance(event, TurnEnd):
            self._after_end.append(f"{type(event).__name__} seq {event.seq} after the end "
                                   f"of {event.turn_id}")
        if isinstance(event, TurnStart):
            self._starts[event.turn_id] += 1
            self._open[event.turn_id] = event
        elif isinstance(event, TurnEnd):
            if self._ends[event.turn_id]:
                self._after_end.append(f"turn/end seq {event.seq} after the end of "
                                       f"{event.turn_id}")
            self._ends[event.turn_id] += 1
            self._open.pop(event.turn_id, None)
        elif isinstance(event, ToolCallEvent):
            self._calls[(event.turn_id, event.step, event.call_id)] += 1
            self._unanswered.setdefault(event.turn_id, {})[event.call_id] = event
        elif isinstance(event, ToolResultEvent):
            self._results[(event.turn_id, event.step, event.call_id)] += 1
            self._unanswered.get(event.turn_id, {}).pop(event.call_id, None)
        elif isinstance(event, MaintenanceStart):
            self._maintenance = (event.turn_id, False)
        elif isinstance(event, HistoryCompacted) and self._maintenance is not None:
            self._maintenance = (self._maintenance[0], True)
        elif isinstance(event, MaintenanceEnd):
            self._maintenance = None

    # -- what is open -----------------------------------------------------------------

    def open_turns(self) -> list[TurnStart]:
        """Turns that started and never ended (the runtime died inside them), in start
        order: a subagent's turn and its parent's can both be open."""
        return list(self._open.values())

    def unanswered_calls(self, turn_id: str) -> list[ToolCallEvent]:
        """The turn's calls without a result, in call order."""
        return list(self._unanswered.get(turn_id, {}).values())

    def open_maintenance(self) -> tuple[str, bool] | None:
        """The last ``maintenance/start``, if it has no end (None: it has one, or there is
        none): the turn it ran inside (empty: the maintenance phase) and whether its
        ``history/compacted`` made it to the log."""
        return self._maintenance

    def ended_turns(self) -> set[str]:
        return {turn for turn, n in self._ends.items() if n}

    # -- what breaks the rules --------------------------------------------------------

    def call_problems(self, turns: Iterable[str] | None = None) -> list[str]:
        """Calls without exactly one result in their turn and step, and results without
        exactly one call: in ``turns`` only (None: every turn)."""
        wanted = None if turns is None else set(turns)
        problems = []
        for key in sorted(set(self._calls) | set(self._results)):
            if wanted is not None and key[0] not in wanted:
                continue
            if self._calls[key] != 1 or self._results[key] != 1:
                problems.append(f"call {key}: {self._calls[key]} tool/call, "
                                f"{self._results[key]} tool/result")
        return problems

    def turn_problems(self) -> list[str]:
        """Turns without exactly one ``turn/start`` and one ``turn/end``."""
        return [f"turn {turn}: {self._starts[turn]} turn/start, {self._ends[turn]} turn/end"
                for turn in sorted(set(self._starts) | set(self._ends))
                if self._starts[turn] != 1 or self._ends[turn] != 1]

    def after_end_problems(self) -> list[str]:
        """Events of a turn that follow its ``turn/end``."""
        return list(self._after_end)

    def seq_problems(self) -> list[str]:
        seqs = [e.seq for e in self.events]
        if seqs != list(range(len(seqs))):
            return ["seqs are not 0, 1, 2, …"]
        return []

    def problems(self) -> list[str]:
        """Every rule a log at rest must keep (empty: it keeps them all)."""
        return (self.seq_problems() + self.turn_problems() + self.after_end_problems()
                + self.call_problems())

    # -- what closes it ---------------------------------------------------------------

    def repair(self) -> tuple[DurableEvent, ...]:
        """What the daemon appends when it loads this log, numbered on from its last
        seq: the open compaction's end (before the end of the turn it ran inside), then,
        innermost (latest) turn first, a result for each unanswered call and the turn's
        ``interrupted`` end. Empty: the log needs none."""
        seq = self.events[-1].seq + 1 if self.events else 0
        added: list[DurableEvent] = []
        cut = self.open_maintenance()
        if cut is not None:
            inside, compacted = cut
            added.append(MaintenanceEnd(seq, inside, TurnOutcome("interrupted"), compacted))
            seq += 1
        result = aborted_result(before_dispatch=False, details={"recovered": RECOVERED})
        for turn in reversed(self.open_turns()):
            for call in self.unanswered_calls(turn.turn_id):
                added.append(ToolResultEvent(seq, call.turn_id, call.step, call.call_id, True,
                                             result.code, result.content, result.details))
                seq += 1
            added.append(TurnEnd(seq, turn.turn_id,
                                 TurnOutcome("interrupted", error=INTERRUPTED), "error"))
            seq += 1
        return tuple(added)


def balance_problems(events: Iterable[DurableEvent | AnnouncedEvent], *,
                     ended_only: bool = False) -> list[str]:
    """The calls rule alone: in every turn (``ended_only``: every turn that has ended; a
    turn still running may be waiting on a call), each call has exactly one result."""
    transcript = Transcript(events)
    return transcript.call_problems(transcript.ended_turns() if ended_only else None)


def repair_problems(before: Sequence[DurableEvent], after: Sequence[DurableEvent]) -> list[str]:
    """What a load did wrong to a log: ``after`` must be ``before`` (unchanged), then its
    :meth:`Transcript.repair` and nothing else, and keep every rule."""
    problems: list[str] = []
    encode = msgspec.json.encode
    kept = len(before)
    if [encode(e) for e in after[:kept]] != [encode(e) for e in before]:
        problems.append("the load changed what was on disk")
    owed = [encode(e) for e in Transcript(before).repair()]
    added = [encode(e) for e in after[kept:]]
    if added != owed:
        problems.append(f"the load added {len(added)} events, not the {len(owed)} of the "
                        f"repair: {[e.decode() for e in added if e not in owed][:3]}")
    return problems + Transcript(after).problems()
