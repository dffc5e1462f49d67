"""``coalesced.Coalesced``: callers asking at once share one run, and a caller always gets
a run that began after it asked."""

from __future__ import annotations

import trio
import trio.testing

from runtime.proc.coalesced import Coalesced


async def test_callers_at_once_share_a_run_begun_after_they_asked() -> None:
    coalesced = Coalesced()
    runs: list[int] = []
    release = trio.Event()
    got: dict[str, int] = {}

    async def work() -> int:
        runs.append(len(runs))
        if len(runs) == 1:
            await release.wait()  # the first run is in progress while others ask
        return len(runs)

    async def ask(name: str) -> None:
        got[name] = await coalesced.run(work)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask, "first")
        await trio.testing.wait_all_tasks_blocked()
        for k in range(5):
            nursery.start_soon(ask, f"late{k}")
        await trio.testing.wait_all_tasks_blocked()
        release.set()
    assert runs == [0, 1]  # one run for the first, one for the five that asked during it
    assert got["first"] == 1
    assert {got[f"late{k}"] for k in range(5)} == {2}  # not the run already under way
