"""A hypothesis state machine over turns of steps with random stops and failures.

Each rule runs one step (in its own trio run with an autojump clock) with a
random batch: exclusive or parallel-safe calls, body durations, cooperative or
deaf bodies, body failures, pre-policies (allow, deny, ask, slow, failing), an
optional timeout policy, slow wrappers and post-policies, a random stop point,
a random pool size and sometimes a failing recorder. Steps of one turn share the
turn's controller, so once it is stopped every later step is stopped on entry.
After every step the invariants are checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import trio
import trio.testing
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, rule

from protocol.errors import ErrorCode
from protocol.toolclass import ToolClass
from protocol.tools import ToolResult, error_result
from runtime.agent.registry import (
    AbortController,
    Allow,
    Ask,
    Delegate,
    Deny,
    PolicyDecision,
    TimeoutPolicy,
    ToolCallRequest,
    ToolDispatchExecution,
    ToolExecution,
    ToolRegistry,
    UserCause,
    run_tool_calls,
)
from tests.registry.fakes import (
    Args,
    Behaviour,
    BodyLog,
    MemoryRecorder,
    RecorderFailure,
    all_tasks,
    cooperative,
    logged_tool,
    uncooperative,
)

ABD = ErrorCode.ABORTED_BEFORE_DISPATCH.name
ABORTED = ErrorCode.ABORTED.name

Policy = Literal["allow", "deny", "ask-allow", "ask-deny", "slow", "raise"]
Outcome = Literal["ok", "error", "raise"]


@dataclass(frozen=True)
class CallPlan:
    exclusive: bool
    seconds: float
    cooperative: bool
    outcome: Outcome
    policy: Policy
    bad_args: bool
    stop_handler: bool


@dataclass(frozen=True)
class StepPlan:
    calls: tuple[CallPlan, ...]
    stop_at: float | None
    max_parallel: int
    timeout: float | None
    wrapper_delay: float
    post_delay: float
    fail_record: int | None


halves = st.integers(0, 8).map(lambda n: n / 2)
call_plans = st.builds(
    CallPlan,
    exclusive=st.booleans(),
    seconds=halves,
    cooperative=st.booleans(),
    outcome=st.sampled_from(["ok", "ok", "ok", "error", "raise"]),
    policy=st.sampled_from(["allow"] * 6 + ["deny", "ask-allow", "ask-deny", "slow", "raise"]),
    bad_args=st.sampled_from([False] * 7 + [True]),
    stop_handler=st.booleans(),
)
step_plans = st.builds(
    StepPlan,
    calls=st.lists(call_plans, min_size=0, max_size=7).map(tuple),
    stop_at=st.none() | halves,
    max_parallel=st.integers(1, 4),
    timeout=st.sampled_from([None, None, 0.5, 1.5, 3.0]),
    wrapper_delay=st.sampled_from([0.0, 0.0, 0.5]),
    post_delay=st.sampled_from([0.0, 0.0, 0.5]),
    fail_record=st.none() | st.none() | st.none() | st.integers(0, 12),
)
# Steps stopped while bodies run (random plans rarely are): the stop walk, ABORTED and
# its races with timeouts, wrappers and post-policies get exercised every run.
in_flight_plans = st.builds(
    StepPlan,
    calls=st.lists(st.builds(CallPlan, exclusive=st.booleans(),
                             seconds=st.sampled_from([1.0, 2.0, 3.5]),
                             cooperative=st.booleans(), outcome=st.just("ok"),
                             policy=st.just("allow"), bad_args=st.just(False),
                             stop_handler=st.booleans()),
                   min_size=1, max_size=5).map(tuple),
    stop_at=st.sampled_from([0.5, 1.0, 1.5]),
    max_parallel=st.integers(1, 4),
    timeout=st.sampled_from([None, 0.5, 1.0, 1.5]),  # before, at and after the stop
    wrapper_delay=st.sampled_from([0.0, 0.5]),
    post_delay=st.sampled_from([0.0, 0.5]),
    fail_record=st.none(),
)


class FailingRecorder(MemoryRecorder):
    """Fails on its ``fail_at``-th record (0-based), if there is one."""

    def __init__(self, fail_at: int | None) -> None:
        super().__init__()
        self.fail_at = fail_at
        self.attempts = 0

    def _maybe_fail(self, kind: str, call_id: str) -> None:
        self.attempts += 1
        if self.fail_at is not None and self.attempts == self.fail_at + 1:
            raise RecorderFailure(f"record {self.fail_at} ({kind} {call_id})")


@dataclass(frozen=True)
class HandlerRun:
    """One stop handler run: which call, and whether the call's signal was aborted then."""

    call_id: str
    signal_aborted: bool


def build(plan: StepPlan, log: BodyLog,
          handled: list[HandlerRun]) -> tuple[ToolRegistry, list[ToolCallRequest]]:
    plans = {f"c{i}": p for i, p in enumerate(plan.calls)}

    async def stop(call: ToolExecution) -> None:
        handled.append(HandlerRun(call.call_id, call.signal.aborted))

    def behaviour(p: CallPlan) -> Behaviour:
        inner = cooperative(p.seconds) if p.cooperative else uncooperative(p.seconds)

        async def body(args: Args, call: ToolExecution) -> ToolResult:
            result = await inner(args, call)
            if p.outcome == "raise":
                raise ValueError("tool failed")
            if p.outcome == "error":
                return error_result(ErrorCode.TOOL_FAILED, "exit 1", body_invoked=True)
            return result

        return body

    tools = [logged_tool(f"T{i}", behaviour(p), log, exclusive=p.exclusive,
                         tool_class=ToolClass.PROCESS, stop=stop if p.stop_handler else None)
             for i, p in enumerate(plan.calls)]

    async def pre(call: ToolExecution) -> PolicyDecision:
        policy = plans[call.call_id].policy
        if policy == "slow":
            await trio.sleep(1)
        if policy == "raise":
            raise LookupError("policy failed")
        if policy == "deny":
            return Deny("no")
        return Ask() if policy.startswith("ask") else Allow()

    async def approval(call: ToolExecution, ask: Ask) -> Allow | Deny:
        with trio.move_on_after(1):
            await call.signal.wait()
            call.signal.raise_if_aborted()
        return Deny("no") if plans[call.call_id].policy == "ask-deny" else Allow()

    async def slow_wrapper(call: ToolDispatchExecution, delegate: Delegate) -> ToolResult:
        await trio.sleep(plan.wrapper_delay)
        result = await delegate()
        await trio.sleep(plan.wrapper_delay)
        return result

    async def slow_post(call: ToolExecution, result: ToolResult) -> ToolResult:
        await trio.sleep(plan.post_delay)
        return result

    wrappers = [slow_wrapper] + ([TimeoutPolicy(plan.timeout)] if plan.timeout else [])
    registry = ToolRegistry(tools, pre_policies=[pre], approval=approval, wrappers=wrappers,
                            post_policies=[slow_post])
    step = [ToolCallRequest(f"c{i}", f"T{i}", {"value": "bad"} if p.bad_args else {"value": i})
            for i, p in enumerate(plan.calls)]
    return registry, step


@dataclass
class StepRun:
    results: tuple[ToolResult, ...] | None
    failure: BaseException | None
    stopped_during_step: bool
    leftover_tasks: int
    listeners: int


class TurnMachine(RuleBasedStateMachine):
    @initialize()
    def new_controller(self) -> None:
        self.controller = AbortController()

    @rule()
    def next_turn(self) -> None:
        self.controller = AbortController()

    @rule(plan=step_plans | in_flight_plans)
    def run_step(self, plan: StepPlan) -> None:
        log = BodyLog()
        handled: list[HandlerRun] = []
        registry, step = build(plan, log, handled)
        recorder = FailingRecorder(plan.fail_record)
        stopped_on_entry = self.controller.signal.aborted
        run = trio.run(self._run, plan, registry, step, recorder,
                       clock=trio.testing.MockClock(autojump_threshold=0))
        self.check(plan, step, log, recorder, run, stopped_on_entry)
        self.check_stop_handlers(plan, log, handled, run, stopped_on_entry)

    async def _run(self, plan: StepPlan, registry: ToolRegistry, step: list[ToolCallRequest],
                   recorder: MemoryRecorder) -> StepRun:
        controller = self.controller
        before = all_tasks()
        results: tuple[ToolResult, ...] | None = None
        failure: BaseException | None = None
        async with trio.open_nursery() as nursery:
            if plan.stop_at is not None:
                nursery.start_soon(_abort_after, plan.stop_at, controller)
            try:
                results = await run_tool_calls(step, registry=registry, recorder=recorder,
                                               signal=controller.signal,
                                               max_parallel=plan.max_parallel)
            except* RecorderFailure as group:
                failure = group
            stopped = controller.signal.aborted
            leftover = len(all_tasks() - before - set(nursery.child_tasks))
            nursery.cancel_scope.cancel()
        return StepRun(results, failure, stopped, leftover, controller.signal.listener_count)

    def check(self, plan: StepPlan, step: list[ToolCallRequest], log: BodyLog,
              recorder: MemoryRecorder, run: StepRun, stopped_on_entry: bool) -> None:
        ids = [c.call_id for c in step]
        # Quiescence: every body that started had finished; no task was left running.
        assert sorted(log.finished) == sorted(log.invoked)
        assert run.leftover_tasks == 0 and run.listeners == 0
        # No body was invoked with its signal already aborted (a stop or a timeout).
        assert not any(log.aborted_on_entry.values()), log.aborted_on_entry
        # The pool and the barriers.
        assert log.max_running <= plan.max_parallel and not log.exclusive_overlap
        if stopped_on_entry:
            assert log.invoked == []
        recorded_calls = [i for kind, i in recorder.records if kind == "call"]
        recorded_results = [i for kind, i in recorder.records if kind == "result"]
        assert recorded_calls == ids[:len(recorded_calls)]  # model order
        assert recorded_results == ids[:len(recorded_results)]  # committed in model order
        for i in recorded_results:
            assert recorder.records.index(("call", i)) < recorder.records.index(("result", i))
        for i, result in recorder.results.items():
            self.check_classification(i, result, log)
            if plan.timeout is None:  # only the timeout policy produces TOOL_TIMEOUT
                assert result.code != ErrorCode.TOOL_TIMEOUT.name, (i, result)
            event(f"result {result.code or 'ok'}")
        event("recorder failed" if run.failure is not None else
              "stopped" if run.stopped_during_step else "completed")
        if run.failure is not None:  # drained, then raised; nothing invented
            assert run.results is None
            assert set(log.invoked) <= set(recorded_calls)
            return
        assert run.results is not None
        # Balanced: every call has exactly one result, in model order, as returned.
        assert recorded_calls == ids and recorded_results == ids
        assert list(run.results) == [recorder.results[i] for i in ids]
        if not run.stopped_during_step:
            assert all(r.code != ABD for r in run.results)
            assert all(r.code != ABORTED for r in run.results)

    @staticmethod
    def check_stop_handlers(plan: StepPlan, log: BodyLog, handled: list[HandlerRun],
                            run: StepRun, stopped_on_entry: bool) -> None:
        """The stop walk drove each handler once, on the stop, for exactly the calls in flight.

        A call is surely in flight at the stop (virtual time ``stop_at``) when its body
        started by then and finished later; a handler may also run for a call whose
        body had finished but which had not yet settled (a post-policy still running).
        """
        ids = [h.call_id for h in handled]
        assert len(set(ids)) == len(ids), ids  # once per call
        if plan.stop_at is None or stopped_on_entry:
            assert handled == []  # no stop during the step: no walk
            return
        for h in handled:
            index = int(h.call_id.removeprefix("c"))
            assert h.signal_aborted and plan.calls[index].stop_handler, h
            assert log.started_at[h.call_id] <= plan.stop_at, h  # its body ran before the stop
        if run.failure is not None:
            return  # an internal failure may cancel the walk before the stop
        in_flight = {
            f"c{i}" for i, p in enumerate(plan.calls)
            if p.stop_handler and f"c{i}" in log.started_at
            and log.started_at[f"c{i}"] <= plan.stop_at < log.finished_at[f"c{i}"]
        }
        assert in_flight <= set(ids), (in_flight, ids)
        event("stop handlers driven" if handled else "no stop handler in flight")

    @staticmethod
    def check_classification(call_id: str, result: ToolResult, log: BodyLog) -> None:
        invoked = call_id in log.invoked
        assert result.body_invoked == invoked, (call_id, result)
        if result.code == ABD:
            assert not invoked
        if result.code == ABORTED:
            assert invoked
        assert isinstance(result, ToolResult)


async def _abort_after(seconds: float, controller: AbortController) -> None:
    await trio.sleep(seconds)
    controller.abort(UserCause())


TurnMachine.TestCase.settings = settings(
    max_examples=100, stateful_step_count=4, deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_turns = TurnMachine.TestCase
