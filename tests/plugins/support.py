"""Shared pieces of the plugin tests: the SDK test server, sessions that use it."""

from __future__ import annotations

import pathlib
import sys
from typing import Any

import trio

from protocol.messages.client import ScriptedProviderConfig, SessionNewParams, SessionNewResult
from protocol.messages.common import McpServerConfig
from tests.kit.daemon import Agent

SERVER = pathlib.Path(__file__).parent / "servers" / "tools_server.py"
QUIET = {"QUIESCE_PLUGIN_QUIET_WINDOW": "0.3"}
"""A shorter quiet window than the default 1 s, for the daemons of these tests."""


def tools_server(name: str = "tools") -> McpServerConfig:
    return McpServerConfig(name, sys.executable, (str(SERVER),))


async def new_plugin_session(agent: Agent, workspace: pathlib.Path, script: list[Any], *,
                             servers: tuple[McpServerConfig, ...] = (tools_server(),)
                             ) -> SessionNewResult:
    with trio.fail_after(30):
        result: SessionNewResult = await agent.daemon.request("session.new", SessionNewParams(
            str(workspace), "auto", ScriptedProviderConfig(script=script), servers))
    agent.session_id = result.session_id
    return result


def pid_in(text: str) -> int:
    return int(text.rsplit(" ", 1)[-1])

