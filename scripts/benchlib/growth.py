"""Growth: does a stop stay fast as the work in flight grows?

One daemon of its own. At each level (1, 10, 100, 1,000 calls in flight), sessions
are added until there are that many, each holding one call in flight: a ``Write``
waiting in a permission prompt (mode ``ask``) that the client never answers, so
every call is registered in the runtime and the host and costs no CPU while it
waits. Then a few of those sessions are stopped one at a time (``agent.abort`` sent
until answered, as in the stop rows) and re-prompted, so the level stays constant;
then, as a second figure, all of them are stopped at once.

Memory is psutil's RSS of daemon plus host: per idle session from the sessions the
last level added (created, not prompted), per in-flight call from prompting them.
The tombstone row is in-process: a ``TombstoneRegistry`` with the host's defaults
takes a million early aborts while ``tracemalloc`` follows its memory.
"""

from __future__ import annotations

import gc
import itertools
import tracemalloc
from dataclasses import dataclass, field

import psutil
import trio

from benchlib.harness import ABORT_TIMEOUT, Bench, Session, now_ms
from benchlib.stats import Goal, Series
from host.manager import HostConfig
from host.tombstones import TombstoneRegistry
from protocol.messages.client import AgentPromptResult

FULL_LEVELS = (1, 10, 100, 1000)
QUICK_LEVELS = (1, 10)
GROWTH_FACTOR = 10.0
"""Goal: the stop latency with 1,000 calls in flight under 10x that with 1."""
ALL_PREFIX = "growth-all-"
TOMBSTONES_FULL = 1_000_000
TOMBSTONES_QUICK = 50_000


@dataclass
class Held:
    """A session holding one permission-pending Write, and its prompt's answers."""

    session: Session
    turns: int = 0
    answers: list[AgentPromptResult] = field(default_factory=list)
    answered: trio.Event = field(default_factory=trio.Event)


def _rss(bench: Bench) -> float:
    total = 0
    for pid in bench.own_pids:
        try:
            total += psutil.Process(pid).memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return float(total)


async def _hold(bench: Bench, nursery: trio.Nursery, held: Held) -> None:
    """Prompt ``held``'s session and wait until its Write asks for permission."""
    asked = len(held.session.permission_requests)
    held.answered = trio.Event()
    text = f"turn {held.turns}"
    held.turns += 1

    async def prompt(event: trio.Event = held.answered) -> None:
        held.answers.append(await bench.prompt(held.session, text))
        event.set()

    nursery.start_soon(prompt)
    await bench.wait_for(lambda: len(held.session.permission_requests) > asked,
                         what="a permission request")


async def growth(bench: Bench, repeat: int, warmup: int, quick: bool) -> list[Series]:
    levels = QUICK_LEVELS if quick else FULL_LEVELS
    workspace = bench.workdir / "ws-growth"
    workspace.mkdir()
    # Every prompt a session may get: its first, each stop (warm-up included) that picks
    # it, and the re-prompt after each level's stop of all.
    per_session = (repeat + warmup + 1) * len(levels) + 2
    held: list[Held] = []
    out: list[Series] = []
    memory = Series("memory", "memory (daemon + host RSS)", unit="KiB")
    rotate = itertools.count()
    async with trio.open_nursery() as prompts:
        for level in levels:
            before = _rss(bench)
            added = level - len(held)
            for _ in range(added):
                n = len(held)
                script = [[{"toolCall": {"id": f"w{n}-{t}", "name": "Write",
                                         "args": {"path": f"g{n}-{t}.txt", "content": "no"}}}]
                          for t in range(per_session)]
                held.append(Held(await bench.new_session(workspace, script, mode="ask")))
            idle = _rss(bench)
            for h in held[-added:]:
                await _hold(bench, prompts, h)
            busy = _rss(bench)
            if added >= 100:  # per-item figures from a step large enough to see
                memory.add_extra("idleSessionKiB", (idle - before) / added / 1024)
                memory.add_extra("inFlightCallKiB", (busy - idle) / added / 1024)
            memory.notes.append(f"{level} calls in flight: daemon + host RSS "
                                f"{busy / 2**20:.1f} MB")
            series = Series(f"growth-{level}", f"stop with {level:,} calls in flight "
                            f"({level:,} sessions)")
            for rep in range(-warmup, repeat):  # the first stops of a level warm up
                h = held[next(rotate) % len(held)]
                start = now_ms()
                with trio.fail_after(ABORT_TIMEOUT):
                    answer = await bench.request("agent.abort", bench.abort_params(h.session))
                    if rep >= 0:
                        series.samples.append(now_ms() - start)
                    await h.answered.wait()
                if answer.outcome != "aborted" or h.answers[-1].stop_reason != "cancelled":
                    series.anomalies.append(f"outcome {answer.outcome}, prompt "
                                            f"{h.answers[-1].stop_reason}")
                await _hold(bench, prompts, h)  # back in flight: the level stays
            out.append(series)
            out.append(await _stop_all(bench, held, level))
            if level != levels[-1]:
                for h in held:
                    await _hold(bench, prompts, h)
        prompts.cancel_scope.cancel()
    first, last = out[0], out[-1]
    last.goal = Goal(GROWTH_FACTOR * first.median,
                     f"< {GROWTH_FACTOR:g}x the stop with 1 call in flight")
    return [*out, memory]


async def _stop_all(bench: Bench, held: list[Held], level: int) -> Series:
    """Every session stopped at once: each ``agent.abort``'s round trip, and the time
    from sending them all until the last answer (``lastMs``)."""
    series = Series(f"{ALL_PREFIX}{level}", f"all {level:,} sessions stopped at once: each "
                    "`agent.abort` round trip")
    answers: list[str] = []
    start = now_ms()

    async def stop(h: Held) -> None:
        sent = now_ms()
        answer = await bench.request("agent.abort", bench.abort_params(h.session))
        series.samples.append(now_ms() - sent)
        answers.append(answer.outcome)
        await h.answered.wait()

    with trio.fail_after(ABORT_TIMEOUT):
        async with trio.open_nursery() as nursery:
            for h in held:
                nursery.start_soon(stop, h)
    series.extra["lastMs"] = [now_ms() - start]
    bad = [a for a in answers if a != "aborted"]
    if bad or any(h.answers[-1].stop_reason != "cancelled" for h in held):
        series.anomalies.append(f"{len(bad)} outcomes not 'aborted', prompts "
                                f"{[h.answers[-1].stop_reason for h in held][:5]}...")
    return series


def tombstone_memory(quick: bool) -> Series:
    """Memory of the host's tombstone registry (default ttl and capacity) after early
    aborts, in KiB, sampled as the count grows; flat once the capacity is reached."""
    total = TOMBSTONES_QUICK if quick else TOMBSTONES_FULL
    config = HostConfig()
    series = Series("tombstones", f"tombstone registry memory (capacity "
                    f"{config.tombstone_capacity:,}, ttl {config.tombstone_ttl:g} s)",
                    unit="KiB")
    checkpoints = {10**k for k in range(3, 7) if 10**k <= total} | {total}
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        registry = TombstoneRegistry(ttl=config.tombstone_ttl,
                                     capacity=config.tombstone_capacity)
        for i in range(1, total + 1):
            registry.add((f"session-{i % 97}", f"turn-{i}.call-{i}", "Read"))
            if i in checkpoints:
                series.samples.append((tracemalloc.get_traced_memory()[0] - base) / 1024)
                series.add_extra("count", float(i))
                series.add_extra("held", float(len(registry)))
    finally:
        tracemalloc.stop()
    series.notes.append(f"after {total:,} early aborts: {len(registry):,} held, "
                        f"{registry.evicted:,} evicted by the capacity")
    return series
