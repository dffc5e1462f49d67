"""The sans-IO parts of the ACP dialect: event translation and option conversion."""

from __future__ import annotations

import msgspec
import pytest

from protocol.errors import ErrorCode, RpcError
from protocol.messages.common import McpServerConfig
from protocol.messages.events import (
    AssistantDeltaEvent,
    AssistantMessageEvent,
    Block,
    ToolCallEvent,
    ToolProgressEvent,
    ToolResultEvent,
    TurnEnd,
    TurnOutcome,
    UserMessageEvent,
)
from protocol.tools import TextContent
from runtime.clients.acp.convert import mcp_servers, prompt_text
from runtime.clients.acp.messages import (
    AgentMessageChunk,
    AgentThoughtChunk,
    ResourceBlock,
    ResourceLinkBlock,
    TextBlock,
    ToolCallProgress,
    ToolCallStart,
    UserMessageChunk,
)
from runtime.clients.acp.translate import PROGRESS_TAIL, Translator

CALL = ToolCallEvent(3, "t1", 1, "c1", "Bash", "process", {"command": "make"})


def test_user_messages_only_in_replay_and_subagent_text_is_thought() -> None:
    t = Translator()
    assert t.translate(UserMessageEvent(2, "t1", "hi")) == []
    assert t.translate(UserMessageEvent(2, "t1", "hi"), replay=True) == [
        UserMessageChunk(TextBlock("hi"))]
    assert t.translate(UserMessageEvent(2, "t1~1", "sub"), replay=True) == []
    child = AssistantMessageEvent(4, "t1~1", 1, (Block("text", "found it"),))
    assert t.translate(child) == [AgentThoughtChunk(TextBlock("found it"))]


def test_streamed_deltas_are_sent_once_and_replay_sends_the_record() -> None:
    t = Translator()
    assert t.translate(AssistantDeltaEvent(2, "t1", 0, "reasoning", "hm")) == [
        AgentThoughtChunk(TextBlock("hm"))]
    assert t.translate(AssistantDeltaEvent(2, "t1", 0, "text", "Hel")) == [
        AgentMessageChunk(TextBlock("Hel"))]
    assert t.translate(AssistantDeltaEvent(2, "t1", 0, "text", "lo")) == [
        AgentMessageChunk(TextBlock("lo"))]
    record = AssistantMessageEvent(3, "t1", 0, (Block("reasoning", "hm"),
                                                 Block("text", "Hello")))
    assert t.translate(record) == []  # the client has it already
    replayed = Translator().translate(record, replay=True)
    assert replayed == [AgentThoughtChunk(TextBlock("hm")), AgentMessageChunk(TextBlock("Hello"))]


def test_progress_is_bounded_and_the_result_closes_the_call() -> None:
    t = Translator()
    [start] = t.translate(CALL)
    assert isinstance(start, ToolCallStart) and start.tool_call_id == "t1.c1"
    assert start.kind == "execute" and start.title == "Bash make"
    for i in range(5):
        [update] = t.translate(ToolProgressEvent(4, "t1", "c1", "stdout", str(i) * PROGRESS_TAIL))
        assert isinstance(update, ToolCallProgress) and update.status == "in_progress"
        text = update.content[0].content.text  # type: ignore[index]
        assert len(text) == PROGRESS_TAIL and text.endswith(str(i))
    [done] = t.translate(ToolResultEvent(5, "t1", 1, "c1", True, "ABORTED",
                                         (TextContent("partial"),)))
    assert isinstance(done, ToolCallProgress)
    assert (done.status, done.raw_output) == ("failed", {"code": "ABORTED"})
    assert t.open_calls() == []
    assert t.translate(ToolResultEvent(6, "t1", 1, "c1", False, None, ())) == []


def test_turn_end_fails_a_call_left_open() -> None:
    t = Translator()
    t.translate(CALL)
    [closed] = t.translate(TurnEnd(9, "t1", TurnOutcome("interrupted"), "cancelled"))
    assert isinstance(closed, ToolCallProgress) and closed.status == "failed"
    assert t.open_calls() == []


def test_prompt_blocks_become_text() -> None:
    blocks = msgspec.json.decode(
        b'[{"type":"text","text":"look"},{"type":"resource_link","uri":"file:///a","name":"a"},'
        b'{"type":"resource","resource":{"uri":"file:///b","text":"B"}}]',
        type=tuple[TextBlock | ResourceLinkBlock | ResourceBlock, ...])
    assert prompt_text(blocks) == 'look\n\n[a](file:///a)\n\n<context uri="file:///b">\nB\n</context>'


def test_mcp_servers_from_acp() -> None:
    assert mcp_servers(({"name": "fs", "command": "npx", "args": ["-y", "srv"],
                         "env": [{"name": "TOKEN", "value": "t"}]},)) == (
        McpServerConfig("fs", "npx", ("-y", "srv"), {"TOKEN": "t"}),)
    for bad in ({"type": "sse", "name": "s", "url": "http://x", "headers": []},
                {"name": "no-command"}):
        with pytest.raises(RpcError) as caught:
            mcp_servers((bad,))
        assert caught.value.code is ErrorCode.INVALID_PARAMS
