"""Agent turns end to end through ``quiesce serve``: completed turns and every stop path.

Every stop goes through ``Agent.stop_and_check``: the answer comes only once the turn's
end is on disk, every call has one result, and no tool process is alive. The stops that
need no process (when idle, keeping or clearing the inbox) run in process on virtual time
(tests/runtime/test_agent.py, tests/runtime/test_agent_stops.py)."""

from __future__ import annotations

import json
import os
import pathlib
import threading
import time

import pytest
import trio
import trio.testing

from protocol.causes import CauseKind, HookCause, ParentCause, UserCause
from protocol.ids import child_turn_id
from protocol.messages.client import (
    AgentAbortResult,
    AgentPromptResult,
    ClientPermissionRequestParams,
)
from protocol.messages.common import Empty
from protocol.messages.events import (
    AssistantDeltaEvent,
    AssistantMessageEvent,
    ToolAbortEvent,
    ToolCallEvent,
    ToolProgressEvent,
    ToolResultEvent,
    ToolStartedEvent,
    TurnEnd,
)
from tests.conftest import Marked
from tests.kit.answers import allow
from tests.kit.daemon import (
    agent_daemon,
    call,
    freeze,
    frozen,
    sleep,
    text,
    thaw,
    wait_unread_input,
)
from tests.support import stuck_grep_file

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
        assert kinds == ["SessionMeta", "TurnStart", "UserMessageEvent", "ModelUsageEvent",
                         "AssistantMessageEvent", "ToolCallEvent", "ToolCallEvent",
                         "ToolResultEvent", "ToolResultEvent", "ModelUsageEvent",
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
                   if not isinstance(e, ToolProgressEvent | AssistantDeltaEvent
                                     | ToolStartedEvent)]
        assert [e.seq for e in durable] == [e.seq for e in agent.log()]
        # Each call's body start is announced after its tool/call, before its result.
        started = [e.call_id for e in agent.events if isinstance(e, ToolStartedEvent)]
        assert sorted(started) == ["c1", "c2"]
        for call_id in started:
            def at(kind: type, call_id: str = call_id) -> int:
                return next(i for i, e in enumerate(agent.events)
                            if isinstance(e, kind) and getattr(e, "call_id", "") == call_id)
            assert at(ToolCallEvent) < at(ToolStartedEvent) < at(ToolResultEvent)
        order = [type(e).__name__ for e in agent.events]
        assert order.index("AssistantDeltaEvent") < order.index("AssistantMessageEvent")


async def test_stop_during_the_stream_keeps_the_interrupted_prefix(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    # c1 is whole before the stop (the provider yields only complete calls), but the stream
    # of its step never finished: it is dropped, never dispatched. c2 never arrives at all.
    script = [[{"reasoning": "thinking"}, text("Hello, "),
               call("c1", "Bash", command="touch streamed"), text("wor"), sleep(60_000),
               call("c2", "Bash", command="touch never"), text("ld")]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        async with trio.open_nursery() as nursery:
            prompts = agent.prompt_soon(nursery, "hi")
            await agent.wait_for(lambda e: isinstance(e, AssistantDeltaEvent) and e.text == "wor")
            aborted = await agent.stop_and_check()
        assert aborted.outcome == "aborted" and aborted.cause == UserCause()
        assert aborted.tool_calls == ()
        assert prompts[0].stop_reason == "cancelled"
        messages = [e for e in agent.log() if isinstance(e, AssistantMessageEvent)]
        assert len(messages) == 1 and messages[0].interrupted
        assert [(b.type, b.text) for b in messages[0].blocks] == [
            ("reasoning", "thinking"), ("text", "Hello, wor")]
        assert not any(isinstance(e, ToolCallEvent) for e in [*agent.log(), *agent.events])
        assert not (tmp_path / "streamed").exists() and not (tmp_path / "never").exists()


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
            aborted = await agent.stop_and_check()
        codes = {c.call_id: c.code for c in aborted.tool_calls}
        assert codes == {"b1": "ABORTED", "w1": "ABORTED_BEFORE_DISPATCH",
                         "r1": "ABORTED_BEFORE_DISPATCH"}
        assert aborted.settled_ms < 5000
        assert not (tmp_path / "x").exists()


async def test_stop_a_stuck_read_only_call(tmp_path: pathlib.Path, marked: Marked) -> None:
    script = [[call("g1", "Grep", **stuck_grep_file(tmp_path))]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "grep")
            await agent.wait_for(lambda e: isinstance(e, ToolCallEvent))
            await trio.sleep(0.2)
            # Its rg is killed by the host just after the runtime stopped waiting.
            aborted = await agent.stop_and_check(processes_gone_within=2.0)
        assert [(c.tool, c.code) for c in aborted.tool_calls] == [("Grep", "ABORTED")]
        assert aborted.settled_ms < 1000


async def test_stop_during_a_permission_prompt(tmp_path: pathlib.Path, marked: Marked) -> None:
    script = [[call("w1", "Write", path="x.txt", content="no")]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script, mode="ask")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "write")
            with trio.fail_after(10):
                while not agent.permission_requests:
                    await agent.changed.wait()
            aborted = await agent.stop_and_check()
        assert [c.code for c in aborted.tool_calls] == ["ABORTED_BEFORE_DISPATCH"]
        with trio.fail_after(5):
            while not agent.withdrawn:
                await trio.sleep(0.01)
        assert agent.withdrawn == [agent.permission_requests[0].request_id]
        assert not (tmp_path / "x.txt").exists()


async def test_permission_answered_runs_the_call(tmp_path: pathlib.Path, marked: Marked) -> None:
    script = [[call("w1", "Write", path="x.txt", content="yes")], [text("ok")]]
    async with agent_daemon(marked, answer=allow) as agent:
        await agent.new_session(tmp_path, script, mode="ask")
        with trio.fail_after(15):
            result = await agent.prompt("write")
        assert result.stop_reason == "end_turn"
        assert (tmp_path / "x.txt").read_text() == "yes"
        assert agent.permission_requests[0].tool == "Write"


async def test_a_stop_before_the_turn_started_stops_it_unasked(tmp_path: pathlib.Path,
                                                               marked: Marked) -> None:
    """Prompt and abort go out in one write, so the daemon starts both handlers in one
    scheduler batch, in an order trio picks at random. Prompt first: the abort lands after
    the prompt was accepted and before its turn started, and must stop the turn before the
    model is asked. Abort first: a no-op, and the turn completes. Repeat until the first."""
    attempts = 16
    script = [[text(f"r{i}")] for i in range(attempts + 1)]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        consumed = 0

        async def prompt(into: list[AgentPromptResult]) -> None:
            into.append(await agent.prompt("one"))

        async def stop(into: list[AgentAbortResult]) -> None:
            into.append(await agent.stop_and_check("hook", reason="policy"))

        for _ in range(attempts):
            prompts: list[AgentPromptResult] = []
            answers: list[AgentAbortResult] = []
            with trio.fail_after(10):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(prompt, prompts)
                    nursery.start_soon(stop, answers)
            (result,), (aborted,) = prompts, answers
            seen = [e for e in agent.events if e.turn_id == result.turn_id]
            said = [b.text for e in agent.log() if isinstance(e, AssistantMessageEvent)
                    and e.turn_id == result.turn_id for b in e.blocks]
            if aborted.outcome == "idle":
                assert result.stop_reason == "end_turn" and said == [f"r{consumed}"]
                consumed += 1
                continue
            assert aborted.turn_id == result.turn_id and result.stop_reason == "cancelled"
            assert aborted.cause == HookCause("policy")
            # The model was never asked: nothing streamed, said or called.
            assert said == [] and not any(
                isinstance(e, AssistantDeltaEvent | AssistantMessageEvent | ToolCallEvent)
                for e in seen)
            break
        else:
            pytest.fail(f"the abort never landed before the turn started in {attempts} tries")
        # The response the stopped turn would have taken is still the next one.
        with trio.fail_after(10):
            result = await agent.prompt("two")
        said = [b.text for e in agent.log() if isinstance(e, AssistantMessageEvent)
                and e.turn_id == result.turn_id for b in e.blocks]
        assert said == [f"r{consumed}"]


async def test_concurrent_aborts_all_answer_with_the_first_cause(tmp_path: pathlib.Path,
                                                                marked: Marked) -> None:
    script = [[call("b1", "Bash", command="echo go; sleep 60")]]
    # No liveness pings: the host is frozen on purpose for a moment.
    async with agent_daemon(marked, extra_args=("--ping-interval", "60")) as agent:
        await agent.new_session(tmp_path, script)
        answers: list[AgentAbortResult] = []

        async def stop(cause: CauseKind, reason: str | None = None) -> None:
            answers.append(await agent.stop_and_check(cause, reason=reason))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent))
            with frozen(agent.host_pid):
                nursery.start_soon(stop, "hook", "first")
                # The runtime sends tools.abort only once the turn's controller holds a
                # cause: when it reaches the frozen host, the first cause is set.
                await wait_unread_input(agent.host_pid, agent.daemon.process.pid)
                for cause in ("operator", "user", "parent"):
                    nursery.start_soon(stop, cause)
                await trio.testing.wait_all_tasks_blocked()  # their requests are sent
                # Requests are served in the order read: once this is answered, every abort
                # above waits for the settlement (which cannot come: the host is frozen).
                await agent.daemon.request("session.list", Empty())
                assert answers == []
        assert len(answers) == 4
        assert {(a.outcome, a.turn_id) for a in answers} == {("aborted", "t1")}
        assert [a.cause for a in answers] == [HookCause("first")] * 4
        again = await agent.stop_and_check()  # repeated after the settlement: a no-op
        assert again.outcome == "idle"


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
            aborted = await agent.stop_and_check()
        assert [(c.tool, c.code) for c in aborted.tool_calls] == [("Task", "ABORTED")]
        ends = {e.turn_id: e for e in agent.log() if isinstance(e, TurnEnd)}
        child = ends[f"{aborted.turn_id}~task1"]
        assert child.end.kind == "aborted" and child.end.reason == ParentCause()
        assert ends[aborted.turn_id or ""].end.reason == UserCause()
        child_results = agent.results(f"{aborted.turn_id}~task1")
        assert child_results["b1"].code == "ABORTED"


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
        # Its body (the subagent) started: announced, as for a host tool's body.
        assert [e.call_id for e in agent.events if isinstance(e, ToolStartedEvent)] == ["task1"]
        agent.assert_balanced()


async def test_a_subagent_prompt_names_its_call_when_the_ids_have_dots(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """A provider's call ids may have dots: the client is still told the turn and call of
    the prompting call's tool/call event (protocol.ids keeps host call ids unambiguous)."""
    script = [
        [call("fn.task1", "Task", prompt="write it")],
        [call("w.1", "Write", path="x.txt", content="yes")],
        [text("written")],
        [text("the child wrote it")],
    ]
    async with agent_daemon(marked, answer=allow) as agent:
        await agent.new_session(tmp_path, script, mode="ask")
        with trio.fail_after(15):
            result = await agent.prompt("go")
        assert result.stop_reason == "end_turn"
        assert (tmp_path / "x.txt").read_text() == "yes"
        [write] = [e for e in agent.log() if isinstance(e, ToolCallEvent) and e.tool == "Write"]
        [asked] = agent.permission_requests
        assert isinstance(asked, ClientPermissionRequestParams)
        assert (asked.turn_id, asked.call_id) == (write.turn_id, "w.1")
        assert write.turn_id == child_turn_id(result.turn_id or "", "fn.task1")
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
            aborted = await agent.stop_and_check()
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
    command = "trap '' TERM; echo stubborn; sleep 60 & trap '' TERM; sleep 60"
    script = [[call("b1", "Bash", command=command)]]
    async with agent_daemon(marked, extra_args=("--process-grace", "0.2")) as agent:
        await agent.new_session(tmp_path, script)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent))
            # The tree may outlive the answer (that is what unconfirmed says), not the
            # host's kill grace.
            aborted = await agent.stop_and_check(processes_gone_within=5.0)
        result = agent.results(aborted.turn_id or "")["b1"]
        assert result.code == "ABORTED" and result.details["unconfirmed"], (result.code, result)
        assert "stubborn" in result.details["output"]
        assert aborted.settled_ms < 1500, aborted.settled_ms


def _freeze_once_writing(workspace: pathlib.Path, pid: int, turn_over: threading.Event) -> bool:
    """SIGSTOP the host the moment a Write body's temporary file appears (the body is then
    between creating it and renaming it over the target); False if the turn ended first.
    In a thread: no event loop latency between seeing the file and freezing."""
    deadline = time.monotonic() + 30
    while not turn_over.is_set() and time.monotonic() < deadline:
        if any(name.endswith(".tmp") for name in os.listdir(workspace)):
            freeze(pid)
            return True
    return False


async def test_stop_a_running_write_awaits_its_atomic_end(tmp_path: pathlib.Path,
                                                         marked: Marked) -> None:
    content = "0123456789abcdef" * (6 * 1024 * 1024 // 16)  # 6 MiB: a write takes a moment
    # A loaded machine may miss a write's window: each attempt is one more turn.
    attempts = 3
    script = [step for n in range(attempts) for step in (
        [call(f"w{n}", "Write", path=f"big{n}.txt", content=content)], [text("written")])]
    script_file = tmp_path / "script.json"
    script_file.write_text(json.dumps(script))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    # A process call would be given up after 0.1 s; a mutating one must be awaited.
    async with agent_daemon(marked, extra_args=("--process-grace", "0.1",
                                                "--ping-interval", "60")) as agent:
        await agent.new_session(workspace, script_file)
        host = agent.host_pid
        answers: list[AgentAbortResult] = []

        async def prompt(turn_over: threading.Event) -> None:
            try:
                await agent.prompt("write")
            finally:
                turn_over.set()

        async def stop() -> None:
            answers.append(await agent.stop_and_check())

        for n in range(attempts):
            target = workspace / f"big{n}.txt"
            async with trio.open_nursery() as nursery:
                turn_over = threading.Event()
                nursery.start_soon(prompt, turn_over)
                if not await trio.to_thread.run_sync(_freeze_once_writing, workspace, host,
                                                     turn_over):
                    continue  # the write came and went between two looks
                try:
                    if target.exists():
                        continue  # it ended between the look and the freeze
                    nursery.start_soon(stop)
                    await wait_unread_input(host, agent.daemon.process.pid)  # tools.abort came
                    await trio.sleep(0.4)  # well past the 0.1 s a process call would be given
                    assert answers == []
                finally:
                    thaw(host)
            break
        else:
            pytest.fail(f"no Write body was caught running in {attempts} tries")
        (aborted,) = answers
        assert [(c.call_id, c.code) for c in aborted.tool_calls] == [(f"w{n}", "ABORTED")]
        assert aborted.settled_ms >= 400
        (abort,) = [e for e in agent.events if isinstance(e, ToolAbortEvent)]
        assert abort.host_state == "running" and abort.body_invoked  # the stop met the body
        result = agent.results(aborted.turn_id or "")[f"w{n}"]
        # The host's own account, not an abandoned call's: the write completed, atomically.
        assert "abandoned" not in result.details, result.details
        assert result.details["completed"] and result.details["bytesWritten"] == len(content)
        assert target.read_text() == content
        assert sorted(p.name for p in workspace.iterdir()) == [
            f"big{i}.txt" for i in range(n + 1)]
