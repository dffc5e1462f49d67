"""Plugin servers of a session: declared per workspace and per session, validated,
persisted across loads and host restarts, and killed with a host or runtime that dies."""

from __future__ import annotations

import json
import os
import pathlib
import signal
import sys

import psutil
import pytest
import trio

from protocol.errors import ErrorCode, RemoteError
from protocol.messages.client import SessionCloseParams, SessionLoadParams
from protocol.messages.common import McpServerConfig
from protocol.messages.events import SessionMeta
from runtime.link import ConnectionClosed
from tests.conftest import Marked
from tests.kit.daemon import agent_daemon, call, text
from tests.kit.waiters import wait_file
from tests.plugins.support import QUIET, SERVER, new_plugin_session, pid_in
from tests.support import alive, command_line, marked_processes


def write_workspace_file(workspace: pathlib.Path, servers: dict[str, object]) -> None:
    (workspace / ".quiesce").mkdir()
    (workspace / ".quiesce" / "mcp.json").write_text(json.dumps({"mcpServers": servers}))


async def test_workspace_servers_and_session_servers_merge_by_name(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    write_workspace_file(tmp_path, {
        "ws": {"command": sys.executable, "args": [str(SERVER)]},
        "tools": {"command": "/nonexistent/replaced-by-the-session"},
        "gone": {"command": "/nonexistent/mcp-server"},
    })
    script = [[call("a", "mcp__ws__echo", text="from the workspace"),
               call("b", "mcp__gone__anything")], [text("done")]]
    # The workspace is trusted up front (the file's servers run only once trusted:
    # tests/e2e/test_workspace_trust.py).
    async with agent_daemon(marked, env_extra=QUIET,
                            extra_args=("--trust-workspace", str(tmp_path))) as agent:
        opened = await new_plugin_session(agent, tmp_path, script)
        statuses = {s.name: (s.tools, s.error) for s in opened.plugin_servers}
        assert statuses["ws"] == (8, None) and statuses["tools"] == (8, None)
        assert statuses["gone"][0] == 0 and "cannot start" in (statuses["gone"][1] or "")
        with trio.fail_after(30):
            answer = await agent.prompt("go")
        results = agent.results(answer.turn_id or "")
        assert results["a"].content[0].text.startswith("echo from the workspace")  # type: ignore[union-attr]
        # Its server never started, so the model was never offered its tools.
        assert results["b"].code == "NOT_FOUND"
        agent.assert_balanced()


BAD_CONFIGURATIONS: list[tuple[str | None, tuple[McpServerConfig, ...], str]] = [
    (None, (McpServerConfig("bad name", "x"),), "must match [A-Za-z0-9_-]+"),
    (None, (McpServerConfig("a", "x"), McpServerConfig("a", "y")), "declared twice"),
    (None, (McpServerConfig("a", " "),), "has no command"),
    (None, (McpServerConfig("a", "x", ("ok", "n\x00ul")),),
     "server 'a': args[1] contains a NUL byte"),
    (None, (McpServerConfig("a", "x", (), {"A=B": "1"}),), "server 'a': env name 'A=B'"),
    (None, (McpServerConfig("a", "x", (), {"": "1"}),), "server 'a': env name ''"),
    (None, (McpServerConfig("a", "x", (), {"A": "1\x002"}),),
     "server 'a': env['A'] contains a NUL byte"),
    (None, (McpServerConfig("a", "x\x00y"),), "server 'a': command contains a NUL byte"),
    ('{"mcpServers": {"a": {"command": "x", "args": ["\\u0000"]}}}', (),
     ".quiesce/mcp.json: server 'a': args[0] contains a NUL byte"),
    ('{"mcpServers": {"a": {"command": "x", "env": {"=": ""}}}}', (),
     ".quiesce/mcp.json: server 'a': env name '='"),
    ("{not json", (), ".quiesce/mcp.json: not a JSON object"),
    ('{"mcpServers": {"a": {"args": []}}}', (), "mcpServers.a"),
    ('{"mcpServers": {"a.b": {"command": "x"}}}', (), "must match"),
    ('{"mcpServers": []}', (), "mcpServers must be an object"),
]


async def test_bad_plugin_configuration_is_invalid_params_and_leaves_no_session(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    async with agent_daemon(marked, env_extra=QUIET) as agent:
        for n, (workspace_file, session_servers, message) in enumerate(BAD_CONFIGURATIONS):
            workspace = tmp_path / f"w{n}"
            workspace.mkdir()
            if workspace_file is not None:
                (workspace / ".quiesce").mkdir()
                (workspace / ".quiesce" / "mcp.json").write_text(workspace_file)
            with pytest.raises(RemoteError) as refused:
                await new_plugin_session(agent, workspace, [], servers=session_servers)
            assert refused.value.code == ErrorCode.INVALID_PARAMS
            assert message in refused.value.message, refused.value.message
        sessions = marked.data_dir / "sessions"
        assert not sessions.exists() or list(sessions.iterdir()) == []


def hung_servers(marked: Marked) -> list[psutil.Process]:
    return [p for p in marked_processes(marked.mark) if "time.sleep(300)" in command_line(p)]


async def test_session_close_of_a_session_still_opening_undoes_it_at_once(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    """session.close naming a session whose session.new waits on a plugin server that
    never answers its handshake: the open is undone at once (the server killed), and
    session.new answers REQUEST_CANCELLED, not a session."""
    hung = McpServerConfig("hung", sys.executable, ("-c", "import time; time.sleep(300)"))
    async with agent_daemon(marked, env_extra=QUIET) as agent:
        async with trio.open_nursery() as nursery:
            outcome: list[BaseException] = []

            async def open_it() -> None:
                try:
                    await new_plugin_session(agent, tmp_path, [], servers=(hung,))
                except RemoteError as exc:
                    outcome.append(exc)

            nursery.start_soon(open_it)
            meta = await agent.wait_for(lambda e: isinstance(e, SessionMeta))
            assert isinstance(meta, SessionMeta)
            with trio.fail_after(10):
                while not hung_servers(marked):
                    await trio.sleep(0.02)
            started = trio.current_time()
            with trio.fail_after(5):
                await agent.daemon.request("session.close", SessionCloseParams(
                    meta.session_id))
        assert trio.current_time() - started < 5  # not the 30 s start timeout
        [refused] = outcome
        assert isinstance(refused, RemoteError)
        assert refused.code == ErrorCode.REQUEST_CANCELLED
        assert hung_servers(marked) == []


async def test_session_servers_survive_a_load(tmp_path: pathlib.Path, marked: Marked) -> None:
    script = [[call("e", "mcp__tools__echo", text="x")], [text("ok")]]
    async with agent_daemon(marked) as first:
        session_id = (await new_plugin_session(first, tmp_path, script)).session_id
        with trio.fail_after(30):
            assert (await first.prompt("one")).stop_reason == "end_turn"
    async with agent_daemon(marked) as second:
        second.session_id = session_id
        with trio.fail_after(30):
            await second.daemon.request("session.load", SessionLoadParams(session_id))
            turn = await second.prompt("two")  # the script starts over with a new provider
        echo = second.results(turn.turn_id or "")["e"]
        assert not echo.is_error and echo.content[0].text.startswith("echo x")  # type: ignore[union-attr]
        second.assert_balanced()


async def test_a_host_killed_under_a_plugin_call(tmp_path: pathlib.Path,
                                                 marked: Marked) -> None:
    script = [[call("w", "mcp__tools__wait_politely")],
              [call("e", "mcp__tools__echo", text="new host")], [text("ok")]]
    async with agent_daemon(marked, env_extra=QUIET) as agent:
        await new_plugin_session(agent, tmp_path, script)
        host = agent.daemon.info.capabilities["host"]["pid"]  # type: ignore[union-attr]
        async with trio.open_nursery() as nursery:
            prompts = agent.prompt_soon(nursery, "go")
            server_pid = int(await wait_file(tmp_path / "started-politely"))
            os.kill(host, signal.SIGKILL)
        assert prompts[0].stop_reason == "error"
        assert agent.results(prompts[0].turn_id or "")["w"].code == "HOST_CRASHED"
        agent.assert_balanced()
        # The runtime kills what the dead host left, the plugin server included.
        with trio.fail_after(10):
            while alive(server_pid):
                await trio.sleep(0.05)
        # A fresh host was told of the session with its servers: the next call starts one.
        with trio.fail_after(30):
            turn = await agent.prompt("again")
        echo = agent.results(turn.turn_id or "")["e"]
        assert not echo.is_error, echo
        assert pid_in(echo.content[0].text) != server_pid  # type: ignore[union-attr]
        agent.assert_balanced()


async def test_a_runtime_killed_under_a_plugin_call(tmp_path: pathlib.Path,
                                                    marked: Marked) -> None:
    script = [[call("w", "mcp__tools__wait_stubbornly")]]
    async with agent_daemon(marked, env_extra=QUIET) as agent:
        await new_plugin_session(agent, tmp_path, script)
        async with trio.open_nursery() as nursery:
            async def prompt() -> None:
                with pytest.raises(ConnectionClosed):
                    await agent.prompt("go")

            nursery.start_soon(prompt)
            server_pid = int(await wait_file(tmp_path / "started-stubbornly"))
            agent.daemon.process.send_signal(signal.SIGKILL)
    # The host saw EOF, stopped the call (which the server ignores) and, leaving,
    # killed the server's tree once the call outlasted the quiet window.
    with trio.fail_after(8):
        while alive(server_pid):
            await trio.sleep(0.05)
