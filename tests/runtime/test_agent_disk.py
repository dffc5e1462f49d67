"""The agent on a failing disk (in process): ends the log could not take are owed and
recorded as soon as it takes records again; stops are counted where they settle."""

from __future__ import annotations

import pathlib
from collections.abc import Callable, Iterator

import pytest
import trio
import trio.testing

from protocol.errors import ErrorCode, RpcError
from protocol.messages.events import ToolCallEvent, ToolResultEvent, TurnEnd, TurnStart
from runtime.agent import logfaults
from runtime.agent.collaborators import Unowned
from runtime.agent.registry import DisposedCause, UserCause
from runtime.agent.sessionlog import read_log
from tests.kit.agent import ECHO, make_agent, tool_call


@pytest.fixture
def faults() -> Iterator[Callable[[str], None]]:
    yield logfaults.configure
    logfaults.configure("")


def ends(path: pathlib.Path) -> dict[str, list[TurnEnd]]:
    contents = read_log(path)
    assert contents.torn_bytes == 0
    found: dict[str, list[TurnEnd]] = {}
    for event in contents.events:
        if isinstance(event, TurnStart):
            found.setdefault(event.turn_id, [])
        elif isinstance(event, TurnEnd):
            found[event.turn_id].append(event)
    return found


async def test_an_end_the_log_could_not_take_is_recorded_before_the_next_turn(
        tmp_path: pathlib.Path, faults: Callable[[str], None]) -> None:
    script = [[tool_call("c1", "Echo")], [{"text": "done"}], [{"text": "second"}]]
    agent, _, announced = make_agent(tmp_path, script, tools=[ECHO])
    # turn/start, user/message, model/usage, tool/call are written; the tool/result and the
    # balancing result are not, so neither is the turn/end.
    faults("write:EIO:5:2")
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.run)
        with trio.fail_after(5):
            first = agent.prompt("one")
            await first.done.wait()
            assert first.result is not None and first.result.stop_reason == "error"
            assert first.result.turn_id == "t1"
            assert ends(tmp_path / "s.jsonl") == {"t1": []}  # open, and nothing torn
            second = agent.prompt("two")
            await second.done.wait()
        nursery.cancel_scope.cancel()
    assert second.result is not None and second.result.stop_reason == "end_turn"
    assert second.result.turn_id == "t2"
    found = ends(tmp_path / "s.jsonl")
    (t1,) = found["t1"]
    assert t1.end.kind == "error" and t1.stop_reason == "error"
    assert t1.end.error is not None and "could not record this turn's end" in t1.end.error
    assert [e.end.kind for e in found["t2"]] == ["completed"]
    log = read_log(tmp_path / "s.jsonl").events
    # The call whose result was lost is balanced, its outcome said to be unknown, before
    # the owed end, and both before the next turn.
    kinds = [(type(e).__name__, e.turn_id) for e in log]
    assert kinds.index(("ToolResultEvent", "t1")) < kinds.index(("TurnEnd", "t1")) < \
        kinds.index(("TurnStart", "t2"))
    (lost,) = [e for e in log if isinstance(e, ToolResultEvent)]
    assert lost.code == ErrorCode.INTERNAL.name
    assert [e.call_id for e in log if isinstance(e, ToolCallEvent)] == ["c1"]
    assert [e.seq for e in log] == list(range(len(log)))  # no gap where writes failed
    assert [e.turn_id for e in announced if isinstance(e, TurnEnd)] == ["t1", "t2"]


async def test_an_unsynced_end_is_kept_and_the_stop_never_answers_aborted(
        tmp_path: pathlib.Path, faults: Callable[[str], None],
        autojump_clock: trio.testing.MockClock) -> None:
    agent, _, announced = make_agent(tmp_path, [[{"text": "partial"}, {"sleepMs": 60_000}],
                                                [{"text": "again"}]])
    faults("fsync:EIO:1")
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.run)
        pending = agent.prompt("hi")
        await trio.sleep(1)
        with pytest.raises(RpcError) as failed:
            await agent.cancel(UserCause())
        assert failed.value.code == ErrorCode.INTERNAL
        # The end is true, only its durability unconfirmed: kept, not announced, not owed.
        assert [e.end.kind for e in ends(tmp_path / "s.jsonl")["t1"]] == ["aborted"]
        assert not [e for e in announced if isinstance(e, TurnEnd)]
        assert await agent.record_owed()
        again = agent.prompt("again")
        await again.done.wait()
        nursery.cancel_scope.cancel()
    assert pending.result is not None and pending.result.stop_reason == "error"
    assert pending.result.turn_id == "t1"
    assert again.result is not None and again.result.stop_reason == "end_turn"
    found = ends(tmp_path / "s.jsonl")
    assert [(e.end.kind, e.stop_reason) for e in found["t1"]] == [("aborted", "cancelled")]
    assert [e.end.kind for e in found["t2"]] == ["completed"]


async def test_a_turn_whose_start_the_log_refused_records_no_end(
        tmp_path: pathlib.Path, faults: Callable[[str], None]) -> None:
    agent, _, announced = make_agent(tmp_path, [[{"text": "one"}], [{"text": "two"}]])
    faults("write:EIO:1")  # the turn/start
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.run)
        with trio.fail_after(5):
            first = agent.prompt("one")
            await first.done.wait()
            second = agent.prompt("two")
            await second.done.wait()
        nursery.cancel_scope.cancel()
    assert first.result is not None and first.result.stop_reason == "error"
    assert first.result.turn_id is None  # nothing of it in the log to look up
    assert [type(e).__name__ for e in read_log(tmp_path / "s.jsonl").events] == \
        ["SessionMeta", "TurnStart", "UserMessageEvent", "ModelUsageEvent",
         "AssistantMessageEvent", "TurnEnd"]
    assert second.result is not None and second.result.stop_reason == "end_turn"
    assert second.result.turn_id == "t2"
    assert list(ends(tmp_path / "s.jsonl")) == ["t2"]
    assert [e.turn_id for e in announced if isinstance(e, TurnEnd)] == ["t2"]


async def test_a_stop_of_a_turn_that_could_not_start_says_so(
        tmp_path: pathlib.Path, faults: Callable[[str], None]) -> None:
    agent, _, _ = make_agent(tmp_path, [[{"text": "one"}]])
    faults("write:EIO:1")
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.run)
        pending = agent.prompt("one")
        with trio.fail_after(5), pytest.raises(RpcError) as failed:
            await agent.cancel(UserCause())
        nursery.cancel_scope.cancel()
    assert failed.value.code == ErrorCode.INTERNAL
    assert "could not start" in str(failed.value)
    assert pending.result is not None and pending.result.turn_id is None
    assert ends(tmp_path / "s.jsonl") == {}


@pytest.mark.parametrize(("fault", "child_end"), [
    ("fsync:EIO:1", "completed"),  # the child's end is kept, unsynced
    ("write:EIO:7", "error"),  # the child's end is refused: owed, and recorded error
])
async def test_a_parent_records_its_subagent_as_the_log_does(
        tmp_path: pathlib.Path, faults: Callable[[str], None], fault: str,
        child_end: str) -> None:
    task = {"toolCall": {"id": "k1", "name": "Task", "args": {"prompt": "sub"}}}
    agent, _, _ = make_agent(tmp_path, [[task], [{"text": "child answer"}], [{"text": "done"}]])
    # Writes: t1's turn/start, user/message, tool/call (1-3); the child's turn/start,
    # user/message, assistant/message (4-6) and turn/end (7, fsync 1).
    faults(fault)
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.run)
        with trio.fail_after(5):
            first = agent.prompt("one")
            await first.done.wait()
        nursery.cancel_scope.cancel()
    found = ends(tmp_path / "s.jsonl")
    assert [e.end.kind for e in found["t1~k1"]] == [child_end]
    (said,) = [e for e in read_log(tmp_path / "s.jsonl").events
               if isinstance(e, ToolResultEvent) and e.call_id == "k1"]
    assert said.details["childEnd"] == child_end


async def test_a_turn_does_not_start_while_an_earlier_end_is_still_owed(
        tmp_path: pathlib.Path, faults: Callable[[str], None]) -> None:
    agent, _, _ = make_agent(tmp_path, [[{"text": "one"}], [{"text": "two"}]])
    faults("write:EROFS:3:0")  # from the step's model/usage on, nothing is written
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.run)
        with trio.fail_after(5):
            first = agent.prompt("one")
            await first.done.wait()
            second = agent.prompt("two")
            await second.done.wait()
        nursery.cancel_scope.cancel()
    assert first.result is not None and first.result.stop_reason == "error"
    # The second turn never began: no id, nothing in the log, the model never asked.
    assert second.result is not None and second.result.turn_id is None
    assert second.result.stop_reason == "error"
    assert ends(tmp_path / "s.jsonl") == {"t1": []}
    assert not agent.busy


async def test_a_stop_is_counted_once_where_it_settles(
        tmp_path: pathlib.Path, autojump_clock: trio.testing.MockClock) -> None:
    counted: list[float] = []

    class Counting(Unowned):
        def on_stop(self, settled_ms: float) -> None:
            counted.append(settled_ms)

    agent, _, _ = make_agent(tmp_path, [[{"text": "a"}, {"sleepMs": 60_000}], [{"text": "b"}],
                                        [{"text": "c"}, {"sleepMs": 60_000}]],
                             collaborators=Counting())
    async with trio.open_nursery() as nursery:
        await nursery.start(agent.run)
        agent.prompt("one")
        await trio.sleep(1)
        answers = []

        async def stop() -> None:
            answers.append(await agent.cancel(UserCause()))

        async with trio.open_nursery() as stops:  # two aborts join one settlement
            stops.start_soon(stop)
            stops.start_soon(stop)
        assert [a.outcome for a in answers] == ["aborted", "aborted"]
        assert len(counted) == 1
        done = agent.prompt("two")
        await done.done.wait()
        assert (await agent.cancel(UserCause())).outcome == "idle"  # nothing to stop
        agent.prompt("three")
        await trio.sleep(1)
        await agent.cancel(DisposedCause())  # as session.close and the shutdown stop
        nursery.cancel_scope.cancel()
    assert len(counted) == 2 and all(ms >= 0 for ms in counted)
