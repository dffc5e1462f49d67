"""What operators see of one session's calls, kept by the session itself (``Session.ops``).

Two sources: the calls of a step the scheduler has not started yet (``plan_step``; listed
``queued`` until their ``tool/call`` is recorded, which means started, or their turn ends),
and the host tools of the session's recent turns, whose ``in_flight()`` lists the calls
waiting on the host. ``DaemonOps`` reads it; the session's close drops it with the session.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from protocol.ids import root_turn_id
from protocol.messages.events import ToolCallEvent, TurnEnd
from protocol.messages.ops import OpsCall
from runtime.agent.hooks.stages import TurnHooks
from runtime.agent.hosttools import HostTools


@dataclass(frozen=True)
class PlannedCall:
    """A call of a step the scheduler has not started yet."""

    call_id: str
    tool: str
    tool_class: str
    since: float = field(default_factory=time.monotonic)


class SessionOpsView:
    def __init__(self) -> None:
        # Host tools of the session's recent turns: where in-flight calls are seen.
        self._tools: dict[str, HostTools] = {}
        # Each turn's planned calls not started yet.
        self._planned: dict[str, dict[str, PlannedCall]] = {}
        # Hooks of the session's recent turns: a call running a hook is shown so.
        self._hooks: dict[str, TurnHooks] = {}

    def plan_step(self, turn_id: str, calls: Sequence[tuple[str, str, str]]) -> None:
        """A step's calls (call id, tool, class), before the scheduler starts any of them (it
        starts them in order, some only after others settle)."""
        self._planned[turn_id] = {
            call_id: PlannedCall(call_id, tool, tool_class) for call_id, tool, tool_class in calls}

    def track_tools(self, turn_id: str, tools: HostTools) -> None:
        top = root_turn_id(turn_id)
        # Keep every turn of the current top-level turn (a parent outlives its subagents'
        # turns); drop older turns once nothing of theirs waits on the host.
        for old in [t for t, h in self._tools.items()
                    if root_turn_id(t) != top and not h.in_flight()]:
            del self._tools[old]
        self._tools[turn_id] = tools

    def track_hooks(self, turn_id: str, hooks: TurnHooks) -> None:
        top = root_turn_id(turn_id)
        for old in [t for t, h in self._hooks.items() if root_turn_id(t) != top and not h.running]:
            del self._hooks[old]
        self._hooks[turn_id] = hooks

    def hooks(self, now: float) -> list[OpsCall]:
        """Calls running a hook (before or after their body), with the hook."""
        return [OpsCall(r.call_id, r.tool, r.tool_class.value, "hook", round(now - r.since, 3),
                        f"{r.label} {' '.join(r.command)}")
                for hooks in self._hooks.values() for r in hooks.running.values()]

    def unplan(self, event: ToolCallEvent | TurnEnd) -> None:
        """A recorded ``tool/call`` (started) or ``turn/end``: no longer queued."""
        if event.turn_id not in self._planned:
            return
        if isinstance(event, TurnEnd):
            del self._planned[event.turn_id]
        else:
            self._planned[event.turn_id].pop(event.call_id, None)

    def queued(self, now: float) -> list[OpsCall]:
        return [OpsCall(c.call_id, c.tool, c.tool_class, "queued", round(now - c.since, 3))
                for calls in self._planned.values() for c in calls.values()]

    def tools(self) -> list[HostTools]:
        return list(self._tools.values())
