"""``/compact`` through ``quiesce acp`` (the official ACP SDK as the editor): a prompt of
exactly that text compacts the session instead of starting a turn, and ``session/cancel``
stops a compaction like a turn (the history unchanged, the prompt ``cancelled``)."""

from __future__ import annotations

import asyncio
import pathlib

from protocol.messages.events import HistoryCompacted, MaintenanceEnd
from tests.acp.harness import acp_agent, native_log, new_session, run, workspace
from tests.conftest import Marked


def test_compact_then_cancel_a_slow_one(marked: Marked, tmp_path: pathlib.Path) -> None:
    ws = workspace(tmp_path)
    script = [[{"text": "one"}], [{"text": "two"}], [{"text": "SUMMARY"}], [{"text": "three"}],
              [{"text": "half"}, {"sleepMs": 20000}]]

    async def main() -> None:
        async with acp_agent(marked, script, tmp_path) as (conn, editor):
            session = await new_session(conn, editor, ws)
            assert await session.prompt("first") == "end_turn"
            assert await session.prompt("second") == "end_turn"
            assert await session.prompt("/compact") == "end_turn"
            said = [u["content"]["text"] for u in editor.updates()
                    if u["sessionUpdate"] == "agent_message_chunk"]
            assert said[-1].startswith("Compacted the history: 1 turn(s) summarised")
            log = native_log(marked, session.session_id)
            (compacted,) = [e for e in log if isinstance(e, HistoryCompacted)]
            assert compacted.replaced == ("t1",) and compacted.summary == "SUMMARY"
            assert await session.prompt("third") == "end_turn"
            prompt = asyncio.create_task(session.prompt("/compact"))
            await asyncio.sleep(0.5)  # the summary is in its pause
            await conn.cancel(session_id=session.session_id)
            assert await prompt == "cancelled"
            log = native_log(marked, session.session_id)
            assert len([e for e in log if isinstance(e, HistoryCompacted)]) == 1
            end = log[-1]
            assert isinstance(end, MaintenanceEnd) and end.end.kind == "aborted"
    run(main())
