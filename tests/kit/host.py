"""A real host subprocess driven over its link, as the runtime drives it."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio

from protocol.causes import CauseKind, cause_of
from protocol.messages.common import Empty
from protocol.messages.host import (
    HostStatsResult,
    PermissionRequestParams,
    PermissionRequestResult,
    PermissionWithdrawnParams,
    SessionOpenParams,
    ToolsAbortParams,
    ToolsAbortResult,
    ToolsExecuteParams,
    ToolsOutputParams,
    ToolsStartedParams,
)
from protocol.tools import Decision, ToolResult
from runtime.link import answers_later
from runtime.supervision import cgroup_sweeps
from runtime.supervision.link import HostLink
from tests.kit.answers import Answer, never


class NoRuntime:
    """The runtime port of an in-process ``CallManager``: every prompt allowed, output
    dropped."""

    async def request_permission(self, params: PermissionRequestParams) -> Decision:
        return "allow-once"

    def permission_withdrawn(self, params: PermissionWithdrawnParams) -> None:
        pass

    def tool_output(self, params: ToolsOutputParams) -> None:
        pass

    def tool_started(self, params: ToolsStartedParams) -> None:
        pass


@dataclass
class Host:
    link: HostLink
    session_id: str
    permission_requests: list[PermissionRequestParams] = field(default_factory=list)
    withdrawn: list[str] = field(default_factory=list)
    output: list[ToolsOutputParams] = field(default_factory=list)
    notices: list[ToolsOutputParams | ToolsStartedParams] = field(default_factory=list)
    """Every ``tools.started`` and ``tools.output``, in the order they came."""
    permission_asked: trio.Event = field(default_factory=trio.Event)

    async def execute(self, call_id: str, tool: str, args: dict[str, Any]) -> ToolResult:
        result: ToolResult = await self.link.request(
            "tools.execute", ToolsExecuteParams(self.session_id, call_id, tool, args))
        return result

    async def abort(self, call_id: str, tool: str, cause: CauseKind = "user") -> ToolsAbortResult:
        result: ToolsAbortResult = await self.link.request("tools.abort", ToolsAbortParams(
            self.session_id, call_id, tool, cause_of(cause, "a test's hook")))
        return result

    async def stats(self) -> HostStatsResult:
        result: HostStatsResult = await self.link.request("host.stats", Empty())
        return result

    def output_text(self, call_id: str) -> str:
        return "".join(o.text for o in self.output if o.call_id == call_id)


@asynccontextmanager
async def running_host(workspace: str, env: dict[str, str], *, mode: str = "auto",
                       config: dict[str, Any] | None = None,
                       answer: Answer = never,
                       command: list[str] | None = None) -> AsyncIterator[Host]:
    """``command``: the host to start (``python -m host`` by default), without
    ``--config``."""
    command = list(command or [sys.executable, "-m", "host"])
    if config:
        command += ["--config", msgspec.json.encode(config).decode()]
    holder: list[Host] = []

    async def on_permission(params: PermissionRequestParams) -> PermissionRequestResult:
        holder[0].permission_requests.append(params)
        holder[0].permission_asked.set()
        return await answer(params)

    def on_withdrawn(params: PermissionWithdrawnParams) -> None:
        holder[0].withdrawn.append(params.request_id)

    def on_output(params: ToolsOutputParams) -> None:
        holder[0].output.append(params)
        holder[0].notices.append(params)

    def on_started(params: ToolsStartedParams) -> None:
        holder[0].notices.append(params)

    # A client answering later: the link reads on.
    link = HostLink(command=command, env=env,
                    handlers={"permission.request": answers_later(on_permission)},
                    notification_handlers={"permission.withdrawn": on_withdrawn,
                                           "tools.output": on_output,
                                           "tools.started": on_started})
    async with trio.open_nursery() as nursery:
        await link.start(nursery)
        host = Host(link, "s-test")
        holder.append(host)
        await link.request("session.open", SessionOpenParams("s-test", workspace, mode))  # type: ignore[arg-type]
        try:
            yield host
        finally:
            await link.stop()
            if link.pid is not None:  # as the runtime does after its host's death
                await cgroup_sweeps.kill_host_cgroups(link.pid)
            nursery.cancel_scope.cancel()
