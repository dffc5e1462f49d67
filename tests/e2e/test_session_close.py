"""``session.close``: a session is released only once its turn has settled; its plugin
servers and process trees die with it, and its log stays loadable."""

from __future__ import annotations

import pathlib

import psutil
import pytest
import trio

from protocol.errors import RemoteError
from protocol.messages.client import (
    AgentPromptParams,
    SessionCloseParams,
    SessionListResult,
    SessionLoadParams,
)
from protocol.messages.common import Empty
from protocol.messages.events import ToolProgressEvent, TurnEnd
from protocol.tools import TextContent
from tests.conftest import Marked
from tests.e2e.agent_harness import agent_daemon, call, text
from tests.plugins.support import new_plugin_session
from tests.support import command_line, marked_processes

TREE = "echo up; ( setsid sleep 60 & ) ; ( sleep 60 & ) ; sleep 60"


async def test_close_stops_the_turn_then_releases_the_session(tmp_path: pathlib.Path,
                                                              marked: Marked) -> None:
    script = [[call("b1", "Bash", command=TREE)], [text("never")]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        prompts = []
        async with trio.open_nursery() as nursery:
            async def prompt() -> None:
                prompts.append(await agent.prompt("go"))

            nursery.start_soon(prompt)
            await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent))
            with trio.fail_after(10):
                while len([p for p in marked_processes(marked.mark)
                           if "sleep" in command_line(p)]) < 3:
                    await trio.sleep(0.05)
            with trio.fail_after(20):
                await agent.daemon.request("session.close", SessionCloseParams(agent.session_id))
            # Answered only once settled: the end is on disk and no tool process is left.
            ends = [e for e in agent.log() if isinstance(e, TurnEnd)]
            assert [(e.end.kind, e.end.reason.kind if e.end.reason else None)
                    for e in ends] == [("aborted", "disposed")]
            assert [p for p in marked_processes(marked.mark) if "sleep" in command_line(p)] == []
        assert prompts[0].stop_reason == "cancelled"
        agent.assert_balanced()
        assert agent.results(ends[0].turn_id)["b1"].code == "ABORTED"
        with pytest.raises(RemoteError) as gone:
            await agent.daemon.request("agent.prompt", AgentPromptParams(agent.session_id, "x"))
        assert gone.value.code.name == "NOT_FOUND"
        listed: SessionListResult = await agent.daemon.request("session.list", Empty())
        (info,) = [s for s in listed.sessions if s.session_id == agent.session_id]
        assert not info.loaded and not info.interrupted
        # Its log was released, whole: it loads again in the same daemon, with nothing to
        # repair (the close settled the turn; it was not cut off).
        loaded = await agent.daemon.request("session.load", SessionLoadParams(agent.session_id))
        assert not loaded.recovered and loaded.events == len(agent.log())


async def test_close_of_an_idle_session_stops_its_plugin_servers(tmp_path: pathlib.Path,
                                                                 marked: Marked) -> None:
    script = [[call("e1", "mcp__tools__echo", text="hi")], [text("done")]]
    async with agent_daemon(marked) as agent:
        await new_plugin_session(agent, tmp_path, script)
        with trio.fail_after(30):
            assert (await agent.prompt("echo")).stop_reason == "end_turn"
        (result,) = agent.results(agent.log()[-1].turn_id).values()
        (content,) = result.content
        assert isinstance(content, TextContent)
        server_pid = int(content.text.rsplit(" from ", 1)[1])  # "echo hi from <pid>"
        assert psutil.pid_exists(server_pid)
        with trio.fail_after(20):
            await agent.daemon.request("session.close", SessionCloseParams(agent.session_id))
        with trio.fail_after(5):
            while psutil.pid_exists(server_pid) and \
                    psutil.Process(server_pid).status() != psutil.STATUS_ZOMBIE:
                await trio.sleep(0.02)
        with pytest.raises(RemoteError) as unknown:
            await agent.daemon.request("session.close", SessionCloseParams(agent.session_id))
        assert unknown.value.code.name == "NOT_FOUND"
