"""Agent turns end to end through ``quiesce serve``: completed turns and every stop path."""

from __future__ import annotations

import pathlib

import trio
import trio.lowlevel

from protocol.messages.events import (
    AssistantDeltaEvent,
    AssistantMessageEvent,
    ToolCallEvent,
    ToolProgressEvent,
    TurnEnd,
    TurnStart,
)
from protocol.messages.host import PermissionRequestParams, PermissionRequestResult
from tests.conftest import Marked
from tests.e2e.agent_harness import agent_daemon, call, sleep, text

TREE = ("echo tree-started; sleep 60 & setsid sleep 60 & ( sleep 60 & ) ; "
        "nohup sleep 60 >/dev/null 2>&1 & sleep 60")


async def test_a_completed_turn_with_tools(tmp_path: pathlib.Path, marked: Marked) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    script = [
        [text("reading"), call("c1", "Read", path="a.txt"), call("c2", "Glob", pattern="*")],
        [text("done")],
    ]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        with trio.fail_after(20):
            result = await agent.prompt("read a.txt")
        assert result.stop_reason == "end_turn"
        kinds = [type(e).__name__ for e in agent.log()]
        assert kinds == ["SessionMeta", "TurnStart", "UserMessageEvent", "AssistantMessageEvent",
                         "ToolCallEvent", "ToolCallEvent", "ToolResultEvent", "ToolResultEvent",
                         "AssistantMessageEvent", "TurnEnd"]
        results = agent.results(result.turn_id or "")
        assert "hello" in str(results["c1"].content) and results["c2"].code is None
        agent.assert_balanced()
        # Announced events are the durable ones, in order, plus the stream's deltas (each
        # announced before the message that records it; never logged).
        deltas = [e for e in agent.events if isinstance(e, AssistantDeltaEvent)]
        assert [(d.step, d.type, d.text) for d in deltas] == [(0, "text", "reading"),
                                                              (1, "text", "done")]
        durable = [e for e in agent.events
                   if not isinstance(e, ToolProgressEvent | AssistantDeltaEvent)]
        assert [e.seq for e in durable] == [e.seq for e in agent.log()]
        order = [type(e).__name__ for e in agent.events]
        assert order.index("AssistantDeltaEvent") < order.index("AssistantMessageEvent")


async def test_stop_during_the_stream_keeps_the_interrupted_prefix(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    script = [[{"reasoning": "thinking"}, text("Hello, "), text("wor"), sleep(60_000),
               call("c1", "Bash", command="touch never"), text("ld")]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        async with trio.open_nursery() as nursery:
            prompts = []

            async def prompt() -> None:
                prompts.append(await agent.prompt("hi"))

            nursery.start_soon(prompt)
            await agent.wait_for(lambda e: isinstance(e, TurnStart))
            await trio.sleep(0.3)
            with trio.fail_after(10):
                aborted = await agent.abort()
            turn_end = agent.turn_end_on_disk(aborted.turn_id or "")
            assert turn_end is not None, "agent.abort answered before turn/end was on disk"
        assert aborted.outcome == "aborted" and aborted.cause is not None
        assert aborted.cause.kind == "user" and aborted.tool_calls == ()
        assert prompts[0].stop_reason == "cancelled"
        assert turn_end.end.kind == "aborted" and turn_end.end.reason is not None
        messages = [e for e in agent.log() if isinstance(e, AssistantMessageEvent)]
        assert len(messages) == 1 and messages[0].interrupted
        assert [(b.type, b.text) for b in messages[0].blocks] == [
            ("reasoning", "thinking"), ("text", "Hello, wor")]
        assert not any(isinstance(e, ToolCallEvent) for e in agent.log())
        assert not (tmp_path / "never").exists()


async def test_stop_a_process_tree_and_undispatched_siblings(tmp_path: pathlib.Path,
                                                             marked: Marked) -> None:
    script = [[call("b1", "Bash", command=TREE), call("w1", "Write", path="x", content="1"),
               call("r1", "Read", path="x")]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent)
                                 and "tree-started" in e.text)
            with trio.fail_after(15):
                aborted = await agent.abort()
            assert agent.turn_end_on_disk(aborted.turn_id or "") is not None
        codes = {c.call_id: c.code for c in aborted.tool_calls}
        assert codes == {"b1": "ABORTED", "w1": "ABORTED_BEFORE_DISPATCH",
                         "r1": "ABORTED_BEFORE_DISPATCH"}
        assert aborted.settled_ms < 5000
        agent.assert_balanced()
        assert not (tmp_path / "x").exists()


async def test_stop_a_stuck_read_only_call(tmp_path: pathlib.Path, marked: Marked) -> None:
    (tmp_path / "big.txt").write_text(("a" * 22 + "\n") * 40000)
    script = [[call("g1", "Grep", pattern="(a|aa)*c")]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "grep")
            await agent.wait_for(lambda e: isinstance(e, ToolCallEvent))
            await trio.sleep(0.2)
            with trio.fail_after(10):
                aborted = await agent.abort()
        assert [(c.tool, c.code) for c in aborted.tool_calls] == [("Grep", "ABORTED")]
        assert aborted.settled_ms < 1000
        agent.assert_balanced()


async def test_stop_during_a_permission_prompt(tmp_path: pathlib.Path, marked: Marked) -> None:
    script = [[call("w1", "Write", path="x.txt", content="no")]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script, mode="ask")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "write")
            with trio.fail_after(10):
                while not agent.permission_requests:
                    await agent.changed.wait()
            aborted = await agent.abort()
        assert [c.code for c in aborted.tool_calls] == ["ABORTED_BEFORE_DISPATCH"]
        with trio.fail_after(5):
            while not agent.withdrawn:
                await trio.sleep(0.01)
        assert agent.withdrawn == [agent.permission_requests[0].request_id]
        assert not (tmp_path / "x.txt").exists()
        agent.assert_balanced()


async def test_permission_answered_runs_the_call(tmp_path: pathlib.Path, marked: Marked) -> None:
    async def allow(params: PermissionRequestParams) -> PermissionRequestResult:
        return PermissionRequestResult("allow-once")

    script = [[call("w1", "Write", path="x.txt", content="yes")], [text("ok")]]
    async with agent_daemon(marked, answer=allow) as agent:
        await agent.new_session(tmp_path, script, mode="ask")
        with trio.fail_after(15):
            result = await agent.prompt("write")
        assert result.stop_reason == "end_turn"
        assert (tmp_path / "x.txt").read_text() == "yes"
        assert agent.permission_requests[0].tool == "Write"


async def test_stop_when_idle_is_a_no_op_that_arms_nothing(tmp_path: pathlib.Path,
                                                           marked: Marked) -> None:
    script = [[text("first")]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        idle = await agent.abort()
        assert idle.outcome == "idle" and idle.turn_id is None and idle.cause is None
        with trio.fail_after(10):
            result = await agent.prompt("one")
        assert result.stop_reason == "end_turn"


async def test_stop_racing_the_prompt_is_consistent(tmp_path: pathlib.Path,
                                                   marked: Marked) -> None:
    """Prompt and abort sent back to back: whichever the daemon takes first, the answers agree
    with the log (the in-process tests pin the 'accepted but not started' order)."""
    script = [[text("first")]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        prompts = []
        async with trio.open_nursery() as nursery:
            async def prompt() -> None:
                prompts.append(await agent.prompt("one"))

            nursery.start_soon(prompt)
            await trio.lowlevel.checkpoint()
            aborted = await agent.abort("hook", reason="policy")
        (result,) = prompts
        turn_end = agent.turn_end_on_disk(result.turn_id or "")
        assert turn_end is not None
        if aborted.outcome == "aborted":
            assert result.stop_reason == "cancelled" and turn_end.end.kind == "aborted"
            assert aborted.cause is not None and aborted.cause.reason == "policy"
        else:
            assert result.stop_reason == "end_turn" and turn_end.end.kind == "completed"


async def test_repeated_and_concurrent_aborts_join_one_settlement(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    script = [[call("b1", "Bash", command="echo go; sleep 60")]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        answers = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent))

            async def abort(cause: str) -> None:
                answers.append(await agent.abort(cause))

            with trio.fail_after(15):
                async with trio.open_nursery() as aborts:
                    for cause in ("user", "operator", "user", "parent"):
                        aborts.start_soon(abort, cause)
        turn_ids = {a.turn_id for a in answers if a.outcome == "aborted"}
        assert len(turn_ids) == 1 and len(answers) == 4
        causes = {a.cause.kind for a in answers if a.cause is not None}
        assert len(causes) == 1  # the first cause wins for everyone
        again = await agent.abort()
        assert again.outcome == "idle"


async def test_keep_inbox_both_ways(tmp_path: pathlib.Path, marked: Marked) -> None:
    script = [[text("a"), sleep(60_000)], [text("b")], [text("c"), sleep(60_000)]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        results: dict[str, object] = {}
        async with trio.open_nursery() as nursery:
            async def prompt(name: str) -> None:
                results[name] = await agent.prompt(name)

            nursery.start_soon(prompt, "p1")
            await agent.wait_for(lambda e: isinstance(e, AssistantMessageEvent) or (
                isinstance(e, TurnStart)))
            nursery.start_soon(prompt, "p2")
            await trio.sleep(0.2)
            kept = await agent.abort(keep_inbox=True)
            assert kept.outcome == "aborted"
            # p2 survived the stop and runs as the next turn.
            with trio.fail_after(10):
                while "p2" not in results:
                    await trio.sleep(0.01)
            assert results["p2"].stop_reason == "end_turn"  # type: ignore[attr-defined]
            nursery.start_soon(prompt, "p3")
            await agent.wait_for(lambda e: isinstance(e, TurnStart) and e.turn_id == "t3")
            nursery.start_soon(prompt, "p4")
            await trio.sleep(0.2)
            await agent.abort()
        assert results["p3"].stop_reason == "cancelled"  # type: ignore[attr-defined]
        p4 = results["p4"]
        assert p4.stop_reason == "cancelled" and p4.turn_id is None  # type: ignore[attr-defined]
        turn_ends = [e for e in agent.log() if isinstance(e, TurnEnd)]
        assert [e.turn_id for e in turn_ends] == ["t1", "t2", "t3"]


async def test_a_parent_stop_stops_the_subagent(tmp_path: pathlib.Path, marked: Marked) -> None:
    script = [
        [text("delegating"), call("task1", "Task", prompt="run the long job")],
        [call("b1", "Bash", command="echo child-running; sleep 60 & sleep 60")],
    ]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent)
                                 and "child-running" in e.text)
            with trio.fail_after(15):
                aborted = await agent.abort()
        assert [(c.tool, c.code) for c in aborted.tool_calls] == [("Task", "ABORTED")]
        ends = {e.turn_id: e for e in agent.log() if isinstance(e, TurnEnd)}
        child = ends[f"{aborted.turn_id}~task1"]
        assert child.end.kind == "aborted" and child.end.reason is not None
        assert child.end.reason.kind == "parent"
        assert ends[aborted.turn_id or ""].end.reason.kind == "user"  # type: ignore[union-attr]
        child_results = agent.results(f"{aborted.turn_id}~task1")
        assert child_results["b1"].code == "ABORTED"
        agent.assert_balanced()


async def test_a_subagent_answer_becomes_the_task_result(tmp_path: pathlib.Path,
                                                         marked: Marked) -> None:
    script = [
        [call("task1", "Task", prompt="say hi")],
        [text("hi from the child")],
        [text("the child said hi")],
    ]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        with trio.fail_after(15):
            result = await agent.prompt("go")
        assert result.stop_reason == "end_turn"
        task = agent.results(result.turn_id or "")["task1"]
        assert task.code is None and "hi from the child" in str(task.content)
        agent.assert_balanced()


async def test_stop_image_generation_returns_what_was_written(tmp_path: pathlib.Path,
                                                             marked: Marked) -> None:
    script = [[call("img1", "GenerateImages", prompt="a red square", count=8)]]
    async with agent_daemon(marked, env_extra={"QUIESCE_IMAGE_DELAY_MS": "300"}) as agent:
        await agent.new_session(tmp_path, script)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "draw")
            # Two images reported as progress: the backend is mid-way.
            with trio.fail_after(20):
                while sum(isinstance(e, ToolProgressEvent) for e in agent.events) < 2:
                    await agent.changed.wait()
            aborted = await agent.abort()
        assert [c.code for c in aborted.tool_calls] == ["ABORTED"]
        result = agent.results(aborted.turn_id or "")["img1"]
        written = result.details["written"]
        assert 2 <= len(written) < 8
        for path in written:
            assert (tmp_path / path).is_file()
        images = list((tmp_path / "images").glob("*.png"))
        assert len(images) == len(written)  # nothing half-written left behind


async def test_process_grace_exceeded_is_reported_unconfirmed(tmp_path: pathlib.Path,
                                                              marked: Marked) -> None:
    # A TERM-ignoring tree takes the host's kill grace (2 s) to die; the runtime waits
    # only 0.2 s for the host's result, then reports what it has, marked unconfirmed.
    command = "echo stubborn; trap '' TERM; sleep 60 & trap '' TERM; sleep 60"
    script = [[call("b1", "Bash", command=command)]]
    async with agent_daemon(marked, extra_args=("--process-grace", "0.2")) as agent:
        await agent.new_session(tmp_path, script)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent))
            started = trio.current_time()
            aborted = await agent.abort()
            elapsed = trio.current_time() - started
        result = agent.results(aborted.turn_id or "")["b1"]
        assert result.code == "ABORTED" and result.details["unconfirmed"]
        assert "stubborn" in result.details["output"]
        assert elapsed < 1.5, elapsed
        agent.assert_balanced()


async def test_stop_a_running_write_is_atomic_and_honest(tmp_path: pathlib.Path,
                                                        marked: Marked) -> None:
    content = "0123456789abcdef" * (4 * 1024 * 1024 // 16)  # 4 MiB: takes a moment to write
    # The next step streams slowly, so the turn is still running when the stop arrives
    # even on a machine fast enough to finish the write first.
    script = [[call("w1", "Write", path="big.txt", content=content)],
              [text("written"), sleep(60_000)]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "write")
            await agent.wait_for(lambda e: isinstance(e, ToolCallEvent))
            aborted = await agent.abort()
        assert aborted.outcome == "aborted"
        (summary,) = aborted.tool_calls
        result = agent.results(aborted.turn_id or "")["w1"]
        target = tmp_path / "big.txt"
        # Mutating calls are awaited, never abandoned: the file is whole or absent, and
        # the code says which (none: it finished before the stop reached it).
        if summary.code is None:
            assert target.read_text() == content and not result.is_error
        elif summary.code == "ABORTED":
            assert target.read_text() == content
            assert result.details.get("completed") or result.details.get("bytesWritten")
        else:
            assert summary.code == "ABORTED_BEFORE_DISPATCH" and not target.exists()
        assert [p.name for p in tmp_path.iterdir() if p.name != "big.txt"] == []
        agent.assert_balanced()
