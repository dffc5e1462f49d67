"""The runtime's loop while one session streams a long answer from a fast local server.

One session of the bench's daemon (the openai provider against :class:`SSEServer` on
127.0.0.1) streams 1 MB of text in 16-character deltas, 256 events a write, as fast as
the runtime reads them. Meanwhile a probe sends ``session.list`` every 10 ms; a sample is
one probe's round trip, and the goal is on its p99 (before the linear assembler, its
``text += delta`` made it quadratic, and every other session waited for it).
"""

from __future__ import annotations

import trio

from benchlib.harness import Bench, now_ms
from benchlib.sseserver import SSEServer, text_stream
from benchlib.stats import Goal, Series
from protocol.messages.client import AgentPromptParams, OpenAIProviderConfig, SessionNewParams
from protocol.messages.common import Empty

TOTAL = 1_000_000
DELTA = 16
LAG_GOAL = Goal(50.0, "p99 < 50 ms while one session streams 1 MB in 16-byte deltas",
                99.0)
BEFORE = ("before the linear assembler (runtime/agent/assembler.py and turn.py of "
          "commit a4e1dfb: `text += delta`, no yield between ready chunks), side by side "
          "with this row on 2026-12-05, load average 3.2 to 3.7: median 185 ms, p99 3,259 "
          "ms, max 3,323 ms (n=13: the loop answered few probes); the streaming turn took "
          "2,334 to 6,222 ms (after: median 6.9 ms, p99 17.1 ms, max 37.9 ms, n=129; turns "
          "732 to 825 ms)")


async def stream_lag(bench: Bench, n: int, warmup: int) -> Series:
    series = Series("stream-loop-lag", "runtime loop lag: `session.list` round trip while "
                    "one session streams 1 MB of text in 16-byte deltas", goal=LAG_GOAL)
    series.notes.append(BEFORE)
    workspace = bench.workdir / "ws-stream"
    workspace.mkdir()
    server = SSEServer()
    streams = 1 if n < 5 else 3  # the CI smoke streams once
    async with trio.open_nursery() as nursery:
        await server.start(nursery)
        for _ in range(streams):
            # A session a stream: a second turn in one session would carry the first's
            # 1 MB answer, past the model's context window (the turn then ends error).
            opened = await bench.request("session.new", SessionNewParams(
                str(workspace), "auto", OpenAIProviderConfig(base_url=server.base_url,
                                                             model="bench-local")))
            server.bodies.append(text_stream(TOTAL, DELTA))
            await _one_stream(bench, opened.session_id, series)
        nursery.cancel_scope.cancel()
    series.notes.append(f"the streaming turn took {min(series.extra['turnMs']):.0f} ms at best "
                        f"({streams} runs; {TOTAL // DELTA:,} deltas each)")
    return series


async def _one_stream(bench: Bench, session: str, series: Series) -> None:
    """One streaming turn, probed with ``session.list`` every 10 ms until it ends."""
    done = trio.Event()

    async def turn() -> None:
        start = now_ms()
        result = await bench.request("agent.prompt", AgentPromptParams(
            session, "write a long answer"))
        series.add_extra("turnMs", now_ms() - start)
        if result.stop_reason != "end_turn":
            series.anomalies.append(f"the streaming turn ended {result.stop_reason}")
        done.set()

    async with trio.open_nursery() as load:
        load.start_soon(turn)
        while not done.is_set():
            start = now_ms()
            await bench.request("session.list", Empty())
            series.samples.append(now_ms() - start)
            await trio.sleep(0.01)
