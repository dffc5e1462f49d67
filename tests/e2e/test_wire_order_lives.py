"""A session's lives in one write (the real ``quiesce serve``): a closed session loaded,
prompted, aborted, closed and loaded again, with a prompt behind each load. Each request
answers; the first prompt is the one the abort stops (no tool body runs), the close closes
that life, and the last prompt runs on the life the second load made."""

from __future__ import annotations

import pathlib

import trio

from protocol.messages.events import ToolResultEvent, TurnEnd
from runtime.agent.sessionlog import read_log
from tests.conftest import Marked
from tests.e2e.pipeline import INIT, Pipeline, write_then_end
from tests.kit.rawclient import raw_daemon

ROUNDS = 10


async def test_load_prompt_abort_close_load_prompt_in_one_write(
        marked: Marked, tmp_path: pathlib.Path) -> None:
    with trio.fail_after(100):
        async with raw_daemon(marked.env()) as raw:
            pipe = Pipeline(raw)
            assert "result" in await pipe.call("initialize", INIT)
            for i in range(ROUNDS):
                target = tmp_path / f"ran-{i}.txt"
                made = await pipe.call(*pipe.scripted_session(
                    str(tmp_path), write_then_end(str(target)) * 2))
                sid = made["result"]["sessionId"]
                assert "result" in await pipe.call("session.close", {"sessionId": sid})
                on = {"sessionId": sid}
                answers = await pipe.wait(await pipe.write(
                    ("session.load", on),
                    ("agent.prompt", {**on, "text": "one"}),
                    ("agent.abort", on),
                    ("session.close", on),
                    ("session.load", on),
                    ("agent.prompt", {**on, "text": "two"})))
                assert all("result" in a for a in answers), (i, answers)
                _, one, abort, _, _, two = (a["result"] for a in answers)
                assert one["stopReason"] == "cancelled", (i, answers)
                assert abort["outcome"] == "aborted" and abort["turnId"] == one["turnId"]
                assert two["stopReason"] == "end_turn" and two["turnId"] != one["turnId"]
                events = list(read_log(marked.data_dir / "sessions" / f"{sid}.jsonl").events)
                ends = {e.turn_id: e.end.kind for e in events if isinstance(e, TurnEnd)}
                assert ends == {one["turnId"]: "aborted", two["turnId"]: "completed"}, (i, ends)
                codes = [e.code for e in events
                         if isinstance(e, ToolResultEvent) and e.turn_id == one["turnId"]]
                assert set(codes) <= {"ABORTED_BEFORE_DISPATCH"}, (i, codes)
                assert "result" in await pipe.call("session.close", on)
            assert pipe.duplicates == []


async def test_shutdown_written_behind_a_load_and_its_prompt(
        marked: Marked, tmp_path: pathlib.Path) -> None:
    """A closed session loaded, prompted, then shutdown, in one write: every request
    answers once (the load and the prompt before the shutdown are not refused), and the
    daemon exits."""
    with trio.fail_after(120):
        for i in range(5):
            async with raw_daemon(marked.env()) as raw:
                pipe = Pipeline(raw)
                assert "result" in await pipe.call("initialize", INIT)
                made = await pipe.call(*pipe.scripted_session(
                    str(tmp_path), [[{"text": "done"}]]))
                on = {"sessionId": made["result"]["sessionId"]}
                assert "result" in await pipe.call("session.close", on)
                answers = await pipe.wait(await pipe.write(
                    ("session.load", on),
                    ("agent.prompt", {**on, "text": "one"}),
                    ("shutdown", None)))
                assert "result" in answers[0] and "result" in answers[2], (i, answers)
                prompt = answers[1]
                assert "result" in prompt or prompt["error"]["code"] == -32005, (i, answers)
                assert pipe.duplicates == []
