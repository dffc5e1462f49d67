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
from protocol.messages.events import AssistantDeltaEvent, ToolProgressEvent, TurnEnd
from protocol.tools import TextContent
from tests.conftest import Marked
from tests.e2e.test_ops import find_key, ops
from tests.kit.daemon import agent_daemon, call, text
from tests.kit.waiters import wait_file
from tests.plugins.support import new_plugin_session
from tests.support import alive, command_line, marked_processes

TREE = "echo up; ( setsid sleep 60 & ) ; ( sleep 60 & ) ; sleep 60"


async def test_close_stops_the_turn_then_releases_the_session(tmp_path: pathlib.Path,
                                                              marked: Marked) -> None:
    script = [[call("b1", "Bash", command=TREE)], [text("never")]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        async with trio.open_nursery() as nursery:
            prompts = agent.prompt_soon(nursery, "go")
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
            await agent.check_no_tool_process()
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


async def test_during_a_close_aborts_join_its_stop_and_prompts_are_refused(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    script = [[call("b1", "Bash", command=TREE)], [text("never")]]
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, script)
        aborts = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            await agent.wait_for(lambda e: isinstance(e, ToolProgressEvent))

            async def close() -> None:
                await agent.daemon.request("session.close",
                                           SessionCloseParams(agent.session_id))

            nursery.start_soon(close)
            await agent.wait_for(lambda e: type(e).__name__ == "ToolAbortEvent")
            with pytest.raises(RemoteError) as refused:
                await agent.daemon.request("agent.prompt",
                                           AgentPromptParams(agent.session_id, "more"))
            assert "closing" in refused.value.message
            # An abort of a closing session is not NOT_FOUND: it joins the close's stop
            # and answers only once the turn's end is on disk.
            aborts.append(await agent.stop_and_check())
            assert [e.end.kind for e in agent.log() if isinstance(e, TurnEnd)] == ["aborted"]
        (joined,) = aborts
        assert joined.outcome == "aborted" and joined.cause is not None
        assert joined.cause.kind == "disposed"  # the first cause wins
        agent.assert_balanced()


async def test_a_stuck_call_of_a_closing_session_is_visible_and_forceable(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    # A plugin that keeps reporting progress after the cancel: the close waits for it (it
    # is awaited), operators see the session and force the call, and the close answers.
    script = [[call("w1", "mcp__tools__wait_stubbornly")], [text("never")]]
    async with agent_daemon(marked, extra_args=("--stuck-after", "0.3"),
                            env_extra={"QUIESCE_PLUGIN_QUIET_WINDOW": "0.5"}) as agent:
        await new_plugin_session(agent, tmp_path, script)
        closed = trio.Event()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            server_pid = int(await wait_file(tmp_path / "started-stubbornly"))

            async def close() -> None:
                with trio.fail_after(30):
                    await agent.daemon.request("session.close",
                                               SessionCloseParams(agent.session_id))
                closed.set()

            nursery.start_soon(close)
            await trio.sleep(1.2)
            assert not closed.is_set()  # the plugin call is awaited, so the close is too
            code, show = await ops(marked, "show", agent.session_id)
            assert code == 0, show
            assert find_key(show, "stuck") is True and find_key(show, "class") == "plugin"
            code, forced = await ops(marked, "force", agent.session_id, "w1")
            assert code == 0, forced
        assert closed.is_set()
        (end,) = [e for e in agent.log() if isinstance(e, TurnEnd)]
        assert agent.results(end.turn_id)["w1"].details["forced"] is True
        assert not alive(server_pid)
        agent.assert_balanced()


async def test_a_stop_by_session_close_is_counted_in_ops_stats(tmp_path: pathlib.Path,
                                                               marked: Marked) -> None:
    script = [[text("thinking"), {"sleepMs": 60_000}], [text("two"), {"sleepMs": 60_000}]]
    async with agent_daemon(marked) as agent:
        first = await agent.new_session(tmp_path, script)
        second = await agent.new_session(tmp_path, script)
        async with trio.open_nursery() as nursery:
            for session_id in (first, second):
                nursery.start_soon(agent.daemon.request, "agent.prompt",
                                   AgentPromptParams(session_id, "go"))
            with trio.fail_after(10):  # both turns stream (meta, turn/start, user/message…)
                while any(not any(isinstance(e, AssistantDeltaEvent)
                                  for e in agent.by_session.get(s, [])) for s in (first, second)):
                    await agent.changed.wait()
            with trio.fail_after(15):
                await agent.daemon.request("session.close", SessionCloseParams(first))
            agent.session_id = second
            answer = await agent.abort()
            assert answer.outcome == "aborted"
        code, stats = await ops(marked, "stats")
        assert code == 0
        assert find_key(stats, "stops") == 2  # the close's stop and the abort's
