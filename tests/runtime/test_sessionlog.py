from __future__ import annotations

import pathlib

import pytest

from protocol.messages.events import (
    Cause,
    SessionMeta,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnOutcome,
    TurnStart,
)
from runtime.sessionlog import SessionLog, read_log


def meta(seq: int = 0) -> SessionMeta:
    return SessionMeta(seq, "", "s1", "/w", "ask", 1.0)


async def test_append_read_and_sync(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "sessions" / "s1.jsonl"
    log = SessionLog.create(path)
    log.append(meta(log.next_seq()))
    log.append(TurnStart(log.next_seq(), "t1"))
    log.append(TurnEnd(log.next_seq(), "t1", TurnOutcome("aborted", Cause("user")), "cancelled"))
    await log.sync()
    log.close()
    contents = read_log(path)
    assert [e.seq for e in contents.events] == [0, 1, 2]
    assert contents.meta.session_id == "s1"
    assert contents.open_turns() == []
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def test_torn_last_line_is_ignored_then_cut(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.jsonl"
    log = SessionLog.create(path)
    log.append(meta(log.next_seq()))
    log.append(TurnStart(log.next_seq(), "t1"))
    log.append(ToolCallEvent(log.next_seq(), "t1", 0, "c1", "Bash", "process", {}))
    log.close()
    with path.open("ab") as f:
        f.write(b'{"kind":"tool/result","seq":3,"turnId":"t1","ste')
    contents = read_log(path)
    assert contents.torn_bytes > 0
    assert [t.turn_id for t in contents.open_turns()] == ["t1"]
    assert [c.call_id for c in contents.unanswered_calls("t1")] == ["c1"]
    reopened = SessionLog.reopen(path, contents)
    reopened.append(ToolResultEvent(reopened.next_seq(), "t1", 0, "c1", True, "ABORTED", ()))
    reopened.close()
    again = read_log(path)
    assert again.torn_bytes == 0 and again.events[-1].seq == 3
    assert again.unanswered_calls("t1") == []


def test_corrupt_middle_line_is_an_error(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(b'{"nonsense": 1}\n')
    with pytest.raises(ValueError, match="unreadable event"):
        read_log(path)


def test_create_refuses_to_overwrite(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.jsonl"
    SessionLog.create(path).close()
    with pytest.raises(FileExistsError):
        SessionLog.create(path)


def test_a_parent_and_its_subagent_can_both_be_open(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.jsonl"
    log = SessionLog.create(path)
    log.append(meta(log.next_seq()))
    log.append(TurnStart(log.next_seq(), "t1"))
    log.append(ToolCallEvent(log.next_seq(), "t1", 0, "task", "Task", "local", {}))
    log.append(TurnStart(log.next_seq(), "t1~task"))
    log.append(ToolCallEvent(log.next_seq(), "t1~task", 0, "b1", "Bash", "process", {}))
    log.close()
    contents = read_log(path)
    assert [t.turn_id for t in contents.open_turns()] == ["t1", "t1~task"]
    assert [c.call_id for c in contents.unanswered_calls("t1")] == ["task"]
