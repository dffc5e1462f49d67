from __future__ import annotations

import pytest
import trio
import trio.testing

from runtime.agent.providers.base import (
    ModelRequest,
    ProviderError,
    ReasoningDelta,
    TextDelta,
    ToolCallChunk,
)
from runtime.agent.providers.scripted import ScriptedProvider, parse_script

REQUEST = ModelRequest("", ())


async def collect(provider: ScriptedProvider) -> list[object]:
    async with provider.stream(REQUEST) as stream:
        return [chunk async for chunk in stream]


async def test_responses_are_consumed_in_order() -> None:
    provider = ScriptedProvider(parse_script(b'''[
        [{"reasoning": "think"}, {"text": "hi "}, {"sleepMs": 5}, {"text": "there"}],
        [{"toolCall": {"id": "c1", "name": "Read", "args": {"path": "a"}}}]
    ]'''))
    assert await collect(provider) == [ReasoningDelta("think"), TextDelta("hi "),
                                       TextDelta("there")]
    assert await collect(provider) == [ToolCallChunk("c1", "Read", {"path": "a"})]
    with pytest.raises(ProviderError, match="no response left"):
        await collect(provider)


async def test_sleeps_are_real_and_cancellable(autojump_clock: trio.testing.MockClock) -> None:
    provider = ScriptedProvider(parse_script([[{"text": "a"}, {"sleepMs": 60000},
                                               {"text": "b"}]]))
    seen: list[object] = []
    with trio.move_on_after(1):
        async with provider.stream(REQUEST) as stream:
            async for chunk in stream:
                seen.append(chunk)
    assert seen == [TextDelta("a")]


@pytest.mark.parametrize("script", [
    b'{"not": "a list"}',
    b'[[{"text": "a", "reasoning": "b"}]]',
    b'[[{}]]',
    b'[[{"sleepMs": -1}]]',
    b'[[{"toolCall": {"id": "x"}}]]',
    b'[[{"txt": "typo"}]]',
])
def test_bad_scripts_are_refused_clearly(script: bytes) -> None:
    with pytest.raises(ValueError, match="invalid script"):
        parse_script(script)
