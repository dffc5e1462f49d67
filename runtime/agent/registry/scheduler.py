"""The scheduler of one step's tool calls, and what a stop does to them.

Calls start in model order. An exclusive call is a barrier: it starts when
nothing is in flight, and nothing starts until it has settled. Parallel-safe
calls share a rolling pool of at most ``max_parallel`` calls in flight. A call's
``tool/call`` is recorded (and awaited, so the recorder may make it durable)
immediately before it starts; results are recorded in model order, each as soon
as it and every earlier call have settled. Every call that is recorded also
starts, so the started calls are always a prefix of the step.

On a stop (the step's signal aborts): nothing more starts; the stop walk
drives the stop handler of every in-flight call whose body was invoked, itself,
not only through the signal; the started calls are drained (each awaited until
it settles, committing its real result); then every call that never started,
later groups included, gets a ``tool/call`` and a synthetic
``ABORTED_BEFORE_DISPATCH`` ``tool/result``, in model order. The transcript of
the step is balanced. A stop handler cannot unbalance or hang it: one that
raises is logged and contained (``ToolCall.stop``), and one still running when
its call settles is cancelled then, so the step waits for its calls, never for
a handler.

On an internal failure (the recorder raises, a bug): nothing more starts or is
recorded, the started calls are drained (their runs are shielded, so the
nursery's cancellation cannot cut them short), and the failure is raised as
trio raises it, in an ``ExceptionGroup``. No result is invented: the recorded
calls still waiting for a result are left to the session log's repair.
Cancelling the enclosing trio scope does the same (drain, then ``Cancelled``):
stop a step with its signal to get a balanced transcript.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Protocol

import trio

from protocol.tools import ToolResult
from runtime.agent.registry import outcomes
from runtime.agent.registry.frozen import freeze_result
from runtime.agent.registry.pipeline import ToolCall
from runtime.agent.registry.registry import ToolRegistry
from runtime.agent.registry.signal import AbortSignal
from runtime.agent.registry.views import ToolCallRequest, ToolExecutionInput

__all__ = ["DEFAULT_MAX_PARALLEL", "Recorder", "run_tool_calls"]

log = logging.getLogger(__name__)

DEFAULT_MAX_PARALLEL = 4


class Recorder(Protocol):
    """Where a step's ``tool/call`` and ``tool/result`` records go (e.g. the session log).

    The scheduler awaits each record before going on, from one task, in the order
    the records must appear.
    """

    async def record_call(self, call: ToolCallRequest) -> None: ...

    async def record_result(self, call: ToolCallRequest, result: ToolResult) -> None: ...


async def run_tool_calls(
    calls: Sequence[ToolCallRequest],
    *,
    registry: ToolRegistry,
    recorder: Recorder,
    signal: AbortSignal,
    max_parallel: int = DEFAULT_MAX_PARALLEL,
) -> tuple[ToolResult, ...]:
    """Run one step's calls; return their results in model order (see module doc)."""
    if max_parallel < 1:
        raise ValueError(f"max_parallel must be at least 1, not {max_parallel}")
    ids = [call.call_id for call in calls]
    if len(set(ids)) != len(ids):
        raise ValueError("call ids must be unique within a step")
    return await _Step(tuple(calls), registry, recorder, signal, max_parallel).run()


class _Step:
    def __init__(self, calls: tuple[ToolCallRequest, ...], registry: ToolRegistry,
                 recorder: Recorder, signal: AbortSignal, max_parallel: int) -> None:
        self._calls = calls
        self._registry = registry
        self._recorder = recorder
        self._signal = signal
        self._max_parallel = max_parallel
        self._tokens: list[ToolCall] = []  # the started calls, in model order
        self._results: list[ToolResult | None] = [None] * len(calls)
        self._committed = 0
        self._in_flight = 0
        self._changed = trio.Event()

    async def run(self) -> tuple[ToolResult, ...]:
        async with trio.open_nursery() as nursery:
            walk = trio.CancelScope()
            nursery.start_soon(self._stop_walk, nursery, walk)
            await self._start_calls(nursery)
            await self._wait_for(lambda: self._in_flight == 0, until_stop=False)  # drain
            await self._commit_ready()
            for index in range(len(self._tokens), len(self._calls)):  # only after a stop
                await self._record_skipped(index)
            walk.cancel()
        results = tuple(r for r in self._results if r is not None)
        assert len(results) == len(self._calls)
        return results

    # -- starting -------------------------------------------------------------------------

    async def _start_calls(self, nursery: trio.Nursery) -> None:
        for call in self._calls:
            exclusive = self._registry.is_exclusive(call.tool)
            if exclusive:
                await self._wait_for(lambda: self._in_flight == 0, until_stop=True)
            else:
                await self._wait_for(lambda: self._in_flight < self._max_parallel,
                                     until_stop=True)
            if self._signal.aborted:
                log.debug("stop: %d of %d calls not started", len(self._calls) - len(self._tokens),
                          len(self._calls))
                return
            await self._recorder.record_call(call)
            # Recorded means started: from here the call gets its own, real result.
            token = self._registry.prepare(ToolExecutionInput.of(call, self._signal))
            self._tokens.append(token)
            self._in_flight += 1
            nursery.start_soon(self._run_call, len(self._tokens) - 1, token)
            if exclusive:  # a barrier: nothing starts beside it
                await self._wait_for(lambda: self._in_flight == 0, until_stop=True)

    async def _run_call(self, index: int, token: ToolCall) -> None:
        self._results[index] = await token.run()  # shielded: a started call always settles
        self._in_flight -= 1
        self._changed.set()

    # -- waiting and committing -------------------------------------------------------------

    async def _wait_for(self, ready: Callable[[], bool], *, until_stop: bool) -> None:
        """Commit settled results in model order until ``ready()`` (or a stop, if asked)."""
        while True:
            changed = self._changed = trio.Event()
            await self._commit_ready()
            if ready() or (until_stop and self._signal.aborted):
                return
            await changed.wait()

    async def _commit_ready(self) -> None:
        while self._committed < len(self._tokens):
            result = self._results[self._committed]
            if result is None:
                return
            await self._recorder.record_result(self._calls[self._committed], result)
            self._committed += 1

    async def _record_skipped(self, index: int) -> None:
        call = self._calls[index]
        result = self._results[index] = freeze_result(outcomes.aborted(body_invoked=False))
        await self._recorder.record_call(call)
        await self._recorder.record_result(call, result)

    # -- the stop walk ------------------------------------------------------------------------

    async def _stop_walk(self, nursery: trio.Nursery, scope: trio.CancelScope) -> None:
        with scope:
            cause = await self._signal.wait()
            self._changed.set()
            walked = [t for t in self._tokens if t.body_invoked and not t.settled]
            log.debug("stop (%s): driving %d in-flight calls", cause.kind, len(walked))
            for token in walked:
                nursery.start_soon(self._drive_stop, token)

    @staticmethod
    async def _drive_stop(token: ToolCall) -> None:
        # Shielded so an internal failure cannot cut a stop short on its way to the tool;
        # bounded all the same: token.stop() ends the handler when the call settles, and
        # the drain awaits every started call anyway.
        with trio.CancelScope(shield=True):
            await token.stop()
