"""Turns through ``quiesce serve`` with the anthropic provider against a local server
speaking the Messages stream format."""

from __future__ import annotations

import pathlib

import trio

from protocol.messages.client import AnthropicProviderConfig, SessionNewParams
from protocol.messages.events import (
    AssistantDeltaEvent,
    AssistantMessageEvent,
    SessionMeta,
    ToolCallEvent,
    TurnEnd,
    TurnStart,
)
from tests.conftest import Marked
from tests.kit.daemon import Agent, agent_daemon
from tests.providers.fakeserver import FakeServer, Reply
from tests.providers.messages_recorded import (
    error_event,
    ev,
    finish,
    json_delta,
    ping,
    start,
    text_block,
    thinking_block,
    tool_block,
    tool_start,
)

ENV = {"QUIESCE_TEST_ANTHROPIC_KEY": "sk-ant-local"}


async def open_session(agent: Agent, workspace: pathlib.Path, server: FakeServer) -> None:
    result = await agent.daemon.request("session.new", SessionNewParams(
        str(workspace), "auto",
        AnthropicProviderConfig(base_url=server.base_url, model="claude-test",
                                api_key_env="QUIESCE_TEST_ANTHROPIC_KEY")))
    agent.session_id = result.session_id


async def test_a_turn_with_thinking_and_a_tool_call(tmp_path: pathlib.Path,
                                                    marked: Marked) -> None:
    (tmp_path / "a.txt").write_text("from the workspace\n")
    server = FakeServer()
    server.queue(
        Reply(body=(start() + thinking_block(0, "I should read it.", signature="sig-A")
                    + text_block(1, "Reading.")
                    + tool_block(2, "toolu_1", "Read", '{"path":', ' "a.txt"}')
                    + finish("tool_use"),)),
        Reply(body=(start() + text_block(0, "It says hello.") + finish(),)),
    )
    async with trio.open_nursery() as nursery:
        await server.start(nursery)
        async with agent_daemon(marked, env_extra=ENV) as agent:
            await open_session(agent, tmp_path, server)
            with trio.fail_after(20):
                result = await agent.prompt("what is in a.txt?")
            assert result.stop_reason == "end_turn"
            agent.assert_balanced()
            first, second = (r.json() for r in server.requests)
            assert server.requests[0].headers["x-api-key"] == "sk-ant-local"
            assert {t["name"] for t in first["tools"]} >= {"Read", "Bash", "Edit"}
            assert all(t["input_schema"]["type"] == "object" for t in first["tools"])
            assistant, results = second["messages"][1:3]
            assert assistant == {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "I should read it.", "signature": "sig-A"},
                {"type": "text", "text": "Reading."},
                {"type": "tool_use", "id": "toolu_1", "name": "Read",
                 "input": {"path": "a.txt"}}]}
            [result_block] = results["content"]
            assert result_block["type"] == "tool_result"
            assert result_block["tool_use_id"] == "toolu_1" and not result_block["is_error"]
            assert "from the workspace" in result_block["content"]
            log = agent.log()
            meta = next(e for e in log if isinstance(e, SessionMeta))
            assert "sk-ant-local" not in str(meta) and meta.provider["model"] == "claude-test"
        nursery.cancel_scope.cancel()
    assert "sk-ant-local" not in "".join(p.read_text() for p in marked.data_dir.rglob("*")
                                         if p.is_file())


async def test_stop_mid_stream_closes_the_http_stream_and_drops_the_half_call(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    server = FakeServer()
    # Text, then half of a call's input, then more text in another block (seen: the
    # fragment before it was read), then nothing but pings: the call never completes.
    server.queue(Reply(body=(
        start() + text_block(0, "Let me look.") + tool_start(1, "toolu_1", "Bash")
        + json_delta(1, '{"command": "touch half'),
        ev("content_block_start", index=2, content_block={"type": "text", "text": ""})
        + ev("content_block_delta", index=2, delta={"type": "text_delta", "text": " Wait."}),
    ), forever=ping()))
    async with trio.open_nursery() as nursery:
        await server.start(nursery)
        async with agent_daemon(marked, env_extra=ENV) as agent:
            await open_session(agent, tmp_path, server)
            async with trio.open_nursery() as turn:
                turn.start_soon(agent.prompt, "hi")
                await agent.wait_for(lambda e: isinstance(e, AssistantDeltaEvent)
                                     and e.text == " Wait.")
                stopped_at = trio.current_time()
                aborted = await agent.stop_and_check()
            assert aborted.outcome == "aborted" and aborted.tool_calls == ()
            with trio.fail_after(5):
                await server.gone.wait()
            assert server.gone_at is not None and server.gone_at - stopped_at < 2.0
            messages = [e for e in agent.log() if isinstance(e, AssistantMessageEvent)]
            assert len(messages) == 1 and messages[0].interrupted
            assert [(b.type, b.text) for b in messages[0].blocks] == [
                ("text", "Let me look. Wait.")]
            assert not any(isinstance(e, ToolCallEvent) for e in [*agent.log(), *agent.events])
            assert not (tmp_path / "half").exists()
        nursery.cancel_scope.cancel()


async def test_overloaded_ends_the_turn_naming_status_and_reason(
        tmp_path: pathlib.Path, marked: Marked) -> None:
    server = FakeServer()
    server.queue(
        Reply(status=529, reason="Overloaded", headers=(("Content-Type", "application/json"),),
              framing="length", body=(b'{"type": "error", "error": {"type": "overloaded_error",'
                                      b' "message": "Overloaded"}}',)),
        Reply(body=(start() + text_block(0, "Hal"), error_event("rate_limit_error",
                                                                 "Too many tokens"))),
    )
    async with trio.open_nursery() as nursery:
        await server.start(nursery)
        async with agent_daemon(marked, env_extra=ENV) as agent:
            await open_session(agent, tmp_path, server)
            with trio.fail_after(20):
                first = await agent.prompt("hi")
                second = await agent.prompt("again")
            assert (first.stop_reason, second.stop_reason) == ("error", "error")
            ends = [e for e in agent.log() if isinstance(e, TurnEnd)]
            assert [e.end.kind for e in ends] == ["error", "error"]
            assert "HTTP 529 Overloaded" in (ends[0].end.error or "")
            assert "overloaded_error" in (ends[0].end.error or "")
            assert "as HTTP 429" in (ends[1].end.error or "")
            assert "Too many tokens (rate_limit_error)" in (ends[1].end.error or "")
            assert any(isinstance(e, TurnStart) for e in agent.log())
        nursery.cancel_scope.cancel()
