"""``/compact`` through ``quiesce acp`` (the official ACP SDK as the editor): a prompt of
exactly that text compacts the session instead of starting a turn, and ``session/cancel``
stops a compaction like a turn (the history unchanged, the prompt ``cancelled``)."""

from __future__ import annotations

import asyncio
import pathlib
from dataclasses import dataclass, field
from typing import Any

from acp.schema import AvailableCommandsUpdate

from protocol.messages.events import HistoryCompacted, MaintenanceEnd
from tests.conftest import Marked
from tests.kit.acpclient import (
    TIMEOUT,
    Editor,
    acp_agent,
    native_log,
    new_session,
    run,
    workspace,
)


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


@dataclass
class TypedEditor(Editor):
    """Keeps each update as the SDK parsed it (its own schema's models)."""

    typed: list[Any] = field(default_factory=list)

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.typed.append((session_id, update))


def test_compact_is_advertised_after_the_session_opens(marked: Marked,
                                                      tmp_path: pathlib.Path) -> None:
    ws = workspace(tmp_path)
    editor = TypedEditor()

    async def main() -> None:
        async with acp_agent(marked, [[{"text": "one"}]], tmp_path, editor=editor) as (
                conn, _):
            session = await new_session(conn, editor, ws)
            await asyncio.wait_for(editor.wait_for(
                lambda d, m: d == "in" and m.get("method") == "session/update"
                and m["params"]["update"]["sessionUpdate"] == "available_commands_update"),
                TIMEOUT)
            assert {sid for sid, _ in editor.typed} == {session.session_id}
            (advertised,) = [u for _, u in editor.typed
                             if isinstance(u, AvailableCommandsUpdate)]  # the SDK's model
            assert [(c.name, c.input) for c in advertised.available_commands] == [
                ("compact", None)]
            assert advertised.available_commands[0].description
            # After the answer that opened it: the editor knows the session by then.
            (sent,) = [i for i, (d, m) in enumerate(editor.wire) if d == "in"
                       and m.get("method") == "session/update"]
            assert sent > editor.index_of_answer("session/new")
            # The command it names is the one a prompt runs.
            assert await session.prompt("/compact") == "end_turn"
            said = [u["content"]["text"] for u in editor.updates()
                    if u["sessionUpdate"] == "agent_message_chunk"]
            assert said == ["Nothing to compact yet: the most recent turn is always kept."]
            # A session loaded again is told too.
            editor.typed.clear()
            await asyncio.wait_for(conn.load_session(
                cwd=str(ws), session_id=session.session_id, mcp_servers=[]), TIMEOUT)
            await asyncio.wait_for(editor.wait_for(
                lambda d, m: len([1 for d2, m2 in editor.wire if d2 == "in" and
                                  m2.get("params", {}).get("update", {}).get("sessionUpdate")
                                  == "available_commands_update"]) == 2), TIMEOUT)
            assert editor.index_of_answer("session/load") < max(
                i for i, (d, m) in enumerate(editor.wire) if d == "in"
                and m.get("params", {}).get("update", {}).get("sessionUpdate")
                == "available_commands_update")
    run(main())
