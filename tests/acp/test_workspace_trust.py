"""Workspace trust through ACP, driven by the official SDK (issue 26, item 2): the editor
is asked with ``session/request_permission`` while ``session/new`` opens the session,
before any server of the workspace's ``.quiesce/mcp.json`` starts; the command is shown in
full; nothing runs until trusted; a changed file is asked about again."""

from __future__ import annotations

import asyncio
import pathlib

from acp.schema import (
    AllowedOutcome,
    PermissionOption,
    RequestPermissionResponse,
    ToolCallUpdate,
)

from tests.conftest import Marked
from tests.e2e.test_workspace_trust import hostile
from tests.kit.acpclient import TIMEOUT, Editor, acp_agent, run


def test_editor_is_asked_before_workspace_servers_start(marked: Marked,
                                                        tmp_path: pathlib.Path) -> None:
    workspace = tmp_path / "cloned"
    workspace.mkdir()
    evidence = tmp_path / "FILE"
    args = hostile(workspace, evidence)
    choices = ["not-now", "trust", "never"]
    offered: list[list[str]] = []

    async def answer(options: list[PermissionOption],
                     tool_call: ToolCallUpdate) -> RequestPermissionResponse:
        offered.append([o.option_id for o in options])
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected",
                                                                option_id=choices.pop(0)))

    editor = Editor(answer=answer)

    async def main() -> None:
        async with acp_agent(marked, [[{"text": "hi"}]], tmp_path, editor=editor) as (
                conn, _):
            async def new() -> None:
                await asyncio.wait_for(conn.new_session(cwd=str(workspace), mcp_servers=[]),
                                       TIMEOUT)

            await new()  # not now
            await asyncio.sleep(0.5)
            assert not evidence.exists(), "a server of an untrusted workspace ran"
            (asked,) = editor.permission_requests
            shown = asked.content[0].content.text  # type: ignore[index, union-attr]
            assert f"sh -c '{args[1]}'" in shown and str(workspace) in shown, shown
            assert offered[0] == ["trust", "not-now", "never"]
            await new()  # trust: it runs
            assert evidence.read_text().splitlines() == ["ran"]
            evidence.unlink()
            await new()  # trusted content: not asked again
            assert len(editor.permission_requests) == 2
            assert evidence.read_text().splitlines() == ["ran"]
            evidence.unlink()
            hostile(workspace, evidence, extra="; true")
            await new()  # changed: asked again; never
            assert len(editor.permission_requests) == 3
            await asyncio.sleep(0.5)
            assert not evidence.exists()

    run(main())


def test_editor_is_shown_the_environment_a_declaration_sets(marked: Marked,
                                                            tmp_path: pathlib.Path) -> None:
    """A declared ``env`` changes what runs (``LD_PRELOAD``, ``PATH``): the editor's
    question shows it before the command."""
    evidence = tmp_path / "FILE"
    hostile(tmp_path, evidence, env={"LD_PRELOAD": "./payload.so"})

    async def answer(options: list[PermissionOption],
                     tool_call: ToolCallUpdate) -> RequestPermissionResponse:
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected",
                                                                option_id="not-now"))

    editor = Editor(answer=answer)

    async def main() -> None:
        async with acp_agent(marked, [[{"text": "hi"}]], tmp_path, editor=editor) as (
                conn, _):
            await asyncio.wait_for(conn.new_session(cwd=str(tmp_path), mcp_servers=[]),
                                   TIMEOUT)
            (asked,) = editor.permission_requests
            shown = asked.content[0].content.text  # type: ignore[index, union-attr]
            assert "evil: LD_PRELOAD=./payload.so sh -c " in shown, shown
            assert "LD_PRELOAD=./payload.so sh -c" in (asked.title or ""), asked.title
            assert not evidence.exists()

    run(main())


def test_session_load_of_a_session_whose_file_appeared_since_asks(
        marked: Marked, tmp_path: pathlib.Path) -> None:
    """A stored session, loaded after the workspace gained a ``.quiesce/mcp.json`` (a
    pull, a checkout): ``session/load`` asks as ``session/new`` does, before it runs."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    evidence = tmp_path / "FILE"
    choices = ["not-now", "trust"]

    async def answer(options: list[PermissionOption],
                     tool_call: ToolCallUpdate) -> RequestPermissionResponse:
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected",
                                                                option_id=choices.pop(0)))

    async def first() -> str:
        async with acp_agent(marked, [[{"text": "hi"}]], tmp_path) as (conn, editor):
            created = await asyncio.wait_for(
                conn.new_session(cwd=str(workspace), mcp_servers=[]), TIMEOUT)
            assert not editor.permission_requests
            return created.session_id

    async def load(session_id: str) -> int:
        editor = Editor(answer=answer)
        async with acp_agent(marked, [[{"text": "hi"}]], tmp_path, editor=editor) as (
                conn, _):
            await asyncio.wait_for(conn.load_session(cwd=str(workspace),
                                                     session_id=session_id,
                                                     mcp_servers=[]), TIMEOUT)
            await asyncio.sleep(0.5)
            return len(editor.permission_requests)

    session_id = run(first())
    hostile(workspace, evidence)
    assert run(load(session_id)) == 1  # not now
    assert not evidence.exists(), "loaded, an untrusted declaration ran"
    assert run(load(session_id)) == 1  # trust
    assert evidence.read_text().splitlines() == ["ran"]
