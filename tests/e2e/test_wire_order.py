"""Requests written back to back take effect in wire order (the real ``quiesce serve``).

A pipelining client writes several requests in one write, without waiting. Each case
repeats 100 times; to keep that cheap the repetitions share a daemon (one session each,
a fresh script each), and the first-handshake case, which only a fresh daemon has, runs
on a few fresh daemons (``QUIESCE_FRESH_DAEMONS``, default 4).
"""

from __future__ import annotations

import os
import pathlib

import pytest
import trio

from protocol.messages.events import ToolResultEvent, TurnEnd
from runtime.agent.sessionlog import read_log
from tests.conftest import Marked
from tests.e2e.pipeline import INIT, Pipeline, write_then_end
from tests.kit.rawclient import raw_daemon

ROUNDS = 100
FRESH_DAEMONS = int(os.environ.get("QUIESCE_FRESH_DAEMONS", "4"))


def _log(marked: Marked, session_id: str) -> list[object]:
    return list(read_log(marked.data_dir / "sessions" / f"{session_id}.jsonl").events)


def _check_listed(answers: list[dict[str, object]]) -> None:
    init, new, listed = answers
    assert "result" in init, init
    assert "result" in new, new
    assert "result" in listed, listed
    session_id = new["result"]["sessionId"]  # type: ignore[index]
    assert session_id in [s["sessionId"] for s in listed["result"]["sessions"]], listed  # type: ignore[index]


async def test_initialize_new_and_list_in_one_write(marked: Marked,
                                                    tmp_path: pathlib.Path) -> None:
    new = ("session.new", {"workspace": str(tmp_path), "permissionMode": "auto"})
    requests = (("initialize", INIT), new, ("session.list", {}))
    with trio.fail_after(60 + 15 * FRESH_DAEMONS):
        for _ in range(FRESH_DAEMONS):  # the very first frames a daemon reads
            async with raw_daemon(marked.env()) as raw:
                pipe = Pipeline(raw)
                _check_listed(await pipe.wait(await pipe.write(*requests)))
        async with raw_daemon(marked.env()) as raw:
            pipe = Pipeline(raw)
            for _ in range(ROUNDS):
                _check_listed(await pipe.wait(await pipe.write(*requests)))
            assert pipe.duplicates == []


async def _scripted(pipe: Pipeline, workspace: pathlib.Path, script: list[object]) -> str:
    answer = await pipe.call(*pipe.scripted_session(str(workspace), script))
    assert "result" in answer, answer
    return str(answer["result"]["sessionId"])


@pytest.mark.parametrize("keep_inbox", [False, True])
async def test_prompt_then_abort_in_one_write_stops_that_turn(
        marked: Marked, tmp_path: pathlib.Path, keep_inbox: bool) -> None:
    """The prompt answers cancelled, the abort answers aborted with that turn's id, no tool
    body ran (its Write is not on disk), and the turn's turn/end is. A prompt queued
    behind it survives the stop with keepInbox, and is cancelled without."""
    with trio.fail_after(120):
        async with raw_daemon(marked.env()) as raw:
            pipe = Pipeline(raw)
            assert "result" in await pipe.call("initialize", INIT)
            for i in range(ROUNDS):
                target = f"ran-{i}.txt"
                queued = i % 2 == 1  # every other round, a second prompt waits behind
                script = write_then_end(target) * 2
                sid = await _scripted(pipe, tmp_path, script)
                requests = [("agent.prompt", {"sessionId": sid, "text": "write it"})]
                if queued:
                    requests.append(("agent.prompt", {"sessionId": sid, "text": "again"}))
                requests.append(("agent.abort", {"sessionId": sid, "keepInbox": keep_inbox}))
                answers = await pipe.wait(await pipe.write(*requests))
                first, abort = answers[0]["result"], answers[-1]["result"]
                assert first["stopReason"] == "cancelled", (i, answers)
                assert abort["outcome"] == "aborted", (i, answers)
                assert abort["turnId"] == first["turnId"], (i, answers)
                events = _log(marked, sid)
                turn = first["turnId"]
                ends = [e for e in events if isinstance(e, TurnEnd) and e.turn_id == turn]
                assert [e.end.kind for e in ends] == ["aborted"], (i, events)
                codes = [e.code for e in events
                         if isinstance(e, ToolResultEvent) and e.turn_id == turn]
                assert set(codes) <= {"ABORTED_BEFORE_DISPATCH"}, (i, codes)
                if queued:
                    second = answers[1]["result"]
                    if keep_inbox:
                        assert second["stopReason"] == "end_turn", (i, answers)
                        assert second["turnId"] != turn
                    else:
                        assert second == {"turnId": None, "stopReason": "cancelled"}, answers
                else:
                    assert not (tmp_path / target).exists(), i
            assert pipe.duplicates == []


@pytest.mark.parametrize("keep_inbox", [False, True])
async def test_a_prompt_and_an_abort_written_during_a_turn(
        marked: Marked, tmp_path: pathlib.Path, keep_inbox: bool) -> None:
    """While a first prompt's turn runs, a second prompt and an abort in one write: the
    abort stops the running turn (the one accepted before it); the second prompt, queued
    behind it, is cancelled, or with keepInbox runs its turn after the stop."""
    slow = [[{"text": "working"}, {"sleepMs": 60000}]]
    with trio.fail_after(120):
        async with raw_daemon(marked.env()) as raw:
            pipe = Pipeline(raw)
            assert "result" in await pipe.call("initialize", INIT)
            for i in range(10):
                sid = await _scripted(pipe, tmp_path, [*slow, [{"text": "second"}]])
                [first] = await pipe.write(("agent.prompt", {"sessionId": sid, "text": "1"}))
                with trio.fail_after(10):  # the first turn runs: its text is announced
                    while not any(e["params"]["event"]["kind"] == "assistant/delta"
                                  and e["params"]["sessionId"] == sid for e in pipe.events):
                        await pipe.pump()
                second, abort = await pipe.write(
                    ("agent.prompt", {"sessionId": sid, "text": "2"}),
                    ("agent.abort", {"sessionId": sid, "keepInbox": keep_inbox}))
                a1, a2, ab = await pipe.wait([first, second, abort])
                assert a1["result"] == {"turnId": "t1", "stopReason": "cancelled"}, (i, a1)
                assert ab["result"]["outcome"] == "aborted", (i, ab)
                assert ab["result"]["turnId"] == "t1", (i, ab)
                if keep_inbox:
                    assert a2["result"] == {"turnId": "t2", "stopReason": "end_turn"}, (i, a2)
                else:
                    assert a2["result"] == {"turnId": None, "stopReason": "cancelled"}, (i, a2)
