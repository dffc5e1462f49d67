"""The agent's phase as a state table: ``idle``, ``maintenance``, ``running``.

Every non-idle phase owns exactly one ``AbortController`` and one ``settled``
event; a transition into a non-idle phase makes fresh ones, a transition to
``idle`` drops the controller and sets the phase's ``settled``. A stop is applied
to the current phase's controller and waits for that phase's ``settled``, so a
stop while idle has nothing to abort and arms nothing for later.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import trio

from protocol.statetable import InvalidTransition, StateTable
from runtime.agent.registry import AbortController

__all__ = ["IDLE", "TABLE", "InvalidTransition", "Phase", "PhaseEvent", "PhaseKind",
           "PhaseMachine"]


class PhaseKind(enum.Enum):
    IDLE = "idle"
    MAINTENANCE = "maintenance"
    RUNNING = "running"


class PhaseEvent(enum.Enum):
    START_TURN = "start-turn"
    END_TURN = "end-turn"
    START_MAINTENANCE = "start-maintenance"
    END_MAINTENANCE = "end-maintenance"


TABLE: StateTable[PhaseKind, PhaseEvent] = StateTable(
    "the agent's phase", PhaseKind.IDLE, {
        (PhaseKind.IDLE, PhaseEvent.START_TURN): PhaseKind.RUNNING,
        (PhaseKind.RUNNING, PhaseEvent.END_TURN): PhaseKind.IDLE,
        (PhaseKind.IDLE, PhaseEvent.START_MAINTENANCE): PhaseKind.MAINTENANCE,
        (PhaseKind.MAINTENANCE, PhaseEvent.END_MAINTENANCE): PhaseKind.IDLE,
    }, doc="one session's agent: a turn or a maintenance (compaction) at a time")


@dataclass(frozen=True)
class Phase:
    kind: PhaseKind
    controller: AbortController | None
    turn_id: str | None = None
    settled: trio.Event | None = None
    """Set when this (non-idle) phase has ended."""


IDLE = Phase(PhaseKind.IDLE, None)


class PhaseMachine:
    def __init__(self) -> None:
        self.phase = IDLE

    def fire(self, event: PhaseEvent, *, turn_id: str | None = None) -> Phase:
        target = TABLE.next(self.phase.kind, event)
        ended = self.phase
        if target is PhaseKind.IDLE:
            self.phase = IDLE
        else:
            self.phase = Phase(target, AbortController(),
                               turn_id if target is PhaseKind.RUNNING else None, trio.Event())
        if ended.settled is not None:
            ended.settled.set()
        return self.phase
