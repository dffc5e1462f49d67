"""The anthropic provider's sans-IO parts: stream decoding, request encoding, config."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.messages.client import AnthropicProviderConfig
from runtime.agent.providers.anthropic import AnthropicConfig, provider_from_config, recorded
from runtime.agent.providers.anthropic_stream import MessagesStreamDecoder, error_text
from runtime.agent.providers.anthropic_wire import Settings, encode_request
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
    UsageReport,
    UserMessage,
)
from tests.providers.messages_recorded import (
    error_body,
    ev,
    finish,
    ping,
    start,
    text_block,
    thinking_block,
    tool_block,
)

BODY = (start() + ping() + thinking_block(0, "Let me ", "think.", signature="c2ln")
        + ev("content_block_start", index=1,
             content_block={"type": "redacted_thinking", "data": "EmwKAhgBEgy3va"})
        + ev("content_block_stop", index=1)
        + text_block(2, "Reading ", "it.")
        + tool_block(3, "toolu_1", "Read", '{"pa', 'th": "a.txt", "limit": 5}')
        + finish("tool_use"))
EXPECTED = [ReasoningDelta("Let me "), ReasoningDelta("think."), ReasoningSeal(signature="c2ln"),
            ReasoningSeal(redacted="EmwKAhgBEgy3va"), TextDelta("Reading "), TextDelta("it."),
            ToolCallChunk("toolu_1", "Read", {"path": "a.txt", "limit": 5}),
            UsageReport(25, 15)]  # at message_stop: message_start's input, the delta's output


def decode(*pieces: bytes) -> tuple[list[StreamChunk], MessagesStreamDecoder]:
    decoder = MessagesStreamDecoder()
    out: list[StreamChunk] = []
    for piece in pieces:
        out.extend(decoder.feed(piece))
    out.extend(decoder.end())
    return out, decoder


def test_a_whole_stream() -> None:
    out, decoder = decode(BODY)
    assert out == EXPECTED
    assert (decoder.done, decoder.stop_reason, decoder.input_tokens,
            decoder.output_tokens) == (True, "tool_use", 25, 15)


@given(st.lists(st.integers(min_value=1, max_value=len(BODY) - 1), max_size=12))
def test_any_split_of_the_bytes_decodes_the_same(cuts: list[int]) -> None:
    points = [0, *sorted(set(cuts)), len(BODY)]
    assert decode(*(BODY[a:b] for a, b in itertools.pairwise(points)))[0] == EXPECTED


def test_unknown_events_and_deltas_are_skipped() -> None:
    body = (start() + ev("some_future_event", x=1)
            + ev("content_block_start", index=0, content_block={"type": "text", "text": ""})
            + ev("content_block_delta", index=0, delta={"type": "citations_delta",
                                                        "citation": {}})
            + ev("content_block_delta", index=0, delta={"type": "text_delta", "text": "ok"})
            + ev("content_block_stop", index=0) + finish())
    assert decode(body)[0] == [TextDelta("ok"), UsageReport(25, 15)]


def test_nothing_after_message_stop_is_read() -> None:
    assert decode(start() + text_block(0, "a") + finish() + b"event: x\ndata: {\n\n")[0] == [
        TextDelta("a"), UsageReport(25, 15)]


@pytest.mark.parametrize(("body", "match"), [
    (start() + tool_block(0, "toolu_1", "Bash", '{"command": ') + finish(),
     "toolu_1 \\(Bash\\) has input that is not a JSON object"),
    (start() + tool_block(0, "toolu_1", "Bash", "[1]") + finish(), "not a JSON object"),
    (start() + ev("content_block_delta", index=4, delta={"type": "text_delta", "text": "x"}),
     "block 4, which is not open"),
    (text_block(0, "a"), "before message_start"),
    (start() + ev("content_block_start", index=0, content_block={"type": "text", "text": ""})
     + finish(), "message_stop with blocks still open"),
    (start() + b"data: {not json\n\n", "malformed stream event"),
    (start() + ev("content_block_start", index=0, content_block={"type": "text", "text": ""})
     + ev("content_block_delta", index=0, delta={"type": "input_json_delta",
                                                 "partial_json": "{}"}),
     "input_json_delta in a text block"),
    (start() + text_block(0, "a"), "ended before message_stop"),
])
def test_unusable_streams_are_provider_errors(body: bytes, match: str) -> None:
    with pytest.raises(ProviderError, match=match):
        decode(body)


def test_error_body_text() -> None:
    assert error_text(error_body("overloaded_error", "Overloaded")) == (
        "Overloaded (overloaded_error) [request req_011CSHoEeqs5C35K2UUqR7Fy]")
    assert error_text(b"<html>") is None
    assert error_text(b'{"type": "message"}') is None


def test_messages_merge_by_role_and_drop_what_cannot_be_sent() -> None:
    request = ModelRequest("", (
        UserMessage("a"), UserMessage("b"),  # a stopped turn left no assistant message
        AssistantMessage("", "unsealed only"),  # nothing the API would accept: left out
        UserMessage("c"),
        AssistantMessage("end  \n", "", (), (SealedReasoning("", redacted="DATA"),))))
    body = json.loads(encode_request(Settings("m", 10, temperature=0.2,
                                              prompt_caching=False), request))
    assert "system" not in body and "tools" not in body and "thinking" not in body
    assert body["temperature"] == 0.2
    assert body["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"},
                                     {"type": "text", "text": "c"}]},
        {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "DATA"},
                                          {"type": "text", "text": "end"}]}]


def test_config_from_the_environment_and_what_is_recorded() -> None:
    env = {"ANTHROPIC_MODEL": "claude-env", "ANTHROPIC_API_KEY": "sk-ant-1",
           "ANTHROPIC_BASE_URL": "https://gateway.example/v1/"}
    provider = provider_from_config(AnthropicProviderConfig(), env)
    config = provider.config
    assert (config.model, config.base_url, config.api_key) == (
        "claude-env", "https://gateway.example", "sk-ant-1")
    assert config.url == "https://gateway.example/v1/messages"
    assert "sk-ant-1" not in repr(config)
    kept = recorded(AnthropicProviderConfig(), config)
    assert (kept.model, kept.base_url, kept.api_key_env) == (
        "claude-env", "https://gateway.example", None)
    default = AnthropicConfig.resolve(AnthropicProviderConfig(model="m"),
                                      {"ANTHROPIC_API_KEY": "k"})
    assert default.url == "https://api.anthropic.com/v1/messages"
    with pytest.raises(ValueError, match="ANTHROPIC_MODEL is unset"):
        AnthropicConfig.resolve(AnthropicProviderConfig(), {"ANTHROPIC_API_KEY": "k"})
    with pytest.raises(ValueError, match="MINE is not set"):
        AnthropicConfig.resolve(AnthropicProviderConfig(model="m", api_key_env="MINE",
                                                        base_url="http://local:1"), {})
    local = AnthropicConfig.resolve(AnthropicProviderConfig(model="m",
                                                            base_url="http://local:1"), {})
    assert local.api_key is None
    with pytest.raises(ValueError, match="must be above thinkingBudget"):
        AnthropicConfig(model="m", max_tokens=2000, thinking_budget=4000)
    with pytest.raises(ValueError, match="default temperature"):
        AnthropicConfig(model="m", temperature=0.5, thinking_budget=4000)


def test_prompt_caching_marks_tools_system_and_the_newest_message() -> None:
    request = ModelRequest("Sys", (UserMessage("a"), AssistantMessage(
        "", "", (ToolCallChunk("t1", "Read", {"path": "x"}),)), ToolMessage("t1", "X")),
        (ToolSchema("Read", "r", {"type": "object"}), ToolSchema("Bash", "b", {})))
    body = json.loads(encode_request(Settings("m", 10), request))
    mark = {"type": "ephemeral"}
    assert body["system"] == [{"type": "text", "text": "Sys", "cache_control": mark}]
    assert "cache_control" not in body["tools"][0] and body["tools"][1]["cache_control"] == mark
    assert [m["content"][-1].get("cache_control") for m in body["messages"]] == [
        None, None, mark]
    assert body["messages"][2]["content"][0]["type"] == "tool_result"
