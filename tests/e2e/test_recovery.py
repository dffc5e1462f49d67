"""A runtime killed mid-turn: its host cleans up, and the next load closes the turn honestly."""

from __future__ import annotations

import pathlib
import signal

import psutil
import pytest
import trio

from protocol.messages.client import SessionLoadParams
from protocol.messages.common import Empty
from protocol.messages.events import ToolProgressEvent, ToolResultEvent, TurnEnd
from runtime.link import ConnectionClosed
from tests.conftest import Marked
from tests.kit.daemon import agent_daemon, call
from tests.support import marked_processes


async def test_load_after_the_runtime_was_killed_mid_turn(tmp_path: pathlib.Path,
                                                          marked: Marked) -> None:
    script = [[call("b1", "Bash", command="echo running; sleep 60 & sleep 60"),
               call("r1", "Read", path="nothing")]]
    async with agent_daemon(marked) as first:
        session_id = await first.new_session(tmp_path, script)
        async with trio.open_nursery() as nursery:
            async def prompt() -> None:
                with pytest.raises(ConnectionClosed):  # the runtime dies under the prompt
                    await first.prompt("go")

            nursery.start_soon(prompt)
            await first.wait_for(lambda e: isinstance(e, ToolProgressEvent))
            host_pid = first.daemon.info.capabilities["host"]["pid"]  # type: ignore[union-attr]
            first.daemon.process.send_signal(signal.SIGKILL)
            with trio.fail_after(10):
                await first.daemon.process.wait()
    # The host saw its runtime's pipe close: it killed the Bash tree and exited.
    with trio.fail_after(10):
        while psutil.pid_exists(host_pid) and \
                psutil.Process(host_pid).status() != psutil.STATUS_ZOMBIE:
            await trio.sleep(0.05)
    assert marked_processes(marked.mark) == []

    async with agent_daemon(marked) as second:
        second.session_id = session_id
        listed = await second.daemon.request("session.list", Empty())
        (info,) = listed.sessions
        assert info.session_id == session_id and info.interrupted and not info.loaded
        loaded = await second.daemon.request("session.load", SessionLoadParams(session_id))
        assert loaded.recovered
        # Every event was replayed before the answer.
        assert [e.seq for e in second.events] == [e.seq for e in second.log()]
        assert loaded.events == len(second.log())
        log = second.log()
        results = [e for e in log if isinstance(e, ToolResultEvent)]
        assert [(r.call_id, r.code) for r in results] == [("b1", "ABORTED")]
        assert results[0].details["recovered"]
        end = log[-1]
        assert isinstance(end, TurnEnd) and end.end.kind == "interrupted"
        second.assert_balanced()
        # Loading again repairs nothing more.
        again = await second.daemon.request("session.load", SessionLoadParams(session_id))
        assert not again.recovered and again.events == loaded.events
        listed = await second.daemon.request("session.list", Empty())
        assert [(s.loaded, s.interrupted) for s in listed.sessions] == [(True, False)]
