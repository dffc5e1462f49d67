"""Stops of the agent in process, on virtual time (trio's ``MockClock``): the inbox kept or
cleared, a stop after a compaction, a prompt queued behind one, an automatic one stopped.
None needs a kernel (no host, no process, no socket): the scripted model's pauses pass
at once, and what a turn's stop leaves is checked as the end-to-end suite checks a stop
through the daemon (:func:`tests.kit.daemon.check_answer`, by the transcript rulebook).
A stop of a compaction through the daemon stays end to end (tests/e2e/test_compaction.py)."""

from __future__ import annotations

import pathlib
from typing import Any

import trio
import trio.testing

from protocol.messages.client import AgentAbortResult
from protocol.messages.events import (
    AnnouncedEvent,
    DurableEvent,
    HistoryCompacted,
    MaintenanceEnd,
    MaintenanceStart,
    TurnEnd,
    TurnStart,
)
from runtime.agent.agent import Agent, PendingPrompt
from runtime.agent.compaction import ContextSettings
from runtime.agent.registry import UserCause
from runtime.agent.sessionlog import read_log
from tests.kit.agent import VirtualSyncLog, make_agent
from tests.kit.daemon import check_answer, sleep, text

TWO_TURNS = [[text("first answer")], [text("second answer")]]


def make(tmp_path: pathlib.Path, script: list[Any]
         ) -> tuple[Agent, list[AnnouncedEvent]]:
    agent, _, announced = make_agent(tmp_path, script, log_type=VirtualSyncLog)
    return agent, announced


def log_of(tmp_path: pathlib.Path) -> list[DurableEvent]:
    return list(read_log(tmp_path / "s.jsonl").events)


def kinds(log: list[DurableEvent]) -> list[str]:
    return [type(e).__struct_config__.tag for e in log  # type: ignore[misc]
            if isinstance(e, MaintenanceStart | MaintenanceEnd | HistoryCompacted)]


async def stop_and_check(agent: Agent, tmp_path: pathlib.Path, announced: list[AnnouncedEvent],
                         cause: Any = None, *, keep_inbox: bool = False) -> AgentAbortResult:
    """Stop, and check what the answer claims at the moment it arrives (its turn's end on
    disk and announced, every call answered), as the end-to-end suite does."""
    answer = await agent.cancel(cause or UserCause(), keep_inbox=keep_inbox)
    check_answer(answer, log_of(tmp_path), list(announced))
    return answer


async def two_turns_then(agent: Agent) -> None:
    for prompt in ("one", "two"):
        pending = agent.prompt(prompt)
        await pending.done.wait()
        assert pending.result is not None and pending.result.stop_reason == "end_turn"


def outcome(pending: PendingPrompt) -> tuple[str | None, str]:
    assert pending.result is not None
    return pending.result.turn_id, pending.result.stop_reason


async def test_a_stop_keeps_the_inbox_or_clears_it(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    script = [[text("a"), sleep(60_000)], [text("b")], [text("c"), sleep(60_000)]]
    agent, announced = make(tmp_path, script)
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.run)
        p1 = agent.prompt("p1")
        await trio.sleep(1)  # t1 streams (its minute-long pause)
        p2 = agent.prompt("p2")
        kept = await stop_and_check(agent, tmp_path, announced, keep_inbox=True)
        assert kept.outcome == "aborted" and kept.turn_id == "t1"
        await p2.done.wait()  # p2 survived the stop and ran as the next turn
        assert outcome(p2) == ("t2", "end_turn")
        p3 = agent.prompt("p3")
        await trio.sleep(1)
        p4 = agent.prompt("p4")
        dropped = await stop_and_check(agent, tmp_path, announced)
        assert dropped.outcome == "aborted" and dropped.turn_id == "t3"
        await p4.done.wait()
        nursery.cancel_scope.cancel()
    assert outcome(p1) == ("t1", "cancelled") and outcome(p3) == ("t3", "cancelled")
    assert outcome(p4) == (None, "cancelled")
    assert [e.turn_id for e in log_of(tmp_path) if isinstance(e, TurnEnd)] == ["t1", "t2", "t3"]


async def test_a_stop_after_the_compaction_is_idle(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    agent, announced = make(tmp_path, [*TWO_TURNS, [text("SUMMARY")]])
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.run)
        await two_turns_then(agent)
        job = agent.compact()
        assert job is not None
        await job.done.wait()
        assert job.result().outcome == "compacted"
        answer = await stop_and_check(agent, tmp_path, announced)
        nursery.cancel_scope.cancel()
    assert answer.outcome == "idle"
    assert kinds(log_of(tmp_path)) == ["maintenance/start", "history/compacted",
                                       "maintenance/end"]


async def test_a_prompt_queued_during_compaction_runs_after_it(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    agent, _ = make(tmp_path, [*TWO_TURNS, [sleep(500), text("SUMMARY")],
                                        [text("third")]])
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.run)
        await two_turns_then(agent)
        job = agent.compact()
        assert job is not None
        queued = agent.prompt("third prompt")
        await queued.done.wait()
        nursery.cancel_scope.cancel()
    assert job.result().outcome == "compacted"
    assert outcome(queued) == ("t3", "end_turn")
    log = log_of(tmp_path)
    end_at = next(i for i, e in enumerate(log) if isinstance(e, MaintenanceEnd))
    t3_at = next(i for i, e in enumerate(log) if e.turn_id == "t3")
    assert end_at < t3_at


async def test_a_stop_of_an_automatic_compaction_and_the_prompt_behind_it(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    """A prompt that finds the history too big waits in the inbox while the compaction
    runs: a stop clears it (answered ``cancelled``, no turn), unless it keeps the inbox
    (then the turn runs, on the history as it was)."""
    script = [[text("long reply " * 50)], [text("short")],
              [text("slow"), sleep(30_000)], [text("slow"), sleep(30_000)], [text("third")]]
    agent, announced = make(tmp_path, script)
    agent.context = ContextSettings(20_000, 0.01)
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.run)
        for prompt in ("one " * 100, "two"):
            await agent.prompt(prompt).done.wait()
        for keep in (False, True):
            seen = len(announced)
            pending = agent.prompt("three")
            await trio.sleep(0.3)  # the summary is streaming
            assert any(isinstance(e, MaintenanceStart) for e in announced[seen:])
            stopped = await agent.cancel(UserCause(), keep_inbox=keep)
            log = log_of(tmp_path)
            assert stopped.outcome == "aborted" and stopped.turn_id is None
            end = [e for e in log if isinstance(e, MaintenanceEnd)][-1]
            assert end.end.kind == "aborted"
            assert all(e.seq < end.seq for e in log if isinstance(e, MaintenanceStart))
            await pending.done.wait()
            if not keep:
                assert outcome(pending) == (None, "cancelled")
            else:
                assert outcome(pending) == ("t3", "end_turn")
                t3 = next(e for e in log_of(tmp_path) if isinstance(e, TurnStart)
                          and e.turn_id == "t3")
                assert t3.seq > end.seq  # the kept prompt ran after the maintenance ended
        nursery.cancel_scope.cancel()
    log = log_of(tmp_path)
    starts = [e for e in log if isinstance(e, MaintenanceStart)]
    assert [s.trigger for s in starts] == ["auto", "auto"]
    assert not any(isinstance(e, HistoryCompacted) for e in log)

