"""A stop's answer: what a settled phase's ``turn/end`` (or compaction) says, never more.

``Agent.cancel`` waits for the phase it stopped to settle, then answers from what the log
holds: ``idle`` if the phase ended on its own first, ``aborted`` or ``error`` with the
stopped turn's calls and how each ended, or an ``INTERNAL`` error when the end could not be
made durable (a settlement the agent cannot vouch for).
"""

from __future__ import annotations

from protocol.errors import ErrorCode, RpcError
from protocol.messages.client import AbortedCall, AgentAbortResult
from protocol.messages.events import ToolCallEvent, ToolResultEvent
from runtime.agent.compaction import Compaction
from runtime.agent.journal import Journal
from runtime.agent.registry import Cause
from runtime.agent.turnend import TurnSlot


def stop_answer(journal: Journal, slot: TurnSlot | None, job: Compaction | None,
                stop_cause: Cause | None, settled_ms: float) -> AgentAbortResult:
    """The answer to the stop of a settled phase: its turn's ``slot``, or (None) the
    maintenance phase's ``job``; raise ``RpcError`` (``INTERNAL``) if its end is not durable."""
    if slot is None:  # maintenance: no turn, no calls
        if job is not None and not job.durable:
            raise RpcError(ErrorCode.INTERNAL, "the compaction ended, but its "
                           "maintenance/end could not be made durable (see the daemon log)")
        if job is not None and job.outcome in ("compacted", "nothing"):
            return AgentAbortResult("idle")  # it ended on its own first
        return AgentAbortResult("aborted", None, stop_cause, settled_ms)
    if slot.end is None and slot.turn_id not in journal.by_turn:
        raise RpcError(ErrorCode.INTERNAL, "the turn could not start: the session log "
                       "refused its turn/start (see the daemon log)")
    if slot.end is None:
        raise RpcError(ErrorCode.INTERNAL, f"turn {slot.turn_id} ended, but its turn/end "
                       "could not be made durable (see the daemon log)")
    if slot.end.end.kind == "completed":
        return AgentAbortResult("idle", slot.turn_id)  # it ended on its own first
    # Aborted, or ended by an error (a host crash, a record the disk refused) while the
    # stop settled: either way the stopped turn is over, its calls say how each ended,
    # and the answer says what its durable turn/end says.
    if slot.end.end.kind == "error":
        return AgentAbortResult("error", slot.turn_id, stop_cause, settled_ms,
                                calls_of(journal, slot.turn_id), slot.end.end.error)
    return AgentAbortResult("aborted", slot.turn_id, stop_cause, settled_ms,
                            calls_of(journal, slot.turn_id))


def calls_of(journal: Journal, turn_id: str) -> tuple[AbortedCall, ...]:
    """The turn's calls, each with the code of its result (if it has one)."""
    calls: dict[str, AbortedCall] = {}
    for event in journal.by_turn.get(turn_id, []):
        if isinstance(event, ToolCallEvent):
            calls[event.call_id] = AbortedCall(event.call_id, event.tool, event.tool_class)
        elif isinstance(event, ToolResultEvent) and event.call_id in calls:
            call = calls[event.call_id]
            calls[event.call_id] = AbortedCall(call.call_id, call.tool, call.tool_class,
                                               event.code)
    return tuple(calls.values())
