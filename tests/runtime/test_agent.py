"""The agent in process (no host): phases, checkpoints, the inbox, settlement."""

from __future__ import annotations

import dataclasses
import errno
import pathlib
from typing import Any

import pytest
import trio
import trio.testing

from protocol.errors import ErrorCode, RpcError
from protocol.messages.events import (
    AssistantMessageEvent,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
)
from protocol.toolclass import ToolClass
from protocol.tools import ToolResult, error_result
from runtime.agent.assembler import Assembler
from runtime.agent.phase import InvalidTransition, PhaseEvent, PhaseKind, PhaseMachine
from runtime.agent.providers.base import ReasoningDelta, ReasoningSeal, TextDelta, ToolCallChunk
from runtime.agent.providers.scripted import ScriptedProvider, parse_script
from runtime.agent.registry import (
    AbortSignal,
    HookCause,
    ToolExecution,
    UserCause,
    cancel_on_abort,
    define_tool,
)
from runtime.agent.sessionlog import SessionLog, read_log
from runtime.daemon.daemon import Daemon
from tests.kit.agent import (
    ECHO,
    EchoArgs,
    VirtualSyncLog,
    local_tools,
    make_agent,
    tool_call,
)


async def _crash_on_stop(args: EchoArgs, execution: ToolExecution) -> ToolResult:
    # Stands for a host call whose host dies while the call is being stopped.
    with cancel_on_abort(execution.signal):
        await trio.sleep_forever()
    await trio.sleep(0.05)
    return error_result(ErrorCode.HOST_CRASHED, "the host exited during the call",
                        body_invoked=True)


CRASH_ON_STOP = define_tool("Slow", args=EchoArgs, tool_class=ToolClass.LOCAL,
                            body=_crash_on_stop)


def test_phase_table() -> None:
    machine = PhaseMachine()
    assert machine.phase.kind is PhaseKind.IDLE and machine.phase.controller is None
    running = machine.fire(PhaseEvent.START_TURN, turn_id="t1")
    assert running.kind is PhaseKind.RUNNING and running.controller is not None
    with pytest.raises(InvalidTransition):
        machine.fire(PhaseEvent.START_TURN, turn_id="t2")
    with pytest.raises(InvalidTransition):
        machine.fire(PhaseEvent.START_MAINTENANCE)
    assert running.settled is not None and not running.settled.is_set()
    idle = machine.fire(PhaseEvent.END_TURN)
    assert idle.controller is None and running.settled.is_set()
    maintenance = machine.fire(PhaseEvent.START_MAINTENANCE)
    assert maintenance.controller is not None and maintenance.controller is not \
        running.controller


def test_assembler_keeps_visible_blocks_and_drops_nothing_else() -> None:
    a = Assembler()
    for chunk in (ReasoningDelta("hmm"), TextDelta("Hel"), TextDelta("lo"), TextDelta("  "),
                  ToolCallChunk("c1", "Read", {}), ReasoningDelta("  ")):
        a.add(chunk)
    assert a.visible_blocks() == [("reasoning", "hmm"), ("text", "Hello  ")]
    assert a.chunks == 6 and len(a.tool_calls) == 1


async def test_stop_after_prompt_accepted_before_turn_began(tmp_path: pathlib.Path) -> None:
    agent, provider, _ = make_agent(tmp_path, [[{"text": "never streamed"}]])
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.run)
        pending = agent.prompt("hi")
        # No checkpoint between accepting the prompt and the stop: the turn has not run.
        with trio.fail_after(5):
            results = [await agent.cancel(HookCause("policy"))]
            await pending.done.wait()
        nursery.cancel_scope.cancel()
    assert pending.result is not None and pending.result.stop_reason == "cancelled"
    assert provider.remaining == 1  # the model was never asked
    (answer,) = results
    assert answer.outcome == "aborted" and answer.cause is not None
    assert answer.cause.kind == "hook" and answer.cause.reason == "policy"
    events = read_log(tmp_path / "s.jsonl").events
    assert [type(e).__name__ for e in events] == ["SessionMeta", "TurnStart",
                                                  "UserMessageEvent", "TurnEnd"]


async def test_cancel_when_idle_arms_nothing(tmp_path: pathlib.Path) -> None:
    agent, _, _ = make_agent(tmp_path, [[{"text": "answer"}]])
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.run)
        idle = await agent.cancel(UserCause())
        assert idle.outcome == "idle"
        pending = agent.prompt("hi")
        with trio.fail_after(5):
            await pending.done.wait()
        nursery.cancel_scope.cancel()
    assert pending.result is not None and pending.result.stop_reason == "end_turn"


async def test_stream_stop_keeps_interrupted_prefix_and_first_cause_wins(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    script = [[{"text": "partial "}, {"reasoning": "why"}, {"sleepMs": 60_000},
               {"toolCall": {"id": "c1", "name": "Read", "args": {"path": "x"}}}]]
    agent, _, announced = make_agent(tmp_path, script)
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.run)
        pending = agent.prompt("hi")
        await trio.sleep(1)
        answers = []

        async def stop(cause: Any) -> None:
            answers.append(await agent.cancel(cause))

        nursery.start_soon(stop, UserCause())
        await trio.testing.wait_all_tasks_blocked()  # the user's stop is in first
        nursery.start_soon(stop, HookCause("late"))
        await pending.done.wait()
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    kinds = {a.cause.kind for a in answers if a.cause}
    assert kinds == {"user"} and len(answers) == 2  # both joined one settlement: the first cause
    message = [e for e in announced if isinstance(e, AssistantMessageEvent)]
    assert len(message) == 1 and message[0].interrupted and message[0].chunks == 2
    end = next(e for e in announced if isinstance(e, TurnEnd))
    assert end.end.kind == "aborted" and end.stop_reason == "cancelled"
    assert end.end.reason is not None and {end.end.reason.kind} == kinds


async def test_inbox_runs_queued_prompts_and_a_stop_clears_it(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    script = [[{"text": "one"}, {"sleepMs": 60_000}], [{"text": "never"}]]
    agent, provider, _ = make_agent(tmp_path, script, log_type=VirtualSyncLog)
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.run)
        first = agent.prompt("1")
        second = agent.prompt("2")
        assert len(agent.inbox) == 1
        await trio.sleep(0.2)
        await agent.cancel(UserCause())
        assert second.done.is_set() and second.result is not None
        assert second.result.turn_id is None and second.result.stop_reason == "cancelled"
        await first.done.wait()
        nursery.cancel_scope.cancel()
    assert provider.remaining == 1


async def test_a_stop_during_maintenance_aborts_it_and_answers_once_it_ended(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    agent, provider, _ = make_agent(tmp_path, [[{"text": "after maintenance"}]],
                                    log_type=VirtualSyncLog)
    seen: list[object] = []

    async def job(signal: AbortSignal) -> None:
        with cancel_on_abort(signal):
            await trio.sleep_forever()
        await trio.sleep(0.2)  # its own cleanup, which the stop waits for
        seen.append(signal.cause)

    async with trio.open_nursery() as nursery:
        await nursery.start(agent.run)
        nursery.start_soon(agent.maintain, job)
        await trio.sleep(0.05)
        assert agent.machine.phase.kind is PhaseKind.MAINTENANCE and agent.busy
        queued = agent.prompt("later")  # maintenance runs: the prompt waits in the inbox
        assert list(agent.inbox) == [queued]
        started = trio.current_time()
        with trio.fail_after(5):
            answer = await agent.cancel(UserCause(), keep_inbox=True)
        assert trio.current_time() - started >= 0.2
        assert seen == [UserCause()]
        assert answer.outcome == "aborted" and answer.turn_id is None
        assert answer.cause is not None and answer.cause.kind == "user"
        with trio.fail_after(5):
            await queued.done.wait()  # the kept prompt runs once maintenance ended
        nursery.cancel_scope.cancel()
    assert queued.result is not None and queued.result.stop_reason == "end_turn"
    assert provider.remaining == 0


async def test_a_turn_ends_max_steps_at_the_daemons_step_limit(tmp_path: pathlib.Path) -> None:
    daemon = Daemon(data_dir=tmp_path / "data", max_steps=2)
    workspace = tmp_path / "ws"
    workspace.mkdir()
    step = [tool_call("e", "Echo")]
    provider = ScriptedProvider(parse_script([step, step, step, [{"text": "never"}]]))
    services = dataclasses.replace(daemon.requests.services,
                                   announce=lambda session_id, event: None,
                                   tools=lambda session_id: local_tools([ECHO]))
    session = daemon.sessions.create(str(workspace), "auto", None, provider, services)
    async with trio.open_nursery() as nursery:
        await nursery.start(session.agent.run)
        pending = session.agent.prompt("loop")
        with trio.fail_after(10):
            await pending.done.wait()
        nursery.cancel_scope.cancel()
    session.agent.journal.close()
    assert pending.result is not None and pending.result.stop_reason == "max_steps"
    assert provider.remaining == 2  # two steps, not one more
    events = read_log(daemon.sessions.path_of(session.session_id)).events
    assert len([e for e in events if isinstance(e, ToolCallEvent)]) == 2
    assert len([e for e in events if isinstance(e, ToolResultEvent)]) == 2
    end = events[-1]
    assert isinstance(end, TurnEnd) and end.stop_reason == "max_steps"


class SyncFailingLog(SessionLog):
    async def sync(self) -> None:
        raise OSError(errno.EIO, "fsync failed")


async def test_a_stop_whose_turn_end_is_not_durable_is_an_internal_error(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    agent, _, announced = make_agent(tmp_path, [[{"text": "partial"}, {"sleepMs": 60_000}]],
                                     log_type=SyncFailingLog)
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.run)
        pending = agent.prompt("hi")
        await trio.sleep(1)
        with pytest.raises(RpcError) as failed:
            await agent.cancel(UserCause())
        nursery.cancel_scope.cancel()
    assert failed.value.code == ErrorCode.INTERNAL
    assert pending.result is not None and pending.result.stop_reason == "error"
    assert not [e for e in announced if isinstance(e, TurnEnd)]  # never announced either
    assert not agent.busy  # the session still takes prompts


async def test_a_stop_that_ends_in_a_host_crash_answers_with_the_stopped_calls(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    agent, _, _ = make_agent(tmp_path, [[tool_call("c1", "Slow")]], tools=[CRASH_ON_STOP],
                             log_type=VirtualSyncLog)
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.run)
        pending = agent.prompt("hi")
        await trio.sleep(0.05)
        with trio.fail_after(5):
            answer = await agent.cancel(UserCause())
        nursery.cancel_scope.cancel()
    assert pending.result is not None and pending.result.stop_reason == "error"
    # The turn ended with an error (the crash): the answer says so, as its turn/end does.
    assert answer.outcome == "error" and answer.turn_id == pending.result.turn_id
    assert answer.error and "host" in answer.error.lower(), answer.error
    assert answer.cause is not None and answer.cause.kind == "user"
    assert answer.settled_ms > 0
    assert [(c.call_id, c.code) for c in answer.tool_calls] == [("c1", "HOST_CRASHED")]


def test_assembler_keeps_sealed_reasoning_blocks_apart() -> None:
    a = Assembler()
    for chunk in (ReasoningDelta("one"), ReasoningSeal(signature="s1"), ReasoningDelta("two"),
                  ReasoningSeal(signature="s2"), ReasoningSeal(redacted="R"), TextDelta("hi"),
                  ReasoningDelta("cut")):
        a.add(chunk)
    whole = [(b.type, b.text, b.signature, b.redacted) for b in a.kept_blocks(interrupted=False)]
    assert whole == [("reasoning", "one", "s1", ""), ("reasoning", "two", "s2", ""),
                     ("reasoning", "", "", "R"), ("text", "hi", "", ""),
                     ("reasoning", "cut", "", "")]
    # An interrupted prefix keeps visible blocks only (the redacted one shows nothing).
    assert [b.text for b in a.kept_blocks(interrupted=True)] == ["one", "two", "hi", "cut"]
