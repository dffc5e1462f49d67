"""The host's plugin client in process (a real ``CallManager``, real server processes):
servers that fail to start, a stop, a kill or a close while a server starts, routing
and re-opening."""

from __future__ import annotations

import pathlib
import sys

import pytest
import trio

from host.manager import CallManager, HostConfig
from host.plugins import McpConnection, PluginSettings, PluginStartError
from protocol.messages.common import McpServerConfig
from protocol.messages.host import (
    ToolsAbortParams,
    ToolsExecuteParams,
)
from protocol.tools import ToolResult
from tests.conftest import Marked
from tests.kit.host import NoRuntime
from tests.kit.waiters import wait_file
from tests.plugins.support import SERVER
from tests.support import MARK_VAR, alive


def python(marked: Marked, name: str, code: str) -> McpServerConfig:
    """A fake "server": any Python one-liner, marked so a survivor fails the test."""
    return McpServerConfig(name, sys.executable, ("-c", code), {MARK_VAR: marked.mark})


async def run(manager: CallManager, call_id: str, tool: str,
              args: dict[str, object] | None = None) -> ToolResult:
    return await manager.execute(ToolsExecuteParams("s", call_id, tool, args or {}))


async def test_servers_that_cannot_start_are_reported_and_fail_their_calls(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    manager = CallManager(HostConfig(plugins=PluginSettings(start_timeout=0.5)), NoRuntime())
    servers = (python(marked, "quits", "pass"),
               python(marked, "mute", "import time; time.sleep(60)"),
               python(marked, "garbage", "print('hello, not JSON-RPC', flush=True); "
                                          "import time; time.sleep(60)"),
               McpServerConfig("missing", str(tmp_path / "no-such-server")))
    with trio.fail_after(15):
        async with trio.open_nursery() as background:
            manager.attach(background)
            manager.open_session("s", str(tmp_path), "auto", servers)
            listed = await manager.list_plugins("s")
            errors = {s.name: s.error or "" for s in listed.servers}
            assert listed.tools == ()
            assert "exited during the MCP handshake" in errors["quits"]
            assert "no answer to initialize within 0.5 s" in errors["mute"]
            assert "no answer to initialize" in errors["garbage"]
            assert "cannot start" in errors["missing"]
            result = await run(manager, "c1", "mcp__mute__anything")
            assert result.code == "TOOL_FAILED" and "could not start" in result.content[0].text  # type: ignore[union-attr]
            unknown = await run(manager, "c2", "mcp__nobody__tool")
            assert unknown.code == "NOT_FOUND"
            await manager.stop_all("disposed")
            background.cancel_scope.cancel()


async def test_a_stop_while_the_server_starts_ends_the_call_at_once(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    manager = CallManager(HostConfig(), NoRuntime())  # 30 s to start: the stop must not wait
    server = python(marked, "slow", "import time; time.sleep(60)")
    async with trio.open_nursery() as background:
        manager.attach(background)
        manager.open_session("s", str(tmp_path), "auto", (server,))
        results: list[ToolResult] = []

        async def call() -> None:
            results.append(await run(manager, "c1", "mcp__slow__tool"))

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(call)
                await trio.sleep(0.3)
                manager.abort(ToolsAbortParams("s", "c1", "mcp__slow__tool"))
        (result,) = results
        # No tools/call was ever sent: from the plugin's side, the body never ran.
        assert result.code == "ABORTED_BEFORE_DISPATCH" and not result.body_invoked
        assert result.content[0].text == "Error: tool call aborted before dispatch"  # type: ignore[union-attr]
        assert result.details["cancel"] == "stopped before the call reached the server"
        background.cancel_scope.cancel()
    # marked: the half-started server's process is gone (the fixture checks).


HANG = "import os, time; open('hang-pid', 'w').write(str(os.getpid())); time.sleep(60)"
"""A "server" that never answers ``initialize``: it stays starting for the 30 s allowed."""


async def test_a_kill_or_close_while_a_server_starts_leaves_no_process(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    manager = CallManager(HostConfig(), NoRuntime())  # 30 s to start: nothing may wait it out
    listed: list[dict[str, str]] = []

    async def list_servers() -> None:
        result = await manager.list_plugins("s")
        listed.append({s.name: s.error or "" for s in result.servers})

    with trio.fail_after(15):
        async with trio.open_nursery() as background:
            manager.attach(background)
            manager.open_session("s", str(tmp_path), "auto", (python(marked, "hang", HANG),))
            background.start_soon(list_servers)
            first = int(await wait_file(tmp_path / "hang-pid"))
            routed = manager.sessions["s"].plugins.route("mcp__hang__tool")
            assert routed is not None
            await routed[0].kill("an operator forced a call")  # as ops force does
            assert not alive(first)  # dead and reaped when kill returns
            while not listed:
                await trio.sleep(0.01)
            assert listed.pop()["hang"] == "stopped while starting: an operator forced a call"

            (tmp_path / "hang-pid").unlink()
            background.start_soon(list_servers)  # a kill is not final: it starts again
            second = int(await wait_file(tmp_path / "hang-pid"))
            manager.open_session("s", str(tmp_path), "auto", ())  # another config: closed
            while alive(second) or not listed:
                await trio.sleep(0.01)
            assert listed.pop()["hang"] == "stopped while starting: its session was re-opened"
            await manager.stop_all("disposed")
            background.cancel_scope.cancel()


async def test_a_spawn_that_exec_refuses_is_a_start_error(tmp_path: pathlib.Path,
                                                          marked: Marked) -> None:
    # check_servers refuses these at session open; the spawn maps them anyway.
    for config in (McpServerConfig("a", sys.executable, ("n\x00ul",)),
                   McpServerConfig("a", sys.executable, (), {"A=B": "1"})):
        connection = McpConnection(config, cwd=str(tmp_path), marker=(MARK_VAR, marked.mark),
                                   kill_grace=1.0, start_timeout=5.0)
        with trio.fail_after(5), pytest.raises(PluginStartError, match="cannot start"):
            await connection.serve()
        assert connection.dead.is_set() and connection.pid is None


async def test_reopening_a_session_keeps_or_replaces_its_servers(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    manager = CallManager(HostConfig(), NoRuntime())
    first = McpServerConfig("t", sys.executable, (str(SERVER),), {MARK_VAR: marked.mark})
    with trio.fail_after(20):
        async with trio.open_nursery() as background:
            manager.attach(background)
            manager.open_session("s", str(tmp_path), "auto", (first,))
            one = await run(manager, "c1", "mcp__t__echo", {"text": "a"})
            manager.open_session("s", str(tmp_path), "auto", (first,))  # same config: kept
            two = await run(manager, "c2", "mcp__t__echo", {"text": "b"})
            assert one.content[0].text.split()[-1] == two.content[0].text.split()[-1]  # type: ignore[union-attr]
            renamed = McpServerConfig("u", first.command, first.args, first.env)
            manager.open_session("s", str(tmp_path), "auto", (renamed,))  # replaced
            gone = await run(manager, "c3", "mcp__t__echo", {"text": "c"})
            assert gone.code == "NOT_FOUND"
            three = await run(manager, "c4", "mcp__u__echo", {"text": "d"})
            assert not three.is_error, three
            await manager.stop_all("disposed")
            background.cancel_scope.cancel()


async def test_an_unconfirmed_stop_listens_until_its_server_is_gone(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    manager = CallManager(HostConfig(plugins=PluginSettings(quiet_window=0.2)), NoRuntime())
    server = McpServerConfig("t", sys.executable, (str(SERVER),), {MARK_VAR: marked.mark})
    results: list[ToolResult] = []

    async def call() -> None:
        results.append(await run(manager, "c1", "mcp__t__sleep_then_write", {"seconds": 30}))

    with trio.fail_after(20):
        async with trio.open_nursery() as background:
            manager.attach(background)
            manager.open_session("s", str(tmp_path), "auto", (server,))
            background.start_soon(call)
            await wait_file(tmp_path / "started-sync")
            manager.abort(ToolsAbortParams("s", "c1", "mcp__t__sleep_then_write"))
            while not results:
                await trio.sleep(0.01)
            (result,) = results
            assert result.code == "ABORTED" and result.body_invoked
            assert result.details["unconfirmed"] is True
            routed = manager.sessions["s"].plugins.route("mcp__t__x")
            assert routed is not None and routed[0].connection is not None
            connection = routed[0].connection
            assert connection.open_requests == 1  # settled, still listened to
            await manager.stop_all("disposed")
            assert connection.dead.is_set() and connection.open_requests == 0
            background.cancel_scope.cancel()
    assert not (tmp_path / "finished-sync").exists()  # its server died under it
