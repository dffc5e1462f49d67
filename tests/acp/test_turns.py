"""``quiesce acp`` turns, permissions, load and plugins, driven by the official ACP SDK."""

from __future__ import annotations

import asyncio
import pathlib
from typing import Any

from acp import text_block

from protocol.messages.events import TurnEnd
from tests.conftest import Marked
from tests.kit.acpclient import (
    TIMEOUT,
    Editor,
    acp_agent,
    assert_balanced,
    assert_settled_before_answer,
    kinds,
    native_log,
    new_session,
    run,
    select,
    wait_file,
    workspace,
)


def test_prompt_streams_text_thought_and_tool_calls(marked: Marked, tmp_path: pathlib.Path
                                                    ) -> None:
    ws = workspace(tmp_path)
    (ws / "a.txt").write_text("alpha\n")
    script = [
        [{"reasoning": "Look first."}, {"text": "Reading "}, {"text": "a.txt."},
         {"toolCall": {"id": "c1", "name": "Read", "args": {"path": "a.txt"}}}],
        [{"text": "It says alpha."}],
    ]

    async def main() -> None:
        async with acp_agent(marked, script, tmp_path) as (conn, editor):
            session = await new_session(conn, editor, ws)
            assert await session.prompt("what is in a.txt?") == "end_turn"
            updates = assert_settled_before_answer(editor)
            # Each model chunk is its own update, as it streams (no second copy when
            # the step's message is recorded).
            assert kinds(updates) == ["agent_thought_chunk", "agent_message_chunk",
                                      "agent_message_chunk", "tool_call", "tool_call_update",
                                      "tool_call_update", "agent_message_chunk"]
            assert updates[0]["content"] == {"type": "text", "text": "Look first."}
            assert [u["content"]["text"] for u in updates[1:3]] == ["Reading ", "a.txt."]
            call, running, done = updates[3], updates[4], updates[5]
            assert call["kind"] == "read" and call["status"] == "pending"
            assert call["rawInput"] == {"path": "a.txt"}
            assert running == {"sessionUpdate": "tool_call_update",
                               "toolCallId": call["toolCallId"], "status": "in_progress"}
            assert done["toolCallId"] == call["toolCallId"] and done["status"] == "completed"
            assert "alpha" in done["content"][0]["content"]["text"]
            assert updates[6]["content"]["text"] == "It says alpha."
            assert editor.permission_requests == []  # Read never asks
    run(main())


def test_permission_options_map_to_host_decisions(marked: Marked, tmp_path: pathlib.Path
                                                  ) -> None:
    """allow-once lets the Write run; reject-always denies it, and the host then denies
    the tool for the rest of the session without asking again."""
    ws = workspace(tmp_path)
    script = [
        [{"toolCall": {"id": "w1", "name": "Write", "args": {"path": "a.txt",
                                                             "content": "one"}}}],
        [{"toolCall": {"id": "w2", "name": "Write", "args": {"path": "b.txt",
                                                             "content": "two"}}}],
        [{"toolCall": {"id": "w3", "name": "Write", "args": {"path": "c.txt",
                                                             "content": "three"}}}],
        [{"text": "done"}],
    ]
    answers = iter(["allow-once", "reject-always"])

    async def answer(options: Any, tool_call: Any) -> Any:
        assert [(o.option_id, o.kind) for o in options] == [
            ("allow-once", "allow_once"), ("allow-always", "allow_always"),
            ("reject-once", "reject_once"), ("reject-always", "reject_always")]
        return await select(next(answers))(options, tool_call)

    async def main() -> None:
        editor = Editor(answer=answer)
        async with acp_agent(marked, script, tmp_path, editor=editor) as (conn, _):
            session = await new_session(conn, editor, ws)
            assert await session.prompt("write three files") == "end_turn"
            updates = assert_settled_before_answer(editor)
            asked = editor.permission_requests
            assert [t.title for t in asked] == ["Write a.txt", "Write b.txt"]
            assert asked[0].kind == "edit"
            # Each prompt names the call the editor was shown (the native prompt names it
            # by its tool/call's turnId and callId).
            shown = [u["toolCallId"] for u in updates if u["sessionUpdate"] == "tool_call"]
            assert [t.tool_call_id for t in asked] == shown[:2]
            final = {u["toolCallId"]: u for u in updates if u["sessionUpdate"] ==
                     "tool_call_update"}
            statuses = [u["status"] for u in final.values()]
            assert statuses == ["completed", "failed", "failed"]
            assert [u["rawOutput"].get("code") for u in final.values()][1:] == [
                "TOOL_DENIED", "TOOL_DENIED"]
        assert (ws / "a.txt").read_text() == "one"
        assert not (ws / "b.txt").exists() and not (ws / "c.txt").exists()
    run(main())


def test_session_load_replays_history_before_answering(marked: Marked,
                                                       tmp_path: pathlib.Path) -> None:
    ws = workspace(tmp_path)
    (ws / "a.txt").write_text("alpha\n")
    script = [[{"reasoning": "Hm."}, {"text": "Reading."},
               {"toolCall": {"id": "c1", "name": "Read", "args": {"path": "a.txt"}}}],
              [{"text": "Alpha."}]]

    async def first() -> str:
        async with acp_agent(marked, script, tmp_path) as (conn, editor):
            session = await new_session(conn, editor, ws)
            assert await session.prompt("read a.txt") == "end_turn"
            return session.session_id

    async def second(session_id: str) -> None:
        async with acp_agent(marked, script, tmp_path) as (conn, editor):
            await asyncio.wait_for(conn.load_session(cwd=str(ws), session_id=session_id,
                                                     mcp_servers=[]), TIMEOUT)
            answer = editor.index_of_answer("session/load")
            replayed = editor.updates(answer)
            assert kinds(replayed) == ["user_message_chunk", "agent_thought_chunk",
                                       "agent_message_chunk", "tool_call", "tool_call_update",
                                       "agent_message_chunk"]
            assert replayed[0]["content"]["text"] == "read a.txt"
            assert replayed[4]["status"] == "completed"
            assert editor.updates() == replayed
            # The loaded session takes prompts (its script starts again).
            stop = await asyncio.wait_for(conn.prompt(session_id=session_id,
                                                      prompt=[text_block("again")]), TIMEOUT)
            assert stop.stop_reason == "end_turn"

    session_id = run(first())
    run(second(session_id))
    ends = [e for e in native_log(marked, session_id) if isinstance(e, TurnEnd)]
    assert [e.stop_reason for e in ends] == ["end_turn", "end_turn"]


def test_session_new_refuses_what_it_cannot_honour(marked: Marked, tmp_path: pathlib.Path
                                                   ) -> None:
    """A relative cwd and an http MCP server (not declared in mcpCapabilities) are
    invalid params; the agent keeps serving."""
    from acp import RequestError
    from acp.schema import HttpMcpServer

    async def main() -> None:
        async with acp_agent(marked, [], tmp_path) as (conn, editor):
            for kwargs in ({"cwd": "relative/dir", "mcp_servers": []},
                           {"cwd": str(workspace(tmp_path)), "mcp_servers": [
                               HttpMcpServer(type="http", name="web", url="http://x",
                                             headers=[])]}):
                try:
                    await asyncio.wait_for(conn.new_session(**kwargs), TIMEOUT)
                except RequestError as exc:
                    assert exc.code == -32602
                else:
                    raise AssertionError(f"accepted {kwargs}")
            assert (await new_session(conn, editor, workspace(tmp_path))).session_id
    run(main())


def test_bad_requests_get_the_json_rpc_error_they_deserve(marked: Marked,
                                                          tmp_path: pathlib.Path) -> None:
    async def main() -> None:
        async with acp_agent(marked, [], tmp_path) as (conn, editor):
            session = await new_session(conn, editor, workspace(tmp_path))
            sid = session.session_id
            await editor.send_raw(
                {"jsonrpc": "2.0", "id": "m", "method": "session/set_model",
                 "params": {"sessionId": sid, "modelId": "x"}},
                {"jsonrpc": "2.0", "id": "u", "method": "session/prompt",
                 "params": {"sessionId": "s-unknown", "prompt": []}},
                {"jsonrpc": "2.0", "id": "i", "method": "session/prompt",
                 "params": {"sessionId": sid, "prompt": [
                     {"type": "image", "mimeType": "image/png", "data": ""}]}},
                {"jsonrpc": "2.0", "id": "v", "method": "session/prompt",
                 "params": {"sessionId": sid}},
                {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": 99}})
            codes = {}
            for request_id in ("m", "u", "i", "v"):
                answer = await asyncio.wait_for(editor.wait_for(
                    lambda d, m, r=request_id: d == "in" and m.get("id") == r), TIMEOUT)
                codes[request_id] = answer["error"]["code"]
            assert codes == {"m": -32601, "u": -32602, "i": -32602, "v": -32602}
            # Still serving; a turn that fails (the script is empty) answers an error with
            # the reason, never a stop reason.
            from acp import RequestError
            try:
                await session.prompt("still serving")
            except RequestError as exc:
                assert exc.code == -32603 and exc.data["turnId"] == "t1", exc
                assert "script" in str(exc).lower(), exc
            else:
                raise AssertionError("a failed turn answered a stop reason")
    run(main())


def test_mcp_servers_of_session_new_are_plugin_tools(marked: Marked, tmp_path: pathlib.Path
                                                     ) -> None:
    """ACP ``mcpServers`` (stdio) become the session's plugin tools, mcp__<server>__<tool>;
    a stop of a plugin call is forwarded to the server and awaited (the server records
    the cancel), and the call ends ABORTED."""
    import sys

    from acp.schema import EnvVariable, McpServerStdio

    from tests.plugins.support import SERVER

    ws = workspace(tmp_path)
    script = [[{"toolCall": {"id": "e1", "name": "mcp__tools__echo", "args": {"text": "hi"}}}],
              [{"toolCall": {"id": "w1", "name": "mcp__tools__wait_politely", "args": {}}}],
              [{"text": "not reached"}]]

    async def main() -> None:
        async with acp_agent(marked, script, tmp_path,
                             extra=("--permission-mode", "auto")) as (conn, editor):
            created = await asyncio.wait_for(conn.new_session(cwd=str(ws), mcp_servers=[
                McpServerStdio(name="tools", command=sys.executable, args=[str(SERVER)],
                               env=[EnvVariable(name="ACP_TEST", value="1")])]), 30)
            session_id = created.session_id
            prompt = asyncio.create_task(asyncio.wait_for(conn.prompt(
                session_id=session_id, prompt=[text_block("go")]), 30))
            await wait_file(ws / "started-politely")
            await conn.cancel(session_id=session_id)
            assert (await prompt).stop_reason == "cancelled"
            await asyncio.sleep(0.2)
            updates = assert_settled_before_answer(editor)
            calls = [u for u in updates if u["sessionUpdate"] == "tool_call"]
            assert [c["title"] for c in calls] == ["mcp__tools__echo",
                                                   "mcp__tools__wait_politely"]
            assert {c["kind"] for c in calls} == {"other"}
            final = [u for u in updates if u.get("status") in ("completed", "failed")]
            assert final[0]["status"] == "completed"
            assert final[0]["content"][0]["content"]["text"].startswith("echo hi from ")
            assert (final[1]["status"], final[1]["rawOutput"]["code"]) == ("failed", "ABORTED")
            results = assert_balanced(marked, session_id)
            assert [r.code for r in results.values()] == [None, "ABORTED"]
        assert (ws / "cancelled-politely").read_text() == "yes"

    run(main())


def test_the_agent_adopts_the_host_it_started_before_its_imports(
        marked: Marked, tmp_path: pathlib.Path) -> None:
    """As ``quiesce serve``: the host is spawned first and imports beside the ACP agent;
    the daemon adopts it (one host child, never a second spawn)."""
    import json

    import psutil

    ws = workspace(tmp_path)
    (ws / "a.txt").write_text("alpha\n")
    script = [[{"toolCall": {"id": "r1", "name": "Read", "args": {"path": "a.txt"}}}],
              [{"text": "done"}]]

    async def main() -> None:
        async with acp_agent(marked, script, tmp_path) as (conn, editor):
            session = await new_session(conn, editor, ws)
            assert await session.prompt("read") == "end_turn"
            children = psutil.Process(editor.process.pid).children()
            assert [c.cmdline()[1:3] for c in children] == [["-m", "host"]]
            host_pid = children[0].pid
        lines = [json.loads(line) for line in
                 (tmp_path / "acp-stderr.log").read_text().splitlines() if line.startswith("{")]
        assert any(line.get("msg") == f"host {host_pid} adopted (started before the "
                   "runtime's imports)" for line in lines)
    run(main())


def test_a_silent_call_is_in_progress_as_soon_as_its_body_starts(
        marked: Marked, tmp_path: pathlib.Path) -> None:
    """``in_progress`` comes when the host starts the body (after the permission), not
    with the first output: a silent ``sleep`` is in progress while it sleeps."""
    ws = workspace(tmp_path)
    script = [[{"toolCall": {"id": "b1", "name": "Bash", "args": {"command": "sleep 3"}}}],
              [{"text": "slept"}]]

    def status_of(status: str) -> Any:
        def match(direction: str, message: dict[str, Any]) -> bool:
            update = message.get("params", {}).get("update", {})
            return (direction == "in" and update.get("sessionUpdate") == "tool_call_update"
                    and update.get("status") == status)
        return match

    async def main() -> None:
        editor = Editor(answer=select("allow-once"))
        async with acp_agent(marked, script, tmp_path, editor=editor) as (conn, _):
            session = await new_session(conn, editor, ws)
            prompt = asyncio.ensure_future(session.prompt("sleep"))
            started = await asyncio.wait_for(editor.wait_for(status_of("in_progress")), 10)
            asked = len(editor.permission_requests)
            assert asked == 1  # after the permission was granted
            assert not prompt.done()
            assert not [u for u in editor.updates() if u.get("status") == "completed"]
            assert started["params"]["update"].get("content") is None  # no output yet
            assert await prompt == "end_turn"
            updates = assert_settled_before_answer(editor)
            statuses = [u.get("status") for u in updates
                        if u["sessionUpdate"] in ("tool_call", "tool_call_update")]
            assert statuses == ["pending", "in_progress", "completed"]
    run(main())


def test_config_file_and_max_steps_options_are_serves(marked: Marked,
                                                      tmp_path: pathlib.Path) -> None:
    """``quiesce acp --config FILE`` and ``--max-steps N`` work as for ``serve``: the file's
    ``max_steps`` applies unless the option overrides it."""
    ws = workspace(tmp_path)
    (ws / "a.txt").write_text("alpha\n")
    read = [{"toolCall": {"id": "c1", "name": "Read", "args": {"path": "a.txt"}}}]
    script = [read, read, [{"text": "done"}]]
    config = tmp_path / "config.toml"
    config.write_text("max_steps = 1\n")

    async def main(extra: tuple[str, ...], expected: str) -> None:
        async with acp_agent(marked, script, tmp_path, extra=extra) as (conn, editor):
            session = await new_session(conn, editor, ws)
            assert await session.prompt("read it") == expected

    run(main(("--config", str(config)), "max_turn_requests"))
    run(main(("--config", str(config), "--max-steps", "5"), "end_turn"))
