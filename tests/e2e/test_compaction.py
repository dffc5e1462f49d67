"""Compaction through ``quiesce serve`` (scripted provider): ``session.compact`` in the
maintenance phase, stops before and during the summary's stream, a failed compaction, and
``kill -9`` during one then load. The stops that need no process (after a compaction, a
prompt queued behind one, an automatic one) run in process on virtual time
(tests/runtime/test_agent_stops.py)."""

from __future__ import annotations

import pathlib
import time
from typing import Any

import trio

from protocol.messages.client import (
    AgentAbortResult,
    SessionCompactParams,
    SessionCompactResult,
    SessionListResult,
    SessionLoadParams,
)
from protocol.messages.common import Empty
from protocol.messages.events import (
    DurableEvent,
    HistoryCompacted,
    MaintenanceEnd,
    MaintenanceStart,
    ModelUsageEvent,
    TurnEnd,
)
from protocol.transcript import repair_problems
from runtime.agent.sessionlog import read_log
from tests.conftest import Marked
from tests.e2e.pipeline import INIT, Pipeline
from tests.kit.daemon import Agent, agent_daemon, kill_under, sleep, text
from tests.kit.rawclient import raw_daemon


def usage(i: int, o: int, cached: int = 0) -> dict[str, Any]:
    return {"usage": {"input": i, "output": o, "cachedInput": cached}}


TWO_TURNS = [[text("first answer"), usage(100, 10, 40)], [text("second answer"), usage(120, 12)]]


async def compact(agent: Agent) -> SessionCompactResult:
    result: SessionCompactResult = await agent.daemon.request(
        "session.compact", SessionCompactParams(agent.session_id))
    return result


def kinds(log: list[DurableEvent]) -> list[str]:
    return [type(e).__struct_config__.tag for e in log  # type: ignore[misc]
            if isinstance(e, MaintenanceStart | MaintenanceEnd | HistoryCompacted)]


async def test_manual_compaction_records_the_summary_and_usage(tmp_path: pathlib.Path,
                                                               marked: Marked) -> None:
    script = [*TWO_TURNS, [text("SUMMARY of turn one"), usage(300, 30)],
              [text("third answer")]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        with trio.fail_after(20):
            await agent.prompt("one " * 200)  # a long turn, summarised short
            await agent.prompt("two")
            result = await compact(agent)
        assert result.outcome == "compacted" and result.replaced == ("t1",)
        assert result.tokens_after < result.tokens_before
        log = agent.log()
        assert kinds(log) == ["maintenance/start", "history/compacted", "maintenance/end"]
        compacted = next(e for e in log if isinstance(e, HistoryCompacted))
        assert compacted.summary == "SUMMARY of turn one"
        assert compacted.usage.input == 300 and not compacted.usage.estimated
        end = next(e for e in log if isinstance(e, MaintenanceEnd))
        assert end.end.kind == "completed" and end.compacted
        # Usage: per step, per turn (turn/end), per session (session.list).
        ends = [e for e in log if isinstance(e, TurnEnd)]
        assert [e.usage for e in ends if e.usage] and ends[0].usage is not None
        assert (ends[0].usage.input, ends[0].usage.output, ends[0].usage.cached_input) == (
            100, 10, 40)
        listed: SessionListResult = await agent.daemon.request("session.list", Empty())
        (info,) = listed.sessions
        assert info.usage is not None and info.phase == "idle"
        assert (info.usage.input, info.usage.output, info.usage.cached_input) == (520, 52, 40)
        assert not info.usage.estimated
        # A later turn asks no compaction (the history fits: no window set) and its
        # usage, unreported, is estimated and marked so.
        with trio.fail_after(20):
            assert (await agent.prompt("three")).stop_reason == "end_turn"
        third = [e for e in agent.log() if isinstance(e, ModelUsageEvent)][-1]
        assert third.turn_id == "t3" and third.usage.estimated and third.usage.input > 0


async def test_nothing_to_compact_with_one_turn(tmp_path: pathlib.Path,
                                                marked: Marked) -> None:
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, [[text("only")]])
        with trio.fail_after(20):
            await agent.prompt("one")
            result = await compact(agent)
        assert result.outcome == "nothing" and result.replaced == ()
        assert not any(isinstance(e, HistoryCompacted) for e in agent.log())


async def _compacting(agent: Agent, nursery: trio.Nursery) -> list[SessionCompactResult]:
    """Start session.compact; return once its maintenance/start was announced."""
    answers: list[SessionCompactResult] = []

    async def run() -> None:
        answers.append(await compact(agent))

    nursery.start_soon(run)
    await agent.wait_for(lambda e: isinstance(e, MaintenanceStart))
    return answers


async def test_stop_during_the_summary_stream(tmp_path: pathlib.Path, marked: Marked) -> None:
    script = [*TWO_TURNS, [text("half a sum"), sleep(30_000), text("mary")], [text("after")]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        with trio.fail_after(20):
            await agent.prompt("one")
            await agent.prompt("two")
        async with trio.open_nursery() as nursery:
            answers = await _compacting(agent, nursery)
            queued = agent.prompt_soon(nursery, "queued behind the compaction")
            await trio.sleep(0.3)  # the summary is streaming (its 30 s sleep)
            listed: SessionListResult = await agent.daemon.request("session.list", Empty())
            assert listed.sessions[0].phase == "maintenance"
            began = time.monotonic()
            second: list[AgentAbortResult] = []

            async def later_stop() -> None:  # a second cause, right behind: it joins
                second.append(await agent.abort("hook", reason="policy"))

            nursery.start_soon(later_stop)
            with trio.fail_after(10):
                answer: AgentAbortResult = await agent.abort()
            took = time.monotonic() - began
            log = agent.log()  # as it was when the abort answered
        assert answer.outcome == "aborted" and answer.turn_id is None
        assert answer.cause is not None and answer.cause.kind == "user"
        assert second[0].outcome == "aborted" and second[0].cause == answer.cause  # first wins
        assert took < 5, f"the stop waited {took:.1f} s: the summary stream was not closed"
        end = log[-1]
        assert isinstance(end, MaintenanceEnd) and end.end.kind == "aborted"
        assert end.end.reason is not None and end.end.reason.kind == "user"
        assert not end.compacted and not any(isinstance(e, HistoryCompacted) for e in log)
        assert answers[0].outcome == "aborted"
        assert queued[0].stop_reason == "cancelled" and queued[0].turn_id is None
        # The history is unchanged: the next compaction replaces t1 again.
        with trio.fail_after(20):
            assert (await agent.prompt("three")).stop_reason == "end_turn"


async def test_stop_before_the_summary_request(tmp_path: pathlib.Path,
                                               marked: Marked) -> None:
    """session.compact and agent.abort in one write: the stop lands before the summary is
    asked for (the maintenance waits, like a turn, until the link has taken what it read),
    so the compaction's response is never consumed: the next turn gets it."""
    script = [*TWO_TURNS, [text("used by turn three")]]
    async with raw_daemon(marked.env()) as raw:
        pipe = Pipeline(raw)
        assert "result" in await pipe.call("initialize", INIT)
        new = await pipe.call(*pipe.scripted_session(str(tmp_path), script))
        session = {"sessionId": new["result"]["sessionId"]}
        for prompt in ("one", "two"):
            await pipe.call("agent.prompt", {**session, "text": prompt})
        compacted, aborted = await pipe.wait(await pipe.write(
            ("session.compact", session), ("agent.abort", session)))
        assert compacted["result"]["outcome"] == "aborted", compacted
        assert aborted["result"]["outcome"] == "aborted", aborted
        log = list(read_log(marked.data_dir / "sessions"
                            / f"{session['sessionId']}.jsonl").events)
        assert kinds(log) == ["maintenance/start", "maintenance/end"]
        assert not any(isinstance(e, ModelUsageEvent) and not e.turn_id for e in log)
        third = await pipe.call("agent.prompt", {**session, "text": "three"})
        assert third["result"]["stopReason"] == "end_turn", third
        log = list(read_log(marked.data_dir / "sessions"
                            / f"{session['sessionId']}.jsonl").events)
        assert "used by turn three" in str(log)


async def test_a_failed_compaction_leaves_the_history(tmp_path: pathlib.Path,
                                                      marked: Marked) -> None:
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, [*TWO_TURNS, [text("   ")]])
        with trio.fail_after(20):
            await agent.prompt("one")
            await agent.prompt("two")
            empty = await compact(agent)  # an empty summary
            gone = await compact(agent)  # the script has no response left
        assert empty.outcome == "failed" and "empty summary" in (empty.error or "")
        assert gone.outcome == "failed" and "no response left" in (gone.error or "")
        log = agent.log()
        assert not any(isinstance(e, HistoryCompacted) for e in log)
        ends = [e for e in log if isinstance(e, MaintenanceEnd)]
        assert [e.end.kind for e in ends] == ["error", "error"]


async def test_kill_during_compaction_then_load(tmp_path: pathlib.Path,
                                                marked: Marked) -> None:
    script = [*TWO_TURNS, [text("half"), sleep(30_000), text("never")]]
    async with agent_daemon(marked) as first:
        session_id = await first.new_session(tmp_path, script)
        with trio.fail_after(20):
            await first.prompt("one")
            await first.prompt("two")
        await kill_under(first, lambda: compact(first),
                         lambda e: isinstance(e, MaintenanceStart), after=0.3)
        cut = first.log()
    async with agent_daemon(marked) as second:
        second.session_id = session_id
        with trio.fail_after(20):
            loaded = await second.daemon.request("session.load",
                                                 SessionLoadParams(session_id))
        assert loaded.recovered
        log = second.log()
        assert not any(isinstance(e, HistoryCompacted) for e in log)
        end = log[-1]
        assert isinstance(end, MaintenanceEnd) and end.end.kind == "interrupted"
        assert repair_problems(cut, log) == []  # what the rulebook says, nothing else
        # The loaded session works on: a compaction of the same two turns (the reloaded
        # script starts again at its first response, which is the summary now).
        with trio.fail_after(20):
            again = await compact(second)
        assert again.outcome == "compacted" and again.replaced == ("t1",)
