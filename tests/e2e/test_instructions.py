"""What reaches the model's request: the system prompt (built-in, the daemon's, the
session's) and the workspace's AGENTS.md, read afresh at each turn's start."""

from __future__ import annotations

import pathlib

import trio

from protocol.messages.client import OpenAIProviderConfig, SessionLoadParams, SessionNewParams
from runtime.agent.instructions import DEFAULT_SYSTEM_PROMPT
from tests.conftest import Marked
from tests.kit.daemon import Agent, agent_daemon
from tests.providers.fakeserver import FakeServer, Reply
from tests.providers.recorded import event, sse


def answer() -> Reply:
    return Reply(body=(sse(event({"content": "ok"}), event({}, "stop")),))


async def open_session(agent: Agent, workspace: pathlib.Path, server: FakeServer,
                       system_prompt: str | None = None) -> None:
    result = await agent.daemon.request("session.new", SessionNewParams(
        str(workspace), "auto", OpenAIProviderConfig(base_url=server.base_url, model="m"),
        system_prompt=system_prompt))
    agent.session_id = result.session_id


def system_of(server: FakeServer, index: int) -> str:
    first = server.requests[index].json()["messages"][0]
    assert first["role"] == "system"
    return str(first["content"])


async def test_agents_md_reaches_the_request_and_is_reread_each_turn(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    server = FakeServer()
    server.queue(answer(), answer(), answer())
    async with trio.open_nursery() as nursery:
        await server.start(nursery)
        async with agent_daemon(marked) as agent:
            await open_session(agent, tmp_path, server)
            with trio.fail_after(30):
                await agent.prompt("before")
                (tmp_path / "AGENTS.md").write_text("Indent with tabs.\n")
                await agent.prompt("with it")
                (tmp_path / "AGENTS.md").write_text("Indent with four spaces.\n")
                await agent.prompt("after the edit")
        nursery.cancel_scope.cancel()
    assert system_of(server, 0) == DEFAULT_SYSTEM_PROMPT
    assert system_of(server, 1).startswith(DEFAULT_SYSTEM_PROMPT)
    assert system_of(server, 1).endswith("\n\nIndent with tabs.")
    assert system_of(server, 2).endswith("\n\nIndent with four spaces.")


async def test_the_daemons_prompt_and_the_sessions(tmp_path: pathlib.Path,
                                                   marked: Marked) -> None:
    (tmp_path / "prompt.md").write_text("You are the daemon's agent.\n")
    config = tmp_path / "c.toml"
    config.write_text('system_prompt_file = "prompt.md"\n')
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "AGENTS.md").write_text("Say hi.")
    server = FakeServer()
    server.queue(answer(), answer())
    async with trio.open_nursery() as nursery:
        await server.start(nursery)
        async with agent_daemon(marked, extra_args=("--config", str(config))) as agent:
            await open_session(agent, workspace, server)
            with trio.fail_after(20):
                await agent.prompt("one")
            await open_session(agent, workspace, server, system_prompt="Session's own.")
            with trio.fail_after(20):
                await agent.prompt("two")
        nursery.cancel_scope.cancel()
    daemons, sessions = system_of(server, 0), system_of(server, 1)
    assert daemons.startswith("You are the daemon's agent.\n\n# Workspace instructions")
    assert sessions.startswith("Session's own.\n\n# Workspace instructions")
    assert daemons.endswith("Say hi.") and sessions.endswith("Say hi.")


async def test_a_loaded_session_keeps_its_own_prompt(tmp_path: pathlib.Path,
                                                     marked: Marked) -> None:
    server = FakeServer()
    server.queue(answer(), answer())
    async with trio.open_nursery() as nursery:
        await server.start(nursery)
        async with agent_daemon(marked) as first:
            await open_session(first, tmp_path, server, system_prompt="Mine alone.")
            session_id = first.session_id
            with trio.fail_after(20):
                await first.prompt("one")
        async with agent_daemon(marked) as second:
            await second.daemon.request("session.load", SessionLoadParams(session_id))
            second.session_id = session_id
            with trio.fail_after(20):
                await second.prompt("two")
        nursery.cancel_scope.cancel()
    assert system_of(server, 0) == system_of(server, 1) == "Mine alone."
