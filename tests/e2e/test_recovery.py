"""A runtime killed mid-turn: its host cleans up, and the next load closes the turn honestly."""

from __future__ import annotations

import pathlib

import psutil
import trio

from protocol.messages.client import SessionLoadParams
from protocol.messages.common import Empty
from protocol.messages.events import ToolProgressEvent, ToolResultEvent, TurnEnd
from protocol.transcript import repair_problems
from tests.conftest import Marked
from tests.kit.daemon import agent_daemon, call, kill_under
from tests.support import marked_processes


async def test_load_after_the_runtime_was_killed_mid_turn(tmp_path: pathlib.Path,
                                                          marked: Marked) -> None:
    script = [[call("b1", "Bash", command="echo running; sleep 60 & sleep 60"),
               call("r1", "Read", path="nothing")]]
    async with agent_daemon(marked) as first:
        session_id = await first.new_session(tmp_path, script)
        host_pid = first.host_pid
        await kill_under(first, lambda: first.prompt("go"),  # the runtime dies under it
                         lambda e: isinstance(e, ToolProgressEvent))
        cut = first.log()
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
        assert repair_problems(cut, log) == []  # what the rulebook says, nothing else
        # Loading again repairs nothing more.
        again = await second.daemon.request("session.load", SessionLoadParams(session_id))
        assert not again.recovered and again.events == loaded.events
        listed = await second.daemon.request("session.list", Empty())
        assert [(s.loaded, s.interrupted) for s in listed.sessions] == [(True, False)]
