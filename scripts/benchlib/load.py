"""The load test: many sessions stopped at once (phase A, :mod:`benchlib.load_phase_a`),
then thousands of stops interleaved with executions (phase B, :mod:`benchlib.load_phase_b`),
all in one real ``quiesce serve`` (driven through :mod:`benchlib.harness`), judged by
:mod:`benchlib.load_judge` once the daemon has exited.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import trio

from benchlib.harness import kill_all, marked, open_bench
from benchlib.load_judge import judge
from benchlib.load_leftovers import LEFTOVER_WAIT
from benchlib.load_phase_a import phase_a
from benchlib.load_phase_b import phase_b
from benchlib.load_records import LoadConfig, LoadResult, PhaseA
from benchlib.load_sampler import open_ops


async def run_load(cfg: LoadConfig, workdir: Any) -> LoadResult:
    """Run both phases in one daemon; the daemon's ops socket lives in ``workdir/run``."""
    result = LoadResult(cfg)
    run_dir = workdir / "run"
    run_dir.mkdir(mode=0o700)
    mark = ""
    async with open_bench(workdir, {"XDG_RUNTIME_DIR": str(run_dir)}) as bench:
        mark = bench.mark
        async with AsyncExitStack() as stack:
            ops = await stack.enter_async_context(open_ops(bench, result))
            phases: list[tuple[str, Callable[[], Awaitable[None]]]] = [
                ("phase A", lambda: phase_a(bench, cfg, ops, result.phase_a))]
            if cfg.control:
                control = dataclasses.replace(
                    cfg, roles=tuple(r for r in cfg.roles if r != "read-only"),
                    sessions=sum(1 for i in range(cfg.sessions)
                                 if cfg.roles[i % len(cfg.roles)] != "read-only"))
                control_out = result.phase_a_control = PhaseA()
                phases.append(("phase A without Grep", lambda: phase_a(
                    bench, control, ops, control_out, "a-control")))
            phases.append(("phase B", lambda: phase_b(bench, cfg, ops, result.phase_b)))
            for name, phase in phases:
                try:
                    await phase()
                except Exception as exc:  # noqa: BLE001 - reported, and the run fails
                    result.failures.append(f"{name}: {type(exc).__name__}: {exc}")
    deadline = time.monotonic() + LEFTOVER_WAIT
    left = marked(mark)
    while left and time.monotonic() < deadline:
        await trio.sleep(0.05)
        left = marked(mark)
    kill_all(left)
    result.leftovers = [m.describe() for m in left]
    judge(result)
    return result
