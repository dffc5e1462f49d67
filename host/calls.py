"""One tool call as the host tracks it, its lifecycle as a state table, and the table
of calls in flight.

A call is registered before anything is evaluated for it (arguments,
permission, admission), so an abort always finds it. Its ``state`` moves only
through ``TABLE`` (``Call.fire``): ``admission`` (registered: arguments,
permission evaluation, an admission slot) → ``permission-pending`` while the
user is asked → back to ``admission`` → ``running`` once the body is about to be
called → ``settled`` (from any of them) when its one result is published. A stop
is not a state: it records the state it found (``stopped_in``). ``stop`` is the call's
stop request; ``pre_body`` is the cancel scope of everything before the body
(a stop there means the body never ran); ``body`` is the cancel scope of a
body that may be abandoned (read-only tools).
"""

from __future__ import annotations

import enum
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import trio

from protocol.causes import Cause
from protocol.messages.host import CallPhase, CallState
from protocol.statetable import InvalidTransition, StateTable
from protocol.toolclass import ToolClass

__all__ = ["TABLE", "Call", "CallEvent", "CallKey", "CallTable", "InvalidTransition"]

CallKey = tuple[str, str]  # (session id, call id)


class CallEvent(enum.Enum):
    ASK_PERMISSION = "ask-permission"  # the user is asked for permission
    ADMIT = "admit"  # permission granted (or not needed): waits for an admission slot
    START_BODY = "start-body"  # immediately before the body is called
    SETTLE = "settle"  # its one result is published


TABLE: StateTable[CallState, CallEvent] = StateTable(
    "a call in the host", "admission", {
        ("admission", CallEvent.ASK_PERMISSION): "permission-pending",
        ("permission-pending", CallEvent.ADMIT): "admission",
        ("admission", CallEvent.ADMIT): "admission",
        ("admission", CallEvent.START_BODY): "running",
        ("admission", CallEvent.SETTLE): "settled",
        ("permission-pending", CallEvent.SETTLE): "settled",
        ("running", CallEvent.SETTLE): "settled",
    }, doc="one tools.execute, from its registration to its one result",
    notes={("admission", CallEvent.ADMIT): "permission not needed: straight to a slot"})
"""Every allowed move of a call's ``state``; anything else is a bug (``InvalidTransition``)."""


@dataclass(eq=False)
class Call:
    session_id: str
    call_id: str
    tool: str
    tool_class: ToolClass
    state: CallState = "admission"
    cause: Cause | None = None
    body_invoked: bool = False
    """Set by the ``START_BODY`` move (``fire``), the one record that the body was called."""
    forced: bool = False
    permission_request_id: str | None = None
    stop: trio.Event = field(default_factory=trio.Event)
    pre_body: trio.CancelScope = field(default_factory=trio.CancelScope)
    body: trio.CancelScope = field(default_factory=trio.CancelScope)
    force_scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    started_at: float = field(default_factory=time.monotonic)
    output_seq: int = 0
    stopped_in: CallState | None = None  # the phase the first stop found the call in
    stop_hooks: list[Callable[[], None]] = field(default_factory=list)
    """Run by the first stop as it arrives (a process tree is sent TERM then, not a few
    scheduler passes later when its task wakes); each must not raise."""

    @property
    def key(self) -> CallKey:
        return (self.session_id, self.call_id)

    def fire(self, event: CallEvent) -> CallState:
        self.state = TABLE.next(self.state, event)
        if event is CallEvent.START_BODY:
            self.body_invoked = True  # kept past ``settled``, which forgets ``running``
        return self.state

    @property
    def phase(self) -> CallPhase | None:
        """Where a call in flight is (``host.stats``); None once settled."""
        if self.state == "settled" or self.state == "tombstoned":
            return None
        return self.state

    def request_stop(self, cause: Cause) -> None:
        """First cause wins; cancels whatever may be abandoned in the call's phase."""
        if self.stop.is_set():
            return
        self.cause = cause
        self.stopped_in = self.state
        self.stop.set()
        for hook in self.stop_hooks:
            hook()
        if not self.body_invoked:
            self.pre_body.cancel()
        elif self.tool_class in (ToolClass.READ_ONLY, ToolClass.LOCAL):
            self.body.cancel()

    def force(self) -> None:
        """Stop waiting for a stopped mutating or plugin body that does not end."""
        self.forced = True
        self.force_scope.cancel()


class CallTable:
    """Calls in flight, plus a bounded memory of settled ones for idempotent aborts."""

    def __init__(self, settled_memory: int = 4096) -> None:
        self._calls: dict[CallKey, Call] = {}
        self._settled: OrderedDict[tuple[str, str, str], None] = OrderedDict()
        self._settled_memory = settled_memory
        self.idle = trio.Event()
        self.idle.set()

    def register(self, call: Call) -> bool:
        if call.key in self._calls:
            return False
        self._calls[call.key] = call
        self.idle = trio.Event() if self.idle.is_set() else self.idle
        return True

    def settle(self, call: Call) -> None:
        call.fire(CallEvent.SETTLE)
        if self._calls.get(call.key) is call:
            del self._calls[call.key]
        self.remember_settled(call.session_id, call.call_id, call.tool)
        if not self._calls:
            self.idle.set()

    def remember_settled(self, session_id: str, call_id: str, tool: str) -> None:
        self._settled[(session_id, call_id, tool)] = None
        while len(self._settled) > self._settled_memory:
            self._settled.popitem(last=False)

    def find(self, session_id: str, call_id: str, tool: str) -> Call | None:
        call = self._calls.get((session_id, call_id))
        return call if call is not None and call.tool == tool else None

    def find_any(self, session_id: str, call_id: str) -> Call | None:
        return self._calls.get((session_id, call_id))

    def was_settled(self, session_id: str, call_id: str, tool: str) -> bool:
        return (session_id, call_id, tool) in self._settled

    def __iter__(self) -> Iterator[Call]:
        return iter(list(self._calls.values()))

    def __len__(self) -> int:
        return len(self._calls)
