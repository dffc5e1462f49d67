"""The anthropic provider against a local server speaking the Messages stream format."""

from __future__ import annotations

import pytest
import trio

from runtime.agent.providers.anthropic import AnthropicConfig, AnthropicProvider
from runtime.agent.providers.base import (
    AssistantMessage,
    ModelRequest,
    ProviderError,
    ReasoningDelta,
    ReasoningSeal,
    SealedReasoning,
    StreamChunk,
    TextDelta,
    ToolCallChunk,
    ToolMessage,
    ToolSchema,
    UserMessage,
)
from tests.providers import fakeserver
from tests.providers.fakeserver import FakeServer, Reply, split
from tests.providers.messages_recorded import (
    error_body,
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

REQUEST = ModelRequest("Be brief.", (UserMessage("hi"),))
KEY = "sk-ant-test-secret"
CLOSE_BOUND = 0.5  # how soon after a stop the server must see the client gone


def provider_for(server: FakeServer, **config: object) -> AnthropicProvider:
    return AnthropicProvider(AnthropicConfig(model="claude-sonnet-4-5", base_url=server.base_url,
                                             api_key=KEY, **config))  # type: ignore[arg-type]


async def collect(provider: AnthropicProvider, request: ModelRequest = REQUEST,
                  seen: list[StreamChunk] | None = None) -> list[StreamChunk]:
    return await fakeserver.collect(provider, request, seen)


async def test_text_with_pings_in_small_http_chunks(server: FakeServer) -> None:
    body = start() + ping() + text_block(0, "Hel", "lo, wörld ✓") + ping() + finish()
    server.queue(Reply(body=split(body, 7)))
    assert await collect(provider_for(server)) == [TextDelta("Hel"), TextDelta("lo, wörld ✓")]


async def test_thinking_then_text_keeps_the_signature(server: FakeServer) -> None:
    body = (start() + thinking_block(0, "The user ", "greets me.", signature="EqQBCgIYAhIM1g")
            + text_block(1, "Hi!") + finish())
    server.queue(Reply(framing="close", body=split(body, 50)))
    assert await collect(provider_for(server)) == [
        ReasoningDelta("The user "), ReasoningDelta("greets me."),
        ReasoningSeal(signature="EqQBCgIYAhIM1g"), TextDelta("Hi!")]


async def test_two_tool_calls_streamed_in_fragments(server: FakeServer) -> None:
    body = (start() + text_block(0, "Let me look.")
            + tool_block(1, "toolu_A1", "Read", "", '{"path', '": "src/a.txt"}')
            + tool_block(2, "toolu_B2", "Grep", '{"pattern": "TODO", ', '"path": "ünï"}')
            + tool_block(3, "toolu_C3", "Glob")  # no input fragments: {}
            + finish("tool_use"))
    server.queue(Reply(framing="length", body=split(body, 64)))
    assert await collect(provider_for(server)) == [
        TextDelta("Let me look."),
        ToolCallChunk("toolu_A1", "Read", {"path": "src/a.txt"}),
        ToolCallChunk("toolu_B2", "Grep", {"pattern": "TODO", "path": "ünï"}),
        ToolCallChunk("toolu_C3", "Glob", {})]


async def test_request_body_and_headers(server: FakeServer) -> None:
    server.queue(Reply(body=(start() + text_block(0, "ok") + finish(),)))
    provider = AnthropicProvider(AnthropicConfig(
        model="claude-sonnet-4-5", base_url=f"http://127.0.0.1:{server.port}/", api_key=KEY,
        thinking_budget=2048))
    request = ModelRequest(
        "Be brief.",
        (UserMessage("read a"),
         AssistantMessage("", "plan", (ToolCallChunk("t1", "Read", {"path": "a"}),),
                          (SealedReasoning("plan", "sig-1"),)),
         ToolMessage("t1", "A"),
         ToolMessage("t2", "no such file", is_error=True),
         UserMessage("thanks"),
         AssistantMessage("Partial ans", "unsealed thoughts"),  # an interrupted message
         UserMessage("go on")),
        (ToolSchema("Read", "Read a file", {"type": "object"}),))
    await collect(provider, request)
    [received] = server.requests
    assert (received.method, received.target) == ("POST", "/v1/messages")
    assert received.headers["x-api-key"] == KEY
    assert received.headers["anthropic-version"] == "2023-06-01"
    assert received.headers["content-type"] == "application/json"
    assert "authorization" not in received.headers
    assert received.json() == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 8192 + 2048,
        "stream": True,
        "system": [{"type": "text", "text": "Be brief.", "cache_control": {"type": "ephemeral"}}],
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "read a"}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "plan", "signature": "sig-1"},
                {"type": "tool_use", "id": "t1", "name": "Read", "input": {"path": "a"}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "t1", "content": "A", "is_error": False},
                {"type": "tool_result", "tool_use_id": "t2", "content": "no such file",
                 "is_error": True},
                {"type": "text", "text": "thanks"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "Partial ans"}]},
            {"role": "user", "content": [{"type": "text", "text": "go on",
                                          "cache_control": {"type": "ephemeral"}}]},
        ],
        "tools": [{"name": "Read", "description": "Read a file",
                   "input_schema": {"type": "object"},
                   "cache_control": {"type": "ephemeral"}}],
    }


@pytest.mark.parametrize(("status", "reason", "kind", "message", "expect"), [
    (529, "Overloaded", "overloaded_error", "Overloaded", "HTTP 529 Overloaded"),
    (429, "Too Many Requests", "rate_limit_error", "Number of request tokens has exceeded "
     "your per-minute rate limit", "HTTP 429 Too Many Requests"),
    (400, "Bad Request", "invalid_request_error", "messages.1.content.0.thinking.signature: "
     "Field required", "HTTP 400 Bad Request"),
    (401, "Unauthorized", "authentication_error", f"invalid x-api-key {KEY}",
     "HTTP 401 Unauthorized"),
])
async def test_api_errors_name_status_and_reason_without_the_key(
        server: FakeServer, status: int, reason: str, kind: str, message: str,
        expect: str) -> None:
    server.queue(Reply(status=status, reason=reason,
                       headers=(("Content-Type", "application/json"),), framing="length",
                       body=(error_body(kind, message),)))
    with pytest.raises(ProviderError) as caught:
        await collect(provider_for(server))
    text = str(caught.value)
    assert text.startswith(f"anthropic: {expect}") and kind in text
    assert message.replace(KEY, "***") in text and KEY not in text
    assert "req_011CSHoEeqs5C35K2UUqR7Fy" in text


async def test_an_error_event_mid_stream(server: FakeServer) -> None:
    server.queue(Reply(body=(start() + ev("content_block_start", index=0, content_block={
        "type": "text", "text": ""}) + ev("content_block_delta", index=0, delta={
            "type": "text_delta", "text": "Hal"}), 0.01,
        error_event("overloaded_error", "Overloaded"))))
    seen: list[StreamChunk] = []
    with pytest.raises(ProviderError, match=r"mid-stream \(as HTTP 529\): Overloaded "
                                            r"\(overloaded_error\)"):
        await collect(provider_for(server), seen=seen)
    assert seen == [TextDelta("Hal")]


async def test_a_stream_cut_before_message_stop_is_an_error(server: FakeServer) -> None:
    server.queue(Reply(framing="close", body=(start() + text_block(0, "ok"),)))
    with pytest.raises(ProviderError, match="ended before message_stop"):
        await collect(provider_for(server))


async def test_no_key_for_the_anthropic_api_is_refused() -> None:
    from protocol.messages.client import AnthropicProviderConfig

    with pytest.raises(ValueError, match="ANTHROPIC_API_KEY is not set"):
        AnthropicConfig.resolve(AnthropicProviderConfig(model="m"), {})


# --- a stop closes the stream ---------------------------------------------------------


@pytest.mark.parametrize("framing", ["chunked", "close"])
@pytest.mark.parametrize("where", ["awaiting-a-chunk", "between-chunks"])
async def test_a_stop_mid_stream_closes_the_connection_at_once(
        server: FakeServer, framing: str, where: str) -> None:
    """Mid thinking and mid tool call: what was seen is reasoning and text; the call
    never leaves the provider; the server, still streaming pings, sees the client
    leave within CLOSE_BOUND of the stop."""
    body = (start() + thinking_block(0, "hmm", signature="sig") + text_block(1, "a")
            + tool_start(2, "toolu_X", "Bash") + json_delta(2, '{"command": "touch '))
    server.queue(Reply(framing=framing, body=(body,),  # type: ignore[arg-type]
                       forever=ping()))
    seen: list[StreamChunk] = []
    got_text = trio.Event()
    left = trio.Event()
    stop = trio.CancelScope()
    provider = provider_for(server)

    async def consume() -> None:
        with stop:
            async with provider.stream(REQUEST) as stream:
                async for chunk in stream:
                    seen.append(chunk)
                    if chunk == TextDelta("a"):
                        got_text.set()
                        if where == "between-chunks":
                            await trio.sleep_forever()
        left.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        with trio.fail_after(5):
            await got_text.wait()
        await trio.sleep(0.05)  # the server is now mid-stream, sending pings
        assert not server.gone.is_set()
        sent_before = server.sent_while_watching
        stopped_at = trio.current_time()
        stop.cancel()
        with trio.fail_after(2):
            await left.wait()
            await server.gone.wait()
    assert server.gone_at is not None
    assert server.gone_at - stopped_at < CLOSE_BOUND, server.gone_how
    assert sent_before > 0
    assert seen == [ReasoningDelta("hmm"), ReasoningSeal(signature="sig"), TextDelta("a")]


async def test_a_stop_while_waiting_for_the_answer_closes_the_connection(
        server: FakeServer) -> None:
    server.queue(Reply(stall=True))
    stop = trio.CancelScope()

    async def consume() -> None:
        with stop:
            await collect(provider_for(server))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        with trio.fail_after(5):
            await server.received.wait()
        stopped_at = trio.current_time()
        stop.cancel()
        with trio.fail_after(2):
            await server.gone.wait()
    assert server.gone_at is not None and server.gone_at - stopped_at < CLOSE_BOUND
