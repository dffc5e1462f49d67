"""Usage from both HTTP providers' streams, and automatic compaction when a small
configured context window fills (``quiesce serve`` against the local fake servers)."""

from __future__ import annotations

import pathlib
from typing import Any

import trio

from protocol.messages.client import (
    AnthropicProviderConfig,
    OpenAIProviderConfig,
    SessionListResult,
    SessionLoadParams,
    SessionNewParams,
)
from protocol.messages.common import Empty
from protocol.messages.events import (
    HistoryCompacted,
    MaintenanceStart,
    ModelUsageEvent,
    TurnEnd,
)
from runtime.agent.compaction import COMPACTION_PROMPT
from runtime.agent.history import SUMMARY_HEADING
from tests.conftest import Marked
from tests.kit.daemon import Agent, agent_daemon
from tests.providers.fakeserver import FakeServer, Reply
from tests.providers.messages_recorded import MODEL, ev, finish, text_block
from tests.providers.recorded import event, sse

OPENAI_ENV = {"QUIESCE_TEST_KEY": "sk-local"}
ANTHROPIC_ENV = {"QUIESCE_TEST_ANTHROPIC_KEY": "sk-ant-local"}


def openai_reply(text: str, usage: dict[str, Any] | None = None) -> Reply:
    events: list[dict[str, Any]] = [event({"role": "assistant", "content": text}),
                                    event({}, "stop")]
    if usage is not None:  # the last event before [DONE], with no choices
        events.append(event(choices=False, usage=usage))
    return Reply(body=(sse(*events),))


def anthropic_reply(text: str, input_tokens: int, output_tokens: int, cache_read: int,
                    cache_creation: int) -> Reply:
    start = ev("message_start", message={
        "id": "msg_01", "type": "message", "role": "assistant", "content": [],
        "model": MODEL, "stop_reason": None, "stop_sequence": None,
        "usage": {"input_tokens": input_tokens, "output_tokens": 1,
                  "cache_read_input_tokens": cache_read,
                  "cache_creation_input_tokens": cache_creation}})
    return Reply(body=(start + text_block(0, text) + finish(output_tokens=output_tokens),))


async def openai_session(agent: Agent, workspace: pathlib.Path, server: FakeServer,
                         **settings: Any) -> None:
    result = await agent.daemon.request("session.new", SessionNewParams(
        str(workspace), "auto", OpenAIProviderConfig(
            base_url=server.base_url, model="test-model", api_key_env="QUIESCE_TEST_KEY",
            **settings)))
    agent.session_id = result.session_id


def usages(agent: Agent) -> list[tuple[str, int, int, int, bool]]:
    return [(e.turn_id, e.usage.input, e.usage.output, e.usage.cached_input,
             e.usage.estimated) for e in agent.log() if isinstance(e, ModelUsageEvent)]


async def test_openai_usage_is_asked_for_recorded_and_summed(tmp_path: pathlib.Path,
                                                              marked: Marked) -> None:
    server = FakeServer()
    server.queue(openai_reply("one", {"prompt_tokens": 50, "completion_tokens": 5,
                                      "total_tokens": 55,
                                      "prompt_tokens_details": {"cached_tokens": 32}}),
                 openai_reply("two"))  # a server that reports nothing: estimated
    async with trio.open_nursery() as nursery:
        await server.start(nursery)
        async with agent_daemon(marked, env_extra=OPENAI_ENV) as agent:
            await openai_session(agent, tmp_path, server)
            with trio.fail_after(20):
                await agent.prompt("first")
                await agent.prompt("second")
            assert server.requests[0].json()["stream_options"] == {"include_usage": True}
            _, (t2, *estimate) = usages(agent)
            assert usages(agent)[0] == ("t1", 50, 5, 32, False)
            assert t2 == "t2" and estimate[-1] is True and estimate[0] > 0
            ends = [e for e in agent.log() if isinstance(e, TurnEnd)]
            assert ends[0].usage is not None and ends[0].usage.input == 50
            assert ends[1].usage is not None and ends[1].usage.estimated
            listed: SessionListResult = await agent.daemon.request("session.list", Empty())
            total = listed.sessions[0].usage
            assert total is not None and total.input == 50 + estimate[0]
            assert total.cached_input == 32 and total.estimated
        nursery.cancel_scope.cancel()


async def test_anthropic_usage_counts_cache_reads_and_writes(tmp_path: pathlib.Path,
                                                             marked: Marked) -> None:
    server = FakeServer()
    server.queue(anthropic_reply("one", 10, 7, 100, 20), anthropic_reply("two", 12, 9, 120, 0))
    async with trio.open_nursery() as nursery:
        await server.start(nursery)
        async with agent_daemon(marked, env_extra=ANTHROPIC_ENV) as agent:
            result = await agent.daemon.request("session.new", SessionNewParams(
                str(tmp_path), "auto", AnthropicProviderConfig(
                    base_url=server.base_url, model="claude-test",
                    api_key_env="QUIESCE_TEST_ANTHROPIC_KEY")))
            agent.session_id = result.session_id
            with trio.fail_after(20):
                await agent.prompt("first")
                await agent.prompt("second")
            # input = uncached + cache reads + cache writes; cachedInput = the reads.
            assert usages(agent) == [("t1", 130, 7, 100, False), ("t2", 132, 9, 120, False)]
            listed: SessionListResult = await agent.daemon.request("session.list", Empty())
            total = listed.sessions[0].usage
            assert total is not None
            assert (total.input, total.output, total.cached_input) == (262, 16, 220)
        nursery.cancel_scope.cancel()


async def test_automatic_compaction_when_a_small_window_fills(tmp_path: pathlib.Path,
                                                              marked: Marked) -> None:
    """History compacted past 200 tokens (a 20,000-token window, compacted at 1%: the
    request's system prompt and tools fit beside it): the long first turn outgrows it; the third
    prompt is preceded by a compaction (the first turn summarised, the second kept), and
    the turn's request, and every request after a load, carry the summary instead."""
    server = FakeServer()
    long_prompt = "the first prompt is long " * 40
    server.queue(openai_reply("first reply"), openai_reply("second reply"),
                 openai_reply("SUMMARY-OF-T1", {"prompt_tokens": 300, "completion_tokens": 8}),
                 openai_reply("third reply"), openai_reply("fourth reply"))
    async with trio.open_nursery() as nursery:
        await server.start(nursery)
        async with agent_daemon(marked, env_extra=OPENAI_ENV) as agent:
            await openai_session(agent, tmp_path, server, context_window=20_000,
                                 compact_at=0.01)
            with trio.fail_after(30):
                await agent.prompt(long_prompt)
                await agent.prompt("second")  # one ended turn: nothing to compact yet
                assert not any(isinstance(e, MaintenanceStart) for e in agent.log())
                third = await agent.prompt("third")
            assert third.stop_reason == "end_turn"
            start = next(e for e in agent.log() if isinstance(e, MaintenanceStart))
            assert start.trigger == "auto"
            compacted = next(e for e in agent.log() if isinstance(e, HistoryCompacted))
            assert compacted.replaced == ("t1",) and compacted.summary == "SUMMARY-OF-T1"
            summary_request = server.requests[2].json()
            assert summary_request["messages"][0] == {"role": "system",
                                                      "content": COMPACTION_PROMPT}
            assert long_prompt in summary_request["messages"][1]["content"]
            assert "tools" not in summary_request
            after = server.requests[3].json()["messages"]
            contents = [m.get("content") or "" for m in after]
            assert not any(long_prompt in c for c in contents)
            assert contents[1].startswith(SUMMARY_HEADING) and "SUMMARY-OF-T1" in contents[1]
            assert contents[2:] == ["second", "second reply", "third"]
        # A fresh daemon loads the session and rebuilds exactly that history.
        async with agent_daemon(marked, env_extra=OPENAI_ENV) as again:
            again.session_id = agent.session_id
            with trio.fail_after(30):
                await again.daemon.request("session.load", SessionLoadParams(agent.session_id))
                await again.prompt("fourth")
            loaded = [m.get("content") or "" for m in server.requests[4].json()["messages"]]
            assert loaded[1:] == [contents[1], "second", "second reply", "third",
                                  "third reply", "fourth"]
        nursery.cancel_scope.cancel()


async def test_a_turn_that_cannot_fit_ends_with_a_clear_error(tmp_path: pathlib.Path,
                                                              marked: Marked) -> None:
    """Nothing to compact (the first turn) and the request over the window: the turn
    ends with the runtime's own error, and the provider is never asked."""
    server = FakeServer()
    async with trio.open_nursery() as nursery:
        await server.start(nursery)
        async with agent_daemon(marked, env_extra=OPENAI_ENV) as agent:
            await openai_session(agent, tmp_path, server, context_window=100)
            with trio.fail_after(20):
                result = await agent.prompt("far too long for the window " * 40)
            assert result.stop_reason == "error"
            (end,) = [e for e in agent.log() if isinstance(e, TurnEnd)]
            assert end.end.error is not None
            assert "does not fit the model's context window (100 tokens)" in end.end.error
            assert server.requests == []
        nursery.cancel_scope.cancel()
