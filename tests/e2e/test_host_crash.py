"""A host that dies or hangs under a turn: every call gets a result, nothing survives, a
fresh host serves the next turn."""

from __future__ import annotations

import os
import pathlib
import signal

import psutil
import pytest
import trio

from protocol.messages.events import ToolCallEvent, ToolProgressEvent, TurnEnd
from tests.conftest import Marked
from tests.e2e.agent_harness import Agent, agent_daemon, call, text
from tests.support import command_line, marked_processes

DOUBLE_FORK = "echo up; ( setsid sleep 60 & ) ; ( sleep 60 & ) ; sleep 60"


def host_pid(agent: Agent) -> int:
    assert agent.daemon.info is not None
    return int(agent.daemon.info.capabilities["host"]["pid"])


def tool_processes(mark: str, *exclude: int) -> list[psutil.Process]:
    return [p for p in marked_processes(mark)
            if p.pid not in exclude and "sleep" in command_line(p)]


@pytest.mark.parametrize(("tool", "args", "started"), [
    ("Bash", {"command": DOUBLE_FORK}, "progress"),
    ("Grep", {"pattern": "(a|aa)*c"}, "call"),
    ("Write", {"path": "w.txt", "content": "x"}, "permission"),
])
async def test_host_killed_mid_call(tmp_path: pathlib.Path, marked: Marked, tool: str,
                                    args: dict[str, object], started: str) -> None:
    (tmp_path / "big.txt").write_text(("a" * 22 + "\n") * 40000)
    script = [[call("c1", tool, **args)], [text("second turn works")]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script, mode="ask" if tool == "Write" else "auto")
        first_host = host_pid(agent)
        prompts = []
        async with trio.open_nursery() as nursery:
            async def prompt() -> None:
                prompts.append(await agent.prompt("go"))

            nursery.start_soon(prompt)
            if started == "progress":
                await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent))
                with trio.fail_after(10):
                    while len(tool_processes(marked.mark)) < 3:
                        await trio.sleep(0.05)
            elif started == "call":
                await agent.wait_for(lambda e: isinstance(e, ToolCallEvent))
                await trio.sleep(0.3)
            else:
                with trio.fail_after(10):
                    while not agent.permission_requests:
                        await agent.changed.wait()
            os.kill(first_host, signal.SIGKILL)
        (result,) = prompts
        assert result.stop_reason == "error"
        results = agent.results(result.turn_id or "")
        assert results["c1"].code == "HOST_CRASHED"
        end = agent.turn_end_on_disk(result.turn_id or "")
        assert end is not None and end.end.kind == "error"
        agent.assert_balanced()
        with trio.fail_after(10):
            while tool_processes(marked.mark):
                await trio.sleep(0.05)
        # The next turn gets a fresh host.
        with trio.fail_after(20):
            second = await agent.prompt("again")
        assert second.stop_reason == "end_turn"
        assert not (tmp_path / "w.txt").exists()


async def test_hung_host_is_detected_killed_and_replaced(tmp_path: pathlib.Path,
                                                         marked: Marked) -> None:
    script = [[call("b1", "Bash", command="echo up; sleep 60")], [text("fine")]]
    args = ("--ping-interval", "0.2", "--liveness-timeout", "0.6")
    async with agent_daemon(marked, extra_args=args) as agent:
        await agent.new_session(tmp_path, script)
        pid = host_pid(agent)
        prompts = []
        async with trio.open_nursery() as nursery:
            async def prompt() -> None:
                prompts.append(await agent.prompt("go"))

            nursery.start_soon(prompt)
            await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent))
            os.kill(pid, signal.SIGSTOP)
            # A renderer's Stop during the hang must still get its answer.
            with trio.fail_after(15):
                aborted = await agent.abort()
        assert aborted.turn_id == prompts[0].turn_id
        assert prompts[0].stop_reason in {"error", "cancelled"}
        results = agent.results(prompts[0].turn_id or "")
        assert results["b1"].code == "HOST_CRASHED"
        assert not psutil.pid_exists(pid) or \
            psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        agent.assert_balanced()
        assert any(isinstance(e, TurnEnd) for e in agent.log())
        with trio.fail_after(20):
            second = await agent.prompt("again")
        assert second.stop_reason == "end_turn"
