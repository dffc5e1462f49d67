"""One step's calls: order, barriers, the pool, stops and internal failures."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from protocol.errors import ErrorCode
from protocol.toolclass import ToolClass
from protocol.tools import Content, ToolResult, ok_result
from runtime.agent.registry import (
    AbortController,
    AbortSignal,
    Allow,
    PolicyDecision,
    ToolCallRequest,
    ToolExecution,
    ToolRegistry,
    UserCause,
    define_tool,
    run_tool_calls,
)
from tests.registry.fakes import (
    Args,
    BodyLog,
    MemoryRecorder,
    RecorderFailure,
    abort_at,
    all_tasks,
    calls,
    cooperative,
    logged_tool,
    uncooperative,
)

ABD = ErrorCode.ABORTED_BEFORE_DISPATCH.name
ABORTED = ErrorCode.ABORTED.name


def balanced_in_model_order(recorder: MemoryRecorder, step: list[ToolCallRequest]) -> None:
    ids = [c.call_id for c in step]
    assert [i for kind, i in recorder.records if kind == "call"] == ids
    assert [i for kind, i in recorder.records if kind == "result"] == ids
    for i in ids:
        assert recorder.records.index(("call", i)) < recorder.records.index(("result", i))


async def run_step(registry: ToolRegistry, step: list[ToolCallRequest], *,
                   recorder: MemoryRecorder | None = None, stop_at: float | None = None,
                   controller: AbortController | None = None,
                   max_parallel: int = 4) -> tuple[MemoryRecorder, tuple[ToolResult, ...]]:
    recorder = recorder or MemoryRecorder()
    controller = controller or AbortController()
    before = all_tasks()
    out: list[tuple[ToolResult, ...]] = []
    async with trio.open_nursery() as nursery:
        if stop_at is not None:
            nursery.start_soon(abort_at, stop_at, controller, UserCause())
        out.append(await run_tool_calls(step, registry=registry, recorder=recorder,
                                        signal=controller.signal, max_parallel=max_parallel))
        assert all_tasks() - before <= set(nursery.child_tasks)  # the step left no task
        nursery.cancel_scope.cancel()
    assert controller.signal.listener_count == 0
    return recorder, out[0]


async def test_model_order_barriers_pool_and_ordered_commits(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = BodyLog()
    registry = ToolRegistry([
        logged_tool("Slow", uncooperative(3), log), logged_tool("Fast", uncooperative(1), log),
        logged_tool("Mid", uncooperative(2), log),
        logged_tool("Write", uncooperative(1), log, exclusive=True),
    ])
    step = calls("Slow", "Fast", "Mid", "Write", "Fast", "Fast")
    recorder, results = await run_step(registry, step, max_parallel=2)
    assert log.started_at == {"c0": 0, "c1": 0, "c2": 1, "c3": 3, "c4": 4, "c5": 4}
    assert log.max_running == 2 and not log.exclusive_overlap
    assert recorder.records == [
        ("call", "c0"), ("call", "c1"), ("call", "c2"),
        # c1 settled first, but is committed after c0
        ("result", "c0"), ("result", "c1"), ("result", "c2"),
        ("call", "c3"), ("result", "c3"),
        ("call", "c4"), ("call", "c5"), ("result", "c4"), ("result", "c5"),
    ]
    assert [r.code for r in results] == [None] * 6
    assert [r.details["value"] for r in results] == list(range(6))
    assert trio.current_time() == 5


async def test_stop_with_a_pool_of_two_and_four_calls(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = BodyLog()
    registry = ToolRegistry([logged_tool("Read", cooperative(10), log)])
    step = calls("Read", "Read", "Read", "Read")
    recorder, results = await run_step(registry, step, stop_at=1, max_parallel=2)
    assert log.invoked == ["c0", "c1"] and sorted(log.finished) == ["c0", "c1"]
    assert [r.code for r in results] == [ABORTED, ABORTED, ABD, ABD]
    assert [r.body_invoked for r in results] == [True, True, False, False]
    assert recorder.records == [
        ("call", "c0"), ("call", "c1"), ("result", "c0"), ("result", "c1"),
        ("call", "c2"), ("result", "c2"), ("call", "c3"), ("result", "c3"),
    ]
    assert trio.current_time() == 1
    assert all(recorder.results[c.call_id] == r for c, r in zip(step, results, strict=True))


async def test_an_exclusive_call_behind_a_stopped_group_never_starts(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = BodyLog()
    registry = ToolRegistry([logged_tool("Read", uncooperative(3), log),
                             logged_tool("Write", uncooperative(1), log, exclusive=True)])
    step = calls("Read", "Read", "Write", "Read")
    recorder, results = await run_step(registry, step, stop_at=1)
    assert log.invoked == ["c0", "c1"] and trio.current_time() == 3  # drained, not abandoned
    assert [r.code for r in results] == [ABORTED, ABORTED, ABD, ABD]
    balanced_in_model_order(recorder, step)


async def test_a_stop_before_the_step_starts_nothing_and_balances_everything() -> None:
    log = BodyLog()
    controller = AbortController()
    controller.abort(UserCause())
    registry = ToolRegistry([logged_tool("Read", uncooperative(1), log),
                             logged_tool("Write", uncooperative(1), log, exclusive=True)])
    step = calls("Write", "Read", "Nope")
    recorder, results = await run_step(registry, step, controller=controller)
    assert log.invoked == [] and [r.code for r in results] == [ABD] * 3
    balanced_in_model_order(recorder, step)


async def test_the_stop_walk_drives_each_started_calls_stop_handler(
    autojump_clock: trio.testing.MockClock,
) -> None:
    released: dict[str, trio.Event] = {}
    stopped: list[str] = []

    async def deaf(args: Args, call: ToolExecution) -> ToolResult:
        """Never looks at its signal: only its stop handler can end it (like a host call)."""
        with trio.move_on_after(100):
            await released.setdefault(call.call_id, trio.Event()).wait()
            return ok_result("stopped by its handler", details={"released": True})
        return ok_result("timed out in the test", details={"released": False})

    async def stop(call: ToolExecution) -> None:
        assert call.signal.aborted  # the walk runs on the stop
        stopped.append(call.call_id)
        released.setdefault(call.call_id, trio.Event()).set()

    async def slow_policy(call: ToolExecution) -> PolicyDecision:
        if call.call_id == "c2":
            await trio.sleep(5)  # still in pre-policy at the stop: no body, no stop handler
        return Allow()

    tool = define_tool("Host", args=Args, tool_class=ToolClass.PROCESS, body=deaf, stop=stop,
                       exclusive=False)
    registry = ToolRegistry([tool], pre_policies=[slow_policy])
    step = calls("Host", "Host", "Host", "Host")
    recorder, results = await run_step(registry, step, stop_at=1, max_parallel=3)
    assert sorted(stopped) == ["c0", "c1"]
    assert [r.code for r in results] == [ABORTED, ABORTED, ABD, ABD]
    assert [r.details.get("released") for r in results] == [True, True, None, None]
    assert trio.current_time() == 5  # the policy still in flight was drained too
    balanced_in_model_order(recorder, step)


async def test_a_call_recorded_as_the_stop_arrives_still_gets_its_own_result() -> None:
    controller = AbortController()
    log = BodyLog()

    class StopWhileRecording(MemoryRecorder):
        async def record_call(self, call: ToolCallRequest) -> None:
            await super().record_call(call)
            if call.call_id == "c1":
                controller.abort(UserCause())

    finals: list[str | None] = []

    def final(result: ToolResult) -> tuple[Content, ...]:
        finals.append(result.code)
        return result.content

    tool = logged_tool("Read", uncooperative(0), log, final_content=final)
    registry = ToolRegistry([tool])
    step = calls("Read", "Read", "Read")
    recorder, results = await run_step(registry, step, recorder=StopWhileRecording(),
                                       controller=controller, max_parallel=1)
    assert [r.code for r in results] == [None, ABD, ABD]
    assert finals == [None, ABD]  # c1 ran through the registry (pre-aborted), c2 never started
    assert log.invoked == ["c0"]
    balanced_in_model_order(recorder, step)


async def test_an_internal_failure_drains_started_calls_then_raises_inventing_nothing(
    autojump_clock: trio.testing.MockClock,
) -> None:
    log = BodyLog()
    registry = ToolRegistry([logged_tool("Fast", uncooperative(1), log),
                             logged_tool("Slow", uncooperative(5), log)])
    step = calls("Fast", "Slow", "Fast")
    recorder = MemoryRecorder(fail_on=("result", "c0"))
    controller = AbortController()
    with pytest.RaisesGroup(RecorderFailure):
        await run_tool_calls(step, registry=registry, recorder=recorder,
                             signal=controller.signal, max_parallel=2)
    assert trio.current_time() == 5 and sorted(log.finished) == ["c0", "c1"]  # drained
    assert log.invoked == ["c0", "c1"]  # nothing more started
    assert recorder.records == [("call", "c0"), ("call", "c1")]  # no result invented
    assert controller.signal.listener_count == 0


async def test_a_failing_stop_handler_is_logged_and_the_stopped_step_stays_balanced(
    autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture,
) -> None:
    class StopFailed(Exception):
        pass

    stopped: list[str] = []

    async def stop(call: ToolExecution) -> None:
        stopped.append(call.call_id)
        if call.call_id == "c0":
            raise StopFailed("host link gone")

    log = BodyLog()
    registry = ToolRegistry([
        logged_tool("Host", uncooperative(4), log, stop=stop, tool_class=ToolClass.PLUGIN),
        logged_tool("Write", uncooperative(1), log, exclusive=True),
    ])
    step = calls("Host", "Host", "Host", "Write")
    recorder, results = await run_step(registry, step, stop_at=1)
    assert sorted(stopped) == ["c0", "c1", "c2"]  # every in-flight call was still driven
    assert trio.current_time() == 4 and sorted(log.finished) == ["c0", "c1", "c2"]  # drained
    # The real results are committed (c0's too), and the unstarted call gets its record.
    assert [r.code for r in results] == [ABORTED, ABORTED, ABORTED, ABD]
    assert [r.details.get("value") for r in results] == [0, 1, 2, None]
    balanced_in_model_order(recorder, step)
    assert any("stop handler failed" in r.getMessage() and r.exc_info is not None
               and isinstance(r.exc_info[1], StopFailed) for r in caplog.records)


async def test_a_stop_handler_that_never_returns_ends_when_its_call_settles(
    autojump_clock: trio.testing.MockClock,
) -> None:
    entered: list[str] = []

    async def stuck(call: ToolExecution) -> None:
        entered.append(call.call_id)
        await trio.sleep_forever()  # e.g. a host that never answers tools.abort

    log = BodyLog()
    registry = ToolRegistry([logged_tool("Host", uncooperative(4), log, stop=stuck,
                                         tool_class=ToolClass.PLUGIN, exclusive=False)])
    step = calls("Host", "Host")
    with trio.fail_after(100):  # virtual time: a hang fails at once
        recorder, results = await run_step(registry, step, stop_at=1)
    assert sorted(entered) == ["c0", "c1"]
    assert trio.current_time() == 4  # the step waited for its calls, not for the handlers
    assert [r.code for r in results] == [ABORTED, ABORTED]
    balanced_in_model_order(recorder, step)

    # The same under an enclosing trio cancellation: drain the calls, then Cancelled.
    with trio.fail_after(100), trio.move_on_after(2) as scope:
        await run_tool_calls(step, registry=registry, recorder=MemoryRecorder(),
                             signal=_stopped_at(trio.current_time() + 1))
    assert scope.cancelled_caught and trio.current_time() == 8


async def test_unknown_tools_are_error_results_in_a_balanced_step() -> None:
    log = BodyLog()
    registry = ToolRegistry([logged_tool("Read", uncooperative(0), log)])
    step = calls("Read", "Nope", "Read")
    recorder, results = await run_step(registry, step)
    assert [r.code for r in results] == [None, ErrorCode.NOT_FOUND.name, None]
    balanced_in_model_order(recorder, step)


async def test_bad_steps_are_refused() -> None:
    registry = ToolRegistry()
    signal = AbortController().signal
    with pytest.raises(ValueError):
        await run_tool_calls(calls("A") * 2, registry=registry, recorder=MemoryRecorder(),
                             signal=signal)
    with pytest.raises(ValueError):
        await run_tool_calls(calls("A"), registry=registry, recorder=MemoryRecorder(),
                             signal=signal, max_parallel=0)


def _stopped_at(when: float) -> AbortSignal:
    """A signal a system task aborts (cause ``user``) at virtual time ``when``."""
    controller = AbortController()
    trio.lowlevel.spawn_system_task(abort_at, when, controller, UserCause())
    return controller.signal
