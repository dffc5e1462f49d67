"""Turns through ``quiesce serve`` with the openai provider against a local streaming server."""

from __future__ import annotations

import pathlib

import pytest
import trio

from protocol.messages.client import OpenAIProviderConfig, SessionLoadParams, SessionNewParams
from protocol.messages.events import (
    AssistantDeltaEvent,
    AssistantMessageEvent,
    ToolCallEvent,
    TurnStart,
)
from tests.conftest import Marked
from tests.kit.daemon import Agent, agent_daemon
from tests.providers.fakeserver import FakeServer, Reply
from tests.providers.recorded import call, event, sse


async def open_session(agent: Agent, workspace: pathlib.Path, server: FakeServer) -> None:
    result = await agent.daemon.request("session.new", SessionNewParams(
        str(workspace), "auto",
        OpenAIProviderConfig(base_url=server.base_url, model="test-model",
                             api_key_env="QUIESCE_TEST_KEY")))
    agent.session_id = result.session_id


async def test_openai_turn_with_a_tool_call(tmp_path: pathlib.Path, marked: Marked) -> None:
    (tmp_path / "a.txt").write_text("from the workspace\n")
    server = FakeServer()
    server.queue(
        Reply(body=(sse(event({"role": "assistant", "content": "Reading."}),
                        event(call(0, id="call_1", name="Read", args='{"path":')),
                        event(call(0, args=' "a.txt"}')), event({}, "tool_calls")),)),
        Reply(body=(sse(event({"content": "It says hello."}), event({}, "stop")),)),
    )
    async with trio.open_nursery() as nursery:
        await server.start(nursery)
        async with agent_daemon(marked, env_extra={"QUIESCE_TEST_KEY": "sk-local"}) as agent:
            await open_session(agent, tmp_path, server)
            with trio.fail_after(20):
                result = await agent.prompt("what is in a.txt?")
            assert result.stop_reason == "end_turn"
            agent.assert_balanced()
            second = server.requests[1].json()
            tool_message = next(m for m in second["messages"] if m["role"] == "tool")
            assert tool_message["tool_call_id"] == "call_1"
            assert "from the workspace" in tool_message["content"]
            assert server.requests[0].headers["authorization"] == "Bearer sk-local"
        nursery.cancel_scope.cancel()


async def test_stop_mid_stream_closes_the_http_stream(tmp_path: pathlib.Path,
                                                      marked: Marked) -> None:
    server = FakeServer()
    server.queue(Reply(body=(sse(event({"role": "assistant", "content": "Partial ans"}),
                                 done=False),),
                       forever=b": keep-alive\n\n"))
    async with trio.open_nursery() as nursery:
        await server.start(nursery)
        async with agent_daemon(marked, env_extra={"QUIESCE_TEST_KEY": "k"}) as agent:
            await open_session(agent, tmp_path, server)
            async with trio.open_nursery() as turn:
                turn.start_soon(agent.prompt, "hi")
                await agent.wait_for(lambda e: isinstance(e, TurnStart))
                with trio.fail_after(10):
                    await server.received.wait()
                await trio.sleep(0.3)
                stopped_at = trio.current_time()
                aborted = await agent.stop_and_check()
            assert aborted.outcome == "aborted"
            with trio.fail_after(5):
                await server.gone.wait()
            assert server.gone_at is not None and server.gone_at - stopped_at < 2.0
            messages = [e for e in agent.log() if isinstance(e, AssistantMessageEvent)]
            assert len(messages) == 1 and messages[0].interrupted
            assert messages[0].blocks[0].text == "Partial ans"
            assert not any(isinstance(e, ToolCallEvent) for e in agent.log())
        nursery.cancel_scope.cancel()


async def test_stop_mid_tool_call_drops_the_half_streamed_call(tmp_path: pathlib.Path,
                                                               marked: Marked) -> None:
    server = FakeServer()
    # Text, then half of a call's arguments, then more text (seen: the fragment before it
    # was read), then nothing but keep-alives: the call never completes.
    server.queue(Reply(body=(
        sse(event({"role": "assistant", "content": "Let me look."}),
            event(call(0, id="call_1", name="Bash", args='{"command": "touch ')),
            event(call(0, args='half')), done=False),
        sse(event({"content": " Wait."}), done=False),
    ), forever=b": keep-alive\n\n"))
    async with trio.open_nursery() as nursery:
        await server.start(nursery)
        async with agent_daemon(marked, env_extra={"QUIESCE_TEST_KEY": "k"}) as agent:
            await open_session(agent, tmp_path, server)
            async with trio.open_nursery() as turn:
                turn.start_soon(agent.prompt, "hi")
                await agent.wait_for(lambda e: isinstance(e, AssistantDeltaEvent)
                                     and e.text == " Wait.")
                aborted = await agent.stop_and_check()
            assert aborted.outcome == "aborted" and aborted.tool_calls == ()
            with trio.fail_after(5):
                await server.gone.wait()
            messages = [e for e in agent.log() if isinstance(e, AssistantMessageEvent)]
            assert len(messages) == 1 and messages[0].interrupted
            assert [(b.type, b.text) for b in messages[0].blocks] == [
                ("text", "Let me look. Wait.")]
            assert not any(isinstance(e, ToolCallEvent) for e in [*agent.log(), *agent.events])
            assert not (tmp_path / "half").exists()
        nursery.cancel_scope.cancel()


async def test_a_model_from_the_environment_is_recorded_for_session_load(
        tmp_path: pathlib.Path, marked: Marked, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("OPENAI_MODEL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    server = FakeServer()
    server.queue(Reply(body=(sse(event({"content": "one"}), event({}, "stop")),)),
                 Reply(body=(sse(event({"content": "two"}), event({}, "stop")),)))
    async with trio.open_nursery() as nursery:
        await server.start(nursery)
        env = {"OPENAI_MODEL": "env-model", "OPENAI_BASE_URL": server.base_url}
        async with agent_daemon(marked, env_extra=env) as first:
            result = await first.daemon.request("session.new", SessionNewParams(
                str(tmp_path), "auto", OpenAIProviderConfig()))
            session_id = result.session_id
            first.session_id = session_id
            with trio.fail_after(20):
                assert (await first.prompt("hi")).stop_reason == "end_turn"
        # A daemon started without that environment reopens the session on its model.
        async with agent_daemon(marked) as second:
            await second.daemon.request("session.load", SessionLoadParams(session_id))
            second.session_id = session_id
            with trio.fail_after(20):
                assert (await second.prompt("again")).stop_reason == "end_turn"
        nursery.cancel_scope.cancel()
    assert [r.json()["model"] for r in server.requests] == ["env-model", "env-model"]
