"""Compaction at a step boundary inside a running turn (``quiesce serve``, a small configured
window): the ended turns before it are summarised under the turn's own controller and the
turn goes on with the compacted history; a stop during that summary's stream is the turn's
stop; ``kill -9`` during it then load is consistent; a turn that alone outgrows the window
still ends with the runtime's own error."""

from __future__ import annotations

import pathlib
from typing import Any

import trio

from protocol.messages.client import (
    ScriptedProviderConfig,
    SessionListResult,
    SessionLoadParams,
    SessionNewParams,
)
from protocol.messages.common import Empty
from protocol.messages.events import (
    DurableEvent,
    HistoryCompacted,
    MaintenanceEnd,
    MaintenanceStart,
    ModelUsageEvent,
    ToolResultEvent,
    TurnEnd,
)
from protocol.transcript import repair_problems
from runtime.agent.compaction import COMPACTION_PROMPT
from runtime.agent.history import SUMMARY_HEADING
from tests.conftest import Marked
from tests.e2e.test_usage_compaction_http import OPENAI_ENV, openai_reply, openai_session
from tests.kit.daemon import Agent, agent_daemon, call, kill_under, sleep, text
from tests.providers.fakeserver import FakeServer, Reply
from tests.providers.recorded import call as call_chunk
from tests.providers.recorded import event, sse

LONG_PROMPT = "the first prompt is long " * 40  # ~250 tokens: past a 200-token share
SMALL = {"context_window": 20_000, "compact_at": 0.01}  # compacted past 200 tokens


def read_call(call_id: str, path: str) -> Reply:
    return Reply(body=(sse(event({"role": "assistant", "content": f"Reading {path}."}),
                           event(call_chunk(0, id=call_id, name="Read",
                                            args=f'{{"path": "{path}"}}')),
                           event({}, "tool_calls")),))


def contents(body: dict[str, Any]) -> list[str]:
    return [m.get("content") or "" for m in body["messages"]]


def maintenance(log: list[DurableEvent]) -> list[tuple[str, str]]:
    return [(type(e).__struct_config__.tag, e.turn_id) for e in log  # type: ignore[misc]
            if isinstance(e, MaintenanceStart | MaintenanceEnd | HistoryCompacted)]


async def test_a_turn_compacts_the_earlier_turns_between_its_steps(tmp_path: pathlib.Path,
                                                                   marked: Marked) -> None:
    (tmp_path / "a.txt").write_text("alpha contents\n")
    (tmp_path / "b.txt").write_text("beta contents\n")
    server = FakeServer()
    server.queue(openai_reply("first reply"),                      # 0: t1
                 read_call("call_a", "a.txt"),                     # 1: t2 step 0
                 openai_reply("SUMMARY-OF-T1", {"prompt_tokens": 300,
                                                "completion_tokens": 8}),  # 2: the summary
                 read_call("call_b", "b.txt"),                     # 3: t2 step 1
                 openai_reply("both read"),                        # 4: t2 step 2
                 openai_reply("third reply"))                      # 5: after a load
    async with trio.open_nursery() as nursery:
        await server.start(nursery)
        async with agent_daemon(marked, env_extra=OPENAI_ENV) as agent:
            await openai_session(agent, tmp_path, server, **SMALL)
            with trio.fail_after(30):
                await agent.prompt(LONG_PROMPT)
                # One ended turn: nothing to compact before t2 (the latest is kept)...
                second = await agent.prompt("read a.txt then b.txt")
            assert second.stop_reason == "end_turn" and second.turn_id == "t2"
            assert len(server.requests) == 5
            # ... but its step 0 carried t1 whole; at its step 1 the history outgrew the
            # share: t1 (every ended turn) was summarised, the running turn kept whole.
            assert LONG_PROMPT in contents(server.requests[1].json())
            summary_request = server.requests[2].json()
            assert summary_request["messages"][0] == {"role": "system",
                                                      "content": COMPACTION_PROMPT}
            assert LONG_PROMPT in summary_request["messages"][1]["content"]
            assert "read a.txt then b.txt" not in summary_request["messages"][1]["content"]
            assert "tools" not in summary_request
            for later in (server.requests[3].json(), server.requests[4].json()):
                seen = contents(later)
                assert not any(LONG_PROMPT in c for c in seen)
                assert seen[1].startswith(SUMMARY_HEADING) and "SUMMARY-OF-T1" in seen[1]
                assert seen[2] == "read a.txt then b.txt" and seen[3] == "Reading a.txt."
                assert "alpha contents" in seen[4]  # the call's result stays with its call
                assert "tools" in later
            assert "beta contents" in contents(server.requests[4].json())[6]
            log = agent.log()
            assert maintenance(log) == [("maintenance/start", "t2"), ("history/compacted", ""),
                                        ("maintenance/end", "t2")]
            start = next(e for e in log if isinstance(e, MaintenanceStart))
            assert start.trigger == "auto"
            compacted = next(e for e in log if isinstance(e, HistoryCompacted))
            assert compacted.replaced == ("t1",) and compacted.summary == "SUMMARY-OF-T1"
            end = next(e for e in log if isinstance(e, MaintenanceEnd))
            assert end.end.kind == "completed" and end.compacted
            # The summary's usage is the turn's: its turn/end sums it.
            (summary_usage,) = [e for e in log if isinstance(e, ModelUsageEvent)
                                and e.step == -1]
            assert summary_usage.turn_id == "t2" and summary_usage.usage.input == 300
            t2_end = next(e for e in log if isinstance(e, TurnEnd) and e.turn_id == "t2")
            assert t2_end.usage is not None and t2_end.usage.input >= 300
            assert end.seq < t2_end.seq
            agent.assert_balanced()
        # A fresh daemon loads the session and rebuilds exactly that history.
        async with agent_daemon(marked, env_extra=OPENAI_ENV) as again:
            again.session_id = agent.session_id
            with trio.fail_after(30):
                await again.daemon.request("session.load", SessionLoadParams(agent.session_id))
                await again.prompt("third")
            loaded = contents(server.requests[5].json())
            assert loaded[1:6] == contents(server.requests[4].json())[1:6]
            assert loaded[-2:] == ["both read", "third"]
        nursery.cancel_scope.cancel()


async def scripted_session(agent: Agent, workspace: pathlib.Path, script: list[Any],
                           **settings: Any) -> str:
    result = await agent.daemon.request("session.new", SessionNewParams(
        str(workspace), "auto", ScriptedProviderConfig(script=script, **settings)))
    agent.session_id = result.session_id
    return agent.session_id


TWO_STEPS_THEN_A_SLOW_SUMMARY: list[Any] = [
    [text("first answer")],                                     # t1
    [text("reading"), call("c1", "Read", path="a.txt")],        # t2 step 0
    [text("half a sum"), sleep(30_000), text("mary")],          # t2's summary, slow
]


async def _compacting_inside_t2(agent: Agent, nursery: trio.Nursery) -> list[Any]:
    with trio.fail_after(20):
        await agent.prompt(LONG_PROMPT)
    answers = agent.prompt_soon(nursery, "read a.txt")
    await agent.wait_for(lambda e: isinstance(e, MaintenanceStart) and e.turn_id == "t2")
    await trio.sleep(0.3)  # the summary is streaming (its 30 s sleep)
    return answers


async def test_a_stop_during_the_summary_is_the_turns_stop(tmp_path: pathlib.Path,
                                                           marked: Marked) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    script = [*TWO_STEPS_THEN_A_SLOW_SUMMARY, [text("SUMMARY")], [text("after")]]
    async with agent_daemon(marked) as agent:
        await scripted_session(agent, tmp_path, script, **SMALL)
        async with trio.open_nursery() as nursery:
            answers = await _compacting_inside_t2(agent, nursery)
            listed: SessionListResult = await agent.daemon.request("session.list", Empty())
            assert listed.sessions[0].phase == "running"  # the turn's phase owns it
            began = trio.current_time()
            # The answer comes after the turn's durable turn/end (checked at its arrival).
            answer = await agent.stop_and_check(within=10)
            took = trio.current_time() - began
            log = agent.log()
        assert answer.outcome == "aborted" and answer.turn_id == "t2"
        assert answer.cause is not None and answer.cause.kind == "user"
        assert took < 5, f"the stop waited {took:.1f} s: the summary stream was not closed"
        assert answers[0].stop_reason == "cancelled" and answers[0].turn_id == "t2"
        # The history is exactly as it was: no history/compacted; the maintenance's end
        # says the stop, durable before the turn's aborted end, the turn's last record.
        assert maintenance(log) == [("maintenance/start", "t2"), ("maintenance/end", "t2")]
        end = next(e for e in log if isinstance(e, MaintenanceEnd))
        assert end.end.kind == "aborted" and end.end.reason is not None
        assert end.end.reason.kind == "user" and not end.compacted
        t2_end = log[-1]
        assert isinstance(t2_end, TurnEnd) and t2_end.turn_id == "t2"
        assert t2_end.end.kind == "aborted" and end.seq < t2_end.seq
        assert [e.call_id for e in log if isinstance(e, ToolResultEvent)] == ["c1"]
        # The session goes on: the next prompt finds t1 and t2 uncompacted (the automatic
        # compaction before its turn replaces t1, the latest ended turn kept).
        with trio.fail_after(20):
            assert (await agent.prompt("three")).stop_reason == "end_turn"
        compacted = next(e for e in agent.log() if isinstance(e, HistoryCompacted))
        assert compacted.replaced == ("t1",) and compacted.summary == "SUMMARY"


async def test_kill_during_a_turns_compaction_then_load(tmp_path: pathlib.Path,
                                                        marked: Marked) -> None:
    (tmp_path / "a.txt").write_text("alpha\n")
    async with agent_daemon(marked) as first:
        session_id = await scripted_session(first, tmp_path, TWO_STEPS_THEN_A_SLOW_SUMMARY,
                                            **SMALL)
        with trio.fail_after(20):
            await first.prompt(LONG_PROMPT)
        await kill_under(first, lambda: first.prompt("read a.txt"),
                         lambda e: isinstance(e, MaintenanceStart), after=0.3)
        cut = first.log()
    async with agent_daemon(marked) as second:
        second.session_id = session_id
        with trio.fail_after(20):
            loaded = await second.daemon.request("session.load", SessionLoadParams(session_id))
        assert loaded.recovered
        log = second.log()
        # No summary recorded; the maintenance closed, then the turn it ran inside.
        assert maintenance(log) == [("maintenance/start", "t2"), ("maintenance/end", "t2")]
        end = next(e for e in log if isinstance(e, MaintenanceEnd))
        assert end.end.kind == "interrupted" and not end.compacted
        t2_end = log[-1]
        assert isinstance(t2_end, TurnEnd) and t2_end.turn_id == "t2"
        assert t2_end.end.kind == "interrupted" and end.seq < t2_end.seq
        second.assert_balanced()
        assert repair_problems(cut, log) == []  # what the rulebook says, nothing else
        listed: SessionListResult = await second.daemon.request("session.list", Empty())
        assert [s.phase for s in listed.sessions] == ["idle"]
        # Loaded again, nothing more to repair: the log is consistent as it stands.
    async with agent_daemon(marked) as third:
        third.session_id = session_id
        with trio.fail_after(20):
            again = await third.daemon.request("session.load", SessionLoadParams(session_id))
        assert not again.recovered and third.log() == log


async def test_a_turn_that_alone_outgrows_the_window_ends_with_a_clear_error(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """The earlier turn is compacted at the step boundary, but the running turn's own
    tool result is past the window: the turn ends ``error`` with the runtime's words and
    that step's request is never made."""
    (tmp_path / "big.txt").write_text("a line of a large file\n" * 1600)  # ~9,200 tokens
    script = [[text("first answer")], [call("c1", "Read", path="big.txt")],
              [text("SUMMARY")], [text("never asked")]]
    async with agent_daemon(marked) as agent:
        await scripted_session(agent, tmp_path, script, context_window=12_000,
                               compact_at=0.01)
        with trio.fail_after(20):
            await agent.prompt(LONG_PROMPT)
            result = await agent.prompt("read big.txt")
        assert result.stop_reason == "error"
        log = agent.log()
        assert next(e for e in log if isinstance(e, HistoryCompacted)).replaced == ("t1",)
        t2_end = log[-1]
        assert isinstance(t2_end, TurnEnd) and t2_end.end.error is not None
        assert "does not fit the model's context window (12,000 tokens)" in t2_end.end.error
        assert [(e.turn_id, e.step) for e in log if isinstance(e, ModelUsageEvent)] == [
            ("t1", 0), ("t2", 0), ("t2", -1)]  # no request for t2's step 1


async def test_a_failed_compaction_inside_a_turn_leaves_the_history_and_the_turn_goes_on(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """An empty summary: the maintenance's end says why, nothing is compacted, the turn's
    next step runs on the history as it was, and a later step does not try again."""
    (tmp_path / "a.txt").write_text("alpha\n")
    script = [[text("first answer")], [call("c1", "Read", path="a.txt")], [text("  ")],
              [call("c2", "Read", path="a.txt")], [text("done")]]
    async with agent_daemon(marked) as agent:
        await scripted_session(agent, tmp_path, script, **SMALL)
        with trio.fail_after(20):
            await agent.prompt(LONG_PROMPT)
            result = await agent.prompt("read a.txt twice")
        assert result.stop_reason == "end_turn"
        log = agent.log()
        assert maintenance(log) == [("maintenance/start", "t2"), ("maintenance/end", "t2")]
        end = next(e for e in log if isinstance(e, MaintenanceEnd))
        assert end.end.kind == "error" and "empty summary" in (end.end.error or "")
        assert [(e.turn_id, e.step) for e in log if isinstance(e, ModelUsageEvent)] == [
            ("t1", 0), ("t2", 0), ("t2", -1), ("t2", 1), ("t2", 2)]
        agent.assert_balanced()
