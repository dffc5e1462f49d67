"""Driving ``quiesce serve`` through agent turns, and checking what a stop left behind."""

from __future__ import annotations

import pathlib
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import msgspec
import trio

from protocol.messages.client import (
    AgentAbortParams,
    AgentAbortResult,
    AgentPromptParams,
    AgentPromptResult,
    ScriptedProviderConfig,
    SessionEventParams,
    SessionNewParams,
)
from protocol.messages.events import (
    AnnouncedEvent,
    Cause,
    DurableEvent,
    ToolCallEvent,
    ToolResultEvent,
    TurnEnd,
)
from protocol.messages.host import (
    PermissionRequestParams,
    PermissionRequestResult,
    PermissionWithdrawnParams,
)
from runtime.client import DaemonClient, spawn_daemon
from runtime.sessionlog import read_log
from tests.conftest import Marked

Answer = Callable[[PermissionRequestParams], Awaitable[PermissionRequestResult]]


async def never(params: PermissionRequestParams) -> PermissionRequestResult:
    await trio.sleep_forever()
    raise AssertionError


@dataclass
class Agent:
    daemon: DaemonClient
    data_dir: pathlib.Path
    session_id: str = ""
    events: list[AnnouncedEvent] = field(default_factory=list)
    permission_requests: list[PermissionRequestParams] = field(default_factory=list)
    withdrawn: list[str] = field(default_factory=list)
    changed: trio.Event = field(default_factory=trio.Event)

    def on_event(self, params: SessionEventParams) -> None:
        self.events.append(params.event)
        self.changed.set()
        self.changed = trio.Event()

    async def new_session(self, workspace: pathlib.Path, script: list[Any], *,
                          mode: str = "auto") -> str:
        result = await self.daemon.request("session.new", SessionNewParams(
            str(workspace), mode, ScriptedProviderConfig(script=script)))  # type: ignore[arg-type]
        self.session_id = result.session_id
        return self.session_id

    async def prompt(self, text: str) -> AgentPromptResult:
        result: AgentPromptResult = await self.daemon.request(
            "agent.prompt", AgentPromptParams(self.session_id, text))
        return result

    async def abort(self, cause: str = "user", *, keep_inbox: bool = False,
                    reason: str | None = None) -> AgentAbortResult:
        result: AgentAbortResult = await self.daemon.request("agent.abort", AgentAbortParams(
            self.session_id, Cause(cause, reason), keep_inbox))  # type: ignore[arg-type]
        return result

    async def wait_for(self, predicate: Callable[[AnnouncedEvent], bool],
                       within: float = 15.0) -> AnnouncedEvent:
        with trio.fail_after(within):
            while True:
                for event in self.events:
                    if predicate(event):
                        return event
                await self.changed.wait()

    def log(self) -> list[DurableEvent]:
        return list(read_log(self.data_dir / "sessions" / f"{self.session_id}.jsonl").events)

    def assert_balanced(self) -> None:
        """Every durable tool/call has exactly one tool/result, in the same turn and step."""
        events = self.log()
        calls = [(e.turn_id, e.step, e.call_id) for e in events if isinstance(e, ToolCallEvent)]
        results = [(e.turn_id, e.step, e.call_id) for e in events
                   if isinstance(e, ToolResultEvent)]
        assert sorted(calls) == sorted(results), (calls, results)
        assert len(set(calls)) == len(calls)

    def turn_end_on_disk(self, turn_id: str) -> TurnEnd | None:
        for event in self.log():
            if isinstance(event, TurnEnd) and event.turn_id == turn_id:
                return event
        return None

    def results(self, turn_id: str) -> dict[str, ToolResultEvent]:
        return {e.call_id: e for e in self.log()
                if isinstance(e, ToolResultEvent) and e.turn_id == turn_id}


@asynccontextmanager
async def agent_daemon(marked: Marked, *, answer: Answer = never,
                       extra_args: tuple[str, ...] = (),
                       env_extra: dict[str, str] | None = None) -> AsyncIterator[Agent]:
    holder: list[Agent] = []

    async def on_permission(params: PermissionRequestParams) -> PermissionRequestResult:
        holder[0].permission_requests.append(params)
        holder[0].changed.set()
        return await answer(params)

    def on_withdrawn(params: PermissionWithdrawnParams) -> None:
        holder[0].withdrawn.append(params.request_id)

    def on_event(params: SessionEventParams) -> None:
        holder[0].on_event(params)

    from runtime.client import serve_command

    async with spawn_daemon(serve_command(*extra_args), env=marked.env(**(env_extra or {})),
                            handlers={"permission.request": on_permission},
                            notification_handlers={"session.event": on_event,
                                                   "permission.withdrawn": on_withdrawn},
                            ) as daemon:
        await daemon.initialize()
        agent = Agent(daemon, marked.data_dir)
        holder.append(agent)
        yield agent


def text(t: str) -> dict[str, Any]:
    return {"text": t}


def sleep(ms: int) -> dict[str, Any]:
    return {"sleepMs": ms}


def call(call_id: str, name: str, **args: Any) -> dict[str, Any]:
    return {"toolCall": {"id": call_id, "name": name, "args": args}}


def encode(obj: Any) -> str:
    return msgspec.json.encode(obj).decode()
