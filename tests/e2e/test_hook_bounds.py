"""Issue 31 items 8 and 12: hooks that must not freeze the runtime or allow by ambiguity."""

from __future__ import annotations

import pathlib

import trio

from protocol.messages.common import Empty
from tests.conftest import Marked
from tests.e2e.hookkit import decisions, hook_table, hooked, script
from tests.kit.daemon import call, text

DONE = [text("done")]


async def test_a_duplicated_key_in_a_hook_answer_fails_closed(tmp_path: pathlib.Path,
                                                              marked: Marked) -> None:
    """``{"decision":"deny","decision":"allow"}`` used to allow (the last key won)."""
    ambiguous = script(tmp_path, "ambiguous",
                       'echo \'{"decision":"deny","decision":"allow"}\'\n')
    ws = tmp_path / "ws"
    async with hooked(marked, tmp_path, hook_table("pre_tool_use", "Write", ambiguous)) as agent:
        await agent.new_session(ws, [[call("w1", "Write", path="x.txt", content="no")], DONE])
        with trio.fail_after(15):
            await agent.prompt("write")
        result = agent.results("t1")["w1"]
        assert result.code == "TOOL_DENIED", result
        assert not (ws / "x.txt").exists()
        (decision,) = decisions(agent)
        assert decision.decision == "deny" and decision.failed
        assert "'decision' more than once" in decision.reason


async def test_a_backtracking_matcher_leaves_the_runtime_responsive(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """``(.*.*.*)*Z`` against a 14-character tool name pinned the runtime's CPU for
    minutes: no other request was answered. Now matched in linear time."""
    ran = tmp_path / "hook-ran"
    record = script(tmp_path, "record", f'touch "{ran}"\n')
    ws = tmp_path / "ws"
    toml = hook_table("pre_tool_use", "(.*.*.*)*Z", record)
    async with hooked(marked, tmp_path, toml) as agent:
        await agent.new_session(ws, [[call("g1", "GenerateImages", prompt="a cat")], DONE])
        async with trio.open_nursery() as nursery:
            answers = agent.prompt_soon(nursery, "draw")
            await trio.sleep(0.5)
            with trio.fail_after(5):  # the loop is free: another request is answered
                await agent.daemon.request("session.list", Empty())
            with trio.fail_after(20):
                while not answers:
                    await trio.sleep(0.05)
        assert answers[0].stop_reason == "end_turn"
        assert not ran.exists()  # the matcher does not match: the hook never ran
        assert "g1" in agent.results("t1")
