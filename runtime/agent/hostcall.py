"""One host call's life in the runtime, as a state table (like ``phase.py``).

A host call is a tool call of a turn sent to the host as ``tools.execute``. Its states:

- ``running``: the execute is (about to be) sent, no stop has reached it;
- ``aborting``: a stop reached it and its one ``tools.abort`` was started;
- ``draining``: the host answered the abort (or it could not be delivered); the call
  still waits for the execute's result, as its class says;
- ``abandoned``: the call stopped waiting (read-only at once, process past its grace);
  a late result or progress is dropped.

Only the moves of ``TABLE`` happen (any other is ``InvalidTransition``); firing ``ABORT``,
which only a running call takes, is what starts the one sender of the call's
``tools.abort``, so a second stop can never send two.
"""

from __future__ import annotations

import enum
import time
from dataclasses import dataclass, field

import trio

from protocol.messages.host import ToolsAbortResult
from protocol.statetable import StateTable
from protocol.toolclass import ToolClass
from protocol.tools import ToolResult


class HostCallState(enum.Enum):
    RUNNING = "running"
    ABORTING = "aborting"
    DRAINING = "draining"
    ABANDONED = "abandoned"


class HostCallEvent(enum.Enum):
    ABORT = "abort"  # a stop reached the call: its tools.abort goes out (once)
    ABORT_DONE = "abort-done"  # the abort was answered, or could not be delivered
    ABANDON = "abandon"  # the call stopped waiting for the host's result


S, E = HostCallState, HostCallEvent
TABLE: StateTable[HostCallState, HostCallEvent] = StateTable(
    "a host call in the runtime", S.RUNNING, {
        (S.RUNNING, E.ABORT): S.ABORTING,
        (S.ABORTING, E.ABORT_DONE): S.DRAINING,
        (S.RUNNING, E.ABANDON): S.ABANDONED,
        (S.ABORTING, E.ABANDON): S.ABANDONED,
        (S.DRAINING, E.ABANDON): S.ABANDONED,
        (S.ABANDONED, E.ABORT_DONE): S.ABANDONED,
    }, doc="one tool call of a turn sent to the host, from its execute to its result",
    notes={(S.ABANDONED, E.ABORT_DONE): "an abandoned read-only call's abort is still "
                                        "delivered; its answer is only logged"})
del S, E


@dataclass(frozen=True)
class InFlightCall:
    """What operators see of a call waiting on the host (``HostTools.in_flight``)."""

    call_id: str
    host_call_id: str
    tool: str
    tool_class: ToolClass
    state: HostCallState
    age: float
    """Seconds since the call was made."""


@dataclass(eq=False)
class HostCall:
    call_id: str
    host_call_id: str
    tool: str
    tool_class: ToolClass
    state: HostCallState = HostCallState.RUNNING
    progress: list[str] = field(default_factory=list)
    abort_answer: ToolsAbortResult | None = None
    abort_done: trio.Event = field(default_factory=trio.Event)
    """Set once the call's one ``tools.abort`` was answered or failed to be delivered."""
    started_at: float = field(default_factory=time.monotonic)

    def fire(self, event: HostCallEvent) -> bool:
        """Apply ``event`` (``InvalidTransition`` if the table has no such move here);
        whether the call's state changed."""
        target = TABLE.next(self.state, event)
        moved = target is not self.state
        self.state = target
        return moved

    @property
    def stopped(self) -> bool:
        """A stop reached the call (its abort started), or it was abandoned."""
        return self.state is not HostCallState.RUNNING

    @property
    def abandoned(self) -> bool:
        return self.state is HostCallState.ABANDONED

    def view(self, now: float) -> InFlightCall:
        return InFlightCall(self.call_id, self.host_call_id, self.tool, self.tool_class,
                            self.state, now - self.started_at)


@dataclass
class Execution:
    """A ``tools.execute`` request in flight: it may outlive the call that sent it."""

    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    done: trio.Event = field(default_factory=trio.Event)
    result: ToolResult | None = None
    failure: Exception | None = None

    def get(self) -> ToolResult:
        """The host's result; a failure of the request is raised here, in the call's task
        (the registry maps it), never in the nursery that ran the request."""
        if self.failure is not None:
            raise self.failure
        assert self.result is not None
        return self.result
