"""The openai provider's sans-IO parts: request encoding, stream decoding, config."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.messages.client import OpenAIProviderConfig
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
    UsageReport,
    UserMessage,
)
from runtime.agent.providers.openai import (
    ChatStreamDecoder,
    OpenAIConfig,
    encode_request,
    provider_from_config,
)
from tests.providers import recorded
from tests.providers.recorded import call, event, sse

PARALLEL_EXPECTED = [
    TextDelta("Let me look."),
    ToolCallChunk("call_A1", "Read", {"path": "src/a.txt"}),
    ToolCallChunk("call_B2", "Grep", {"pattern": "TODO", "path": "ünï"}),
]


def decode(*pieces: bytes) -> list[StreamChunk]:
    decoder = ChatStreamDecoder()
    out = [chunk for piece in pieces for chunk in decoder.feed(piece)]
    return out + decoder.end()


def test_text_reasoning_and_tool_calls() -> None:
    assert decode(recorded.TEXT) == [TextDelta("Hel"), TextDelta("lo, wörld ✓"),
                                     UsageReport(9, 4)]  # the recorded usage event
    assert decode(recorded.REASONING) == [ReasoningDelta("The user "),
                                          ReasoningDelta("greets me."),
                                          ReasoningDelta(" Reply."), TextDelta("Hi!")]
    assert decode(recorded.PARALLEL_CALLS) == PARALLEL_EXPECTED


@given(st.lists(st.integers(0, len(recorded.PARALLEL_CALLS)), max_size=20))
def test_any_split_of_the_body_decodes_the_same(cuts: list[int]) -> None:
    body = recorded.PARALLEL_CALLS
    bounds = [0, *sorted(cuts), len(body)]
    assert decode(*(body[a:b] for a, b in itertools.pairwise(bounds))) \
        == PARALLEL_EXPECTED


def test_a_tool_call_is_released_only_when_the_choice_finishes() -> None:
    decoder = ChatStreamDecoder()
    events = sse(event(call(0, id="c1", name="Bash", args='{"command": "ls"}')), done=False)
    assert decoder.feed(events) == []
    assert decoder.feed(sse(event({}, "tool_calls"), done=False)) == [
        ToolCallChunk("c1", "Bash", {"command": "ls"})]
    assert decoder.feed(sse()) == [] and decoder.done


def test_done_without_finish_reason_releases_calls_and_nothing_after_done_is_read() -> None:
    assert decode(sse(event(call(0, id="c1", name="Glob")))
                  + b"data: {not json\n\n") == [ToolCallChunk("c1", "Glob", {})]


def test_finish_without_done_is_complete_but_a_bare_end_is_not() -> None:
    assert decode(sse(event({"content": "a"}, "stop"), done=False)) == [TextDelta("a")]
    with pytest.raises(ProviderError, match="ended before the response finished"):
        decode(sse(event({"content": "a"}), done=False))
    with pytest.raises(ProviderError, match="ended inside an event"):
        decode(sse(event({"content": "a"}), done=False) + b"data: {")


def test_servers_that_repeat_names_or_omit_indexes() -> None:
    def frag(**fields: object) -> dict[str, object]:
        return {"tool_calls": [fields]}
    body = sse(
        event(frag(id="a", function={"name": "Read", "arguments": '{"path":'})),
        event(frag(id="a", function={"name": "Read", "arguments": '"x"}'})),
        event(frag(id="b", function={"name": "Glob", "arguments": "{}"})),
        event({}, "tool_calls"))
    assert decode(body) == [ToolCallChunk("a", "Read", {"path": "x"}),
                            ToolCallChunk("b", "Glob", {})]


@pytest.mark.parametrize(("body", "match"), [
    (sse('{"choices": [{"delta": '), "malformed stream event"),
    (sse('{"choices": [{"delta": {"content": 5}}]}'), "malformed stream event"),
    (sse({"error": {"message": "overloaded", "type": "server_error"}}),
     "mid-stream: overloaded \\(server_error\\)"),
    (b"event: error\ndata: upstream went away\n\n", "error event: 'upstream went away'"),
    (sse(event(call(0, id="c9", name="Write", args='{"path": "a", ')), event({}, "length")),
     "c9 \\(Write\\) has arguments that are not a JSON object"),
    (sse(event(call(0, id="c9", name="Write", args='["a"]')), event({}, "tool_calls")),
     "not a JSON object"),
    (sse(event(call(0, name="Write", args="{}")), event({}, "tool_calls")), "without an id"),
])
def test_unusable_streams_are_provider_errors(body: bytes, match: str) -> None:
    with pytest.raises(ProviderError, match=match):
        decode(body)


def test_request_encoding() -> None:
    request = ModelRequest(
        system="You are terse.",
        messages=(
            UserMessage("read a"),
            AssistantMessage(text="Reading.", reasoning="hidden",
                             tool_calls=(ToolCallChunk("c1", "Read", {"path": "a"}),)),
            ToolMessage("c1", "contents of a"),
            AssistantMessage(tool_calls=(ToolCallChunk("c2", "Glob", {}),)),
            ToolMessage("c2", "Error: tool call aborted", is_error=True),
            AssistantMessage(text="Done."),
            UserMessage(""),
        ),
        tools=(ToolSchema("Read", "Read a file", {"type": "object", "properties": {
            "path": {"type": "string"}}, "required": ["path"]}),),
    )
    assert json.loads(encode_request("m-1", request)) == {
        "model": "m-1",
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [
            {"role": "system", "content": "You are terse."},
            {"role": "user", "content": "read a"},
            {"role": "assistant", "content": "Reading.", "tool_calls": [
                {"id": "c1", "type": "function",
                 "function": {"name": "Read", "arguments": '{"path":"a"}'}}]},
            {"role": "tool", "tool_call_id": "c1", "content": "contents of a"},
            {"role": "assistant", "tool_calls": [
                {"id": "c2", "type": "function", "function": {"name": "Glob", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "c2", "content": "Error: tool call aborted"},
            {"role": "assistant", "content": "Done."},
            {"role": "user", "content": ""},
        ],
        "tools": [{"type": "function", "function": {
            "name": "Read", "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}},
                           "required": ["path"]}}}],
    }
    assert "tools" not in json.loads(encode_request("m", ModelRequest("", ())))
    assert json.loads(encode_request("m", ModelRequest("", ())))["messages"] == []


def test_config_from_env() -> None:
    config = OpenAIConfig.from_env({"OPENAI_MODEL": "gpt-x", "OPENAI_API_KEY": "sk-secret",
                                    "OPENAI_BASE_URL": "http://localhost:8000/v1/"})
    assert (config.model, config.base_url, config.api_key) == (
        "gpt-x", "http://localhost:8000/v1", "sk-secret")
    assert config.url == "http://localhost:8000/v1/chat/completions"
    assert "sk-secret" not in repr(config)
    default = OpenAIConfig.from_env({"OPENAI_MODEL": "gpt-x"})
    assert (default.base_url, default.api_key) == ("https://api.openai.com/v1", None)
    with pytest.raises(ValueError, match="OPENAI_MODEL is not set"):
        OpenAIConfig.from_env({})


def test_config_from_dict() -> None:
    env = {"MY_KEY": "sk-mine", "OPENAI_MODEL": "env-model", "OPENAI_API_KEY": "sk-default"}
    config = OpenAIConfig.from_dict({"kind": "openai", "baseUrl": "http://h:1/v1",
                                     "model": "m", "apiKeyEnv": "MY_KEY", "timeout": 30,
                                     "headers": {"X-Org": "o"}}, env)
    assert (config.base_url, config.model, config.api_key, config.timeout) == (
        "http://h:1/v1", "m", "sk-mine", 30)
    assert dict(config.headers) == {"X-Org": "o"}
    fallback = OpenAIConfig.from_dict({"kind": "openai"}, env)
    assert (fallback.model, fallback.api_key, fallback.base_url) == (
        "env-model", "sk-default", "https://api.openai.com/v1")
    with pytest.raises(ValueError, match="MISSING, which is not set"):
        OpenAIConfig.from_dict({"kind": "openai", "model": "m", "apiKeyEnv": "MISSING"}, {})
    with pytest.raises(ValueError, match="invalid provider config"):
        OpenAIConfig.from_dict({"kind": "openai", "model": "m", "apiKey": "sk-inline"}, {})
    with pytest.raises(ValueError, match="invalid provider config"):
        OpenAIConfig.from_dict({"kind": "scripted"}, env)
    with pytest.raises(ValueError, match="base URL must be http"):
        OpenAIConfig.from_dict({"kind": "openai", "model": "m", "baseUrl": "ftp://x"}, {})


def test_provider_from_protocol_config() -> None:
    env = {"OPENAI_MODEL": "env-model", "LOCAL_KEY": "sk-local"}
    provider = provider_from_config(OpenAIProviderConfig(
        base_url="http://127.0.0.1:8080/v1", api_key_env="LOCAL_KEY"), env)
    assert (provider.config.model, provider.config.base_url, provider.config.api_key) == (
        "env-model", "http://127.0.0.1:8080/v1", "sk-local")
    with pytest.raises(ValueError, match="OPENAI_MODEL is unset"):
        provider_from_config(OpenAIProviderConfig(), {})


def test_model_settings_are_sent_only_when_set() -> None:
    plain = json.loads(encode_request(OpenAIConfig(model="m"), ModelRequest("", ())))
    assert set(plain) == {"model", "messages", "stream", "stream_options"}
    config = OpenAIConfig.resolve(OpenAIProviderConfig(
        model="o4-mini", temperature=0.3, max_tokens=100, max_completion_tokens=2000,
        reasoning_effort="high"), environ={})
    body = json.loads(encode_request(config, ModelRequest("", ())))
    assert (body["temperature"], body["max_tokens"], body["max_completion_tokens"],
            body["reasoning_effort"]) == (0.3, 100, 2000, "high")
