#!/usr/bin/env python3
"""Benchmarks of quiesce through real `quiesce serve` subprocesses; writes docs/benchmarks.md
and docs/benchmarks.png.

Measures agent.abort to settled per tool class (stuck read-only call, TERM-honouring
and TERM-ignoring process trees, permission-pending with undispatched siblings),
with floors measured side by side in the same run (a bare client round trip, a host
tool round trip, a completed no-op turn, a completed Bash turn, a process-table
scan, an append + fsync, one GIL-holding regex search) and their ratios; then the
tool-call round trip and throughput of the runtime's host link beside a raw pipe
echo and the MCP Python SDK, start-up beside the SDK's, stop latency as the calls
in flight grow (the plot), memory per session and per call, tombstone memory, and
the dispatch layer's and codec's cost per message.

Exit status 1 if a scenario failed, a repetition did not measure what it claims
(wrong code, a survivor) or a process was left behind; a missed goal is reported
in the tables, not an error.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from typing import Any

import trio
from benchlib import growth, link, micro, profiling, socketlink
from benchlib.harness import MARK_VAR, kill_all, marked, open_bench
from benchlib.machine import Machine
from benchlib.plot import plot_growth
from benchlib.report import Report, write_preserving_load
from benchlib.scenarios import RATIOS, SCENARIOS
from benchlib.stats import Series

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "benchmarks.md"
FULL_REPEAT = 15
QUICK_REPEAT = 5
FLOOR_FACTOR = 3
"""Floors are cheap: they get this many times the repetitions (at least ``MIN_FLOOR``)."""
MIN_FLOOR = 5
LEFTOVER_WAIT = 5.0
GROWTH_WARMUP = 3
"""Unrecorded stops before each growth level's samples (none with --warmup 0)."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="scripts/bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true",
                        help=f"CI smoke: {QUICK_REPEAT} repetitions, no warm-up; writes "
                             "docs/benchmarks.md only if --out names it")
    parser.add_argument("--repeat", type=int, default=None,
                        help=f"repetitions per stop scenario (default {FULL_REPEAT}, "
                             f"{QUICK_REPEAT} with --quick); floors get {FLOOR_FACTOR}x")
    parser.add_argument("--warmup", type=int, default=None,
                        help="unrecorded repetitions before each scenario "
                             "(default 1, 0 with --quick)")
    parser.add_argument("--only", action="append", choices=sorted([*SCENARIOS, "groups"]),
                        default=None, help="run only this stop scenario, or 'groups' for "
                        "every other row (repeatable)")
    parser.add_argument("--group", action="append", default=None, metavar="TEXT",
                        help="with --only groups: run only the groups whose name contains "
                        "TEXT (repeatable), e.g. 'link' or 'start-up'")
    parser.add_argument("--out", type=pathlib.Path, default=None,
                        help="where to write the report (default docs/benchmarks.md; with "
                             "--quick or --only, a temporary file)")
    parser.add_argument("--plot", type=pathlib.Path, default=None,
                        help="where to draw the plot (default docs/benchmarks.png beside the "
                             "default report, else next to --out)")
    parser.add_argument("--json", type=pathlib.Path, default=None,
                        help="also write every sample as JSON here")
    parser.add_argument("--keep", action="store_true",
                        help="keep the temporary directory (workspaces, session logs and the "
                             "daemon's log) and print its path")
    parser.add_argument("--profile", action="append", choices=profiling.SCENARIOS,
                        default=None, help="instead of the benchmarks, profile this flood "
                        "(repeatable): each process's µs per call per stage, printed (and "
                        "written to --out if given); see benchlib/profiling.py")
    args = parser.parse_args(argv)
    if args.repeat is None:
        args.repeat = QUICK_REPEAT if args.quick else FULL_REPEAT
    if args.warmup is None:
        args.warmup = 0 if args.quick else 1
    if args.repeat < 1 or args.warmup < 0:
        parser.error("--repeat must be at least 1 and --warmup at least 0")
    return args


def _describe(exc: BaseException) -> str:
    """An exception as one line, the leaves of an exception group included."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_describe(e) for e in exc.exceptions)
    return f"{type(exc).__name__}: {exc}"


def _progress(text: str) -> None:
    print(f"  {text} ...", file=sys.stderr, flush=True)


async def run_groups(args: argparse.Namespace, workdir: pathlib.Path, mark: str,
                     results: dict[str, Series], failures: list[str]) -> None:
    """Round trip, throughput, start-up (with floor and peer), growth, dispatch."""
    env = {**os.environ, MARK_VAR: mark}
    p = link.plan(args.quick, args.repeat)
    groups: list[tuple[str, Callable[[], Awaitable[list[Series]]]]] = []

    async def in_process(fn: Callable[[], list[Series]]) -> list[Series]:
        return fn()

    async def linked(fn: Callable[[link.LinkPlan, link.LinkResults, pathlib.Path],
                                  Awaitable[None]], *extra: Any) -> list[Series]:
        out = link.LinkResults()
        await fn(p, out, workdir, *extra)
        return out.series

    async def grown() -> list[Series]:
        sub = workdir / "growth"
        sub.mkdir()
        async with open_bench(sub, {MARK_VAR: mark}) as bench:
            return await growth.growth(bench, args.repeat if not args.quick else 2,
                                       GROWTH_WARMUP * min(args.warmup, 1), args.quick)

    groups += [
        ("pipe floors", lambda: linked(link.pipe_floors)),
        ("quiesce link: round trip and throughput", lambda: linked(link.quiesce_link, env)),
        ("client link: debug.runTool and session.list, 64 in flight",
         lambda: linked(link.client_link, env)),
        ("MCP SDK peer: round trip, throughput, start-up", lambda: linked(link.mcp_peer)),
        ("socket link: stdio, WebSocket and Unix socket; stops over each",
         lambda: socketlink.socket_links(p.calls, p.warmup, p.flood_calls,
                                         3 if args.quick else args.repeat, workdir, env)),
        ("quiesce start-up", lambda: linked(link.quiesce_startup, env)),
        ("start-up parts: interpreter and imports", lambda: linked(link.startup_parts, env)),
        ("growth: stops with 1 to 1,000 calls in flight", grown),
        ("tombstone memory", lambda: in_process(lambda: [growth.tombstone_memory(args.quick)])),
        ("dispatch and codec", lambda: micro.micro(5 if args.quick else 30)),
        ("profile: where each process's time per call goes",
         lambda: profiling.profile_series(workdir, args.quick)),
    ]
    for name, run in groups:
        if args.only is not None and "groups" not in args.only:
            return
        if args.group and not any(text in name for text in args.group):
            continue
        _progress(name)
        try:
            for series in await run():
                results[series.key] = series
        except Exception as exc:  # noqa: BLE001 - reported, and the run fails
            failures.append(f"{name}: {_describe(exc)}")
            print(f"  {name} failed: {_describe(exc)}", file=sys.stderr, flush=True)


async def run_all(args: argparse.Namespace, workdir: pathlib.Path
                  ) -> tuple[dict[str, Series], list[str], list[str]]:
    """Run the scenarios in one daemon, then the other groups; return their series,
    failures and leftovers."""
    results: dict[str, Series] = {}
    failures: list[str] = []
    names = [n for n in SCENARIOS if args.only is None or n in args.only]
    floor_n = max(MIN_FLOOR, FLOOR_FACTOR * args.repeat)
    mark = ""
    async with open_bench(workdir) as bench:
        mark = bench.mark
        for name in names:
            spec = SCENARIOS[name]
            n = floor_n if spec.floor else args.repeat
            _progress(f"{name} (n={n})")
            try:
                results[name] = await spec.run(bench, n, args.warmup)
            except Exception as exc:  # noqa: BLE001 - reported, and the run fails
                failures.append(f"{name}: {type(exc).__name__}: {exc}")
                print(f"  {name} failed: {exc}", file=sys.stderr, flush=True)
    await run_groups(args, workdir, mark, results, failures)
    # Every daemon and host is gone (stdin closed, waited for): nothing they started
    # may remain.
    deadline = time.monotonic() + LEFTOVER_WAIT
    left = marked(mark)
    while left and time.monotonic() < deadline:
        await trio.sleep(0.05)
        left = marked(mark)
    kill_all(left)
    return results, failures, [m.describe() for m in left]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.profile:
        return profiling.main_profile(args.profile, args.quick, args.out)
    command = "./scripts/bench" + "".join(f" {shlex.quote(a)}"
                                          for a in (sys.argv[1:] if argv is None else argv))
    partial = args.quick or args.only is not None
    out: pathlib.Path = args.out or (
        pathlib.Path(tempfile.gettempdir()) / "quiesce-bench-partial.md" if partial else DOC)
    machine = Machine.describe()
    started = time.monotonic()
    mode = "quick" if args.quick else "full"
    print(f"quiesce bench ({mode}): {args.repeat} repetitions per stop scenario",
          file=sys.stderr, flush=True)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="quiesce-bench-"))
    try:
        results, failures, leftovers = trio.run(run_all, args, tmp)
    finally:
        if args.keep:
            print(f"kept {tmp} (daemon.log, data/sessions/)", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    report = Report(machine, command, mode, results, RATIOS, failures, leftovers,
                    Machine.load_now(), time.monotonic() - started)
    out.parent.mkdir(parents=True, exist_ok=True)
    plot: pathlib.Path = args.plot or out.with_suffix(".png")
    report.plot_name = plot_growth(results, plot, f"{machine.date}, {machine.nproc} CPUs")
    write_preserving_load(out, report.markdown())
    if args.json is not None:
        args.json.write_text(json.dumps({
            "command": command, "mode": mode, "date": machine.date,
            "series": [s.to_json() for s in results.values()],
            "failures": failures, "leftovers": leftovers}, indent=1))
    print(report.summary())
    print(f"wrote {out}" + (f" and {plot}" if report.plot_name else ""))
    bad = failures or leftovers or any(s.anomalies for s in results.values())
    if leftovers:
        print(f"FAIL: processes left behind: {leftovers}", file=sys.stderr)
    if bad:
        print("FAIL: see the anomalies in the report", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
