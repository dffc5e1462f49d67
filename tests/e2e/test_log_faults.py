"""A failing disk under the real daemon, through the log writer's fault seam
(``QUIESCE_LOG_FAULTS``, ``runtime/agent/logfaults.py``): EIO, EROFS and a failing fsync; the
seam itself never reaches the host.
Nothing torn is ever left in the middle of a log, the same session takes new prompts
once the error clears, and a fresh daemon loads every turn with an honest end."""

from __future__ import annotations

import pathlib
from collections.abc import Sequence

import pytest
import trio

from protocol.errors import ErrorCode, RemoteError
from protocol.messages.client import SessionLoadParams
from protocol.messages.common import Empty
from protocol.messages.events import (
    AssistantDeltaEvent,
    DurableEvent,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
)
from runtime.agent.logfaults import ENV
from runtime.agent.sessionlog import read_log
from tests.conftest import Marked
from tests.kit.daemon import agent_daemon, assert_balanced, call, sleep, text


def turns(events: Sequence[DurableEvent]) -> dict[str, list[TurnEnd]]:
    """Each turn's ends, in start order."""
    found: dict[str, list[TurnEnd]] = {}
    for event in events:
        if isinstance(event, TurnStart):
            found.setdefault(event.turn_id, [])
        elif isinstance(event, TurnEnd):
            found[event.turn_id].append(event)
    return found


async def reload_and_check(marked: Marked, session_id: str, *,
                           recovered: bool) -> list[DurableEvent]:
    """A fresh daemon (no faults): the session is listed without an error, loads, and every
    turn of its log has exactly one end and every call one result."""
    async with agent_daemon(marked) as fresh:
        fresh.session_id = session_id
        listed = await fresh.daemon.request("session.list", Empty())
        (info,) = [s for s in listed.sessions if s.session_id == session_id]
        assert info.error is None
        loaded = await fresh.daemon.request("session.load", SessionLoadParams(session_id))
        assert loaded.recovered is recovered
        log = fresh.log()
        assert [e.seq for e in fresh.events] == [e.seq for e in log]
    assert [e.seq for e in log] == list(range(len(log)))
    assert all(len(ends) == 1 for ends in turns(log).values()), turns(log)
    assert_balanced(log, "the reloaded log")
    return log


async def test_eio_mid_turn_is_undone_and_the_end_recorded_once_it_clears(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    script = [[call("r1", "Read", path="a.txt")], [text("unused")], [text("second")]]
    # session/meta, turn/start, user/message, model/usage and tool/call are written; the
    # tool/result (half of it reaches the disk) and the result balancing it fail.
    async with agent_daemon(marked, env_extra={ENV: "write:EIO:6:2"}) as agent:
        session_id = await agent.new_session(tmp_path, script)
        first = await agent.prompt("one")
        assert first.stop_reason == "error" and first.turn_id == "t1"
        contents = read_log(marked.data_dir / "sessions" / f"{session_id}.jsonl")
        assert contents.torn_bytes == 0  # cut back: nothing torn, not even at the end
        assert turns(contents.events) == {"t1": []}
        second = await agent.prompt("two")
        assert second.stop_reason == "end_turn" and second.turn_id == "t2"
    log = await reload_and_check(marked, session_id, recovered=False)
    ends = turns(log)
    assert [(e.end.kind, e.stop_reason) for e in ends["t1"]] == [("error", "error")]
    assert [e.end.kind for e in ends["t2"]] == ["completed"]
    (lost,) = [e for e in log if isinstance(e, ToolResultEvent)]
    assert lost.call_id == "r1" and lost.code == "INTERNAL"


async def test_a_torn_record_that_cannot_be_cut_stays_the_last_line(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """EROFS: the file system went read-only under the daemon. The cut fails too, so the
    log refuses every later append; a fresh daemon (the disk back) cuts the torn line and
    closes the turn as interrupted."""
    (tmp_path / "a.txt").write_text("hello\n")
    # (A loaded session's script starts again from its first response.)
    script = [[call("r1", "Read", path="a.txt")], [text("after")]]
    faults = "write:EROFS:6:0,truncate:EROFS:1:0"  # the 6th: the tool/result
    async with agent_daemon(marked, env_extra={ENV: faults}) as agent:
        session_id = await agent.new_session(tmp_path, script)
        path = marked.data_dir / "sessions" / f"{session_id}.jsonl"
        first = await agent.prompt("one")
        assert first.stop_reason == "error"
        torn = path.read_bytes()
        contents = read_log(path)
        assert contents.torn_bytes > 0  # half a tool/result, as the last line
        assert [type(e).__name__ for e in contents.events][-1] == "ToolCallEvent"
        second = await agent.prompt("two")  # refused: the turn never begins
        assert second.stop_reason == "error" and second.turn_id is None
        assert path.read_bytes() == torn  # nothing appended after the torn record
    async with agent_daemon(marked) as fresh:
        fresh.session_id = session_id
        listed = await fresh.daemon.request("session.list", Empty())
        (info,) = [s for s in listed.sessions if s.session_id == session_id]
        assert info.interrupted and info.error is None
        loaded = await fresh.daemon.request("session.load", SessionLoadParams(session_id))
        assert loaded.recovered
        after = await fresh.prompt("three")
        assert after.stop_reason == "end_turn"
        log = fresh.log()
    ends = turns(log)
    (t1,) = ends["t1"]
    assert t1.end.kind == "interrupted"
    assert t1.end.error == "the runtime stopped before this turn's end was recorded"
    (r1,) = [e for e in log if isinstance(e, ToolResultEvent) and e.turn_id == "t1"]
    assert r1.code == "ABORTED" and r1.details["recovered"]
    assert [e.end.kind for e in ends[after.turn_id or ""]] == ["completed"]
    assert_balanced(log, "the repaired log")
    assert read_log(path).torn_bytes == 0


async def test_a_stop_whose_end_cannot_be_fsynced_answers_internal_never_aborted(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """The stop answers INTERNAL (the end's durability is unconfirmed); the log keeps the
    end the turn truly had, and nothing contradicts it."""
    script = [[text("partial"), sleep(60_000)], [text("again")]]
    async with agent_daemon(marked, env_extra={ENV: "fsync:EIO:1"}) as agent:
        session_id = await agent.new_session(tmp_path, script)
        async with trio.open_nursery() as nursery:
            prompts = agent.prompt_soon(nursery, "one")
            await agent.wait_for(lambda e: isinstance(e, AssistantDeltaEvent))
            with trio.fail_after(15), pytest.raises(RemoteError) as failed:
                await agent.abort()
        assert failed.value.code == ErrorCode.INTERNAL
        assert "could not be made durable" in str(failed.value)
        assert [p.stop_reason for p in prompts] == ["error"]
        assert not [e for e in agent.events if isinstance(e, TurnEnd)]  # never announced
        # The end is true, only unconfirmed: kept (no second end is owed for the turn).
        assert [e.end.kind for e in turns(agent.log())["t1"]] == ["aborted"]
        again = await agent.prompt("two")
        assert again.stop_reason == "end_turn"
    log = await reload_and_check(marked, session_id, recovered=False)
    ends = turns(log)
    assert [(e.end.kind, e.stop_reason) for e in ends["t1"]] == [("aborted", "cancelled")]
    assert [e.end.kind for e in ends["t2"]] == ["completed"]
    assert not [e for e in log if isinstance(e, ToolCallEvent)]


async def test_a_session_whose_meta_cannot_be_written_is_refused_and_leaves_nothing(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    async with agent_daemon(marked, env_extra={ENV: "write:ENOSPC:1"}) as agent:
        with pytest.raises(RemoteError) as refused:
            await agent.new_session(tmp_path, [])
        assert refused.value.code == ErrorCode.INTERNAL
        assert "No space left on device" in str(refused.value)
        assert list((marked.data_dir / "sessions").iterdir()) == []
        listed = await agent.daemon.request("session.list", Empty())
        assert listed.sessions == ()
        await agent.new_session(tmp_path, [])  # the second write works


async def test_the_fault_seam_is_not_inherited_by_the_host_or_its_processes(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    script = [[call("b1", "Bash", command=f"env; echo ${ENV}-unset")], [text("done")]]
    async with agent_daemon(marked, env_extra={ENV: "fsync:EIO:99"}) as agent:
        await agent.new_session(tmp_path, script)
        answer = await agent.prompt("one")
        assert answer.stop_reason == "end_turn"
        (shown,) = [e for e in agent.log() if isinstance(e, ToolResultEvent)]
    output = "".join(getattr(block, "text", "") for block in shown.content)
    assert "-unset" in output and ENV not in output.replace(f"{ENV}-unset", "")
