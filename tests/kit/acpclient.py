"""Driving ``quiesce acp`` from a client built with the official ACP Python SDK.

The SDK is asyncio and runs in the test's own process; each test is a plain function
that calls ``asyncio.run``. The client records every message on the wire, in order, so
the tests can say what came before ``session/prompt`` answered and what after.
"""

from __future__ import annotations

import asyncio
import json
import pathlib
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

from acp import PROTOCOL_VERSION, text_block
from acp.client.connection import ClientSideConnection
from acp.connection import StreamDirection, StreamEvent
from acp.schema import (
    AllowedOutcome,
    ClientCapabilities,
    DeniedOutcome,
    PermissionOption,
    RequestPermissionResponse,
    ToolCallUpdate,
)
from acp.stdio import spawn_agent_process

from protocol.messages.events import DurableEvent, ToolResultEvent
from protocol.transcript import balance_problems
from runtime.agent.sessionlog import read_log
from tests.conftest import Marked

TIMEOUT = 20.0
Answer = Callable[[list[PermissionOption], ToolCallUpdate], Awaitable[RequestPermissionResponse]]


def select(option_id: str) -> Answer:
    async def answer(options: list[PermissionOption],
                     tool_call: ToolCallUpdate) -> RequestPermissionResponse:
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected",
                                                                option_id=option_id))
    return answer


async def never(options: list[PermissionOption],
                tool_call: ToolCallUpdate) -> RequestPermissionResponse:
    await asyncio.Event().wait()
    return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))


@dataclass
class Editor:
    """The SDK's ``Client`` side: answers permission prompts, records the wire."""

    answer: Answer = never
    wire: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    permission_requests: list[ToolCallUpdate] = field(default_factory=list)
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    process: Any = None  # the agent's asyncio subprocess: raw bytes go to its stdin

    async def send_raw(self, *messages: dict[str, Any]) -> None:
        """Write messages in one write (one pipe write: the agent reads them together)."""
        self.process.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in messages))
        await self.process.stdin.drain()

    def observe(self, event: StreamEvent) -> None:
        direction = "in" if event.direction is StreamDirection.INCOMING else "out"
        self.wire.append((direction, event.message))
        self.changed.set()

    async def request_permission(self, options: list[PermissionOption], session_id: str,
                                 tool_call: ToolCallUpdate,
                                 **kwargs: Any) -> RequestPermissionResponse:
        self.permission_requests.append(tool_call)
        self.changed.set()
        return await self.answer(options, tool_call)

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        pass  # the wire record has them, in order

    async def wait_for(self, predicate: Callable[[str, dict[str, Any]], bool]) -> dict[str, Any]:
        while True:
            for direction, message in self.wire:
                if predicate(direction, message):
                    return message
            self.changed.clear()
            await self.changed.wait()

    # -- reading the wire -----------------------------------------------------------------

    def updates(self, before: int | None = None) -> list[dict[str, Any]]:
        """The session/update payloads received (before wire index ``before``), but the
        session's ``available_commands_update`` (sent once it opens, not a turn's)."""
        return [m["params"]["update"] for d, m in self.wire[:before]
                if d == "in" and m.get("method") == "session/update"
                and m["params"]["update"]["sessionUpdate"] != "available_commands_update"]

    def index_of_answer(self, method: str) -> int:
        """Wire index of the answer to our (last) request of ``method``."""
        ids = [m["id"] for d, m in self.wire if d == "out" and m.get("method") == method]
        assert ids, f"no {method} was sent"
        for i, (d, m) in enumerate(self.wire):
            if d == "in" and "method" not in m and m.get("id") == ids[-1]:
                return i
        raise AssertionError(f"{method} was not answered")

    def incoming(self, method: str) -> list[dict[str, Any]]:
        return [m for d, m in self.wire if d == "in" and m.get("method") == method]


@dataclass
class Session:
    conn: ClientSideConnection
    editor: Editor
    session_id: str

    async def prompt(self, text: str) -> str:
        response = await asyncio.wait_for(
            self.conn.prompt(session_id=self.session_id, prompt=[text_block(text)]), TIMEOUT)
        return response.stop_reason


@asynccontextmanager
async def acp_agent(marked: Marked, script: list[Any], tmp: pathlib.Path, *,
                    editor: Editor | None = None,
                    extra: tuple[str, ...] = (),
                    client_meta: dict[str, Any] | None = None
                    ) -> AsyncIterator[tuple[ClientSideConnection, Editor]]:
    editor = editor or Editor()
    script_file = tmp / f"script-{len(list(tmp.glob('script-*')))}.json"
    script_file.write_text(json.dumps(script))
    with (tmp / "acp-stderr.log").open("ab") as stderr:
        async with spawn_agent_process(
                editor, sys.executable, "-m", "runtime", "acp",  # type: ignore[arg-type]
                "--provider", f"scripted:{script_file}", *extra, env=marked.env(),
                transport_kwargs={"stderr": stderr.fileno()},
                observers=[editor.observe]) as (conn, process):
            capabilities = (None if client_meta is None
                            else ClientCapabilities(field_meta=client_meta))
            init = await asyncio.wait_for(
                conn.initialize(protocol_version=PROTOCOL_VERSION,
                                client_capabilities=capabilities), TIMEOUT)
            assert init.protocol_version == 1
            assert init.agent_capabilities is not None
            assert init.agent_capabilities.load_session is True
            editor.process = process
            yield conn, editor
        # The SDK closed stdin; quiesce acp must exit by itself, promptly.
        code = await asyncio.wait_for(process.wait(), TIMEOUT)
        assert code == 0, (tmp / "acp-stderr.log").read_text()[-4000:]


async def new_session(conn: ClientSideConnection, editor: Editor,
                      workspace: pathlib.Path) -> Session:
    created = await asyncio.wait_for(conn.new_session(cwd=str(workspace), mcp_servers=[]),
                                     TIMEOUT)
    return Session(conn, editor, created.session_id)


async def wait_file(path: pathlib.Path) -> str:
    """A file a tool leaves in the workspace, once it has content."""
    async with asyncio.timeout(TIMEOUT):
        while not (path.exists() and path.read_text()):
            await asyncio.sleep(0.02)
    return path.read_text()


def run(coro: Any) -> Any:
    async def bounded() -> Any:
        async with asyncio.timeout(60):
            return await coro
    return asyncio.run(bounded())


def workspace(tmp_path: pathlib.Path) -> pathlib.Path:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    return ws


def kinds(updates: list[dict[str, Any]]) -> list[str]:
    return [u["sessionUpdate"] for u in updates]


# -- what a stop must leave ------------------------------------------------------------

def native_log(marked: Marked, session_id: str) -> list[DurableEvent]:
    return list(read_log(marked.data_dir / "sessions" / f"{session_id}.jsonl").events)


def assert_balanced(marked: Marked, session_id: str) -> dict[str, ToolResultEvent]:
    """Every durable tool/call has exactly one tool/result (the transcript rulebook); the
    results by call id."""
    events = native_log(marked, session_id)
    problems = balance_problems(events)
    assert not problems, problems
    return {e.call_id: e for e in events if isinstance(e, ToolResultEvent)}


def assert_settled_before_answer(editor: Editor) -> list[dict[str, Any]]:
    """Every tool_call got a final update before session/prompt answered; nothing after.
    Returns the updates before the answer."""
    answer = editor.index_of_answer("session/prompt")
    before = editor.updates(answer)
    started = [u["toolCallId"] for u in before if u["sessionUpdate"] == "tool_call"]
    final = [u["toolCallId"] for u in before if u["sessionUpdate"] == "tool_call_update"
             and u.get("status") in ("completed", "failed")]
    assert sorted(started) == sorted(final), (started, final)
    assert len(set(final)) == len(final)
    assert editor.updates() == before, "session/update after session/prompt answered"
    return before
