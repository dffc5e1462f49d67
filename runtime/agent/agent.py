"""One session's agent: the owner of its phases, its inbox, its turns and their stops.

A prompt accepted while idle starts its turn's phase at once (with its
controller), so a stop that arrives before the turn's first step still stops
that turn. Prompts accepted while a turn (or maintenance) runs wait in the inbox
(``inbox.py``) and start the next turns. ``cancel`` aborts the current phase's controller,
whichever non-idle phase it is (first cause wins), clears the inbox unless asked
to keep it, and returns only when that phase has ended: for a turn, when its
``turn/end`` is on disk (fsynced); concurrent cancels join the same settlement.
A turn whose ``turn/end`` could not be made durable answers its stops with an
``INTERNAL`` error, never with a settlement it cannot vouch for (``stopanswer.py``). An end
the log could not take is owed (``owed.py``); a turn runs to its recorded end in
``turnend.py``. A turn whose ``turn/start`` the log never took records nothing. A stop is
counted (``on_stop``) once, where its phase settles, whoever asked for it (a client, an
operator, ``session.close``, shutdown). What happens around its turns is its owner's, given
when it is built (``collaborators.py``).

A compaction (``session.compact``, or a prompt arriving while the history outgrows its
share of the context window) runs in the ``maintenance`` phase the same way: entered at
once, run by the agent's task (``maintenance.py``), shielded to its durable
``maintenance/end``, then its stops answered and the inbox's first prompt started
(``compaction.py`` is the job itself). A compaction a running turn needs between its steps
is the turn's own work (``turn.py``), under the turn's controller: the phase stays
``running``.

The agent keeps the settlement's order in one place: the phase table's ``END_TURN`` fires
where the end is durable or owed (``_release``), then the stops answer, then the next turn
starts. The phases are ``phase.py``, one turn's steps ``turn.py``, a subagent's tool
``task.py``.
"""

from __future__ import annotations

import collections
import itertools
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from protocol import ids
from protocol.messages.client import AbortedCall, AgentAbortResult
from protocol.messages.events import (
    AssistantMessageEvent,
    TokenUsage,
    ToolStartedEvent,
    TurnEnd,
    TurnOutcome,
)
from protocol.messages.host import ToolsOutputParams, ToolsStartedParams
from runtime.agent.collaborators import AgentCollaborators, Unowned
from runtime.agent.compaction import (
    Compaction,
    ContextSettings,
    outgrown,
    usage_sum,
)
from runtime.agent.history import ModelHistory
from runtime.agent.inbox import PendingPrompt
from runtime.agent.journal import Journal
from runtime.agent.maintenance import run_compaction
from runtime.agent.owed import OwedEnds, recorded_end
from runtime.agent.phase import PhaseEvent, PhaseKind, PhaseMachine
from runtime.agent.providers.base import Provider
from runtime.agent.registry import (
    AbortController,
    AbortSignal,
    Cause,
    ToolDefinition,
    ToolRegistry,
)
from runtime.agent.stopanswer import calls_of, stop_answer
from runtime.agent.task import TaskTool
from runtime.agent.turn import Turn, TurnConfig
from runtime.agent.turnend import TurnSlot, run_to_end

log = logging.getLogger(__name__)

CallNotice = ToolsOutputParams | ToolsStartedParams  # the host's word on a running call
ToolsFactory = Callable[[str], tuple[ToolRegistry, list[ToolDefinition[Any]],
                                     Callable[[CallNotice], bool]]]


class Agent:
    def __init__(self, session_id: str, journal: Journal, provider: Provider,
                 tools: ToolsFactory, config: TurnConfig | None = None, *,
                 collaborators: AgentCollaborators | None = None,
                 context: ContextSettings | None = None) -> None:
        """``collaborators``: what its owner does around its turns (None: ``Unowned``);
        ``context``: when the history is compacted on its own (the session's provider's
        window)."""
        self.session_id = session_id
        self.journal = journal
        self._provider = provider
        self._tools = tools
        self._config = config or TurnConfig()
        self.machine = PhaseMachine()
        self.inbox: collections.deque[PendingPrompt] = collections.deque()
        self._current: TurnSlot | None = None
        self._wake = trio.Event()
        self._turn_ids = itertools.count(_turn_count(journal) + 1)
        self._routes: list[Callable[[CallNotice], bool]] = []
        self._history = ModelHistory(journal.by_turn, journal.turn_order)
        self._owner: AgentCollaborators = (
            collaborators if collaborators is not None else Unowned())
        self._stop_at: float | None = None  # the current phase's first stop request
        self._owed = OwedEnds(session_id, journal)
        self.turns = 0
        self.context = context if context is not None else ContextSettings()
        self._maintenance: Compaction | None = None  # the maintenance phase's job
        self._settled_maintenance: Compaction | None = None  # the last one that ended

    # -- prompts ----------------------------------------------------------------------

    def prompt(self, text: str) -> PendingPrompt:
        pending = PendingPrompt(text)
        if self.machine.phase.kind is PhaseKind.IDLE:
            self._begin(pending)
        else:
            self.inbox.append(pending)
        return pending

    def _begin(self, pending: PendingPrompt, *, may_compact: bool = True) -> None:
        if may_compact and self._outgrown():
            # The history would fill too much of the window: compact first, the prompt
            # waiting at the inbox's head (a stop clears it unless it keeps the inbox).
            self.inbox.appendleft(pending)
            self._enter_maintenance(Compaction("auto"))
            return
        turn_id = ids.top_turn_id(next(self._turn_ids))
        self.machine.fire(PhaseEvent.START_TURN, turn_id=turn_id)
        self._current = TurnSlot(turn_id, pending)
        self._wake.set()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Run turns as prompts arrive, forever (cancel the task to stop serving)."""
        task_status.started()
        while True:
            await self._wake.wait()
            self._wake = trio.Event()
            while self._current is not None or self._maintenance is not None:
                if self._maintenance is not None:
                    await self._run_maintenance(self._maintenance)
                else:
                    assert self._current is not None
                    await self._run_turn(self._current)

    async def _run_turn(self, slot: TurnSlot) -> None:
        controller = self.machine.phase.controller
        assert controller is not None
        await self._owner.before_turn(controller.signal)
        registry, definitions, route = self._tools(slot.turn_id)
        def started(call_id: str) -> None:  # a local body: no host says it started
            self.journal.announce(lambda seq: ToolStartedEvent(seq, slot.turn_id, call_id))

        task = TaskTool(slot.turn_id, self._run_child, started).definition()
        registry.register(task)
        self._routes.append(route)
        turn = Turn(turn_id=slot.turn_id, prompt=slot.prompt.text, journal=self.journal,
                    provider=self._provider, registry=registry,
                    definitions=[*definitions, task], config=self._config,
                    history=self._history, on_step=self._owner.on_step,
                    context=self.context)
        durable: TurnEnd | None = None
        with trio.CancelScope(shield=True):  # a turn always reaches its durable turn/end
            try:
                await self._owed.record()
            except OSError:
                log.exception("session %s: the log still cannot record the end of an earlier "
                              "turn; turn %s does not start", self.session_id, slot.turn_id)
                self._routes.remove(route)
                self._release(slot, None)
                return
            async with self._owner.hold_turn(slot.turn_id):
                try:
                    ending, durable = await run_to_end(turn, controller.signal,
                                                       self.journal, self._owed)
                finally:
                    self._routes.remove(route)
                    self.turns += 1
                    self._release(slot, durable)
        log.info("session %s turn %s ended %s", self.session_id, slot.turn_id,
                 ending.outcome.kind)

    def _release(self, slot: TurnSlot, end: TurnEnd | None) -> None:
        """The turn is over (its turn/end durable, or the log broken): release its waiters
        with what the log says, never more."""
        slot.end = end
        # A turn whose turn/start the log never took has no id anyone can look up.
        turn_id = slot.turn_id if slot.turn_id in self.journal.by_turn else None
        slot.prompt.resolve(turn_id, end.stop_reason if end is not None else "error")
        self._current = None
        self._count_stop(end is not None and end.end.kind != "completed")
        self.machine.fire(PhaseEvent.END_TURN)  # the phase has settled: its stops answer
        self._stopping_changed()
        self._begin_queued()

    def _begin_queued(self, *, may_compact: bool = True) -> None:
        if self.inbox and self.machine.phase.kind is PhaseKind.IDLE:
            self._begin(self.inbox.popleft(), may_compact=may_compact)

    # -- maintenance: compaction ------------------------------------------------------

    def _outgrown(self) -> bool:
        return outgrown(self.context, self.journal, self._history)

    def compact(self) -> Compaction | None:
        """Begin a compaction now (``session.compact``); None if a phase runs (busy). Its
        ``done`` is set once its phase has ended (its ``maintenance/end`` durable)."""
        if self.machine.phase.kind is not PhaseKind.IDLE:
            return None
        job = Compaction("manual")
        self._enter_maintenance(job)
        return job

    def _enter_maintenance(self, job: Compaction) -> None:
        self.machine.fire(PhaseEvent.START_MAINTENANCE)  # a stop from now on stops it
        self._maintenance = job
        self._wake.set()

    async def _run_maintenance(self, job: Compaction) -> None:
        controller = self.machine.phase.controller
        assert controller is not None
        await self._owner.before_turn(controller.signal)  # as a turn: a stop right behind wins
        with trio.CancelScope(shield=True):  # it always reaches its durable end
            try:
                await run_compaction(self.session_id, job, self.journal, self._provider,
                                     self._history, controller.signal)
            finally:
                self._maintenance, self._settled_maintenance = None, job
                self._count_stop(job.outcome == "aborted")
                self.machine.fire(PhaseEvent.END_MAINTENANCE)  # its stops answer
                self._stopping_changed()
                job.done.set()
                self._begin_queued(may_compact=False)
        log.info("session %s: compaction (%s) ended %s", self.session_id, job.trigger,
                 job.outcome)

    async def record_owed(self) -> bool:
        """Try to record the owed ends now (a close, a shutdown); whether none is left."""
        if self.busy:
            return False
        with trio.CancelScope(shield=True):
            try:
                await self._owed.record()
            except OSError as exc:
                log.error("session %s: %d turn end(s) still cannot be recorded: %s",
                          self.session_id, len(self._owed), exc)
        return not self._owed

    async def _run_child(self, turn_id: str, prompt: str,
                         controller: AbortController) -> tuple[TurnEnd, str]:
        """One subagent turn in this session's log, under its own controller."""
        registry, definitions, route = self._tools(turn_id)
        self._routes.append(route)
        try:
            turn = Turn(turn_id=turn_id, prompt=prompt, journal=self.journal,
                        provider=self._provider, registry=registry, definitions=definitions,
                        config=self._config, history=self._history,
                        on_step=self._owner.on_step)
            ending, _ = await run_to_end(turn, controller.signal, self.journal,
                                         self._owed)
        finally:
            self._routes.remove(route)
        # The parent's record of the child says what the child's log says: its end (durable
        # or not), the owed end, or (no turn/start) the failure that kept it from starting.
        owed = self._owed.why(turn_id)
        end = recorded_end(self.journal, turn_id) or (
            TurnEnd(-1, turn_id, TurnOutcome("error", error=owed), "error") if owed
            else TurnEnd(-1, turn_id, ending.outcome, ending.stop_reason))
        texts = [e for e in self.journal.by_turn.get(turn_id, [])
                 if isinstance(e, AssistantMessageEvent)]
        text = "".join(b.text for b in texts[-1].blocks if b.type == "text") if texts else ""
        return end, text

    def on_output(self, params: CallNotice) -> bool:
        return any(route(params) for route in self._routes)

    # -- stops ------------------------------------------------------------------------

    async def maintain(self, job: Callable[[AbortSignal], Awaitable[None]]) -> bool:
        """Run ``job`` in the ``maintenance`` phase, under that phase's controller: a stop
        aborts the job's signal and answers once the job has returned. Only from idle
        (False, and nothing run, otherwise); prompts sent meanwhile wait in the inbox."""
        if self.machine.phase.kind is not PhaseKind.IDLE:
            return False
        phase = self.machine.fire(PhaseEvent.START_MAINTENANCE)
        assert phase.controller is not None
        try:
            await job(phase.controller.signal)
        finally:
            self._count_stop(True)
            self.machine.fire(PhaseEvent.END_MAINTENANCE)
            self._begin_queued()
        return True

    def stop_from_within(self, cause: Cause) -> None:
        """Stop the running turn from inside it (a hook's ``stopTurn``): its controller is
        aborted as by ``cancel`` (the first cause wins), the inbox kept; nothing waits."""
        phase, slot = self.machine.phase, self._current
        if phase.kind is not PhaseKind.RUNNING or phase.controller is None:
            return
        phase.controller.abort(cause)
        if self._stop_at is None:
            self._stop_at = time.monotonic()
        if slot is not None and slot.stop_requested_at is None:
            slot.stop_requested_at = time.monotonic()
        self._stopping_changed()

    async def cancel(self, cause: Cause, *, keep_inbox: bool = False,
                     task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
                     ) -> AgentAbortResult:
        """Stop the current phase, whichever it is, and answer once it has settled.
        ``task_status`` is started once the stop is recorded and started (before any
        wait): a link reads on from there."""
        started = time.perf_counter()
        if not keep_inbox:
            while self.inbox:
                self.inbox.popleft().resolve(None, "cancelled")
        phase, slot, job = self.machine.phase, self._current, self._maintenance
        if phase.kind is PhaseKind.IDLE:
            task_status.started()  # nothing to stop: taken (a close goes on after this)
            return AgentAbortResult("idle")
        assert phase.controller is not None and phase.settled is not None
        phase.controller.abort(cause)
        if self._stop_at is None:
            self._stop_at = time.monotonic()
        if slot is not None and slot.stop_requested_at is None:
            slot.stop_requested_at = time.monotonic()
        self._stopping_changed()
        task_status.started()
        with trio.move_on_after(self.stuck_after):
            await phase.settled.wait()
        if not phase.settled.is_set():
            log.warning("session %s: the stop of %s has waited %.1f s: stuck (see quiesce "
                        "ops)", self.session_id, slot.turn_id if slot else phase.kind.value,
                        self.stuck_after)
            await phase.settled.wait()
        settled_ms = round((time.perf_counter() - started) * 1000, 3)
        stop_cause = phase.controller.signal.cause
        return stop_answer(self.journal, slot, job, stop_cause, settled_ms)

    def _stopping_changed(self) -> None:
        self._owner.on_stopping()

    @property
    def stuck_after(self) -> float:
        """Seconds a stop waits before it is called stuck (its owner's)."""
        return self._owner.stuck_after

    @property
    def stopping_since(self) -> float | None:
        """When (monotonic) the current phase's first stop was asked for; ``None`` when no
        stop is settling."""
        return self._stop_at

    def _count_stop(self, aborted: bool) -> None:
        """The phase is settling: count its stop (if it had one that answers ``aborted``)."""
        at, self._stop_at = self._stop_at, None
        if at is not None and aborted:
            self._owner.on_stop(round((time.monotonic() - at) * 1000, 3))

    def calls_of(self, turn_id: str) -> tuple[AbortedCall, ...]:
        return calls_of(self.journal, turn_id)

    @property
    def current_turn(self) -> tuple[str, float, float | None] | None:
        """(turn id, age in s, seconds a stop of it has waited) of the running turn."""
        slot = self._current
        if slot is None:
            return None
        now = time.monotonic()
        waiting = now - slot.stop_requested_at if slot.stop_requested_at is not None else None
        return slot.turn_id, now - slot.started_at, waiting

    @property
    def stopping(self) -> bool:
        """A stop of the current phase has been requested."""
        controller = self.machine.phase.controller
        return controller is not None and controller.signal.aborted

    @property
    def usage(self) -> TokenUsage | None:
        """The session's token usage: its log's ``model/usage`` records summed."""
        return usage_sum(self.journal.events)

    @property
    def busy(self) -> bool:
        return self.machine.phase.kind is not PhaseKind.IDLE


def _turn_count(journal: Journal) -> int:
    """The highest top-level turn number in the log (ids are ``t<n>``; a turn the log never
    took leaves a gap, so counting turns could reuse a later one's id)."""
    return max((n for n in map(ids.top_turn_number, journal.turn_order) if n is not None),
               default=0)

