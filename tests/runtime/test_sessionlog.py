from __future__ import annotations

import errno
import os
import pathlib
from collections.abc import Callable, Iterator

import pytest

from protocol.causes import UserCause
from protocol.messages.events import (
    SessionMeta,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
    TurnOutcome,
    TurnStart,
)
from runtime.agent import logfaults
from runtime.agent.sessionlog import SessionLog, is_live_elsewhere, read_log


def meta(seq: int = 0) -> SessionMeta:
    return SessionMeta(seq, "", "s1", "/w", "ask", 1.0)


async def test_append_read_and_sync(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "sessions" / "s1.jsonl"
    log = SessionLog.create(path)
    log.append(meta(log.next_seq()))
    log.append(TurnStart(log.next_seq(), "t1"))
    log.append(TurnEnd(log.next_seq(), "t1", TurnOutcome("aborted", UserCause()), "cancelled"))
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


# -- a full or failing disk ---------------------------------------------------------------

@pytest.fixture
def faults() -> Iterator[Callable[[str], None]]:
    """Set ``runtime.agent.logfaults`` in this process (as QUIESCE_LOG_FAULTS does in a daemon)."""
    yield logfaults.configure
    logfaults.configure("")


def started(path: pathlib.Path) -> SessionLog:
    log = SessionLog.create(path)
    log.append(meta(log.next_seq()))
    log.append(TurnStart(log.next_seq(), "t1"))
    return log


def result(log: SessionLog, call_id: str = "c1", text: str = "x") -> ToolResultEvent:
    return ToolResultEvent(log.next_seq(), "t1", 0, call_id, False, None,
                           ({"type": "text", "text": text},))


def test_a_failed_append_is_cut_back_and_the_next_starts_a_fresh_line(
        tmp_path: pathlib.Path, faults: Callable[[str], None]) -> None:
    path = tmp_path / "s.jsonl"
    log = started(path)
    whole = path.stat().st_size
    faults("write:EIO:1")  # the next write tears half a record, then fails
    with pytest.raises(OSError) as failed:
        log.append(result(log, text="y" * 1000))
    assert failed.value.errno == errno.EIO
    assert path.stat().st_size == whole and not log.torn
    assert log.next_seq() == 2  # the failed record took no seq
    log.append(result(log))
    log.close()
    contents = read_log(path)
    assert contents.torn_bytes == 0
    assert [e.seq for e in contents.events] == [0, 1, 2]


def test_a_short_write_is_finished_or_undone(tmp_path: pathlib.Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s.jsonl"
    log = started(path)
    whole = path.stat().st_size
    real_write = os.write
    calls: list[int] = []

    def short(fd: int, data: bytes | memoryview) -> int:  # a disk that fills mid-record
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[:10]))
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "write", short)
    with pytest.raises(OSError) as failed:
        log.append(result(log))
    assert failed.value.errno == errno.ENOSPC  # the real reason, from the second write
    assert path.stat().st_size == whole
    # A short write followed by one that finishes the record is a whole record.
    calls.clear()

    def short_once(fd: int, data: bytes | memoryview) -> int:
        calls.append(len(data))
        return real_write(fd, bytes(data[:10]) if len(calls) == 1 else data)

    monkeypatch.setattr(os, "write", short_once)
    log.append(result(log))
    assert len(calls) == 2
    log.close()
    assert [e.seq for e in read_log(path).events] == [0, 1, 2]


def test_a_cut_that_fails_refuses_appends_until_it_succeeds(
        tmp_path: pathlib.Path, faults: Callable[[str], None]) -> None:
    path = tmp_path / "s.jsonl"
    log = started(path)
    whole = path.stat().st_size
    faults("write:EIO:1,truncate:EIO:1:2")  # the cut fails, and its first retry
    with pytest.raises(OSError):
        log.append(result(log))
    assert log.torn and path.stat().st_size > whole  # half a record left behind
    with pytest.raises(OSError, match="refusing to append"):
        log.append(result(log))
    torn = read_log(path)
    assert torn.torn_bytes == path.stat().st_size - whole  # only ever the last line
    assert [e.seq for e in torn.events] == [0, 1]
    log.append(result(log))  # the third cut works: the record follows the last whole one
    assert not log.torn
    log.close()
    contents = read_log(path)
    assert contents.torn_bytes == 0 and [e.seq for e in contents.events] == [0, 1, 2]


def test_reopen_fails_loudly_if_the_torn_tail_cannot_be_cut(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s.jsonl"
    started(path).close()
    with path.open("ab") as f:
        f.write(b'{"kind":"tool/res')

    def refuse(fd: int, size: int) -> None:
        raise OSError(errno.EROFS, os.strerror(errno.EROFS))

    monkeypatch.setattr(os, "ftruncate", refuse)
    with pytest.raises(OSError):
        SessionLog.reopen(path, read_log(path))
    monkeypatch.undo()
    reopened = SessionLog.reopen(path, read_log(path))  # the lock was released
    reopened.close()


def test_the_fault_spec() -> None:
    (write, fsync) = logfaults.parse("write:ENOSPC:3:2, fsync:EIO:1:0")
    assert (write.op, write.errno) == ("write", errno.ENOSPC)
    assert [n for n in range(1, 8) if write.hits(n)] == [3, 4]
    assert [n for n in range(1, 5) if fsync.hits(n)] == [1, 2, 3, 4]
    for bad in ("write:EIO", "read:EIO:1", "write:ENOPE:1"):
        with pytest.raises(ValueError):
            logfaults.parse(bad)
    assert logfaults.Injector().check("write") is None


def test_a_cut_back_never_extends_a_shorter_file(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.jsonl"
    log = started(path)
    os.truncate(path, 10)  # shortened behind the writer's back
    log.rewind(log.mark)
    assert path.stat().st_size == 10  # not padded with NULs up to the mark
    log.close()


def test_reopen_releases_the_lock_if_it_cannot_stat_the_log(
        tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "s.jsonl"
    started(path).close()
    contents = read_log(path)

    def fail(fd: int) -> os.stat_result:
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "fstat", fail)
    with pytest.raises(OSError):
        SessionLog.reopen(path, contents)
    monkeypatch.undo()
    assert not is_live_elsewhere(path)  # neither the descriptor nor its lock leaked
