"""The agent in process, with no host and no daemon: a scripted model, tools that run in
the test's own process, a session log in a temporary directory (``make_agent``)."""

from __future__ import annotations

import pathlib
from collections.abc import Sequence
from typing import Any

import msgspec
import trio

from protocol.messages.events import AnnouncedEvent, SessionMeta
from protocol.messages.host import ToolsOutputParams
from protocol.toolclass import ToolClass
from protocol.tools import ToolResult, ok_result
from runtime.agent.agent import Agent
from runtime.agent.collaborators import AgentCollaborators
from runtime.agent.journal import Journal
from runtime.agent.providers.scripted import ScriptedProvider, parse_script
from runtime.agent.registry import ToolDefinition, ToolExecution, ToolRegistry, define_tool
from runtime.agent.sessionlog import SessionLog
from runtime.agent.turn import TurnConfig


def no_route(params: ToolsOutputParams) -> bool:
    return False


def local_tools(definitions: Sequence[ToolDefinition[Any]] = ()) -> Any:
    def tools(turn_id: str) -> tuple[ToolRegistry, list[ToolDefinition[Any]], Any]:
        return ToolRegistry(list(definitions)), list(definitions), no_route
    return tools


def make_agent(tmp_path: pathlib.Path, script: list[Any], *,
               tools: Sequence[ToolDefinition[Any]] = (), config: TurnConfig | None = None,
               log_type: type[SessionLog] = SessionLog,
               collaborators: AgentCollaborators | None = None,
               ) -> tuple[Agent, ScriptedProvider, list[AnnouncedEvent]]:
    log = log_type.create(tmp_path / "s.jsonl")
    announced: list[AnnouncedEvent] = []
    journal = Journal(log, announced.append)
    journal.append(lambda seq: SessionMeta(seq, "", "s-1", str(tmp_path), "auto", 0.0))
    provider = ScriptedProvider(parse_script(script))
    agent = Agent("s-1", journal, provider, local_tools(tools), config,
                  collaborators=collaborators)
    return agent, provider, announced


class EchoArgs(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    text: str = ""


async def _echo(args: EchoArgs, execution: ToolExecution) -> ToolResult:
    return ok_result(args.text)


ECHO = define_tool("Echo", args=EchoArgs, tool_class=ToolClass.LOCAL, body=_echo)


def tool_call(call_id: str, name: str) -> dict[str, Any]:
    return {"toolCall": {"id": call_id, "name": name, "args": {}}}


class VirtualSyncLog(SessionLog):
    """A log whose fsync takes a virtual millisecond: the real one, in a worker thread,
    would let the mock clock jump while it runs (every task blocked), so a stop would
    read minutes of virtual time that never passed."""

    async def sync(self) -> None:
        await trio.sleep(0.001)
