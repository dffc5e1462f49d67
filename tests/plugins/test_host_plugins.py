"""The host's plugin client in process (a real ``CallManager``, real server processes):
servers that fail to start, a stop while a server starts, routing and re-opening."""

from __future__ import annotations

import pathlib
import sys

import trio

from host.manager import CallManager, HostConfig
from host.plugins import PluginSettings
from protocol.messages.common import McpServerConfig
from protocol.messages.host import (
    PermissionRequestParams,
    PermissionWithdrawnParams,
    ToolsAbortParams,
    ToolsExecuteParams,
    ToolsOutputParams,
)
from protocol.tools import Decision, ToolResult
from tests.conftest import Marked
from tests.plugins.support import SERVER
from tests.support import MARK_VAR


class NoRuntime:
    async def request_permission(self, params: PermissionRequestParams) -> Decision:
        return "allow-once"

    def permission_withdrawn(self, params: PermissionWithdrawnParams) -> None:
        pass

    def tool_output(self, params: ToolsOutputParams) -> None:
        pass


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
        assert result.code == "ABORTED"
        assert result.details["cancel"] == "stopped before the call reached the server"
        background.cancel_scope.cancel()
    # marked: the half-started server's process is gone (the fixture checks).


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
