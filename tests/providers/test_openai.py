"""The openai provider against a local streaming server the test starts itself."""

from __future__ import annotations

import socket
from collections.abc import AsyncIterator

import httpx
import pytest
import trio

from runtime.agent.providers.base import (
    AssistantMessage,
    ModelRequest,
    ProviderError,
    ReasoningDelta,
    StreamChunk,
    TextDelta,
    ToolCallChunk,
    ToolMessage,
    ToolSchema,
    UserMessage,
)
from runtime.agent.providers.openai import OpenAIConfig, OpenAIProvider
from tests.providers import fakeserver, recorded
from tests.providers.fakeserver import FakeServer, Reply, split
from tests.providers.recorded import event, sse

REQUEST = ModelRequest("Be brief.", (UserMessage("hi"),))
KEY = "sk-test-secret"
# How soon after a stop the server must see the client gone. Measured: ~1 ms.
CLOSE_BOUND = 0.5


def provider_for(server: FakeServer, **config: object) -> OpenAIProvider:
    return OpenAIProvider(OpenAIConfig(model="gpt-4o-mini", base_url=server.base_url,
                                       api_key=KEY, **config))  # type: ignore[arg-type]


async def collect(provider: OpenAIProvider, request: ModelRequest = REQUEST,
                  seen: list[StreamChunk] | None = None) -> list[StreamChunk]:
    return await fakeserver.collect(provider, request, seen)


async def test_text_stream_in_small_http_chunks(server: FakeServer) -> None:
    server.queue(Reply(body=split(recorded.TEXT, 7)))
    assert await collect(provider_for(server)) == [TextDelta("Hel"), TextDelta("lo, wörld ✓")]


async def test_reasoning_close_delimited_crlf(server: FakeServer) -> None:
    server.queue(Reply(framing="close", body=(recorded.REASONING[:50], 0.01,
                                              recorded.REASONING[50:])))
    assert await collect(provider_for(server)) == [
        ReasoningDelta("The user "), ReasoningDelta("greets me."), ReasoningDelta(" Reply."),
        TextDelta("Hi!")]


async def test_two_parallel_tool_calls_streamed_in_fragments(server: FakeServer) -> None:
    server.queue(Reply(framing="length", body=split(recorded.PARALLEL_CALLS, 64)))
    assert await collect(provider_for(server)) == [
        TextDelta("Let me look."),
        ToolCallChunk("call_A1", "Read", {"path": "src/a.txt"}),
        ToolCallChunk("call_B2", "Grep", {"pattern": "TODO", "path": "ünï"})]


async def test_request_body_and_headers(server: FakeServer) -> None:
    server.queue(Reply(body=(recorded.TEXT,)))
    provider = OpenAIProvider(OpenAIConfig(model="gpt-4o-mini", base_url=server.base_url + "/",
                                           api_key=KEY, headers={"X-Org": "org-1"}))
    request = ModelRequest(
        "Be brief.",
        (UserMessage("read a"),
         AssistantMessage("", "thinking", (ToolCallChunk("c1", "Read", {"path": "a"}),)),
         ToolMessage("c1", "A"),
         UserMessage("thanks")),
        (ToolSchema("Read", "Read a file", {"type": "object"}),))
    await collect(provider, request)
    [received] = server.requests
    assert (received.method, received.target) == ("POST", "/v1/chat/completions")
    assert received.headers["authorization"] == f"Bearer {KEY}"
    assert received.headers["content-type"] == "application/json"
    assert received.headers["accept"] == "text/event-stream"
    assert received.headers["x-org"] == "org-1"
    assert received.json() == {
        "model": "gpt-4o-mini",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "read a"},
            {"role": "assistant", "tool_calls": [{
                "id": "c1", "type": "function",
                "function": {"name": "Read", "arguments": '{"path":"a"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "A"},
            {"role": "user", "content": "thanks"},
        ],
        "tools": [{"type": "function", "function": {
            "name": "Read", "description": "Read a file", "parameters": {"type": "object"}}}],
    }


async def test_no_key_no_authorization_header(server: FakeServer) -> None:
    server.queue(Reply(body=(recorded.TEXT,)))
    await collect(OpenAIProvider(OpenAIConfig(model="local", base_url=server.base_url)))
    assert "authorization" not in server.requests[0].headers


async def test_http_401_names_status_and_message_without_the_key(server: FakeServer) -> None:
    server.queue(Reply(status=401, reason="Unauthorized",
                       headers=(("Content-Type", "application/json"),),
                       framing="length", body=(recorded.ERROR_401,)))
    with pytest.raises(ProviderError) as caught:
        await collect(provider_for(server))
    message = str(caught.value)
    assert "HTTP 401 Unauthorized" in message
    assert "Incorrect API key provided" in message and "invalid_api_key" in message
    assert KEY not in message


async def test_http_error_body_excerpt_is_bounded(server: FakeServer) -> None:
    page = b"<html><body>" + b"<p>Bad gateway</p>" * 20_000 + b"</body></html>"
    server.queue(Reply(status=502, reason="Bad Gateway", headers=(("Content-Type", "text/html"),),
                       body=split(page, 4096)))
    with pytest.raises(ProviderError, match=r"HTTP 502 Bad Gateway.*<html><body><p>Bad") as caught:
        await collect(provider_for(server))
    assert len(str(caught.value)) < 500


async def test_an_answer_that_is_not_an_event_stream(server: FakeServer) -> None:
    server.queue(Reply(headers=(("Content-Type", "application/json"),), framing="length",
                       body=(b'{"choices": []}',)))
    with pytest.raises(ProviderError, match="application/json, not an event stream"):
        await collect(provider_for(server))


async def test_malformed_event_after_some_text(server: FakeServer) -> None:
    server.queue(Reply(body=(sse(event({"content": "ok"}), done=False),
                             b'data: {"choices": [{"delta": {"content": "x"\n\n')))
    seen: list[StreamChunk] = []
    with pytest.raises(ProviderError, match="malformed stream event"):
        await collect(provider_for(server), seen=seen)
    assert seen == [TextDelta("ok")]


async def test_a_body_cut_mid_chunk_is_a_provider_error(server: FakeServer) -> None:
    server.queue(Reply(body=(sse(event({"content": "ok"}), done=False),), cut=True))
    with pytest.raises(ProviderError, match="RemoteProtocolError"):
        await collect(provider_for(server))


async def test_a_close_delimited_body_ending_early_is_a_provider_error(
        server: FakeServer) -> None:
    server.queue(Reply(framing="close", body=(sse(event({"content": "ok"}), done=False),)))
    with pytest.raises(ProviderError, match="ended before the response finished"):
        await collect(provider_for(server))


async def test_silence_longer_than_the_timeout(server: FakeServer) -> None:
    server.queue(Reply(body=(sse(event({"content": "ok"}), done=False),), stall=False,
                       forever=b": still here\n\n"))
    # A comment every 10 ms keeps a 0.2 s read timeout satisfied; a stalled reply does not.
    server.queue(Reply(stall=True))
    seen: list[StreamChunk] = []
    with trio.move_on_after(0.3) as scope:
        await collect(provider_for(server, timeout=0.2), seen=seen)
    assert scope.cancelled_caught and seen == [TextDelta("ok")]
    with pytest.raises(ProviderError, match="timed out \\(ReadTimeout\\)"):
        await collect(provider_for(server, timeout=0.2))


async def test_connection_refused() -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    provider = OpenAIProvider(OpenAIConfig(model="m", base_url=f"http://127.0.0.1:{port}/v1"))
    with pytest.raises(ProviderError, match="ConnectError"):
        await collect(provider)


# --- a stop closes the stream ---------------------------------------------------------


@pytest.fixture(params=["own-client", "shared-client"])
async def stop_provider(request: pytest.FixtureRequest,
                        server: FakeServer) -> AsyncIterator[OpenAIProvider]:
    config = OpenAIConfig(model="gpt-4o-mini", base_url=server.base_url, api_key=KEY)
    if request.param == "own-client":
        yield OpenAIProvider(config)
        return
    async with httpx.AsyncClient() as client:
        yield OpenAIProvider(config, client=client)


@pytest.mark.parametrize("framing", ["chunked", "close"])
@pytest.mark.parametrize("where", ["awaiting-a-chunk", "between-chunks"])
async def test_a_stop_mid_stream_closes_the_connection_at_once(
        server: FakeServer, stop_provider: OpenAIProvider, framing: str, where: str) -> None:
    """The consumer is cancelled while it waits for the next chunk, or while it is
    busy with one (as an agent checkpointing on every chunk is); either way the
    server, still streaming, must see the client leave within CLOSE_BOUND."""
    # The server streams text, then a comment every 10 ms for as long as the client stays.
    server.queue(Reply(framing=framing,  # type: ignore[arg-type]
                       body=(sse(event({"content": "a"}), event({"content": "b"}), done=False),),
                       forever=b": keep-alive\n\n"))
    seen: list[StreamChunk] = []
    got_two = trio.Event()
    left = trio.Event()
    stop = trio.CancelScope()

    async def consume() -> None:
        with stop:
            async with stop_provider.stream(REQUEST) as stream:
                async for chunk in stream:
                    seen.append(chunk)
                    if len(seen) == 2:
                        got_two.set()
                        if where == "between-chunks":
                            await trio.sleep_forever()
        left.set()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        with trio.fail_after(5):
            await got_two.wait()
        await trio.sleep(0.05)  # the server is now mid-stream, sending keep-alives
        assert not server.gone.is_set()
        sent_before = server.sent_while_watching
        stopped_at = trio.current_time()
        stop.cancel()
        with trio.fail_after(2):
            await left.wait()
            await server.gone.wait()
    assert server.gone_at is not None
    assert server.gone_at - stopped_at < CLOSE_BOUND, server.gone_how
    assert sent_before > 0 and seen == [TextDelta("a"), TextDelta("b")]


async def test_a_stop_while_waiting_for_the_answer_closes_the_connection(
        server: FakeServer, stop_provider: OpenAIProvider) -> None:
    server.queue(Reply(stall=True))
    stop = trio.CancelScope()

    async def consume() -> None:
        with stop:
            await collect(stop_provider)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(consume)
        with trio.fail_after(5):
            await server.received.wait()
        stopped_at = trio.current_time()
        stop.cancel()
        with trio.fail_after(2):
            await server.gone.wait()
    assert server.gone_at is not None and server.gone_at - stopped_at < CLOSE_BOUND


async def test_leaving_the_context_early_closes_the_connection(
        server: FakeServer, stop_provider: OpenAIProvider) -> None:
    server.queue(Reply(body=(sse(event({"content": "a"}), done=False),),
                       forever=b": keep-alive\n\n"))
    with trio.fail_after(5):
        async with stop_provider.stream(REQUEST) as stream:
            async for chunk in stream:
                assert chunk == TextDelta("a")
                break
        left_at = trio.current_time()
        await server.gone.wait()
    assert server.gone_at is not None and server.gone_at - left_at < CLOSE_BOUND
