"""ENOSPC for real: the daemon's data directory on a small tmpfs that fills during a turn.

Mounting needs root (and a kernel that lets us): without it these tests skip, saying so.
The tmpfs is always unmounted, even when a test fails."""

from __future__ import annotations

import contextlib
import errno
import os
import pathlib
import subprocess
import time
from collections.abc import Iterator

import pytest
import trio

from protocol.causes import UserCause
from protocol.errors import ErrorCode, RemoteError
from protocol.messages.events import AssistantDeltaEvent, ToolResultEvent, TurnEnd
from runtime.agent.sessionlog import read_log
from tests.conftest import Marked
from tests.e2e.test_log_faults import reload_and_check, turns
from tests.kit.daemon import agent_daemon, call, sleep, text

SIZE = 1024 * 1024


@contextlib.contextmanager
def small_tmpfs(where: pathlib.Path, size: int = SIZE) -> Iterator[pathlib.Path]:
    if os.geteuid() != 0:
        pytest.skip("a full disk is made with a small tmpfs, and mounting one needs root")
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs",
                              str(where)], capture_output=True, timeout=10, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        for _ in range(50):  # a daemon that just exited may still hold a file for a moment
            if subprocess.run(["umount", str(where)], capture_output=True, timeout=10,
                              check=False).returncode == 0:
                break
            time.sleep(0.1)
        else:
            subprocess.run(["umount", "-l", str(where)], timeout=10, check=True)


def fill(where: pathlib.Path, leave: int = 0) -> pathlib.Path:
    """A file that takes all but ``leave`` bytes of the file system (0: every byte)."""
    filler = where / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        if leave:
            stat = os.statvfs(where)
            os.write(fd, b"\0" * max(0, stat.f_bavail * stat.f_frsize - leave))
        else:
            for chunk in (65536, 4096, 1):
                with contextlib.suppress(OSError):
                    while os.write(fd, b"\0" * chunk):
                        pass
    finally:
        os.close(fd)
    return filler


async def test_a_record_the_full_disk_cut_short_is_undone(tmp_path: pathlib.Path,
                                                          marked: Marked) -> None:
    """The issue's case: a large tool/result meets a full disk halfway. It is cut back, the
    turn ends ``error`` on the few bytes that still fit, and once space returns the same
    session takes prompts and a fresh daemon loads every turn."""
    (tmp_path / "big.txt").write_text(("x" * 199 + "\n") * 1500)  # a 300 KB tool/result
    script = [[call("r1", "Read", path="big.txt")], [text("after")]]
    with small_tmpfs(marked.data_dir):
        async with agent_daemon(marked) as agent:
            session_id = await agent.new_session(tmp_path, script)
            path = marked.data_dir / "sessions" / f"{session_id}.jsonl"
            filler = fill(marked.data_dir, leave=64 * 1024)
            first = await agent.prompt("read it")
            assert first.stop_reason == "error"
            contents = read_log(path)
            assert contents.torn_bytes == 0
            (t1,) = turns(contents.events)["t1"]
            assert t1.end.kind == "error" and "No space left" in (t1.end.error or "")
            (lost,) = [e for e in contents.events if isinstance(e, ToolResultEvent)]
            assert lost.code == "INTERNAL"  # its real result never reached the disk
            filler.unlink()  # space returns
            second = await agent.prompt("again")
            assert second.stop_reason == "end_turn"
        log = await reload_and_check(marked, session_id, recovered=False)
    assert [ends[0].end.kind for ends in turns(log).values()] == ["error", "completed"]


async def test_a_stop_on_a_full_disk_answers_honestly_and_the_session_goes_on(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """The disk fills while the model streams; then the user stops. Whatever still fits,
    the answer never claims more than the disk holds nor contradicts it: ``error`` (with
    the turn's error) when the turn/end on disk says ``error``, else INTERNAL and the end
    is recorded (``error``) once space returns."""
    prefix = "y" * 20_000  # an interrupted prefix too large for any page's slack
    script = [[text(prefix), sleep(60_000)], [text("after")]]
    with small_tmpfs(marked.data_dir):
        async with agent_daemon(marked) as agent:
            session_id = await agent.new_session(tmp_path, script)
            async with trio.open_nursery() as nursery:
                prompts = agent.prompt_soon(nursery, "one")
                await agent.wait_for(lambda e: isinstance(e, AssistantDeltaEvent))
                filler = fill(marked.data_dir)
                try:
                    with trio.fail_after(15):
                        answer = await agent.abort()
                except RemoteError as exc:
                    assert exc.code == ErrorCode.INTERNAL
                    assert "could not be made durable" in str(exc)
                    assert turns(agent.log()) == {"t1": []}
                else:
                    (end,) = turns(agent.log())["t1"]  # on disk before the answer
                    assert end.end.kind == "error"  # the prefix could not be recorded
                    # The answer says what the durable record says, never "aborted".
                    assert answer.outcome == "error" and answer.turn_id == "t1", answer
                    assert answer.error == end.end.error
                    assert answer.cause == UserCause()  # the stop it answers
            assert [p.stop_reason for p in prompts] == ["error"]
            assert read_log(agent.data_dir / "sessions" / f"{session_id}.jsonl"
                            ).torn_bytes == 0
            filler.unlink()
            second = await agent.prompt("two")
            assert second.stop_reason == "end_turn"
        log = await reload_and_check(marked, session_id, recovered=False)
    ends = turns(log)
    assert [e.end.kind for e in ends["t1"]] == ["error"]
    assert [e.end.kind for e in ends["t2"]] == ["completed"]
    assert not [e for e in log if isinstance(e, TurnEnd) and e.end.kind == "aborted"]


def test_fill_really_fills(tmp_path: pathlib.Path) -> None:
    with small_tmpfs(tmp_path / "fs", 256 * 1024) as where:
        fill(where)
        fd = os.open(where / "more", os.O_WRONLY | os.O_CREAT)
        try:
            with pytest.raises(OSError) as full:
                os.write(fd, b"\0" * 8192)
        finally:
            os.close(fd)
        assert full.value.errno == errno.ENOSPC


async def test_a_stop_whose_call_result_cannot_be_logged_answers_what_the_log_says(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """The issue's case: a Bash call has printed a lot when the disk fills and the user
    stops. Its result (the output before the stop) cannot be logged, so the call ends
    INTERNAL and the turn ``error``; the stop's answer says ``error`` too, never ``aborted``."""
    from protocol.messages.events import ToolProgressEvent

    command = "head -c 400000 /dev/zero | tr '\\0' x; echo; echo printed; sleep 300"
    script = [[call("b1", "Bash", command=command)], [text("after")]]
    with small_tmpfs(marked.data_dir):
        async with agent_daemon(marked) as agent:
            session_id = await agent.new_session(tmp_path, script)
            async with trio.open_nursery() as nursery:
                prompts = agent.prompt_soon(nursery, "one")
                await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent))
                await trio.sleep(1.0)  # the rest of its output printed
                filler = fill(marked.data_dir, leave=32 * 1024)
                with trio.fail_after(30):
                    answer = await agent.abort()
                log = agent.log()
                (end,) = turns(log)["t1"]  # on disk before the answer
                (lost,) = [e for e in log if isinstance(e, ToolResultEvent)]
                assert lost.code == "INTERNAL" and end.end.kind == "error"
                assert answer.outcome == "error" and answer.turn_id == "t1", answer
                assert answer.error == end.end.error and answer.cause == UserCause()
                assert [(c.call_id, c.code) for c in answer.tool_calls] == [("b1", "INTERNAL")]
            assert [p.stop_reason for p in prompts] == ["error"]
            filler.unlink()
            second = await agent.prompt("two")
            assert second.stop_reason == "end_turn"
        await reload_and_check(marked, session_id, recovered=False)
