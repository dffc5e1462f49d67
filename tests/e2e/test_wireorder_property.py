"""Property: requests written back to back take effect in wire order (``quiesce serve``).

Hypothesis draws examples (``tests/e2e/wireorder.py``: the model, the runner); one real
daemon serves them all, as in ``tests/host/test_interleavings.py``: Hypothesis runs in
a worker thread and hands each example to the trio loop. ``QUIESCE_WIREORDER`` sets the
number of generated examples (default 12, the suite's short profile);
``scripts/wireorder --examples N`` runs a longer one.
"""

from __future__ import annotations

import os
import pathlib

import trio
from hypothesis import HealthCheck, Phase, example, given, settings

from tests.conftest import Marked
from tests.e2e.pipeline import INIT, Pipeline
from tests.e2e.wireorder import Example, Op, Runner, describe, examples
from tests.kit.rawclient import raw_daemon
from tests.support import marked_processes

EXAMPLES = int(os.environ.get("QUIESCE_WIREORDER", "12"))
EXAMPLE_DEADLINE = 60.0



def P(session: int) -> Op:  # short names keep the examples below readable
    return Op("prompt", session)


def K(session: int, keep: bool = False) -> Op:
    return Op("abort", session, keep)


# Paths each run takes whatever Hypothesis draws.
EXPLICIT: list[Example] = [
    ((P(0), K(0)), ()),
    ((P(1), P(1), K(1, True), P(1)), (K(1),)),
    ((P(0), P(0), K(0), K(0), P(0)), ()),
    ((P(2), Op("close", 2), P(2), K(2)), (Op("load", 2), P(2), K(2, True), Op("list"))),
    ((P(0), Op("load", 0), K(0), P(1), Op("list"), K(1, True)), (P(0),)),
]


async def _bounded(runner: Runner, ex: Example) -> list[str]:
    with trio.fail_after(EXAMPLE_DEADLINE):
        return await runner.run(ex)


async def run_property(marked: Marked, root: pathlib.Path, count: int) -> int:
    """Run ``count`` generated examples (and the explicit ones); how many ran."""
    async with raw_daemon(marked.env()) as raw:
        pipe = Pipeline(raw)
        answer = await pipe.call("initialize", INIT)
        keep = {raw.process.pid, answer["result"]["capabilities"]["host"]["pid"]}
        runner = Runner(pipe, root, marked.data_dir)

        @settings(max_examples=count, deadline=None, print_blob=True,
                  phases=(Phase.explicit, Phase.generate),
                  suppress_health_check=list(HealthCheck))
        @given(ex=examples)
        def wire_order_holds(ex: Example) -> None:
            problems = trio.from_thread.run(_bounded, runner, ex)
            left = [p.pid for p in marked_processes(marked.mark) if p.pid not in keep]
            if left:
                problems.append(f"processes left: {left}")
            assert not problems, describe(ex) + "\n  " + "\n  ".join(problems)

        for explicit in EXPLICIT:
            wire_order_holds = example(ex=explicit)(wire_order_holds)
        await trio.to_thread.run_sync(wire_order_holds)
        return runner.examples


async def test_requests_back_to_back_take_effect_in_wire_order(
        marked: Marked, tmp_path: pathlib.Path) -> None:
    ran = await run_property(marked, tmp_path, EXAMPLES)
    assert ran >= len(EXPLICIT)
