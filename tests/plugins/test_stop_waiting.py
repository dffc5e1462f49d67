"""``stop/waiting`` on the stdio link: what a stop waits on, announced by the session as it
changes (no poller), against a plugin call that ignores its cancel; and nothing when a
stop waits on no call. Real daemon, real host, a real MCP server."""

from __future__ import annotations

import pathlib
import time

import pytest
import trio

from protocol.messages.events import (
    DurableEvent,
    StopWaitingEvent,
    ToolAbortEvent,
    ToolResultEvent,
    TurnEnd,
    TurnStart,
)
from protocol.messages.renderer import AgentForceParams, AgentForceResult
from tests.conftest import Marked
from tests.kit.daemon import agent_daemon, call, sleep, text
from tests.kit.waiters import wait_file
from tests.plugins.support import new_plugin_session
from tests.support import alive

pytestmark = pytest.mark.timeout(120)


async def test_stop_waiting_on_stdio_in_order_and_ends_empty(tmp_path: pathlib.Path,
                                                            marked: Marked) -> None:
    script = [[call("e1", "mcp__tools__echo", text="hi")],
              [call("w1", "mcp__tools__wait_stubbornly")], [text("never")]]
    async with agent_daemon(marked, env_extra={"QUIESCE_PLUGIN_QUIET_WINDOW": "0.5"}
                            ) as agent:
        await new_plugin_session(agent, tmp_path, script)
        aborted = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            server_pid = int(await wait_file(tmp_path / "started-stubbornly", within=30))
            # A call ran and settled, another runs: no stop, nothing announced.
            assert not [e for e in agent.events if isinstance(e, StopWaitingEvent)]
            before = time.time()

            async def abort() -> None:
                aborted.append(await agent.stop_and_check(within=30, spare=[server_pid]))

            nursery.start_soon(abort)
            first = await agent.wait_for(
                lambda e: isinstance(e, StopWaitingEvent) and bool(e.calls))
            assert isinstance(first, StopWaitingEvent)
            await trio.sleep(1.0)
            assert aborted == [] and alive(server_pid)  # the stop waits on the plugin
            forced: AgentForceResult = await agent.daemon.request(
                "agent.force", AgentForceParams(agent.session_id))
            assert [(c.call_id, c.forced) for c in forced.calls] == [("w1", True)]
        (stop,) = aborted
        assert stop.outcome == "aborted"
        events = agent.by_session[agent.session_id]
        waits = [(i, e) for i, e in enumerate(events) if isinstance(e, StopWaitingEvent)]
        lists = [[(c.call_id, c.tool, c.tool_class, c.state) for c in e.calls]
                 for _, e in waits]
        tool = "mcp__tools__wait_stubbornly"
        # Reached by the stop (its abort out), the host answered the abort (draining),
        # then forced: empty. Announced once per change, never the same list twice.
        assert lists == [[("w1", tool, "plugin", "aborting")],
                         [("w1", tool, "plugin", "draining")], []], lists
        turn_id = stop.turn_id
        assert all(e.turn_id == turn_id for _, e in waits)
        assert {c.since for _, e in waits for c in e.calls} == {first.calls[0].since}
        assert before <= first.calls[0].since <= time.time()
        # In order with the rest: the abort's answer between the first two, the empty list
        # before the forced call's result and the turn's end.
        index = {type(e).__name__ + getattr(e, "call_id", ""): i for i, e in enumerate(events)}
        assert waits[0][0] < index["ToolAbortEventw1"] < waits[1][0]
        assert waits[2][0] < index["ToolResultEventw1"] < index["TurnEnd"]
        # Announced, never logged: each carries the seq of the last durable event before it.
        for i, event in waits:
            durable = [e for e in events[:i] if isinstance(e, DurableEvent)]
            assert event.seq == durable[-1].seq
        assert not [e for e in agent.log() if e.turn_id == turn_id
                    and not isinstance(e, DurableEvent)]
        result = agent.results(turn_id or "")["w1"]
        assert result.code == "ABORTED" and result.details["forced"] is True
        assert isinstance(events[index["ToolAbortEventw1"]], ToolAbortEvent)
        assert isinstance(events[index["ToolResultEventw1"]], ToolResultEvent)
        assert isinstance(events[index["TurnEnd"]], TurnEnd)


async def test_no_stop_waiting_when_the_stop_waits_on_no_call(tmp_path: pathlib.Path,
                                                               marked: Marked) -> None:
    async with agent_daemon(marked) as agent:
        await agent.new_session(tmp_path, [[sleep(20_000), text("late")]])
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.prompt, "go")
            await agent.wait_for(lambda e: isinstance(e, TurnStart))
            stop = await agent.stop_and_check(within=15)
        assert stop.outcome == "aborted"
        assert any(isinstance(e, TurnEnd) for e in agent.events)
        assert not [e for e in agent.events if isinstance(e, StopWaitingEvent)]
