"""Issue 31 item 5: a model server that streams a tool call's fragments, or text, without
end.

The runtime holds a call's fragments until the call is complete; past the bound
(``runtime.agent.providers.bounds``) the response is refused: the turn ends ``error`` naming the
bound, the HTTP stream is closed, and the runtime's memory stays put. Before, the runtime
read on and grew (400 MB of fragments: 435 MB) and the turn never ended.
"""

from __future__ import annotations

import pathlib

import psutil
import trio

from protocol.messages.events import TurnEnd
from runtime.agent.providers.bounds import MAX_CALL_ARGUMENTS, MAX_RESPONSE_TEXT, MAX_TOOL_NAME
from tests.conftest import Marked
from tests.e2e import test_anthropic_turns, test_openai_turns
from tests.kit.daemon import agent_daemon
from tests.providers.fakeserver import FakeServer, Reply
from tests.providers.messages_recorded import ev, json_delta, start, tool_start
from tests.providers.recorded import call, event, sse

FRAGMENT = "a" * 65536


VENDORS = {"openai": ({"QUIESCE_TEST_KEY": "k"}, test_openai_turns.open_session),
           "anthropic": (test_anthropic_turns.ENV, test_anthropic_turns.open_session)}


async def ends_refused(marked: Marked, tmp_path: pathlib.Path, vendor: str, reply: Reply,
                       words: str) -> None:
    """A turn against a ``vendor`` model server that answers ``reply``: it ends ``error``
    saying ``words``, the stream is closed (not read on), the daemon's memory stays put."""
    server = FakeServer()
    server.queue(reply)
    env, open_session = VENDORS[vendor]
    async with trio.open_nursery() as nursery:
        await server.start(nursery)
        async with agent_daemon(marked, env_extra=env) as agent:
            await open_session(agent, tmp_path, server)
            daemon = psutil.Process(agent.daemon.process.pid)
            with trio.fail_after(30):
                result = await agent.prompt("call a tool")
            assert result.stop_reason == "error"
            (end,) = [e for e in agent.log() if isinstance(e, TurnEnd)]
            assert end.end.kind == "error" and words in (end.end.error or ""), end
            with trio.fail_after(5):
                await server.gone.wait()  # the stream was closed, not read on
            assert daemon.memory_info().rss < 200 * 1024 * 1024
        nursery.cancel_scope.cancel()


async def test_openai_arguments_without_end_are_refused(tmp_path: pathlib.Path,
                                                        marked: Marked) -> None:
    reply = Reply(body=(sse(event(call(0, id="call_1", name="Write", args='{"c": "')),
                            done=False),),
                  forever=sse(event(call(0, args=FRAGMENT)), done=False))
    await ends_refused(marked, tmp_path, "openai", reply,
                       f"exceed {MAX_CALL_ARGUMENTS} characters")


async def test_openai_a_tool_name_without_end_is_refused(tmp_path: pathlib.Path,
                                                         marked: Marked) -> None:
    reply = Reply(body=(sse(event(call(0, id="call_1", name="W")), done=False),),
                  forever=sse(event(call(0, name="x" * 1024)), done=False))
    await ends_refused(marked, tmp_path, "openai", reply,
                       f"longer than {MAX_TOOL_NAME} characters")


async def test_anthropic_input_json_without_end_is_refused(tmp_path: pathlib.Path,
                                                           marked: Marked) -> None:
    reply = Reply(body=(start() + tool_start(0, "toolu_1", "Write")
                        + json_delta(0, '{"c": "'),),
                  forever=json_delta(0, FRAGMENT))
    await ends_refused(marked, tmp_path, "anthropic", reply,
                       f"exceed {MAX_CALL_ARGUMENTS} characters")


async def test_openai_text_without_end_is_refused(tmp_path: pathlib.Path,
                                                  marked: Marked) -> None:
    """A server that never stops sending text: the turn would keep it all."""
    piece = sse(*(event({"content": FRAGMENT}) for _ in range(8)), done=False)
    reply = Reply(body=(sse(event({"role": "assistant", "content": "Hi"}), done=False),),
                  forever=piece)
    await ends_refused(marked, tmp_path, "openai", reply,
                       f"exceeds {MAX_RESPONSE_TEXT} characters")


async def test_anthropic_text_without_end_is_refused(tmp_path: pathlib.Path,
                                                     marked: Marked) -> None:
    text_delta = ev("content_block_delta", index=0,
                    delta={"type": "text_delta", "text": FRAGMENT})
    reply = Reply(body=(start() + ev("content_block_start", index=0, content_block={
        "type": "text", "text": ""}),), forever=text_delta * 8)
    await ends_refused(marked, tmp_path, "anthropic", reply,
                       f"exceeds {MAX_RESPONSE_TEXT} characters")
