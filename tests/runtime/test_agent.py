"""The agent in process (no host): phases, checkpoints, the inbox, settlement."""

from __future__ import annotations

import pathlib
from typing import Any

import pytest
import trio

from protocol.messages.events import (
    AnnouncedEvent,
    AssistantMessageEvent,
    SessionMeta,
    TurnEnd,
)
from protocol.messages.host import ToolsOutputParams
from runtime.agent.agent import Agent
from runtime.agent.assembler import Assembler
from runtime.agent.journal import Journal
from runtime.agent.phase import InvalidTransition, PhaseEvent, PhaseKind, PhaseMachine
from runtime.providers.base import ReasoningDelta, TextDelta, ToolCallChunk
from runtime.providers.scripted import ScriptedProvider, parse_script
from runtime.registry import HookCause, ToolDefinition, ToolRegistry, UserCause
from runtime.sessionlog import SessionLog, read_log


def make_agent(tmp_path: pathlib.Path, script: list[Any]) -> tuple[Agent, ScriptedProvider,
                                                                   list[AnnouncedEvent]]:
    log = SessionLog.create(tmp_path / "s.jsonl")
    announced: list[AnnouncedEvent] = []
    journal = Journal(log, announced.append)
    journal.append(lambda seq: SessionMeta(seq, "", "s-1", str(tmp_path), "auto", 0.0))
    provider = ScriptedProvider(parse_script(script))

    def tools(turn_id: str) -> tuple[ToolRegistry, list[ToolDefinition[Any]], Any]:
        def route(params: ToolsOutputParams) -> bool:
            return False
        return ToolRegistry(), [], route

    return Agent("s-1", journal, provider, tools), provider, announced


def test_phase_table() -> None:
    machine = PhaseMachine()
    assert machine.phase.kind is PhaseKind.IDLE and machine.phase.controller is None
    running = machine.fire(PhaseEvent.START_TURN, turn_id="t1")
    assert running.kind is PhaseKind.RUNNING and running.controller is not None
    with pytest.raises(InvalidTransition):
        machine.fire(PhaseEvent.START_TURN, turn_id="t2")
    with pytest.raises(InvalidTransition):
        machine.fire(PhaseEvent.START_MAINTENANCE)
    idle = machine.fire(PhaseEvent.END_TURN)
    assert idle.controller is None
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
        nursery.start_soon(stop, HookCause("late"))
        await pending.done.wait()
        await trio.sleep(1)
        nursery.cancel_scope.cancel()
    kinds = {a.cause.kind for a in answers if a.cause}
    assert len(kinds) == 1 and len(answers) == 2  # both joined one settlement, one cause
    message = [e for e in announced if isinstance(e, AssistantMessageEvent)]
    assert len(message) == 1 and message[0].interrupted and message[0].chunks == 2
    end = next(e for e in announced if isinstance(e, TurnEnd))
    assert end.end.kind == "aborted" and end.stop_reason == "cancelled"
    assert end.end.reason is not None and {end.end.reason.kind} == kinds


async def test_inbox_runs_queued_prompts_and_a_stop_clears_it(tmp_path: pathlib.Path) -> None:
    script = [[{"text": "one"}, {"sleepMs": 60_000}], [{"text": "never"}]]
    agent, provider, _ = make_agent(tmp_path, script)
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
