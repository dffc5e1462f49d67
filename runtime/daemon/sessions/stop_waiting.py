"""A stop's waiting set, announced as it changes (``stop/waiting``): one per session.

The set is the calls of the session's host tools that a stop of the session's current
phase has reached (``aborting``, ``draining``) and that still wait on the host (not
abandoned, no result yet); ``agent.force`` without a call id forces them. It changes only
where something tells it: the stop starts or its phase settles (``Session.on_stopping``),
or a host call is made, moves in its state table or ends (``HostTools(on_calls=...)``).
Each time, the set is looked at again and, if it differs from the one announced last, a
``stop/waiting`` event is announced through the session's journal, so it reaches every
client link that hears the session's events (stdio, socket links, ops watchers).

Announced, never logged: it carries the ``seq`` of the last durable event before it (as
``tool/progress`` does). A stop with nothing to wait on announces nothing; one that waited
ends with ``calls: []``.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from protocol.messages.events import StopWaitingEvent, WaitingCall
from protocol.toolclass import ToolClass
from runtime.agent.hostcall import HostCallState

if TYPE_CHECKING:
    from runtime.agent.agent import Agent
    from runtime.daemon.sessions.ops_view import SessionOpsView

WaitingRow = tuple[str, str, str, str]
"""(call id, tool, class, state) of a call a stop waits on."""


def waiting_rows(agent: Agent, ops: SessionOpsView) -> tuple[WaitingRow, ...]:
    """The calls a stop of the session's phase has reached and that still wait on the host
    (``aborting``, ``draining``), in call id order. A call still ``running`` is one the
    stop has not reached yet (its walk is under way): it is listed once it has. A
    read-only call is never waited on (the stop abandons it at once): never listed."""
    if not agent.stopping:
        return ()
    return tuple(sorted(
        (call.call_id, call.tool, call.tool_class.value, call.state.value)
        for tools in ops.tools() for call in tools.in_flight()
        if call.state is not HostCallState.RUNNING
        and call.tool_class is not ToolClass.READ_ONLY))


class StopWaiting:
    def __init__(self, agent: Agent, ops: SessionOpsView) -> None:
        self._agent = agent
        self._ops = ops
        self._rows: tuple[WaitingRow, ...] = ()
        self._since: dict[str, float] = {}  # call id: when the stop began waiting on it
        self._turn_id = ""

    @property
    def rows(self) -> tuple[WaitingRow, ...]:
        return waiting_rows(self._agent, self._ops)

    def changed(self) -> None:
        """Something the set depends on moved: announce the set if it is not the last one
        announced."""
        rows = self.rows
        if rows == self._rows:
            return
        now = time.time()
        if not self._rows:  # a stop begins waiting: the turn it stops
            current = self._agent.current_turn
            self._turn_id = current[0] if current else ""
        self._since = {row[0]: self._since.get(row[0], now) for row in rows}
        self._rows = rows
        event = self.event()
        self._agent.journal.announce(lambda seq: StopWaitingEvent(
            seq, event.turn_id, event.calls))

    def event(self) -> StopWaitingEvent:
        """The set as last announced (``calls`` empty when the stop waits on none)."""
        return StopWaitingEvent(
            self._agent.journal.last_seq, self._turn_id,
            tuple(WaitingCall(call_id, tool, tool_class, state, self._since[call_id])
                  for call_id, tool, tool_class, state in self._rows))
