"""What an editor shows and switches, with the official ACP Python SDK as the editor:
Edit and Write carry a ``diff`` content block, the permission modes are ACP session modes
(offered, and switched with ``session/set_mode``), and ``session/load`` starts the MCP
servers the editor sends."""

from __future__ import annotations

import asyncio
import pathlib
import sys
from typing import Any

import pytest
from acp import RequestError, text_block
from acp.schema import McpServerStdio

from tests.conftest import Marked
from tests.kit.acpclient import (
    TIMEOUT,
    Editor,
    acp_agent,
    assert_balanced,
    new_session,
    run,
    select,
    workspace,
)
from tests.plugins.support import SERVER


def _diffs(blocks: Any) -> list[dict[str, Any]]:
    return [b for b in blocks or () if b.get("type") == "diff"]


def test_edit_and_write_carry_a_diff(marked: Marked, tmp_path: pathlib.Path) -> None:
    ws = workspace(tmp_path)
    (ws / "app.py").write_text("x = 1\ny = 2\n")
    script = [[{"toolCall": {"id": "e1", "name": "Edit", "args": {
                   "path": "app.py", "old_string": "y = 2", "new_string": "y = 3"}}}],
              [{"toolCall": {"id": "w1", "name": "Write", "args": {
                   "path": "new.txt", "content": "hello\n"}}}],
              [{"text": "done"}]]

    async def main() -> None:
        editor = Editor(answer=select("allow-once"))
        async with acp_agent(marked, script, tmp_path, editor=editor) as (conn, _):
            session = await new_session(conn, editor, ws)
            assert await session.prompt("change it") == "end_turn"
            # The permission dialog shows the change.
            asked = [r.model_dump(by_alias=True, mode="json")
                     for r in editor.permission_requests]
            (shown,) = _diffs(asked[0]["content"])
            assert (shown["path"], shown["oldText"], shown["newText"]) == (
                str(ws / "app.py"), "y = 2", "y = 3")
            updates = editor.updates()
            starts = [u for u in updates if u["sessionUpdate"] == "tool_call"]
            assert _diffs(starts[0]["content"]) == [{
                "type": "diff", "path": str(ws / "app.py"), "oldText": "y = 2",
                "newText": "y = 3"}]
            assert _diffs(starts[1]["content"]) == [{
                "type": "diff", "path": str(ws / "new.txt"), "oldText": None,
                "newText": "hello\n"}]
            finals = [u for u in updates if u.get("status") == "completed"]
            assert [len(_diffs(f["content"])) for f in finals] == [1, 1]  # kept at the end
        assert (ws / "app.py").read_text() == "x = 1\ny = 3\n"

    run(main())


def test_modes_are_offered_and_switched(marked: Marked, tmp_path: pathlib.Path) -> None:
    ws = workspace(tmp_path)
    script = [[{"toolCall": {"id": "w1", "name": "Write", "args": {
                   "path": "a.txt", "content": "a"}}}],
              [{"text": "written"}]]

    async def main() -> None:
        editor = Editor(answer=select("reject-once"))
        async with acp_agent(marked, script, tmp_path, editor=editor) as (conn, _):
            created = await asyncio.wait_for(conn.new_session(cwd=str(ws), mcp_servers=[]),
                                             TIMEOUT)
            assert created.modes is not None
            assert created.modes.current_mode_id == "ask"
            assert [m.id for m in created.modes.available_modes] == [
                "ask", "accept-edits", "auto"]
            with pytest.raises(RequestError):
                await conn.set_session_mode(session_id=created.session_id, mode_id="yolo")
            await asyncio.wait_for(conn.set_session_mode(
                session_id=created.session_id, mode_id="accept-edits"), TIMEOUT)
            modes = [u for u in editor.updates() if u["sessionUpdate"] == "current_mode_update"]
            assert [m["currentModeId"] for m in modes] == ["accept-edits"]
            answer = await asyncio.wait_for(conn.prompt(
                session_id=created.session_id, prompt=[text_block("write")]), TIMEOUT)
            assert answer.stop_reason == "end_turn"
            # accept-edits: the Write ran without asking (the editor would have rejected it).
            assert editor.permission_requests == []
            results = assert_balanced(marked, created.session_id)
            assert [r.code for r in results.values()] == [None]
        assert (ws / "a.txt").read_text() == "a"

    run(main())


def test_session_load_starts_the_editors_mcp_servers(marked: Marked,
                                                     tmp_path: pathlib.Path) -> None:
    ws = workspace(tmp_path)
    # The session keeps the provider it was created with: the same script for both.
    script = [[{"toolCall": {"id": "e1", "name": "mcp__tools__echo", "args": {"text": "hi"}}}],
              [{"text": "done"}]]

    async def main() -> None:
        async with acp_agent(marked, script, tmp_path,
                             extra=("--permission-mode", "auto")) as (conn, editor):
            session = await new_session(conn, editor, ws)  # no MCP servers
        editor = Editor()
        async with acp_agent(marked, script, tmp_path, editor=editor,
                             extra=("--permission-mode", "auto")) as (conn, _):
            loaded = await asyncio.wait_for(conn.load_session(
                cwd=str(ws), session_id=session.session_id, mcp_servers=[McpServerStdio(
                    name="tools", command=sys.executable, args=[str(SERVER)], env=[])]), 30)
            assert loaded is not None and loaded.modes is not None
            answer = await asyncio.wait_for(conn.prompt(
                session_id=session.session_id, prompt=[text_block("echo")]), 30)
            assert answer.stop_reason == "end_turn"
            results = assert_balanced(marked, session.session_id)
            assert "e1" in results and results["e1"].code is None, results

    run(main())
